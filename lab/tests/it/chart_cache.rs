//! The chart cache: a chart is fetched once from its repository, verified against the
//! sha256 the repository's `index.yaml` publishes, and rendered from the local `.tgz` afterwards without
//! any network access; a cached chart that changed, or a download that does not match the index, is
//! refused naming the file. A stand-in chart repository is served on 127.0.0.1 by a thread in the test
//! (an `index.yaml` and a `.tgz` the test makes), which counts the requests it answers.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use ocm_lab::backend::chart_cache::{ChartCache, ChartCacheError};
use ocm_lab::backend::helm::{Helm, PostRenderer};
use ocm_lab::backend::tools::{self, ToolName};
use ocm_lab::backend::{ChartRenderer as _, Failure as _, HelmError, Transience};
use ocm_lab::charts::ChartPlan;
use ocm_lab::topology::catalog::Chart;
use serde_json::json;
use sha2::{Digest as _, Sha256};

/// A stand-in chart repository: serves fixed paths and records every request path.
struct Repo {
    url: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Repo {
    fn serve(routes: HashMap<String, Vec<u8>>) -> Repo {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let url = format!("http://{}/charts", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { break };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                loop {
                    let mut header = String::new();
                    match reader.read_line(&mut header) {
                        Ok(0) | Err(_) => break,
                        Ok(_) if header == "\r\n" => break,
                        Ok(_) => {}
                    }
                }
                let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                seen.lock().unwrap().push(path.clone());
                let (status, body) = match routes.get(&path) {
                    Some(b) => ("200 OK", b.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(&body);
            }
        });
        Repo { url, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A small chart archive (`klusterlet/Chart.yaml` in a gzipped tar), as `helm package` makes.
fn chart_tgz(version: &str) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    let text = format!("apiVersion: v2\nname: klusterlet\nversion: {version}\n");
    let mut header = tar::Header::new_gnu();
    header.set_size(text.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "klusterlet/Chart.yaml", text.as_bytes())
        .unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A repository publishing klusterlet `version` with `digest` in its index, serving `tgz` (relative URL).
fn repo_with(version: &str, tgz: &[u8], digest: &str) -> Repo {
    let index = format!(
        "apiVersion: v1\nentries:\n  klusterlet:\n  - apiVersion: v2\n    name: klusterlet\n    version: {version}\n    digest: {digest}\n    urls:\n    - klusterlet-{version}.tgz\n  - apiVersion: v2\n    name: klusterlet\n    version: 0.0.1\n    digest: {}\n    urls:\n    - klusterlet-0.0.1.tgz\ngenerated: \"2025-01-01T00:00:00Z\"\n",
        "0".repeat(64)
    );
    Repo::serve(HashMap::from([
        ("/charts/index.yaml".to_owned(), index.into_bytes()),
        (format!("/charts/klusterlet-{version}.tgz"), tgz.to_vec()),
    ]))
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn a_chart_is_fetched_once_verified_and_then_used_without_the_network() {
    let tgz = chart_tgz("1.1.0");
    let repo = repo_with("1.1.0", &tgz, &sha256(&tgz));
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().join("charts"));

    let path = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap();
    let host = repo.url.split('/').nth(2).unwrap().replace(':', "_");
    assert_eq!(
        path,
        cache_dir
            .path()
            .join("charts")
            .join(&host)
            .join("klusterlet-1.1.0.tgz")
    );
    assert_eq!(std::fs::read(&path).unwrap(), tgz);
    assert_eq!(
        repo.requests(),
        ["/charts/index.yaml", "/charts/klusterlet-1.1.0.tgz"]
    );
    // The verified digest is recorded next to the chart.
    let recorded =
        std::fs::read_to_string(path.with_file_name("klusterlet-1.1.0.tgz.sha256")).unwrap();
    assert!(recorded.starts_with(&sha256(&tgz)), "{recorded}");

    // Second use: the same file, and the repository is not contacted at all.
    let again = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap();
    assert_eq!(again, path);
    assert_eq!(repo.requests().len(), 2, "{:?}", repo.requests());
}

#[test]
fn a_cached_chart_that_changed_is_refused_naming_the_file_without_asking_the_repository() {
    let tgz = chart_tgz("1.1.0");
    let repo = repo_with("1.1.0", &tgz, &sha256(&tgz));
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().join("charts"));
    let path = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap();

    let mut tampered = tgz.clone();
    tampered.extend_from_slice(b"extra");
    std::fs::write(&path, &tampered).unwrap();
    let err = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap_err();
    assert!(matches!(err, ChartCacheError::Tampered { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&sha256(&tampered)), "{text}");
    let help = err.help().unwrap();
    assert!(
        help.contains(&format!("delete {}", path.display())),
        "{help}"
    );
    assert!(help.contains("--bundle"), "{help}");
    assert_eq!(err.transience(), Transience::Permanent);
    // Neither replaced nor re-fetched: the file is left for the user to look at.
    assert_eq!(std::fs::read(&path).unwrap(), tampered);
    assert_eq!(repo.requests().len(), 2);
}

#[test]
fn an_unrecorded_cached_chart_is_checked_against_the_index() {
    let tgz = chart_tgz("1.1.0");
    let repo = repo_with("1.1.0", &tgz, &sha256(&tgz));
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().join("charts"));
    let path = cache.path(&repo.url, "klusterlet", "1.1.0");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();

    // Put there by hand, and not what the index publishes: refused, naming the file and the index.
    std::fs::write(&path, b"something else").unwrap();
    let err = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap_err();
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("/charts/index.yaml"), "{text}");
    assert_eq!(repo.requests(), ["/charts/index.yaml"]);

    // The right bytes are accepted, recorded, and then used offline.
    std::fs::write(&path, &tgz).unwrap();
    assert_eq!(
        cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap(),
        path
    );
    assert_eq!(
        cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap(),
        path
    );
    assert_eq!(repo.requests().len(), 2);
}

#[test]
fn a_download_that_does_not_match_the_index_is_refused_and_nothing_is_cached() {
    let tgz = chart_tgz("1.1.0");
    let published = sha256(b"what the index says");
    let repo = repo_with("1.1.0", &tgz, &published);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().join("charts"));

    let err = cache.ensure(&repo.url, "klusterlet", "1.1.0").unwrap_err();
    assert!(
        matches!(err, ChartCacheError::IndexMismatch { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("klusterlet-1.1.0.tgz"), "{text}");
    assert!(
        text.contains(&published) && text.contains(&sha256(&tgz)),
        "{text}"
    );
    assert!(
        files_under(cache_dir.path()).is_empty(),
        "{:?}",
        files_under(cache_dir.path())
    );
}

#[test]
fn a_version_missing_from_the_index_and_an_unreachable_repository_are_told_apart() {
    let tgz = chart_tgz("1.1.0");
    let repo = repo_with("1.1.0", &tgz, &sha256(&tgz));
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = ChartCache::new(cache_dir.path().join("charts"));
    let err = cache.ensure(&repo.url, "klusterlet", "9.9.9").unwrap_err();
    assert!(matches!(err, ChartCacheError::NotInIndex { .. }), "{err:?}");
    assert_eq!(err.transience(), Transience::Permanent);

    // Nothing listens on this port any more: a network failure, worth a retry, with the bundle as the way out.
    let port = {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port()
    };
    let err = cache
        .ensure(
            &format!("http://127.0.0.1:{port}/charts"),
            "klusterlet",
            "1.1.0",
        )
        .unwrap_err();
    assert!(matches!(err, ChartCacheError::Fetch { .. }), "{err:?}");
    assert_eq!(err.transience(), Transience::Transient);
    assert!(err.help().unwrap().contains("--bundle"));
}

/// A stand-in helm that records its arguments (one a line, calls separated by `--`) and renders a
/// ConfigMap.
const STAND_IN: &str = r#"#!/bin/sh
d='@DIR@'
{ printf '%s\n' "$@"; echo '--'; } >> "$d/calls"
case "$1" in
  version) printf 'v3.19.0'; exit 0 ;;
  template) printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: rendered\n' ;;
  *) echo "Error: unexpected" >&2; exit 1 ;;
esac
"#;

#[tokio::test]
async fn helm_renders_the_cached_chart_from_its_file_and_fetches_it_once() {
    let tgz = chart_tgz("1.1.0");
    let repo = repo_with("1.1.0", &tgz, &sha256(&tgz));
    let dir = tempfile::tempdir().unwrap();
    let helm_path = dir.path().join("helm");
    std::fs::write(
        &helm_path,
        STAND_IN.replace("@DIR@", &dir.path().display().to_string()),
    )
    .unwrap();
    std::fs::set_permissions(&helm_path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = tools::Tool {
        name: ToolName::Helm,
        version: tools::probe(ToolName::Helm, &helm_path).unwrap(),
        path: helm_path,
    };
    let post = PostRenderer {
        exe: PathBuf::from(env!("CARGO_BIN_EXE_ocm-lab")),
        chart_patches: None,
        plugins_dir: dir.path().join("cache/helm-plugins"),
    };
    let cache = ChartCache::new(dir.path().join("cache/charts"));
    let helm = Helm::new(tool, post).with_chart_cache(cache.clone());
    let chart = ChartPlan {
        cluster: "c1".into(),
        release: "klusterlet".into(),
        namespace: "open-cluster-management".into(),
        repo: repo.url.clone(),
        chart: Chart::Klusterlet,
        version: "1.1.0".into(),
        values: json!({}),
        runtime_values: vec![],
        patches: vec![],
    };
    for _ in 0..2 {
        let rendered = helm.template(&chart, &json!({})).await.unwrap();
        assert_eq!(rendered.objects[0]["metadata"]["name"], "rendered");
    }
    let local = cache
        .path(&repo.url, "klusterlet", "1.1.0")
        .display()
        .to_string();
    let calls = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    let templates: Vec<Vec<&str>> = calls
        .split("--\n")
        .map(|c| c.lines().collect::<Vec<_>>())
        .filter(|c| c.first() == Some(&"template"))
        .collect();
    assert_eq!(templates.len(), 2);
    for args in &templates {
        assert_eq!(&args[..3], ["template", "klusterlet", local.as_str()]);
        assert!(!args.contains(&"--repo"), "{args:?}");
    }
    assert_eq!(
        repo.requests(),
        ["/charts/index.yaml", "/charts/klusterlet-1.1.0.tgz"]
    );

    // A tampered cache fails the render with the file named, before helm runs.
    std::fs::write(cache.path(&repo.url, "klusterlet", "1.1.0"), b"changed").unwrap();
    let err = helm.template(&chart, &json!({})).await.unwrap_err();
    assert!(matches!(err, HelmError::ChartCache { .. }), "{err:?}");
    assert!(err.to_string().contains(&local), "{err}");
    assert!(err.help().unwrap().contains("delete"));
    let calls_after = std::fs::read_to_string(dir.path().join("calls")).unwrap();
    assert_eq!(calls_after, calls, "helm did not run");
}
