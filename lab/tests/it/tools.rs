//! The kind and helm adapters and the tool resolver/downloader, against hand-written recorded outputs
//! (`tests/fixtures/tools/`), shell-script shims standing in for the binaries, and a local HTTP server
//! standing in for the release hosts. Nothing here needs kind, helm, Docker or the network.
//!
//! The shims are never put on the process `PATH` (tests run in parallel): each test builds its own
//! `Tool { path: <shim> }` or passes its own search path.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use miette::Diagnostic as _;
use ocm_lab::backend::helm::{self, Helm};
use ocm_lab::backend::kind::{self, Kind};
use ocm_lab::backend::tools::{
    self, Downloads, Pinned, Platform, Tool, ToolError, ToolName, ToolsConfig,
};
use ocm_lab::backend::{ChartRenderer as _, ClusterProvisioner as _, CreateCluster, Transience};
use ocm_lab::charts::ChartPlan;
use ocm_lab::topology::catalog::Chart;
use ocm_lab_testkit::contracts;
use semver::Version;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

// ---------------------------------------------------------------------------------------------------
// Helpers.

/// A recorded output, without its `#| ` provenance header.
fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tools")
        .join(name);
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.split_inclusive('\n')
        .filter(|l| !l.starts_with("#| "))
        .collect()
}

/// A folder with a shim script named `name` that plays a tool. For each call it takes a key from its
/// first two arguments (`create-cluster`, `get-clusters`, `template-cluster-proxy`, …) and:
/// records its argv (one a line) in `<key>.argv`; saves its stdin in `<key>.stdin` when
/// `<key>.read-stdin` exists; sources `<key>.hook` if present; prints `<key>.stdout` and
/// `<key>.stderr`; and exits with the code in `<key>.code` (default 0). Once [`Shim::tool`] has named a
/// version with a contract (`ocm_lab_testkit::contracts`), the shim first refuses what that version of the
/// tool refuses (an unknown flag, a wrong argument count), with the tool's own error.
struct Shim {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Shim {
    fn new(name: &str) -> Shim {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        let script = format!(
            r#"#!/bin/sh
d='{}'
key="$1-$2"
printf '%s\n' "$@" > "$d/$key.argv"
if [ -f "$d/contract" ]; then . "$d/contract"; contract_check "$@"; fi
if [ -f "$d/$key.read-stdin" ]; then cat > "$d/$key.stdin"; fi
if [ -f "$d/$key.hook" ]; then . "$d/$key.hook"; fi
if [ -f "$d/$key.stdout" ]; then cat "$d/$key.stdout"; fi
if [ -f "$d/$key.stderr" ]; then cat "$d/$key.stderr" >&2; fi
code=0
if [ -f "$d/$key.code" ]; then code=$(cat "$d/$key.code"); fi
exit "$code"
"#,
            dir.path().display()
        );
        write_executable(&path, &script);
        Shim { dir, path }
    }

    fn on(&self, key: &str, stdout: &str, stderr: &str, code: i32) -> &Self {
        let d = self.dir.path();
        std::fs::write(d.join(format!("{key}.stdout")), stdout).unwrap();
        std::fs::write(d.join(format!("{key}.stderr")), stderr).unwrap();
        std::fs::write(d.join(format!("{key}.code")), code.to_string()).unwrap();
        self
    }

    fn read_stdin(&self, key: &str) -> &Self {
        std::fs::write(self.dir.path().join(format!("{key}.read-stdin")), "").unwrap();
        self
    }

    fn hook(&self, key: &str, script: &str) -> &Self {
        std::fs::write(self.dir.path().join(format!("{key}.hook")), script).unwrap();
        self
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join(name)).ok()
    }

    fn argv(&self, key: &str) -> Vec<String> {
        self.file(&format!("{key}.argv"))
            .unwrap_or_else(|| panic!("the shim was not called with {key}"))
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn tool(&self, name: ToolName, version: &str) -> Tool {
        let contract = match name {
            ToolName::Kind => contracts::KIND_VERSIONS
                .iter()
                .find(|v| **v == version)
                .map(|v| contracts::kind(v)),
            ToolName::Helm => contracts::HELM_VERSIONS
                .iter()
                .find(|v| **v == version)
                .map(|v| contracts::helm(v)),
        };
        if let Some(c) = contract {
            std::fs::write(self.dir.path().join("contract"), c.guard()).unwrap();
        }
        Tool {
            name,
            path: self.path.clone(),
            version: Version::parse(version).unwrap(),
        }
    }
}

fn write_executable(path: &Path, contents: &str) {
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every regular file under `dir` (empty when `dir` does not exist).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn chart_plan() -> ChartPlan {
    ChartPlan {
        cluster: "hub".into(),
        release: "cluster-proxy".into(),
        namespace: "open-cluster-management-addon".into(),
        repo: "https://open-cluster-management.io/helm-charts".into(),
        chart: Chart::ClusterProxy,
        version: "0.10.0".into(),
        values: json!({}),
        runtime_values: vec![],
        patches: vec![],
    }
}

/// A bounded HTTP/1.1 server on 127.0.0.1: serves `routes` (path → body; anything else is a 404) to at
/// most `max_requests` requests, then stops; it also stops after 20 seconds.
pub(crate) struct Server {
    pub(crate) base: String,
    pub(crate) requests: Arc<Mutex<Vec<String>>>,
}

pub(crate) fn serve(routes: HashMap<String, Vec<u8>>, max_requests: usize) -> Server {
    let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let requests = Arc::new(Mutex::new(Vec::new()));
    let seen = requests.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut served = 0;
        while served < max_requests && Instant::now() < deadline {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
                Err(_) => break,
            };
            served += 1;
            stream.set_nonblocking(false).unwrap();
            stream
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Skip the headers.
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => {}
                }
            }
            let path = request_line
                .split_whitespace()
                .nth(1)
                .unwrap_or("")
                .to_owned();
            seen.lock().unwrap().push(path.clone());
            let mut stream = reader.into_inner();
            let (status, body) = match routes.get(&path) {
                Some(b) => ("200 OK", b.clone()),
                None => ("404 Not Found", b"not found".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
            let _ = stream.flush();
        }
    });
    Server { base, requests }
}

/// A port nobody listens on (bound, then released).
pub(crate) fn dead_port() -> u16 {
    TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

const LINUX_AMD64: Platform = Platform {
    os: "linux",
    arch: "amd64",
};

/// A config that sees no tools on its search path (an empty folder), downloads for linux/amd64, and
/// caches under `root/cache/tools`.
fn isolated_config(root: &Path, downloads: Downloads, base_url: Option<String>) -> ToolsConfig {
    let empty = root.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let mut cfg = ToolsConfig::new(downloads, root.join("cache/tools"));
    cfg.search_path = Some(empty.into_os_string());
    cfg.platform = Some(LINUX_AMD64);
    cfg.base_url = base_url;
    // The tests serve fake binaries, which no real pinned digest matches: they check the published
    // checksum path (the pins are tested on their own below).
    cfg.pinned = tools::PINNED
        .iter()
        .map(|p| Pinned { sha256: None, ..*p })
        .collect();
    cfg
}

const FAKE_KIND: &str = "#!/bin/sh\necho 'kind v0.32.0 go1.24.3 linux/amd64'\n";
const FAKE_HELM: &str = "#!/bin/sh\nprintf 'v3.19.0'\n";

// ---------------------------------------------------------------------------------------------------
// Argument construction and output parsing.

#[test]
fn kind_config_binds_the_api_server_to_the_chosen_port() {
    let yaml = kind::kind_config(41234, &Default::default());
    let v: Value = serde_saphyr::from_str(&yaml).unwrap();
    assert_eq!(
        v,
        json!({
            "kind": "Cluster",
            "apiVersion": "kind.x-k8s.io/v1alpha4",
            "networking": {"apiServerAddress": "127.0.0.1", "apiServerPort": 41234},
        })
    );
}

#[test]
fn free_ports_are_free() {
    let port = kind::free_port().unwrap();
    assert_ne!(port, 0);
    TcpListener::bind(("127.0.0.1", port)).expect("the port is bindable");
}

#[test]
fn create_args_name_image_kubeconfig_and_read_the_config_from_stdin() {
    let req = CreateCluster {
        name: "hub".into(),
        image: "kindest/node:v1.36.1".into(),
        kubeconfig: "/state/lab/kubeconfigs/hub.yaml".into(),
        registries: Default::default(),
    };
    assert_eq!(
        kind::create_args(&req),
        [
            "create",
            "cluster",
            "--name",
            "hub",
            "--image",
            "kindest/node:v1.36.1",
            "--kubeconfig",
            "/state/lab/kubeconfigs/hub.yaml",
            "--config",
            "-",
        ]
    );
}

#[test]
fn versions_parse_from_recorded_outputs() {
    assert_eq!(
        ToolName::Kind.parse_version(&fixture("kind-version.out")),
        Some(Version::new(0, 32, 0))
    );
    assert_eq!(
        ToolName::Kind.parse_version(&fixture("kind-version-old.out")),
        Some(Version::new(0, 20, 0))
    );
    assert_eq!(
        ToolName::Helm.parse_version(&fixture("helm-version-v3.out")),
        Some(Version::new(3, 19, 0))
    );
    let v4 = ToolName::Helm
        .parse_version(&fixture("helm-version-v4.out"))
        .unwrap();
    assert_eq!(v4, Version::new(4, 0, 1));
    assert!(v4 >= ToolName::Helm.minimum(), "Helm v4 is accepted");
    assert!(Version::new(0, 20, 0) < ToolName::Kind.minimum());
}

#[test]
fn kind_get_clusters_output_parses() {
    assert_eq!(
        kind::parse_clusters(&fixture("kind-get-clusters.out")),
        ["cluster1", "cluster2", "hub"]
    );
    // The notice belongs on stderr, but is ignored on stdout too.
    assert!(kind::parse_clusters(&fixture("kind-get-clusters-empty.stderr")).is_empty());
    assert!(kind::parse_clusters("").is_empty());
}

#[test]
fn kind_create_failures_are_classified() {
    let cases = [
        (
            "kind-create-inotify.stderr",
            Transience::Transient,
            "inotify",
        ),
        (
            "kind-create-exists.stderr",
            Transience::Permanent,
            "kind delete cluster --name hub",
        ),
        // Permanent although its output also says "context deadline exceeded".
        (
            "kind-create-kubeadm.stderr",
            Transience::Permanent,
            "kind export logs --name hub",
        ),
        (
            "kind-create-network-race.stderr",
            Transience::Transient,
            "docker network `kind`",
        ),
        (
            "kind-get-clusters-docker-down.stderr",
            Transience::Permanent,
            "start Docker",
        ),
    ];
    for (file, transience, help) in cases {
        let v = kind::classify_create_failure("hub", &fixture(file));
        assert_eq!(v.transience, transience, "{file}");
        let h = v.help.unwrap_or_default();
        assert!(h.contains(help), "{file}: {h}");
    }
    let tls = kind::classify_create_failure(
        "hub",
        "ERROR: failed to pull image: net/http: TLS handshake timeout",
    );
    assert_eq!(tls.transience, Transience::Transient);
    let missing_image = kind::classify_create_failure(
        "hub",
        "ERROR: failed to create cluster: failed to pull image \"kindest/node:v9\": manifest unknown",
    );
    assert_eq!(missing_image.transience, Transience::Permanent);
    let unknown = kind::classify_create_failure("hub", "ERROR: something new went wrong");
    assert_eq!(unknown.transience, Transience::Permanent);
    assert_eq!(unknown.help, None);
}

#[test]
fn helm_template_args_pin_repo_version_and_namespace() {
    let args = helm::template_args(&chart_plan(), Path::new("/tmp/x/values.json"));
    assert_eq!(
        args,
        [
            "template",
            "cluster-proxy",
            "cluster-proxy",
            "--repo",
            "https://open-cluster-management.io/helm-charts",
            "--version",
            "0.10.0",
            "--namespace",
            "open-cluster-management-addon",
            "--include-crds",
            "--values",
            "/tmp/x/values.json",
        ]
    );
}

#[test]
fn helm_template_output_splits_crds_and_keeps_order() {
    let r = helm::parse_manifests(&fixture("helm-template-cluster-proxy.out")).unwrap();
    let kinds = |objs: &[Value]| -> Vec<String> {
        objs.iter()
            .map(|o| o["kind"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds(&r.crds), ["CustomResourceDefinition"]);
    assert_eq!(
        r.crds[0]["metadata"]["name"],
        "managedproxyconfigurations.proxy.open-cluster-management.io"
    );
    assert_eq!(
        kinds(&r.objects),
        [
            "ServiceAccount",
            "ClusterRole",
            "Deployment",
            "ClusterManagementAddOn",
            "ManagedProxyConfiguration",
        ]
    );
    let mpc = &r.objects[4];
    assert_eq!(mpc["spec"]["proxyServer"]["entrypoint"]["port"], 8091);
    assert_eq!(mpc["spec"]["userServer"], json!({}));
}

#[test]
fn helm_output_lists_are_flattened_and_scalars_rejected() {
    let r = helm::parse_manifests(
        "---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n---\n---\n",
    )
    .unwrap();
    assert_eq!(r.objects.len(), 2);
    assert_eq!(r.objects[1]["metadata"]["name"], "b");
    assert_eq!(
        helm::parse_manifests("---\njust a string\n").unwrap_err(),
        helm::ParseError::NotAnObject { index: 1 }
    );
    let e = helm::parse_manifests("a: [1, 2\nb: 3\n").unwrap_err();
    assert!(
        matches!(
            e,
            helm::ParseError::Yaml {
                location: Some(_),
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn real_ocm_crds_parse_within_the_yaml_budget() {
    let fixtures = crate::common::fixtures();
    let dir = fixtures.join("crds");
    let mut stream = String::new();
    let mut count = 0;
    for f in std::fs::read_dir(&dir).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "yaml") {
            stream.push_str("---\n# Source: x/crds/y.yaml\n");
            stream.push_str(&std::fs::read_to_string(&p).unwrap());
            stream.push('\n');
            count += 1;
        }
    }
    assert!(count >= 10, "expected the OCM CRDs in {}", dir.display());
    let r = helm::parse_manifests(&stream).unwrap();
    assert_eq!(r.crds.len(), count);
    assert!(r.objects.is_empty());
}

#[test]
fn helm_failures_are_classified() {
    let plan = chart_plan();
    let nf =
        helm::classify_template_failure(&plan, &fixture("helm-template-version-not-found.stderr"));
    assert_eq!(nf.transience, Transience::Permanent);
    assert!(nf.help.unwrap().contains("ocm-lab plan"));
    let off = helm::classify_template_failure(&plan, &fixture("helm-template-offline.stderr"));
    assert_eq!(off.transience, Transience::Transient);
    assert!(off.help.unwrap().contains("unreachable"));
    let tmpl = helm::classify_template_failure(
        &plan,
        "Error: template: cluster-proxy/templates/x.yaml:3:4: executing ... nil pointer",
    );
    assert_eq!(tmpl.transience, Transience::Permanent);
}

// ---------------------------------------------------------------------------------------------------
// The adapters end to end, against shims.

fn hub_request(dir: &Path) -> CreateCluster {
    CreateCluster {
        name: "hub".into(),
        image: "kindest/node:v1.36.1".into(),
        kubeconfig: dir.join("kubeconfigs/hub.yaml"),
        registries: Default::default(),
    }
}

#[tokio::test]
async fn kind_create_feeds_the_config_on_stdin_with_the_right_flags() {
    let shim = Shim::new("kind");
    shim.on("create-cluster", "", "Creating cluster \"hub\" ...\n", 0)
        .read_stdin("create-cluster");
    let state = tempfile::tempdir().unwrap();
    let req = hub_request(state.path());
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    kind.create(&req).await.unwrap();

    assert_eq!(shim.argv("create-cluster"), kind::create_args(&req));
    assert!(
        req.kubeconfig.parent().unwrap().is_dir(),
        "the kubeconfig folder is created for kind"
    );
    let config: Value =
        serde_saphyr::from_str(&shim.file("create-cluster.stdin").unwrap()).unwrap();
    assert_eq!(config["kind"], "Cluster");
    assert_eq!(config["networking"]["apiServerAddress"], "127.0.0.1");
    let port = config["networking"]["apiServerPort"].as_u64().unwrap();
    assert!(port > 0 && port <= u64::from(u16::MAX));
}

#[tokio::test]
async fn kind_create_inotify_failure_is_transient_and_names_the_command() {
    let shim = Shim::new("kind");
    shim.on(
        "create-cluster",
        "",
        &fixture("kind-create-inotify.stderr"),
        1,
    )
    .read_stdin("create-cluster");
    let state = tempfile::tempdir().unwrap();
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    let e = kind.create(&hub_request(state.path())).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(
        e.to_string().contains(&format!(
            "`{} create cluster --name hub --image kindest/node:v1.36.1 --kubeconfig",
            shim.path.display()
        )),
        "{}",
        e.to_string()
    );
    assert!(e.to_string().contains("--config -`"), "{}", e.to_string());
    assert!(
        e.to_string()
            .contains("could not find a log line that matches"),
        "{}",
        e.to_string()
    );
    assert!(
        e.to_string().contains("exit status: 1"),
        "{}",
        e.to_string()
    );
    assert!(e.help().unwrap().contains("max_user_watches"));
}

#[tokio::test]
async fn kind_create_name_clash_is_permanent_with_delete_help() {
    let shim = Shim::new("kind");
    shim.on(
        "create-cluster",
        "",
        &fixture("kind-create-exists.stderr"),
        1,
    )
    .read_stdin("create-cluster");
    let state = tempfile::tempdir().unwrap();
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    let e = kind.create(&hub_request(state.path())).await.unwrap_err();
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(
        e.to_string().contains("node(s) already exist"),
        "{}",
        e.to_string()
    );
    assert!(
        e.help()
            .unwrap()
            .contains("delete it with `kind delete cluster --name hub` if it is yours")
    );
}

#[tokio::test]
async fn kind_list_with_no_clusters_is_empty() {
    let shim = Shim::new("kind");
    shim.on(
        "get-clusters",
        "",
        &fixture("kind-get-clusters-empty.stderr"),
        0,
    );
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    assert!(kind.list().await.unwrap().is_empty());
    shim.on("get-clusters", &fixture("kind-get-clusters.out"), "", 0);
    assert_eq!(kind.list().await.unwrap(), ["cluster1", "cluster2", "hub"]);
}

#[tokio::test]
async fn kind_list_without_docker_says_so() {
    let shim = Shim::new("kind");
    shim.on(
        "get-clusters",
        "",
        &fixture("kind-get-clusters-docker-down.stderr"),
        1,
    );
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    let e = kind.list().await.unwrap_err();
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(e.to_string().contains("get clusters`"), "{}", e.to_string());
    assert!(
        e.to_string()
            .contains("Cannot connect to the Docker daemon")
    );
    assert!(e.help().unwrap().contains("start Docker"));
}

#[tokio::test]
async fn kind_delete_keeps_away_from_the_users_kubeconfig_and_is_idempotent() {
    let shim = Shim::new("kind");
    shim.on("delete-cluster", "", "Deleting cluster \"hub\" ...\n", 0);
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    kind.delete("hub").await.unwrap();
    let argv = shim.argv("delete-cluster");
    assert_eq!(argv[..4], ["delete", "cluster", "--name", "hub"]);
    assert_eq!(argv[4], "--kubeconfig");
    assert!(
        !Path::new(&argv[5]).parent().unwrap().exists(),
        "the throwaway kubeconfig folder is removed"
    );

    // A kind that fails on unknown names: the cluster is not listed, so the delete is done.
    shim.on(
        "delete-cluster",
        "",
        "ERROR: failed to delete cluster \"gone\": cluster \"gone\" doesn't exist\n",
        1,
    );
    shim.on("get-clusters", "hub\n", "", 0);
    kind.delete("gone").await.unwrap();

    // A failure while the cluster still exists is an error.
    let e = kind.delete("hub").await.unwrap_err();
    assert!(
        e.to_string()
            .contains("failed to delete kind cluster `hub`")
    );
}

#[tokio::test]
async fn kind_export_kubeconfig_writes_it_0600() {
    let shim = Shim::new("kind");
    let kubeconfig = fixture("kind-get-kubeconfig.out");
    shim.on("get-kubeconfig", &kubeconfig, "", 0);
    let kind = Kind::new(shim.tool(ToolName::Kind, "0.32.0"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfigs/hub.yaml");
    kind.export_kubeconfig("hub", &path).await.unwrap();
    assert_eq!(
        shim.argv("get-kubeconfig"),
        ["get", "kubeconfig", "--name", "hub"]
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), kubeconfig);
    assert_eq!(mode(&path), 0o600);

    shim.on(
        "get-kubeconfig",
        "",
        "ERROR: could not locate any control plane nodes for cluster named 'nope'\n",
        1,
    );
    let e = kind
        .export_kubeconfig("nope", &dir.path().join("nope.yaml"))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("could not locate any control plane nodes")
    );
}

/// Every kind command line the adapter builds (create, list, delete, export the kubeconfig, and the
/// version probe) against a stand-in of every kind version the catalog can pick, each refusing what that
/// version refuses.
#[tokio::test]
async fn every_kind_command_line_passes_every_kind_the_catalog_picks() {
    for version in contracts::KIND_VERSIONS {
        let shim = Shim::new("kind");
        shim.on("create-cluster", "", "", 0)
            .read_stdin("create-cluster")
            .on("get-clusters", "hub\n", "", 0)
            .on("delete-cluster", "", "", 0)
            .on("get-kubeconfig", &fixture("kind-get-kubeconfig.out"), "", 0)
            .on(
                "version-",
                &contracts::kind(version).version_stdout(),
                "",
                0,
            );
        let tool = shim.tool(ToolName::Kind, version);
        assert_eq!(
            tools::probe(ToolName::Kind, &shim.path)
                .unwrap()
                .to_string(),
            *version
        );
        let kind = Kind::new(tool);
        let state = tempfile::tempdir().unwrap();
        kind.create(&hub_request(state.path())).await.unwrap();
        assert_eq!(kind.list().await.unwrap(), ["hub"]);
        kind.export_kubeconfig("hub", &state.path().join("hub.yaml"))
            .await
            .unwrap();
        kind.delete("hub").await.unwrap();

        // The stand-in refuses what kind refuses.
        let mut bad = kind::create_args(&hub_request(state.path()));
        bad.push("stray".into());
        let out = std::process::Command::new(&shim.path)
            .args(&bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "kind {version}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            "ERROR: unknown command \"stray\" for \"kind create cluster\"\n"
        );
    }
}

#[tokio::test]
async fn a_tool_that_cannot_start_is_reported_with_its_command_line() {
    let tool = Tool {
        name: ToolName::Kind,
        path: "/nonexistent/kind".into(),
        version: Version::new(0, 32, 0),
    };
    let e = Kind::new(tool).list().await.unwrap_err();
    assert!(
        e.to_string()
            .contains("failed to start `/nonexistent/kind get clusters`"),
        "{}",
        e.to_string()
    );
    assert!(e.help().unwrap().contains("OCM_LAB_KIND"));
}

/// ocm-lab as helm's post-renderer, its Helm 4 plugin written next to the shim.
fn post_renderer(shim: &Shim) -> helm::PostRenderer {
    helm::PostRenderer {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_ocm-lab")),
        chart_patches: None,
        plugins_dir: shim.dir.path().join("plugins"),
    }
}

/// Records the values file's mode, its folder's mode and its contents, as helm sees them.
const RECORD_VALUES: &str = r#"
prev=''
for a in "$@"; do
  if [ "$prev" = "--values" ]; then v="$a"; fi
  prev="$a"
done
printf '%s' "$v" > "$d/values.path"
(stat -c %a "$v" 2>/dev/null || stat -f %Lp "$v") > "$d/values.mode"
(stat -c %a "$(dirname "$v")" 2>/dev/null || stat -f %Lp "$(dirname "$v")") > "$d/values-dir.mode"
cp "$v" "$d/values.copy"
"#;

#[tokio::test]
async fn helm_template_splits_crds_and_removes_its_private_values_file() {
    let shim = Shim::new("helm");
    shim.on(
        "template-cluster-proxy",
        &fixture("helm-template-cluster-proxy.out"),
        "",
        0,
    )
    .hook("template-cluster-proxy", RECORD_VALUES);
    let helm = Helm::new(shim.tool(ToolName::Helm, "3.19.0"), post_renderer(&shim));
    let values =
        json!({"bootstrapHubKubeConfig": "token: s3cret", "userServer": {"enabled": true}});
    let rendered = helm.template(&chart_plan(), &values).await.unwrap();

    assert_eq!(rendered.crds.len(), 1);
    assert_eq!(rendered.objects.len(), 5);
    let values_path = PathBuf::from(shim.file("values.path").unwrap());
    let mut expected = helm::template_args(&chart_plan(), &values_path);
    expected.extend(
        helm::post_renderer_flags(3, &post_renderer(&shim), &chart_plan())
            .unwrap()
            .0,
    );
    assert_eq!(shim.argv("template-cluster-proxy"), expected);
    assert_eq!(shim.file("values.mode").unwrap().trim(), "600");
    assert_eq!(shim.file("values-dir.mode").unwrap().trim(), "700");
    let seen: Value = serde_json::from_str(&shim.file("values.copy").unwrap()).unwrap();
    assert_eq!(seen, values);
    assert!(!values_path.exists(), "the values file is removed");
    assert!(
        !values_path.parent().unwrap().exists(),
        "its folder is removed"
    );
}

#[tokio::test]
async fn helm_template_failures_keep_the_command_and_never_the_values() {
    let shim = Shim::new("helm");
    shim.on(
        "template-cluster-proxy",
        "",
        &fixture("helm-template-version-not-found.stderr"),
        1,
    )
    .hook("template-cluster-proxy", RECORD_VALUES);
    let helm = Helm::new(shim.tool(ToolName::Helm, "4.0.1"), post_renderer(&shim));
    let values = json!({"bootstrapHubKubeConfig": "token: s3cret"});
    let e = helm.template(&chart_plan(), &values).await.unwrap_err();
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(
        e.to_string().contains(&format!(
            "`{} template cluster-proxy cluster-proxy --repo https://open-cluster-management.io/helm-charts --version 0.10.0",
            shim.path.display()
        )),
        "{}",
        e.to_string()
    );
    assert!(e.to_string().contains("version \"0.99.0\" not found"));
    assert!(!e.to_string().contains("s3cret"));
    assert!(e.help().unwrap().contains("ocm-lab plan"));
    let values_path = PathBuf::from(shim.file("values.path").unwrap());
    assert!(!values_path.exists(), "removed on failure too");

    shim.on(
        "template-cluster-proxy",
        "",
        &fixture("helm-template-offline.stderr"),
        1,
    );
    let e = helm.template(&chart_plan(), &values).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(e.help().unwrap().contains("Helm repository"));
}

// ---------------------------------------------------------------------------------------------------
// Resolution.

#[test]
fn with_downloads_off_a_missing_tool_says_where_to_get_it() {
    let root = tempfile::tempdir().unwrap();
    let cfg = isolated_config(root.path(), Downloads::Forbid, None);
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert_eq!(
        e.to_string(),
        "kind not found on PATH (and downloads are off): install it from https://kind.sigs.k8s.io/docs/user/quick-start/#installation or drop --no-download"
    );
    let e = tools::resolve(ToolName::Helm, &cfg).unwrap_err();
    assert!(e.to_string().starts_with("helm not found on PATH"), "{e}");
}

#[test]
fn tools_on_the_search_path_are_found_and_version_checked() {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(&bin.join("kind"), FAKE_KIND);
    write_executable(
        &bin.join("helm"),
        "#!/bin/sh\n[ \"$1 $2 $3\" = 'version --template {{.Version}}' ] || exit 3\nprintf v4.0.1\n",
    );
    let mut cfg = isolated_config(root.path(), Downloads::Forbid, None);
    cfg.search_path = Some(bin.clone().into_os_string());
    let tools = tools::Tools::resolve(&cfg).unwrap();
    assert_eq!(tools.kind.path, bin.join("kind"));
    assert_eq!(tools.kind.version, Version::new(0, 32, 0));
    assert_eq!(tools.helm.version, Version::new(4, 0, 1));
}

#[test]
fn a_too_old_tool_with_downloads_off_is_an_error_naming_both_versions() {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(
        &bin.join("kind"),
        "#!/bin/sh\necho 'kind v0.20.0 go1.20.4 linux/amd64'\n",
    );
    let mut cfg = isolated_config(root.path(), Downloads::Forbid, None);
    cfg.search_path = Some(bin.into_os_string());
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::TooOld { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains("v0.20.0") && msg.contains("v0.27.0"), "{msg}");
}

#[test]
fn an_override_wins_and_must_be_new_enough() {
    let root = tempfile::tempdir().unwrap();
    let good = root.path().join("my-kind");
    write_executable(&good, FAKE_KIND);
    let mut cfg = isolated_config(root.path(), Downloads::Forbid, None);
    cfg.kind_override = Some(good.clone().into_os_string());
    assert_eq!(tools::resolve(ToolName::Kind, &cfg).unwrap().path, good);

    let old = root.path().join("old-kind");
    write_executable(&old, "#!/bin/sh\necho 'kind v0.26.0 go1.23 linux/amd64'\n");
    cfg.kind_override = Some(old.into_os_string());
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(e.to_string().starts_with("OCM_LAB_KIND="), "{e}");
    assert!(
        e.to_string().contains("older than the minimum v0.27.0"),
        "{e}"
    );

    cfg.kind_override = Some(root.path().join("missing").into_os_string());
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(e.to_string().contains("no such file"), "{e}");
}

// ---------------------------------------------------------------------------------------------------
// Downloads.

fn kind_routes(binary: &[u8], published_digest: &str) -> HashMap<String, Vec<u8>> {
    HashMap::from([
        (
            "/v0.32.0/kind-linux-amd64.sha256sum".to_owned(),
            format!("{published_digest}  kind-linux-amd64\n").into_bytes(),
        ),
        ("/v0.32.0/kind-linux-amd64".to_owned(), binary.to_vec()),
    ])
}

#[test]
fn a_verified_download_is_cached_executable_and_reused_offline() {
    let root = tempfile::tempdir().unwrap();
    let server = serve(
        kind_routes(FAKE_KIND.as_bytes(), &sha256(FAKE_KIND.as_bytes())),
        2,
    );
    let cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));

    let tool = tools::resolve(ToolName::Kind, &cfg).unwrap();
    assert_eq!(tool.path, cfg.cached_path(ToolName::Kind));
    assert!(
        tool.path.ends_with("cache/tools/kind-0.32.0/kind"),
        "{}",
        tool.path.display()
    );
    assert_eq!(tool.version, Version::new(0, 32, 0));
    assert_eq!(mode(&tool.path), 0o755);
    assert_eq!(std::fs::read(&tool.path).unwrap(), FAKE_KIND.as_bytes());
    assert_eq!(
        *server.requests.lock().unwrap(),
        [
            "/v0.32.0/kind-linux-amd64.sha256sum",
            "/v0.32.0/kind-linux-amd64"
        ],
        "the checksum file is fetched first"
    );
    assert_eq!(
        files_under(&cfg.cache_dir),
        std::slice::from_ref(&tool.path),
        "no temporary files are left"
    );

    // Next time, with downloads off and no server, the cache serves it.
    let offline = isolated_config(
        root.path(),
        Downloads::Forbid,
        Some(format!("http://127.0.0.1:{}", dead_port())),
    );
    assert_eq!(
        tools::resolve(ToolName::Kind, &offline).unwrap().path,
        tool.path
    );
}

#[test]
fn a_helm_download_is_unpacked_from_its_tarball() {
    let root = tempfile::tempdir().unwrap();
    let pkg = root.path().join("pkg");
    std::fs::create_dir_all(pkg.join("linux-amd64")).unwrap();
    write_executable(&pkg.join("linux-amd64/helm"), FAKE_HELM);
    std::fs::write(pkg.join("linux-amd64/README.md"), "helm\n").unwrap();
    let tarball = root.path().join("helm.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&pkg)
        .args(["linux-amd64/helm", "linux-amd64/README.md"])
        .status()
        .unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&tarball).unwrap();
    let server = serve(
        HashMap::from([
            (
                "/helm-v3.19.0-linux-amd64.tar.gz.sha256sum".to_owned(),
                format!("{}  helm-v3.19.0-linux-amd64.tar.gz\n", sha256(&bytes)).into_bytes(),
            ),
            ("/helm-v3.19.0-linux-amd64.tar.gz".to_owned(), bytes),
        ]),
        2,
    );
    let cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    let tool = tools::resolve(ToolName::Helm, &cfg).unwrap();
    assert_eq!(tool.version, Version::new(3, 19, 0));
    assert_eq!(std::fs::read_to_string(&tool.path).unwrap(), FAKE_HELM);
    assert_eq!(mode(&tool.path), 0o755);
    assert_eq!(
        files_under(&cfg.cache_dir),
        std::slice::from_ref(&tool.path),
        "the tarball and the extraction folder are gone"
    );
}

#[test]
fn a_wrong_checksum_is_a_hard_error_naming_both_digests_and_leaves_nothing() {
    let root = tempfile::tempdir().unwrap();
    let published = sha256(b"what the release should have been");
    let server = serve(kind_routes(FAKE_KIND.as_bytes(), &published), 2);
    let cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::ChecksumMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&published), "{msg}");
    assert!(msg.contains(&sha256(FAKE_KIND.as_bytes())), "{msg}");
    assert!(msg.contains("kind-linux-amd64.sha256sum"), "{msg}");
    assert!(
        files_under(&cfg.cache_dir).is_empty(),
        "{:?}",
        files_under(&cfg.cache_dir)
    );
}

#[test]
fn a_pinned_digest_overrules_the_published_checksum() {
    let root = tempfile::tempdir().unwrap();
    let digest = sha256(FAKE_KIND.as_bytes());
    let server = serve(kind_routes(FAKE_KIND.as_bytes(), &digest), 2);
    let mut cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    let pin = "0".repeat(64);
    let base = *tools::PINNED
        .iter()
        .find(|p| p.tool == ToolName::Kind && p.os == "linux" && p.arch == "amd64")
        .unwrap();
    cfg.pinned = vec![Pinned {
        sha256: Some(Box::leak(pin.clone().into_boxed_str())),
        ..base
    }];
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::PinMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(msg.contains(&pin) && msg.contains(&digest), "{msg}");
    assert_eq!(
        server.requests.lock().unwrap().len(),
        1,
        "the binary is never fetched"
    );
    assert!(files_under(&cfg.cache_dir).is_empty());

    // A matching pin is used.
    cfg.pinned = vec![Pinned {
        sha256: Some(Box::leak(digest.into_boxed_str())),
        ..base
    }];
    let server = serve(
        kind_routes(FAKE_KIND.as_bytes(), &sha256(FAKE_KIND.as_bytes())),
        2,
    );
    cfg.base_url = Some(server.base.clone());
    tools::resolve(ToolName::Kind, &cfg).unwrap();
}

#[test]
fn a_mirror_serving_another_kind_with_a_matching_checksum_file_is_refused_by_the_shipped_pin() {
    let root = tempfile::tempdir().unwrap();
    let digest = sha256(FAKE_KIND.as_bytes());
    let server = serve(kind_routes(FAKE_KIND.as_bytes(), &digest), 2);
    let mut cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    cfg.pinned = tools::PINNED.to_vec();
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::PinMismatch { .. }), "{e:?}");
    let msg = e.to_string();
    // kind v0.32.0 linux/amd64 as pinned in topology::catalog::TOOL_DIGESTS.
    assert!(
        msg.contains("50030de23cf40a18505f20426f6a8506bedf13c6e509244bd1fa9463721b0f54"),
        "{msg}"
    );
    assert!(msg.contains(&digest), "{msg}");
    assert!(files_under(&cfg.cache_dir).is_empty(), "nothing is cached");
}

#[test]
fn an_unreachable_release_host_says_what_to_do() {
    let root = tempfile::tempdir().unwrap();
    let cfg = isolated_config(
        root.path(),
        Downloads::Allow,
        Some(format!("http://127.0.0.1:{}", dead_port())),
    );
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::Download { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(
            "failed to download the kind v0.32.0 checksum file from http://127.0.0.1:"
        ),
        "{e}"
    );
    let help = e.help().unwrap().to_string();
    assert!(help.contains("--no-download"), "{help}");
    assert!(
        help.contains("install kind by hand from https://kind.sigs.k8s.io"),
        "{help}"
    );
    assert!(help.contains("OCM_LAB_KIND"), "{help}");
    assert!(files_under(&cfg.cache_dir).is_empty());

    // As a backend error, the help comes along.
    let be: ocm_lab::step::ActionError = e.into();
    assert_eq!(be.transience, Transience::Permanent);
    assert!(be.help.unwrap().contains("--no-download"));
}

#[test]
fn a_missing_release_file_is_reported_with_its_http_status() {
    let root = tempfile::tempdir().unwrap();
    let server = serve(HashMap::new(), 1);
    let cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(e.to_string().contains("HTTP 404"), "{e}");
}

#[test]
fn unpinned_platforms_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let mut cfg = isolated_config(root.path(), Downloads::Allow, None);
    cfg.platform = Some(Platform {
        os: "freebsd",
        arch: "riscv64",
    });
    let e = tools::resolve(ToolName::Helm, &cfg).unwrap_err();
    assert_eq!(
        e.to_string(),
        "ocm-lab has no helm download for freebsd/riscv64"
    );
}

// ---------------------------------------------------------------------------------------------------
// The doctor's download probe: does the download `up` would make start, without making it.

#[test]
fn the_download_probe_asks_for_the_checksum_file_and_nothing_more() {
    let root = tempfile::tempdir().unwrap();
    let digest = "a".repeat(64);
    let server = serve(
        HashMap::from([(
            "/helm-v3.19.0-linux-amd64.tar.gz.sha256sum".to_owned(),
            format!("{digest}  helm-v3.19.0-linux-amd64.tar.gz\n").into_bytes(),
        )]),
        4,
    );
    let cfg = isolated_config(root.path(), Downloads::Allow, Some(server.base.clone()));
    let url = tools::probe_download(ToolName::Helm, &cfg, Duration::from_secs(5))
        .expect("the mirror answers");
    assert_eq!(
        url,
        format!("{}/helm-v3.19.0-linux-amd64.tar.gz.sha256sum", server.base)
    );
    // kind's checksum file is not on this mirror: a 404 is a download that cannot start.
    let e = tools::probe_download(ToolName::Kind, &cfg, Duration::from_secs(5)).unwrap_err();
    assert!(
        matches!(&e, ToolError::Download { problem, .. } if problem.contains("404")),
        "{e:?}"
    );
    assert_eq!(
        *server.requests.lock().unwrap(),
        [
            "/helm-v3.19.0-linux-amd64.tar.gz.sha256sum",
            "/v0.32.0/kind-linux-amd64.sha256sum"
        ],
        "only the checksum files are asked for"
    );
    assert!(
        files_under(&root.path().join("cache")).is_empty(),
        "nothing is downloaded"
    );
}

#[test]
fn the_download_probe_fails_on_a_closed_port() {
    let root = tempfile::tempdir().unwrap();
    let cfg = isolated_config(
        root.path(),
        Downloads::Allow,
        Some(format!("http://127.0.0.1:{}", dead_port())),
    );
    let e = tools::probe_download(ToolName::Helm, &cfg, Duration::from_secs(5)).unwrap_err();
    assert!(matches!(e, ToolError::Download { .. }), "{e:?}");
    assert!(e.to_string().contains("127.0.0.1"), "{e}");
}
