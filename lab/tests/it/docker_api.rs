//! The Docker Engine API calls ocm-lab makes (through bollard), held to their contract
//! (`ocm_lab_testkit::contracts::DOCKER_API`): each request goes through a gate, a Unix-socket proxy in
//! front of the real engine that forwards a request only when its method, path and query parameters are
//! in the table and the engine's API version is at least the row's minimum, and answers anything else
//! with `400` naming what broke the contract. A real daemon answers an unknown path with 404 but
//! silently ignores a query parameter it does not know (moby `api/server/httputils`, form values are read
//! by name), which is how a parameter an older engine lacks gets lost without an error; the gate refuses
//! it instead, so adding a parameter means adding its row, read from moby's API history.
//!
//! The product's calls driven here: connect (ping, version), `info`, the kind network (ensure, look up,
//! remove), the node and look-alike listings, image inspect and tag, a bundle saved and loaded (export,
//! load), an image imported into a stand-in node (archive upload, exec create/start/inspect), and the
//! sysctl probe (create, attach, start, remove).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use ocm_lab::backend::ContainerRuntime as _;
use ocm_lab::backend::docker::Docker;
use ocm_lab_testkit::contracts::{self, ApiVersion};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// The requests the gate saw (`METHOD target`), each with its verdict.
type Log = Arc<Mutex<Vec<(String, Result<(), String>)>>>;

/// A gate in front of the engine at `upstream`; the requests it saw (`METHOD target`, allowed or not).
struct Gate {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    seen: Log,
}

impl Gate {
    fn start(upstream: PathBuf, engine: ApiVersion) -> Gate {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("docker.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let seen = Log::default();
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, upstream.clone(), engine, log.clone()));
            }
        });
        Gate {
            _dir: dir,
            socket,
            seen,
        }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    fn refused(&self) -> Vec<(String, String)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(r, v)| v.clone().err().map(|e| (r.clone(), e)))
            .collect()
    }
}

/// One client connection: each request head is checked, then forwarded with its body; a connection
/// upgraded by the engine (attach, exec start) is copied through as it is from then on.
async fn serve(client: UnixStream, upstream: PathBuf, engine: ApiVersion, log: Log) {
    let Ok(engine_side) = UnixStream::connect(&upstream).await else {
        return;
    };
    let (cr, cw) = client.into_split();
    let (mut ur, mut uw) = engine_side.into_split();
    let cw = Arc::new(tokio::sync::Mutex::new(cw));
    let back = cw.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = ur.read(&mut buf).await {
            if n == 0 || back.lock().await.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = back.lock().await.shutdown().await;
    });
    let mut cr = BufReader::new(cr);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            match cr.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let end = line == b"\r\n";
            head.extend_from_slice(&line);
            if end {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.lines();
        let request = lines.next().unwrap_or_default();
        let mut words = request.split(' ');
        let method = words.next().unwrap_or_default().to_owned();
        let target = words.next().unwrap_or_default().to_owned();
        let header = |name: &str| {
            text.lines().skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        let verdict = contracts::docker_api_allows(&method, &target, engine);
        log.lock()
            .unwrap()
            .push((format!("{method} {target}"), verdict.clone()));
        if let Err(why) = verdict {
            let body = serde_json::json!({ "message": why }).to_string();
            let mut w = cw.lock().await;
            let _ = w
                .write_all(
                    format!(
                        "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
            let _ = w.shutdown().await;
            return;
        }
        if uw.write_all(&head).await.is_err() {
            return;
        }
        if header("Upgrade").is_some() {
            let _ = tokio::io::copy(&mut cr, &mut uw).await;
            return;
        }
        if let Some(n) = header("Content-Length").and_then(|v| v.parse::<u64>().ok()) {
            if tokio::io::copy(&mut (&mut cr).take(n), &mut uw)
                .await
                .is_err()
            {
                return;
            }
        } else if header("Transfer-Encoding").is_some_and(|v| v.contains("chunked")) {
            loop {
                let mut size_line = Vec::new();
                if cr.read_until(b'\n', &mut size_line).await.unwrap_or(0) == 0
                    || uw.write_all(&size_line).await.is_err()
                {
                    return;
                }
                let size = String::from_utf8_lossy(&size_line);
                let size = size.trim().split(';').next().unwrap_or_default().to_owned();
                let Ok(size) = u64::from_str_radix(&size, 16) else {
                    return;
                };
                if size == 0 {
                    // The trailer, up to its empty line.
                    loop {
                        let mut line = Vec::new();
                        if cr.read_until(b'\n', &mut line).await.unwrap_or(0) == 0
                            || uw.write_all(&line).await.is_err()
                        {
                            return;
                        }
                        if line == b"\r\n" {
                            break;
                        }
                    }
                    break;
                }
                if tokio::io::copy(&mut (&mut cr).take(size + 2), &mut uw)
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

/// The engine's Unix socket, from `DOCKER_HOST` or the default.
fn engine_socket() -> Option<PathBuf> {
    let host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    host.strip_prefix("unix://").map(PathBuf::from)
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn every_docker_api_call_the_lab_makes_is_in_the_contract_and_the_engine_serves_it() {
    let (real, image) = crate::docker::docker_with_test_image().await;
    let Some(socket) = engine_socket() else {
        return;
    };
    let engine = ApiVersion::parse(&real.api_version()).unwrap();
    let gate = Gate::start(socket, engine);
    let d = Docker::connect_to(&gate.host()).await.unwrap();
    let mut cleanup = crate::docker::Cleanup::new(&real);

    d.version().await.unwrap();
    d.info().await.unwrap();
    let network = crate::docker::unique("net");
    cleanup.networks.push(network.clone());
    d.ensure_network(&network).await.unwrap();
    let id = d.network_id(&network).await.unwrap().unwrap();
    d.remove_network_if_unused(&id).await.unwrap();
    d.node_containers("ocm-lab-no-such-cluster").await.unwrap();
    d.look_alikes("ocm-lab-no-such-cluster").await.unwrap();
    d.read_sysctl_via_container(&image, &["kernel.ostype"])
        .await
        .unwrap();

    let tag = format!("ocm-lab-test/api:v1-{}", std::process::id());
    cleanup.images.push(tag.clone());
    d.tag_image(&image, &tag).await.unwrap();
    assert!(d.image_present(&tag).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    d.save_bundle(std::slice::from_ref(&tag), &bundle)
        .await
        .unwrap();
    d.load_bundle(&bundle).await.unwrap();

    let node = crate::docker::sleeper(&real, &mut cleanup, &image, &[], None, true).await;
    crate::node_load_standin::put_default_tools(&real, &node).await;
    let archive = dir.path().join("images.tar");
    std::fs::write(&archive, b"not really an image archive").unwrap();
    d.import_into_node(&node, &archive).await.unwrap();
    d.node_image_refs(&node).await.unwrap();

    let seen = gate.seen.lock().unwrap().clone();
    assert!(seen.len() > 15, "{seen:#?}");
    assert_eq!(gate.refused(), vec![], "every call the lab made: {seen:#?}");
}

/// Every bollard call in the Docker backend's source is a row of the contract, those the live test
/// cannot drive here too (the registry's image pull and network connect, a container's removal).
#[test]
fn every_bollard_call_in_the_docker_backend_has_a_contract_row() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src/backend");
    let mut files = vec![root.join("docker.rs")];
    for entry in std::fs::read_dir(root.join("docker")).unwrap() {
        files.push(entry.unwrap().path());
    }
    let known: Vec<&str> = contracts::DOCKER_API.iter().map(|e| e.bollard).collect();
    let mut called = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // `self.client.method(`, `client.method(` and `.client\n  .method(`, whitespace between.
        let squeezed: String = text.split_whitespace().collect::<Vec<_>>().join("");
        for (at, _) in squeezed.match_indices("client.") {
            let rest = &squeezed[at + "client.".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if rest[name.len()..].starts_with('(')
                && !["clone", "client_version"].contains(&name.as_str())
            {
                called.push((file.display().to_string(), name));
            }
        }
    }
    assert!(called.len() > 20, "{called:?}");
    let missing: Vec<_> = called
        .iter()
        .filter(|(_, m)| {
            !known.contains(&m.as_str()) && !["negotiate_version"].contains(&m.as_str())
        })
        .collect();
    assert_eq!(
        missing,
        Vec::<&(String, String)>::new(),
        "bollard calls without a contract row"
    );
}

#[test]
fn the_gate_refuses_what_breaks_the_contract() {
    use contracts::{ApiVersion, docker_api_allows as allows};
    let v = ApiVersion(1, 41);
    assert_eq!(
        allows("GET", "/images/kindest/node:v1.36.1/json", v),
        Ok(())
    );
    assert_eq!(allows("POST", "/images/load?quiet=true", v), Ok(()));
    assert_eq!(
        allows("POST", "/images/load?quiet=true&platform=linux", v),
        Err(
            "POST /images/load sends query parameter `platform`, which the contract does not list"
                .into()
        )
    );
    assert_eq!(
        allows("POST", "/containers/x/kill", v),
        Err("POST /containers/x/kill is not in the Docker API contract".into())
    );
    assert_eq!(
        allows("GET", "/networks", ApiVersion(1, 20)),
        Err("GET /networks needs API 1.24 and the engine serves 1.20".into())
    );
}
