//! The kind binary as a [`ClusterProvisioner`]: create, delete and list clusters, and export their
//! kubeconfigs.
//!
//! # Creating
//!
//! `kind create cluster --name N --image I --kubeconfig K --config -`, with a generated config on stdin
//! ([`kind_config`]) that binds the API server to `127.0.0.1:<port>`, a port picked here and checked
//! free just before (bind port 0, read it, release it). kind is not asked to wait for readiness: the
//! engine waits on the API itself. The kubeconfig goes to the lab's own file `K`, never the user's.
//!
//! # What a failed create leaves behind
//!
//! kind checks for a same-named cluster before touching anything, so a name clash changes nothing.
//! Any later failure (node boot, kubeadm, CNI) makes kind delete the nodes it created (unless
//! `--retain`, which we never pass) and the kubeconfig entries it wrote; the shared docker network `kind`
//! stays, as it always does. A kind process that is killed (a cancelled step: the child is killed on
//! drop) cannot clean up, and its node containers remain, labelled `io.x-k8s.kind.cluster=<name>`; the
//! next create then fails with the permanent name clash. `create` does not delete a half-created
//! cluster itself: whether a cluster of that name is the lab's to delete is the caller's decision
//! (`kind delete cluster` or `ContainerRuntime::remove_cluster_containers`).
//!
//! # Which failures are transient
//!
//! [`classify_create_failure`] reads kind's stderr, in this order (the first match wins):
//!
//! | stderr contains | verdict | why |
//! |---|---|---|
//! | `node(s) already exist for a cluster with the name` | permanent | the name is taken; help says how to delete it |
//! | `Cannot connect to the Docker daemon`, `failed to connect to the docker API`, `permission denied while trying to connect to the Docker daemon`, `executable file not found in $PATH` | permanent | Docker is down, unreachable or missing: the user must act |
//! | `could not find a log line that matches` (the node never reached `Multi-User System`), `too many open files` | transient | host inotify limits exhausted while several nodes boot (kubernetes-sigs/kind `site/content/docs/user/known-issues.md`); it often passes once other nodes are up |
//! | `failed to init node with kubeadm` | permanent | kubeadm could not bring up the control plane: nearly always the host (memory, disk, cgroups) or a node image that does not fit this kind, so a retry repeats a failure that takes minutes; checked before the timeout markers below because kubeadm's output often contains `context deadline exceeded` |
//! | `failed to pull image` together with `manifest unknown`, `not found` or `unauthorized` | permanent | the node image does not exist or is private |
//! | `failed to pull image` (otherwise) | transient | registry or network hiccup |
//! | `network with name kind already exists`, `error creating network`, `failed to ensure docker network` | transient | parallel creates race to create the shared `kind` network |
//! | `port is already allocated`, `address already in use` | transient | another process took our port between the check and kind's bind; the next attempt picks a new one |
//! | `context deadline exceeded`, `TLS handshake timeout`, `i/o timeout`, `connection reset by peer` | transient | slow or overloaded host or registry |
//! | anything else | permanent | kind's output is attached |

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::tools::{self, Tool, ToolError, ToolFailure, Verdict};
use super::{ClusterProvisioner, CreateCluster, Failure, Transience};

type Result<T, E = KindError> = std::result::Result<T, E>;

/// What went wrong running kind, with the facts: the cluster, the command, its exit status and stderr.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KindError {
    /// kind could not be found, downloaded, started or waited for.
    #[error(transparent)]
    Tool(Arc<ToolError>),
    #[error("failed to find a free port on 127.0.0.1 for cluster `{cluster}`: {detail}")]
    NoFreePort { cluster: String, detail: String },
    #[error("failed to create the folder of {path}: {detail}")]
    KubeconfigFolder { path: String, detail: String },
    /// The registry mirror files (`hosts.toml`) the nodes mount could not be written.
    #[error(
        "failed to write the registry mirror files of cluster `{cluster}` under {dir}: {detail}"
    )]
    MirrorFiles {
        cluster: String,
        dir: String,
        detail: String,
    },
    /// `kind create cluster` failed; `verdict` is what its stderr says about retrying (the table in the
    /// module docs).
    #[error(
        "failed to create kind cluster `{cluster}` (API server on 127.0.0.1:{port}): {failure}"
    )]
    Create {
        cluster: String,
        port: u16,
        failure: ToolFailure,
        verdict: Verdict,
    },
    /// Another kind command failed (`action`: "list kind clusters", "delete kind cluster `x`", ...).
    #[error("failed to {action}: {failure}")]
    Command {
        action: String,
        failure: ToolFailure,
        /// Its stderr says Docker is down, unreachable or missing.
        docker_problem: bool,
    },
    #[error("failed to create a temporary folder: {detail}")]
    Scratch { detail: String },
    #[error("`{command}` printed no kubeconfig")]
    NoKubeconfig { command: String },
    #[error("failed to write the kubeconfig of `{cluster}` to {path}: {detail}")]
    WriteKubeconfig {
        cluster: String,
        path: String,
        detail: String,
    },
}

impl From<ToolError> for KindError {
    fn from(e: ToolError) -> Self {
        KindError::Tool(Arc::new(e))
    }
}

impl Failure for KindError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::Kind
    }
    fn transience(&self) -> Transience {
        match self {
            KindError::Tool(e) => e.transience(),
            KindError::NoFreePort { .. } => Transience::Transient,
            KindError::Create { verdict, .. } => verdict.transience,
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        match self {
            KindError::Tool(e) => e.help(),
            KindError::Create { verdict, .. } => verdict.help.clone(),
            KindError::Command {
                docker_problem: true,
                ..
            } => Some(DOCKER_HELP.to_owned()),
            _ => None,
        }
    }
}

/// kind, run as a subprocess.
#[derive(Debug, Clone)]
pub struct Kind {
    tool: Tool,
}

impl Kind {
    pub fn new(tool: Tool) -> Self {
        Kind { tool }
    }

    pub fn tool(&self) -> &Tool {
        &self.tool
    }
}

/// Registry mirrors for a cluster's nodes, in the containerd 2.x form (containerd/containerd v2.3.1
/// `docs/hosts.md`): kind's `config_path` patch in the v2 key form its local-registry guide uses, and one
/// `<certs_dir>/<registry host>/hosts.toml` per mirror, mounted read-only at `/etc/containerd/certs.d` in
/// every node. This works for the containerd of every kindest/node the catalog knows (2.1.4 has no default
/// `config_path`, 2.2+ would read the same folder); the deprecated `registry.mirrors` form is not used, as
/// containerd 2.3 refuses it next to `config_path` (containerd/containerd v2.3.1
/// `internal/cri/config/config.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NodeRegistries {
    /// (registry host, mirror URL), in topology order.
    pub mirrors: Vec<(String, String)>,
    /// The host folder the `hosts.toml` files are written to and mounted from (on the Docker host).
    pub certs_dir: Option<std::path::PathBuf>,
}

/// Where containerd in the nodes reads registry host configs.
pub const NODE_CERTS_DIR: &str = "/etc/containerd/certs.d";

/// The `containerdConfigPatches` entry that makes containerd read [`NODE_CERTS_DIR`] (kind@v0.32.0
/// site/static/examples/kind-with-registry.sh).
pub const CONFIG_PATH_PATCH: &str =
    "[plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"";

impl NodeRegistries {
    /// The registry mirrors of a lab's kind nodes (`spec.registry`, the local registry included), their
    /// `hosts.toml` files in the lab's state folder.
    pub fn for_lab(lab: &crate::topology::Lab, state: &crate::state::StateDir) -> Self {
        let mirrors: Vec<(String, String)> = lab
            .registry
            .node_mirrors()
            .into_iter()
            .map(|m| (m.host, m.url))
            .collect();
        NodeRegistries {
            certs_dir: (!mirrors.is_empty()).then(|| state.registry_certs_dir()),
            mirrors,
        }
    }

    /// The `hosts.toml` of each mirrored registry host, as (folder name, text). `docker.io` falls back
    /// to `registry-1.docker.io`, every other host to `https://<host>`; the local registry's
    /// `localhost:<port>` has no fallback (it exists only as the mirror).
    pub fn hosts_files(&self) -> Vec<(String, String)> {
        self.mirrors
            .iter()
            .map(|(host, url)| {
                let server = match host.as_str() {
                    "docker.io" => Some("https://registry-1.docker.io".to_owned()),
                    h if h.starts_with("localhost:") => None,
                    h => Some(format!("https://{h}")),
                };
                let mut text = format!(
                    "# Written by ocm-lab from spec.registry of the topology: pull {host} images from {url} first.\n"
                );
                if let Some(server) = server {
                    text.push_str(&format!("server = \"{server}\"\n"));
                }
                text.push_str(&format!(
                    "\n[host.\"{url}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
                ));
                (host.clone(), text)
            })
            .collect()
    }

    /// Writes [`Self::hosts_files`] under `certs_dir` (replacing what was there).
    pub fn write_hosts_files(&self) -> std::io::Result<()> {
        let Some(dir) = &self.certs_dir else {
            return Ok(());
        };
        for (host, text) in self.hosts_files() {
            let folder = dir.join(&host);
            std::fs::create_dir_all(&folder)?;
            std::fs::write(folder.join("hosts.toml"), text)?;
        }
        Ok(())
    }
}

/// The kind config for one cluster: the API server on `127.0.0.1:<port>`, and with mirrors the
/// containerd `config_path` patch and the mount of the `hosts.toml` folder into the node.
pub fn kind_config(port: u16, registries: &NodeRegistries) -> String {
    let mut config = format!(
        "# Generated by ocm-lab: the API server listens on 127.0.0.1:{port}, a port ocm-lab checked free.\n\
         kind: Cluster\n\
         apiVersion: kind.x-k8s.io/v1alpha4\n\
         networking:\n  apiServerAddress: \"127.0.0.1\"\n  apiServerPort: {port}\n"
    );
    if let (false, Some(dir)) = (registries.mirrors.is_empty(), &registries.certs_dir) {
        config.push_str("# Registry mirrors (spec.registry): containerd reads hosts.toml files from config_path.\n");
        config.push_str("containerdConfigPatches:\n- |-\n");
        for line in CONFIG_PATH_PATCH.lines() {
            config.push_str(&format!("  {line}\n"));
        }
        config.push_str(&format!(
            "nodes:\n- role: control-plane\n  extraMounts:\n  - hostPath: {}\n    containerPath: {NODE_CERTS_DIR}\n    readOnly: true\n",
            serde_json::to_string(&dir.to_string_lossy()).expect("strings serialize")
        ));
    }
    config
}

/// A port free on 127.0.0.1 right now (the OS picks it; the socket is closed again before returning).
pub fn free_port() -> std::io::Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

/// `create cluster` arguments; the config is read from stdin (`--config -`).
pub fn create_args(req: &CreateCluster) -> Vec<String> {
    vec![
        "create".into(),
        "cluster".into(),
        "--name".into(),
        req.name.clone(),
        "--image".into(),
        req.image.clone(),
        "--kubeconfig".into(),
        req.kubeconfig.to_string_lossy().into_owned(),
        "--config".into(),
        "-".into(),
    ]
}

/// `delete cluster` arguments. `kubeconfig` is where kind removes the cluster's context from: a
/// throwaway file, so deleting never rewrites the user's kubeconfig (the lab manages its contexts there).
pub fn delete_args(name: &str, kubeconfig: &Path) -> Vec<String> {
    vec![
        "delete".into(),
        "cluster".into(),
        "--name".into(),
        name.to_owned(),
        "--kubeconfig".into(),
        kubeconfig.to_string_lossy().into_owned(),
    ]
}

/// The cluster names in `kind get clusters` output (one a line; "No kind clusters found." is a notice
/// kind prints to stderr, tolerated here too).
pub fn parse_clusters(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("No kind clusters found"))
        .map(str::to_owned)
        .collect()
}

const DOCKER_MARKERS: &[&str] = &[
    "Cannot connect to the Docker daemon",
    "failed to connect to the docker API",
    "permission denied while trying to connect to the Docker daemon",
    "executable file not found in $PATH",
];

const DOCKER_HELP: &str = "kind needs a running Docker that this user may use: start Docker (or add the user to the `docker` group), check `docker ps`, and run again";

fn docker_problem(stderr: &str) -> bool {
    DOCKER_MARKERS.iter().any(|m| stderr.contains(m))
}

/// Classifies a failed `kind create cluster` by its stderr (the table in the module docs).
pub fn classify_create_failure(name: &str, stderr: &str) -> Verdict {
    let has = |m: &str| stderr.contains(m);
    if has("node(s) already exist for a cluster with the name") {
        return Verdict::permanent(Some(format!(
            "a kind cluster named `{name}` already exists: delete it with `kind delete cluster --name {name}` if it is yours, or rename the cluster in the topology"
        )));
    }
    if docker_problem(stderr) {
        return Verdict::permanent(Some(DOCKER_HELP.to_owned()));
    }
    if has("could not find a log line that matches") || has("too many open files") {
        return Verdict::transient(
            "a node did not boot, usually because the host's inotify limits are too low for several kind clusters; \
             raise them with `sudo sysctl fs.inotify.max_user_watches=524288 fs.inotify.max_user_instances=512` \
             (https://kind.sigs.k8s.io/docs/user/known-issues/#pod-errors-due-to-too-many-open-files)",
        );
    }
    if has("failed to init node with kubeadm") {
        return Verdict::permanent(Some(format!(
            "kubeadm could not start the control plane: usually the host (memory, disk space, cgroups) or a node image \
             that does not suit this kind version. To see why, run `kind create cluster --name {name} --retain` and \
             `kind export logs --name {name}`, then `kind delete cluster --name {name}`"
        )));
    }
    if has("failed to pull image") {
        if has("manifest unknown") || has("not found") || has("unauthorized") {
            return Verdict::permanent(Some(
                "the node image cannot be pulled: check `kindImage` in the topology (kind's release notes list the images for each kind version)".to_owned(),
            ));
        }
        return Verdict::transient("pulling the node image failed; check the network or registry");
    }
    if has("network with name kind already exists")
        || has("error creating network")
        || has("failed to ensure docker network")
    {
        return Verdict::transient(
            "parallel creates raced to create the docker network `kind`; it exists now",
        );
    }
    if has("port is already allocated") || has("address already in use") {
        return Verdict::transient(
            "another process took the API server port between ocm-lab's check and kind's bind; the next attempt picks a new port",
        );
    }
    if has("context deadline exceeded")
        || has("TLS handshake timeout")
        || has("i/o timeout")
        || has("connection reset by peer")
    {
        return Verdict::transient(
            "kind timed out; the host or the registry is slow or overloaded",
        );
    }
    Verdict::permanent(None)
}

/// A failure of a kind command other than create: Docker trouble gets its help, the rest is permanent.
fn other_failure(action: String, out: &tools::Output) -> KindError {
    KindError::Command {
        action,
        failure: out.failure(),
        docker_problem: docker_problem(&out.stderr),
    }
}

#[async_trait]
impl ClusterProvisioner for Kind {
    async fn list(&self) -> Result<Vec<String>> {
        let args = vec!["get".to_owned(), "clusters".to_owned()];
        let out = tools::run(&self.tool, &args, None).await?;
        if !out.status.success() {
            return Err(other_failure("list kind clusters".to_owned(), &out));
        }
        Ok(parse_clusters(&String::from_utf8_lossy(&out.stdout)))
    }

    async fn create(&self, req: &CreateCluster) -> Result<()> {
        let port = free_port().map_err(|e| KindError::NoFreePort {
            cluster: req.name.clone(),
            detail: e.to_string(),
        })?;
        if let Some(dir) = req.kubeconfig.parent() {
            std::fs::create_dir_all(dir).map_err(|e| KindError::KubeconfigFolder {
                path: req.kubeconfig.display().to_string(),
                detail: e.to_string(),
            })?;
        }
        tracing::info!(cluster = %req.name, image = %req.image, api_server_port = port, "creating kind cluster");
        let args = create_args(req);
        req.registries
            .write_hosts_files()
            .map_err(|e| KindError::MirrorFiles {
                cluster: req.name.clone(),
                dir: req
                    .registries
                    .certs_dir
                    .as_deref()
                    .unwrap_or(Path::new("?"))
                    .display()
                    .to_string(),
                detail: e.to_string(),
            })?;
        let config = kind_config(port, &req.registries);
        let out = tools::run(&self.tool, &args, Some(config.into_bytes())).await?;
        if out.status.success() {
            tracing::info!(cluster = %req.name, api_server_port = port, "created kind cluster");
            return Ok(());
        }
        Err(KindError::Create {
            cluster: req.name.clone(),
            port,
            failure: out.failure(),
            verdict: classify_create_failure(&req.name, &out.stderr),
        })
    }

    async fn delete(&self, name: &str) -> Result<()> {
        let scratch = tempfile::Builder::new()
            .prefix("ocm-lab-kind")
            .tempdir()
            .map_err(|e| KindError::Scratch {
                detail: e.to_string(),
            })?;
        let args = delete_args(name, &scratch.path().join("kubeconfig"));
        let out = tools::run(&self.tool, &args, None).await?;
        if out.status.success() {
            return Ok(());
        }
        // kind releases differ on deleting an unknown cluster (most succeed, some fail): gone is gone.
        if let Ok(clusters) = self.list().await
            && !clusters.iter().any(|c| c == name)
        {
            tracing::debug!(
                cluster = name,
                "kind delete failed, but no such cluster exists: done"
            );
            return Ok(());
        }
        Err(other_failure(format!("delete kind cluster `{name}`"), &out))
    }

    async fn export_kubeconfig(&self, name: &str, path: &Path) -> Result<()> {
        let args = vec![
            "get".to_owned(),
            "kubeconfig".to_owned(),
            "--name".to_owned(),
            name.to_owned(),
        ];
        let out = tools::run(&self.tool, &args, None).await?;
        if !out.status.success() {
            return Err(other_failure(
                format!("get the kubeconfig of kind cluster `{name}`"),
                &out,
            ));
        }
        if out.stdout.iter().all(u8::is_ascii_whitespace) {
            return Err(KindError::NoKubeconfig {
                command: out.command,
            });
        }
        // The kubeconfig holds the cluster-admin client key: written 0600, never logged.
        crate::state::write_secret(path, &out.stdout).map_err(|e| KindError::WriteKubeconfig {
            cluster: name.to_owned(),
            path: path.display().to_string(),
            detail: e.to_string(),
        })
    }
}
