//! The chart cache: each chart the lab installs is fetched once from its repository into
//! `<cache>/charts/<repo-host>/<name>-<version>.tgz` (`<cache>` as for the tools: `$OCM_LAB_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/ocm-lab`, else `~/.cache/ocm-lab`), and Helm renders and installs it from that file
//! afterwards (`helm template <release> <file>.tgz`, `helm upgrade --install <release> <file>.tgz`).
//!
//! # Fetching and verifying
//!
//! A fetch reads the repository's `index.yaml` (`<repo>/index.yaml`, as Helm does, helm/helm v3.19.5
//! `pkg/repo/chartrepo.go`), takes the entry for the chart's name and version, and downloads its first URL
//! (resolved against the repository URL when relative), hashing the bytes while they stream into a private
//! temporary file in the cache folder. The file is renamed into place only when its sha256 equals the `digest`
//! the index publishes for that name and version; otherwise nothing is cached and the error names both digests.
//! The verified digest is then recorded next to the chart (`<name>-<version>.tgz.sha256`, `sha256sum` format).
//!
//! # Using the cache
//!
//! A cached chart with a recorded digest is used without any network access: its sha256 is computed and
//! compared with the recorded one. A cached chart without a recorded digest (put there by hand) is checked
//! against the repository's index, and recorded when it matches. A cached chart whose digest does not match
//! is refused, naming the file and what to do (delete it and run again with network access, or use a
//! bundle); it is never replaced silently, because a changed file in the cache is a sign of tampering.
//!
//! `OCM_LAB_CHARTS_BASE_URL` replaces the charts' repository with a mirror laid out the same way (its
//! `index.yaml` and the charts it names); what it serves is verified against its own index, and cached
//! under the chart's own repository host.
//!
//! `up --bundle` puts a bundle's charts into the cache with [`ChartCache::install`], checked against the
//! digest the bundle's manifest records, so an offline machine renders from the cache.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::tools;
use super::{Failure, Transience};

/// The largest index or chart fetched (OCM's index is well under 1 MB, its charts under 1 MB each).
const MAX_FETCH_BYTES: u64 = 64 * 1024 * 1024;

/// Why a chart could not be taken from the cache or fetched into it.
#[derive(Debug, thiserror::Error)]
pub enum ChartCacheError {
    /// A cached chart whose sha256 is not the one it was verified with (or, when it was never recorded,
    /// not the one the repository's index publishes).
    #[error(
        "refusing the cached chart {file}: its sha256 is {actual}, but {expected_from} says {expected}"
    )]
    Tampered {
        file: String,
        actual: String,
        expected: String,
        expected_from: String,
    },
    /// A download whose sha256 is not the one the repository's index publishes: nothing was cached.
    #[error(
        "refusing the chart {url}: its sha256 is {actual}, but the repository index {index} says {expected}; nothing was cached"
    )]
    IndexMismatch {
        url: String,
        index: String,
        actual: String,
        expected: String,
    },
    #[error("chart {name} {version} is not in the repository index {index}")]
    NotInIndex {
        index: String,
        name: String,
        version: String,
    },
    #[error(
        "the repository index {index} publishes no sha256 digest for {name} {version}, so ocm-lab cannot verify it"
    )]
    NoDigest {
        index: String,
        name: String,
        version: String,
    },
    #[error("the repository index {url} cannot be read: {problem}")]
    BadIndex { url: String, problem: String },
    /// The repository did not answer (or answered an error): a retry may help.
    #[error("the chart repository is unreachable: failed to fetch {url}: {problem}")]
    Fetch { url: String, problem: String },
    #[error("failed to use the chart cache {path}: {problem}")]
    Cache { path: String, problem: String },
}

impl Failure for ChartCacheError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::ChartCache
    }
    fn transience(&self) -> Transience {
        match self {
            ChartCacheError::Fetch { .. } => Transience::Transient,
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        Some(match self {
            ChartCacheError::Tampered { file, .. } => format!(
                "the cached file was changed or damaged: delete {file} and run again with network access (ocm-lab fetches and verifies it again), or bring the lab up from a bundle (`ocm-lab up --bundle <file>`)"
            ),
            ChartCacheError::IndexMismatch { .. } => "the repository (or a proxy) serves a file other than the one its index publishes; run again later, or bring the lab up from a bundle (`ocm-lab up --bundle <file>`)".to_owned(),
            ChartCacheError::NotInIndex { .. } => {
                "check the chart version in the topology (`ocm-lab plan`)".to_owned()
            }
            ChartCacheError::Fetch { .. } => "check the network connection (and HTTPS_PROXY); offline, bring the lab up from a bundle made where the repository is reachable (`ocm-lab bundle save`, then `ocm-lab up --bundle <file>`)".to_owned(),
            ChartCacheError::Cache { .. } => {
                "check its permissions, or set OCM_LAB_CACHE_DIR to another folder".to_owned()
            }
            ChartCacheError::NoDigest { .. } | ChartCacheError::BadIndex { .. } => return None,
        })
    }
}

type Result<T, E = ChartCacheError> = std::result::Result<T, E>;

/// The chart cache folder (`<cache>/charts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartCache {
    dir: PathBuf,
    /// A chart repository that replaces every chart's own (`OCM_LAB_CHARTS_BASE_URL`): the index and the
    /// charts are fetched from it, and cached under the chart's own repository host.
    mirror: Option<String>,
}

impl ChartCache {
    /// The cache in `dir` (which holds `<repo-host>/<name>-<version>.tgz`).
    pub fn new(dir: PathBuf) -> Self {
        ChartCache { dir, mirror: None }
    }

    /// Fetches from `mirror` (a chart repository laid out as the charts' own: `index.yaml` and the
    /// charts it names) instead of each chart's repository.
    pub fn with_mirror(mut self, mirror: Option<String>) -> Self {
        self.mirror = mirror;
        self
    }

    /// `<cache root>/charts`, the cache root as for the tools (`tools::cache_root_from_env`), with the
    /// mirror `OCM_LAB_CHARTS_BASE_URL` when set.
    pub fn from_env() -> Option<Self> {
        // The adapter's configuration, as for the tools: an offline room points it at its own mirror.
        let mirror = std::env::var("OCM_LAB_CHARTS_BASE_URL")
            .ok()
            .filter(|v| !v.is_empty());
        tools::cache_root_from_env()
            .map(|root| ChartCache::new(root.join("charts")).with_mirror(mirror))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where chart `name` `version` of repository `repo` is cached.
    pub fn path(&self, repo: &str, name: &str, version: &str) -> PathBuf {
        self.dir
            .join(repo_host(repo))
            .join(format!("{name}-{version}.tgz"))
    }

    /// The local `.tgz` of chart `name` `version` from `repo`: the cached file when its digest is the
    /// recorded one (no network access), else fetched and verified against the repository's index.
    /// Blocking.
    pub fn ensure(&self, repo: &str, name: &str, version: &str) -> Result<PathBuf> {
        let path = self.path(repo, name, version);
        // One fetch at a time in this process: parallel installs of the same chart fetch it once.
        let _guard = FETCH_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        if path.is_file() {
            let actual = sha256_file(&path).map_err(cache_err(&path))?;
            if let Some(recorded) = recorded_digest(&path) {
                if actual == recorded {
                    tracing::debug!(chart = %path.display(), "using the cached chart");
                    return Ok(path);
                }
                return Err(ChartCacheError::Tampered {
                    file: path.display().to_string(),
                    actual,
                    expected: recorded,
                    expected_from: format!(
                        "{} (recorded when it was verified)",
                        digest_path(&path).display()
                    ),
                });
            }
            // Never recorded: the repository's index decides.
            let agent = http_agent();
            let (index, entry) = find_entry(&agent, self.source(repo), name, version)?;
            if actual != entry.digest {
                return Err(ChartCacheError::Tampered {
                    file: path.display().to_string(),
                    actual,
                    expected: entry.digest,
                    expected_from: format!("the repository index {index}"),
                });
            }
            record_digest(&path, &actual)?;
            return Ok(path);
        }
        let agent = http_agent();
        let source = self.source(repo);
        let (index, entry) = find_entry(&agent, source, name, version)?;
        let url = resolve_url(source, &entry.url);
        let dir = path.parent().expect("a cache path has a folder");
        std::fs::create_dir_all(dir).map_err(cache_err(dir))?;
        let mut part = tempfile::Builder::new()
            .prefix(".chart.part")
            .tempfile_in(dir)
            .map_err(cache_err(dir))?;
        let actual = fetch_to_file(&agent, &url, part.as_file_mut())?;
        if actual != entry.digest {
            return Err(ChartCacheError::IndexMismatch {
                url,
                index,
                actual,
                expected: entry.digest,
            });
        }
        record_digest(&path, &actual)?;
        part.persist(&path).map_err(|e| ChartCacheError::Cache {
            path: path.display().to_string(),
            problem: e.error.to_string(),
        })?;
        tracing::debug!(chart = %path.display(), %url, "fetched and verified the chart");
        Ok(path)
    }

    /// Where charts of `repo` are fetched from: the mirror when set.
    fn source<'a>(&'a self, repo: &'a str) -> &'a str {
        self.mirror.as_deref().unwrap_or(repo)
    }

    /// Puts a chart into the cache from `reader` (a bundle's entry), accepted only when its sha256 is
    /// `digest` (hex, or `sha256:<hex>`); records the digest. Returns the cached path. Blocking.
    pub fn install(
        &self,
        repo: &str,
        name: &str,
        version: &str,
        digest: &str,
        reader: &mut dyn io::Read,
    ) -> Result<PathBuf> {
        let expected = digest.strip_prefix("sha256:").unwrap_or(digest).to_owned();
        let path = self.path(repo, name, version);
        let dir = path.parent().expect("a cache path has a folder");
        std::fs::create_dir_all(dir).map_err(cache_err(dir))?;
        let mut part = tempfile::Builder::new()
            .prefix(".chart.part")
            .tempfile_in(dir)
            .map_err(cache_err(dir))?;
        let actual = copy_hashing(reader, part.as_file_mut()).map_err(cache_err(&path))?;
        if actual != expected {
            return Err(ChartCacheError::Tampered {
                file: path.display().to_string(),
                actual,
                expected,
                expected_from: "the bundle's manifest".to_owned(),
            });
        }
        let _guard = FETCH_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        record_digest(&path, &actual)?;
        part.persist(&path).map_err(|e| ChartCacheError::Cache {
            path: path.display().to_string(),
            problem: e.error.to_string(),
        })?;
        Ok(path)
    }
}

static FETCH_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The folder name of a repository: its host (and `_<port>` when it has one), e.g.
/// `open-cluster-management.io`, `127.0.0.1_8080`.
pub fn repo_host(repo: &str) -> String {
    let rest = repo.split_once("://").map_or(repo, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let host: String = authority
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if host.is_empty() || host.chars().all(|c| c == '.') {
        "repository".to_owned()
    } else {
        host
    }
}

/// The file holding the digest a cached chart was verified with.
pub fn digest_path(chart: &Path) -> PathBuf {
    let mut name = chart.file_name().unwrap_or_default().to_owned();
    name.push(".sha256");
    chart.with_file_name(name)
}

fn recorded_digest(chart: &Path) -> Option<String> {
    let text = std::fs::read_to_string(digest_path(chart)).ok()?;
    tools::parse_checksum_file(&text)
}

fn record_digest(chart: &Path, digest: &str) -> Result<()> {
    let file = digest_path(chart);
    let dir = file.parent().expect("a cache path has a folder");
    let name = chart.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(cache_err(dir))?;
    tmp.write_all(format!("{digest}  {name}\n").as_bytes())
        .map_err(cache_err(&file))?;
    tmp.persist(&file).map_err(|e| ChartCacheError::Cache {
        path: file.display().to_string(),
        problem: e.error.to_string(),
    })?;
    Ok(())
}

fn cache_err(path: &Path) -> impl FnOnce(io::Error) -> ChartCacheError + '_ {
    move |e| ChartCacheError::Cache {
        path: path.display().to_string(),
        problem: e.to_string(),
    }
}

/// The sha256 (hex) of a file, read in chunks.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    copy_hashing(&mut std::fs::File::open(path)?, &mut io::sink())
}

/// Copies `reader` into `out`, returning the sha256 (hex) of what was copied.
pub fn copy_hashing(reader: &mut dyn io::Read, out: &mut dyn io::Write) -> io::Result<String> {
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hash.update(&buf[..n]);
        out.write_all(&buf[..n])?;
    }
    out.flush()?;
    Ok(hex::encode(hash.finalize()))
}

/// One chart version in a repository index: its first URL and its digest (lowercase hex).
#[derive(Debug)]
struct Entry {
    url: String,
    digest: String,
}

#[derive(serde::Deserialize)]
struct Index {
    #[serde(default)]
    entries: std::collections::BTreeMap<String, Vec<IndexEntry>>,
}

#[derive(serde::Deserialize)]
struct IndexEntry {
    #[serde(default)]
    version: String,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    urls: Vec<String>,
}

/// Fetches `<repo>/index.yaml` and finds chart `name` `version` in it; returns the index URL and the entry.
fn find_entry(
    agent: &ureq::Agent,
    repo: &str,
    name: &str,
    version: &str,
) -> Result<(String, Entry)> {
    let index_url = format!("{}/index.yaml", repo.trim_end_matches('/'));
    let text = get(agent, &index_url)?
        .into_body()
        .into_with_config()
        .limit(MAX_FETCH_BYTES)
        .read_to_string()
        .map_err(|e| ChartCacheError::Fetch {
            url: index_url.clone(),
            problem: e.to_string(),
        })?;
    let entry = parse_index(&text, name, version).map_err(|problem| match problem {
        IndexProblem::Bad(problem) => ChartCacheError::BadIndex {
            url: index_url.clone(),
            problem,
        },
        IndexProblem::Missing => ChartCacheError::NotInIndex {
            index: index_url.clone(),
            name: name.to_owned(),
            version: version.to_owned(),
        },
        IndexProblem::NoDigest => ChartCacheError::NoDigest {
            index: index_url.clone(),
            name: name.to_owned(),
            version: version.to_owned(),
        },
    })?;
    Ok((index_url, entry))
}

enum IndexProblem {
    Bad(String),
    Missing,
    NoDigest,
}

fn parse_index(text: &str, name: &str, version: &str) -> std::result::Result<Entry, IndexProblem> {
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: 10_000_000,
            max_events: 40_000_000,
        },
    };
    let index: Index = serde_saphyr::from_str_with_options(text, options)
        .map_err(|e| IndexProblem::Bad(e.to_string()))?;
    let want = version.strip_prefix('v').unwrap_or(version);
    let found = index
        .entries
        .get(name)
        .and_then(|versions| {
            versions
                .iter()
                .find(|e| e.version.strip_prefix('v').unwrap_or(&e.version) == want)
        })
        .ok_or(IndexProblem::Missing)?;
    let digest = found
        .digest
        .as_deref()
        .map(|d| d.strip_prefix("sha256:").unwrap_or(d).to_ascii_lowercase())
        .filter(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or(IndexProblem::NoDigest)?;
    let url = found
        .urls
        .first()
        .cloned()
        .ok_or_else(|| IndexProblem::Bad(format!("{name} {version} has no URL")))?;
    Ok(Entry { url, digest })
}

/// A chart URL from an index, resolved against the repository URL when relative.
fn resolve_url(repo: &str, url: &str) -> String {
    if url.contains("://") {
        url.to_owned()
    } else {
        format!(
            "{}/{}",
            repo.trim_end_matches('/'),
            url.trim_start_matches("./").trim_start_matches('/')
        )
    }
}

fn http_agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_global(Some(Duration::from_secs(5 * 60)))
        .http_status_as_error(false)
        .user_agent(concat!("ocm-lab/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(config)
}

fn get(agent: &ureq::Agent, url: &str) -> Result<ureq::http::Response<ureq::Body>> {
    let fail = |problem: String| ChartCacheError::Fetch {
        url: url.to_owned(),
        problem,
    };
    let resp = agent.get(url).call().map_err(|e| fail(e.to_string()))?;
    let status = resp.status();
    if status.as_u16() == 404 {
        return Err(ChartCacheError::BadIndex {
            url: url.to_owned(),
            problem: "the server answered HTTP 404 (not found)".to_owned(),
        });
    }
    if !status.is_success() {
        return Err(fail(format!("the server answered HTTP {status}")));
    }
    Ok(resp)
}

/// Streams `url` into `file`, returning the sha256 (hex) of what was written.
fn fetch_to_file(agent: &ureq::Agent, url: &str, file: &mut std::fs::File) -> Result<String> {
    let mut body = get(agent, url)?
        .into_body()
        .into_with_config()
        .limit(MAX_FETCH_BYTES)
        .reader();
    let digest = copy_hashing(&mut body, file).map_err(|e| ChartCacheError::Fetch {
        url: url.to_owned(),
        problem: e.to_string(),
    })?;
    file.sync_all().map_err(|e| ChartCacheError::Cache {
        path: url.to_owned(),
        problem: e.to_string(),
    })?;
    Ok(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_hosts_are_folder_names() {
        assert_eq!(
            repo_host("https://open-cluster-management.io/helm-charts"),
            "open-cluster-management.io"
        );
        assert_eq!(repo_host("http://127.0.0.1:8080/charts/"), "127.0.0.1_8080");
        assert_eq!(repo_host("http://../x"), "repository");
    }

    #[test]
    fn an_index_entry_is_found_by_name_and_version() {
        let index = "apiVersion: v1\nentries:\n  klusterlet:\n  - version: 1.0.0\n    digest: AB\n    urls: [x]\n  - version: 1.1.0\n    digest: \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789ABCDEF\"\n    urls: [\"klusterlet-1.1.0.tgz\"]\n";
        let e = parse_index(index, "klusterlet", "1.1.0").ok().unwrap();
        assert_eq!(
            e.digest,
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
        );
        assert_eq!(
            resolve_url("http://h/charts/", &e.url),
            "http://h/charts/klusterlet-1.1.0.tgz"
        );
        assert!(matches!(
            parse_index(index, "klusterlet", "1.0.0"),
            Err(IndexProblem::NoDigest)
        ));
        assert!(matches!(
            parse_index(index, "klusterlet", "9.9.9"),
            Err(IndexProblem::Missing)
        ));
    }
}
