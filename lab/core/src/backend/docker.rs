//! The Docker backend: [`ContainerRuntime`] on the Docker Engine API, through bollard.
//!
//! What the lab needs from Docker is small: reach the daemon (and say how to fix it when that fails),
//! make sure the shared `kind` network exists, find a kind cluster's node containers and their addresses,
//! remove the leftovers of a cluster we own, and, for the doctor, read kernel settings as the daemon's
//! kernel sees them.
//!
//! Facts this module is built around (bollard 0.21):
//! - bollard reads `DOCKER_HOST` (`unix://`, `tcp://`) but **not** docker CLI contexts, so Docker Desktop
//!   and rootless Docker users must set `DOCKER_HOST`; every "cannot reach Docker" error says so.
//! - bollard connects lazily: the socket is only used on the first request, so [`Docker::connect`] pings
//!   and negotiates the API version at once, and a dead daemon fails there, not halfway through a run.
//! - bollard cannot send `CheckDuplicate` on network creation, and daemons older than API 1.44 (Docker
//!   < 25) then accept a second network with the same name. [`ContainerRuntime::ensure_network`]
//!   resolves such duplicates itself, as kind does.
//! - We never pull images: labs may run where no registry is reachable, and a diagnosis that downloads
//!   things would surprise.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, HostConfig, Ipam, IpamConfig, Network, NetworkCreateRequest,
};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, InspectContainerOptions,
    InspectNetworkOptions, ListContainersOptionsBuilder, ListNetworksOptions,
    RemoveContainerOptionsBuilder, StartContainerOptions,
};
use futures::StreamExt;
use serde::Serialize;

use super::{
    ContainerRuntime, Failure, LookAlike, NetworkRemoval, NodeContainer, Transience,
    is_kind_node_name,
};

type Result<T, E = DockerError> = std::result::Result<T, E>;

/// What went wrong talking to Docker, with the facts: what we asked, where, and what the daemon said.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerError {
    /// The daemon answered `what` with an error status: 5xx and 409 are transient (the daemon or
    /// another client may be busy), other statuses permanent.
    #[error("{what}: Docker answered {status}: {message}")]
    Daemon {
        what: String,
        status: u16,
        message: String,
    },
    /// No daemon listens at `host` (socket missing, connection refused).
    #[error("Docker is not running or not reachable at {host}: start Docker (or set DOCKER_HOST)")]
    NotRunning { host: String },
    #[error("cannot {what}: DOCKER_HOST={uri} is not supported")]
    UnsupportedHost { what: String, uri: String },
    #[error("{what}: Docker at {host} did not answer in time")]
    Timeout { what: String, host: String },
    #[error(
        "permission denied connecting to Docker at {host}: add your user to the docker group or use rootless Docker with DOCKER_HOST"
    )]
    PermissionDenied { host: String },
    #[error("cannot {what}: lost or failed connection to Docker at {host}: {detail}")]
    Connection {
        what: String,
        host: String,
        detail: String,
    },
    /// Anything else bollard reports (a body it could not parse, a bad request it refused to send).
    #[error("{what}: {detail}")]
    Client { what: String, detail: String },
    #[error(
        "DOCKER_HOST={host} with DOCKER_TLS_VERIFY set: ocm-lab does not support TLS connections to Docker"
    )]
    TlsUnsupported { host: String },
    #[error("Docker's /version answer has no version")]
    NoVersion,
    #[error("image {image} is not present on the Docker daemon at {host}")]
    ImageMissing { image: String, host: String },
    #[error("reading kernel settings in container {container} took longer than {after:?}")]
    SysctlTimeout { container: String, after: Duration },
    #[error("image {image} has no cat to read kernel settings with")]
    NoCat { image: String },
    /// The daemon could not start a container of `image` (it answers 500 when there is no /bin/sh).
    #[error("{source}")]
    NoShell {
        image: String,
        source: Box<DockerError>,
    },
    #[error("the sysctl container of {image} printed nothing but: {stderr}")]
    SysctlStderr { image: String, stderr: String },
    #[error(
        "could not create Docker network {network}: exhausted attempts trying to find a non-overlapping subnet"
    )]
    SubnetsExhausted { network: String },
    #[error("could not create Docker network {network}: concurrent creators kept colliding")]
    NetworkRace { network: String },
    /// An empty name where one is needed (`what`: "Docker network name", "kind cluster name").
    #[error("empty {what}")]
    EmptyName { what: &'static str },
    #[error("not a sysctl name: {key:?} (expected e.g. fs.inotify.max_user_watches)")]
    NotSysctl { key: String },
    /// An image a bundle must hold is not in the engine.
    #[error("image {image} is not in the Docker engine at {host}: the bundle cannot hold it")]
    NotInEngine { image: String, host: String },
    /// A local file operation around the engine (a bundle, a temporary folder) failed.
    #[error("failed to {what}: {detail}")]
    Io { what: String, detail: String },
    /// A background task of ours (the bundle writer or checker) ended before finishing.
    #[error("the {what} stopped: {detail}")]
    TaskStopped { what: String, detail: String },
    /// A bundle that fails its manifest check: nothing of it is loaded.
    #[error("bundle {bundle} is refused: {why}; nothing was loaded")]
    BundleRefused { bundle: String, why: String },
    /// `ctr images import` in a kind node failed (exit status and the tail of its output).
    #[error("importing {archive} into containerd in node {node} failed (exit {code}): {output}")]
    NodeImportFailed {
        node: String,
        archive: String,
        code: i64,
        output: String,
    },
    /// A command ocm-lab runs in a kind node (`ctr images ls`, `crictl pull`) failed.
    #[error("`{command}` in node {node} failed (exit {code}): {output}")]
    NodeCommandFailed {
        node: String,
        command: String,
        code: i64,
        output: String,
    },
    /// `bundle save`: the tag of a pinned image names another image than its digest does.
    #[error(
        "cannot save {image} under its tag: the engine's {tag} is image {tagged}, the pinned reference is image {pinned}"
    )]
    TagNamesAnotherImage {
        image: String,
        tag: String,
        tagged: String,
        pinned: String,
    },
    /// `up --bundle`: after `docker load`, the engine does not hold the bundle's image under the name it
    /// was saved by, as the image it was saved as.
    #[error(
        "after loading {image} from the bundle, the engine's {name} is {}, not the bundle's image {want}",
        got.as_deref().unwrap_or("missing")
    )]
    BundleImageNotLoaded {
        image: String,
        name: String,
        want: String,
        got: Option<String>,
    },
    /// The node's `containerd config dump` names no snapshotter where kind reads it.
    #[error(
        "cannot tell the containerd snapshotter of node {node} from `containerd config dump`: {detail}"
    )]
    NodeSnapshotterUnknown { node: String, detail: String },
    /// After importing a bundle's archive into a node, containerd does not hold the reference the
    /// charts ask for (the archive names another, or lost the digest): the kubelet would pull it.
    #[error(
        "node {node} does not hold {image} after importing it from the bundle (containerd lists: {found}): the kubelet would pull it"
    )]
    NodeImageMissing {
        node: String,
        image: String,
        found: String,
    },
    /// A container with the local registry's name that lacks the lab's labels: someone else's.
    #[error(
        "a container named {name} exists on the Docker engine at {host} and is not this lab's (it lacks the label {label})"
    )]
    ForeignRegistry {
        name: String,
        host: String,
        label: String,
    },
    /// The local registry's host port is taken by something else.
    #[error("{source}")]
    PortTaken { port: u16, source: Box<DockerError> },
    /// Pulling an image the lab needs (the local registry's) failed.
    #[error("{source}")]
    PullFailed {
        image: String,
        source: Box<DockerError>,
    },
}

impl Failure for DockerError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::Docker
    }
    fn transience(&self) -> Transience {
        match self {
            DockerError::Daemon { status, .. } if *status >= 500 || *status == 409 => {
                Transience::Transient
            }
            DockerError::Timeout { .. }
            | DockerError::SysctlTimeout { .. }
            | DockerError::NetworkRace { .. } => Transience::Transient,
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        Some(match self {
            DockerError::NotRunning { host } | DockerError::Connection { host, .. } => {
                reach_help(host)
            }
            DockerError::UnsupportedHost { .. } => "use unix:///path/to/docker.sock or tcp://host:port (ssh:// and TLS are not supported: forward the socket with ssh -L and use unix://)".to_owned(),
            DockerError::PermissionDenied { .. } => "sudo usermod -aG docker $USER, then log out and in again (or run `newgrp docker`); for rootless Docker: export DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock".to_owned(),
            DockerError::TlsUnsupported { .. } => "run ocm-lab on the Docker host, or forward the daemon's socket (ssh -L /tmp/docker.sock:/var/run/docker.sock host) and set DOCKER_HOST=unix:///tmp/docker.sock".to_owned(),
            DockerError::ImageMissing { .. } => "ocm-lab does not pull images to read kernel settings: pass an image that exists locally (docker images), e.g. a kind node image".to_owned(),
            DockerError::NoCat { .. } => "pass another local image, e.g. a kind node image".to_owned(),
            DockerError::NoShell { image, .. } => format!("the image must contain /bin/sh; pass another local image (e.g. a kind node image) instead of {image}"),
            DockerError::SubnetsExhausted { .. } => "remove unused Docker networks (`docker network prune`) and run again".to_owned(),
            DockerError::PortTaken { port, .. } => format!("127.0.0.1:{port} is taken (another lab's or kind's registry?): stop what uses it (`docker ps --filter publish={port}`)"),
            DockerError::PullFailed { image, .. } => format!("the local registry needs {image}: pull it where a registry is reachable (`docker pull {image}`), or `docker load` it from a saved archive"),
            DockerError::NotInEngine { image, .. } => format!("`docker pull {image}` where a registry is reachable, then save the bundle again"),
            DockerError::NodeImportFailed { node, .. } => format!("check that {node} is a running kind node (`docker ps`) with free space (`docker exec {node} df -h /`), then run `up --bundle` again"),
            DockerError::TagNamesAnotherImage { image, tag, .. } => format!("`docker pull {image}`, then `docker tag {image} {tag}` (or remove the other {tag}), and save the bundle again"),
            DockerError::BundleImageNotLoaded { .. } => "make the bundle again (`ocm-lab bundle save`) on a machine that has the pinned images, then run `up --bundle` again".to_owned(),
            DockerError::NodeSnapshotterUnknown { node, .. } => format!("check that {node} is a node of a kind release ocm-lab supports (`docker exec {node} containerd config dump` shows its containerd configuration)"),
            DockerError::NodeCommandFailed { node, .. } => format!("check that {node} is a running kind node (`docker ps`); `docker exec {node} crictl info` shows its containerd"),
            DockerError::NodeImageMissing { image, .. } => format!("the bundle's archive of {image} names another reference or lost its digest (a `docker load`ed image can lose the digest it was pulled by): on a machine with network access run `docker pull {image}`, make the bundle again (`ocm-lab bundle save`), then run `up --bundle` again"),
            DockerError::BundleRefused { .. } => "make the bundle again (`ocm-lab bundle save`) or copy it again from where it was made".to_owned(),
            DockerError::ForeignRegistry { name, .. } => format!("if nothing uses it, remove it (`docker rm -f {name}`); otherwise set `spec.registry.local: false` in the topology"),
            _ => return None,
        })
    }
}

impl DockerError {
    /// The HTTP status of the daemon's answer, when it answered with one.
    pub fn status(&self) -> Option<u16> {
        match self {
            DockerError::Daemon { status, .. } => Some(*status),
            DockerError::NoShell { source, .. } => source.status(),
            _ => None,
        }
    }
}

pub mod bundle;
pub mod node_load;
mod registry;

/// Label kind puts on every node container: the cluster's name.
pub const CLUSTER_LABEL: &str = "io.x-k8s.kind.cluster";
/// Label kind puts on every node container: `control-plane`, `worker` or `external-load-balancer`.
pub const ROLE_LABEL: &str = "io.x-k8s.kind.role";
/// Label on every Docker object ocm-lab creates.
pub const CREATED_BY_LABEL: &str = "ocm-lab.open-cluster-management.io/created-by";
/// Value of [`CREATED_BY_LABEL`].
pub const CREATED_BY_VALUE: &str = "ocm-lab";
/// The network kind attaches its nodes to (kind's `fixedNetworkName`).
pub const DEFAULT_NETWORK: &str = "kind";
/// kind's override for [`DEFAULT_NETWORK`]; we follow it so we look where kind put the nodes.
pub const NETWORK_ENV: &str = "KIND_EXPERIMENTAL_DOCKER_NETWORK";
/// Where the docker CLI looks when `DOCKER_HOST` is unset.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";
/// Name prefix of the throwaway containers of [`Docker::read_sysctl_via_container`]; the process id and a
/// counter follow (`ocm-lab-sysctl-<pid>-<n>`).
pub const SYSCTL_CONTAINER_PREFIX: &str = "ocm-lab-sysctl-";

/// A daemon that does not answer a ping within this is as good as down: fail fast at connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// bollard's default, restored after connecting: applies until response headers arrive.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// The sysctl container runs one tiny shell script; anything slower means the daemon is stuck.
const SYSCTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long after its first removal attempt the guard of a cancelled sysctl read looks again: a create
/// request cut off mid-flight may still complete at the daemon after the first look found nothing.
const GUARD_RECHECK: Duration = Duration::from_secs(2);

/// A connection to a Docker daemon, and the network kind's nodes sit on.
#[derive(Debug, Clone)]
pub struct Docker {
    client: bollard::Docker,
    /// Where we connected, as given (`unix:///var/run/docker.sock`, `tcp://host:2375`): for messages.
    host: String,
    /// The network whose address [`ContainerRuntime::node_containers`] reports.
    network: String,
    /// See [`GUARD_RECHECK`]; tests shorten it.
    guard_recheck: Duration,
    /// The removals guards of cancelled reads run in the background, shared by every clone.
    cleanups: tokio_util::task::TaskTracker,
}

/// What the doctor needs to know about the daemon.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineInfo {
    /// Where we connected (`DOCKER_HOST` or the default socket).
    pub host: String,
    /// Engine version (`28.2.2`).
    pub server_version: String,
    /// API version the daemon serves (`1.41`).
    pub api_version: String,
    /// The daemon host's OS as Docker describes it (`Debian GNU/Linux 12 (bookworm)`, `Docker Desktop`).
    pub operating_system: String,
    /// `linux` or `windows`.
    pub os_type: String,
    /// The kernel kind's nodes will share: the daemon's, not this machine's when the daemon is remote.
    pub kernel_version: String,
    pub architecture: String,
    pub ncpu: Option<i64>,
    /// Bytes.
    pub mem_total: Option<i64>,
    /// `1` or `2`.
    pub cgroup_version: Option<String>,
    pub storage_driver: Option<String>,
    /// The daemon runs inside Docker Desktop's VM: host sysctls do not apply to it.
    pub docker_desktop: bool,
    /// Rootless Docker (security option `name=rootless`).
    pub rootless: bool,
    /// Reached over the network (`tcp://`, `http://`, `https://`, `ssh://`): its kernel is not ours.
    pub remote: bool,
}

impl Docker {
    /// Connects the way the docker CLI does without contexts: `DOCKER_HOST` when set, else
    /// `unix:///var/run/docker.sock`; then pings, so a dead or unreachable daemon fails here.
    ///
    /// The network for node addresses is `KIND_EXPERIMENTAL_DOCKER_NETWORK` or `kind`.
    pub async fn connect() -> Result<Docker> {
        // The adapter reads the environment the docker CLI reads, so it reaches the daemon `docker` does.
        let from_env = std::env::var("DOCKER_HOST")
            .ok()
            .filter(|h| !h.trim().is_empty());
        let host = from_env.clone().unwrap_or_else(|| DEFAULT_HOST.to_owned());
        // bollard is built without TLS here: with DOCKER_TLS_VERIFY the daemon expects TLS and would
        // answer our plain HTTP with a confusing 400. Say so before trying.
        if env_set("DOCKER_TLS_VERIFY") && from_env.is_some() {
            return Err(DockerError::TlsUnsupported { host });
        }
        if from_env.is_none()
            && let Some(ctx) = cli_context()
        {
            // The docker CLI would talk to another daemon than we do: worth a warning even if we connect.
            tracing::warn!(
                context = %ctx,
                "the docker CLI uses context {ctx:?}, but ocm-lab ignores docker contexts and uses {host}; set DOCKER_HOST to use the same daemon"
            );
        }
        Docker::connect_to(&host).await
    }

    /// Connects to `host` (`unix:///path` or `tcp://host:port`), ignoring `DOCKER_HOST`; then pings and
    /// negotiates the API version.
    pub async fn connect_to(host: &str) -> Result<Docker> {
        let client = bollard::Docker::connect_with_host(host)
            .map_err(|e| map_error(host, "connect to Docker", e))?
            .with_timeout(CONNECT_TIMEOUT);
        client
            .ping()
            .await
            .map_err(|e| map_error(host, "ping Docker", e))?;
        // bollard speaks API 1.53 and this machine's daemon is 20.10 (API 1.41). bollard 0.21.1 builds
        // request paths without the `/v1.xx` prefix (its `Url::join` with an absolute path drops it), so
        // the daemon answers every request at its own version either way; negotiating still records the
        // daemon's version in the client and keeps us right should bollard fix its paths.
        let client = client
            .negotiate_version()
            .await
            .map_err(|e| map_error(host, "negotiate the Docker API version", e))?
            .with_timeout(REQUEST_TIMEOUT);
        Ok(Docker {
            client,
            host: host.to_owned(),
            network: kind_network(),
            guard_recheck: GUARD_RECHECK,
            cleanups: tokio_util::task::TaskTracker::new(),
        })
    }

    /// The same connection, reporting node addresses on network `name` instead of the default.
    pub fn with_network(mut self, name: impl Into<String>) -> Self {
        self.network = name.into();
        self
    }

    /// The same connection, with the guard of a cancelled sysctl read looking again after `pause`
    /// instead of 2 s (tests, which then need not wait the 2 s out).
    pub fn with_guard_recheck(mut self, pause: Duration) -> Self {
        self.guard_recheck = pause;
        self
    }

    /// Waits until the background removals of cancelled sysctl reads (by this connection or a clone)
    /// have finished.
    pub async fn cleanups_done(&self) {
        self.cleanups.close();
        self.cleanups.wait().await;
        self.cleanups.reopen();
    }

    /// The network whose addresses [`ContainerRuntime::node_containers`] reports.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// Where we connected.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The API version negotiated with the daemon (`1.41`); see [`Docker::connect_to`] on why requests
    /// are answered at the daemon's version regardless.
    pub fn api_version(&self) -> String {
        self.client.client_version().to_string()
    }

    /// The underlying bollard client, for what this type does not wrap.
    pub fn client(&self) -> &bollard::Docker {
        &self.client
    }

    /// Engine version (`28.2.2`).
    pub async fn version(&self) -> Result<String> {
        let v = self
            .client
            .version()
            .await
            .map_err(|e| self.err("read the Docker version", e))?;
        v.version
            .filter(|v| !v.is_empty())
            .ok_or(DockerError::NoVersion)
    }

    /// What the doctor reports about the daemon: versions, OS and kernel, and whether the daemon's kernel
    /// is this machine's (not with Docker Desktop or a remote daemon).
    pub async fn info(&self) -> Result<EngineInfo> {
        let info = self
            .client
            .info()
            .await
            .map_err(|e| self.err("read Docker's system info", e))?;
        let version = self
            .client
            .version()
            .await
            .map_err(|e| self.err("read the Docker version", e))?;
        let operating_system = info.operating_system.unwrap_or_default();
        Ok(EngineInfo {
            host: self.host.clone(),
            server_version: version.version.or(info.server_version).unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            docker_desktop: operating_system.contains("Docker Desktop"),
            operating_system,
            os_type: info.os_type.unwrap_or_default(),
            kernel_version: info.kernel_version.unwrap_or_default(),
            architecture: info.architecture.unwrap_or_default(),
            ncpu: info.ncpu,
            mem_total: info.mem_total,
            cgroup_version: info.cgroup_version.map(|v| v.to_string()),
            storage_driver: info.driver,
            rootless: info
                .security_options
                .unwrap_or_default()
                .iter()
                .any(|o| o.split(',').any(|kv| kv == "name=rootless")),
            remote: is_remote(&self.host),
        })
    }

    /// Reads kernel settings (sysctl names such as `fs.inotify.max_user_watches`, or paths under
    /// `/proc/sys` such as `fs/inotify/max_user_watches`) from inside a throwaway container of `image`,
    /// so they are the daemon kernel's, which is what kind nodes get (Docker Desktop's VM, a remote host).
    ///
    /// `image` must exist locally (nothing is pulled) and have `/bin/sh` and `cat` (or `/bin/busybox`):
    /// a kind node image will do. The container runs with no network, is auto-removed, is force-removed
    /// on every error path, and by a guard if this future is dropped. Keys the kernel does not have are
    /// left out of the answer (and logged); the rest come back in the order asked. Values are meant to be
    /// one line, as the inotify limits are; only a multi-line value's first line is kept.
    pub async fn read_sysctl_via_container(
        &self,
        image: &str,
        keys: &[&str],
    ) -> Result<Vec<(String, String)>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let paths = keys
            .iter()
            .map(|k| sysctl_path(k))
            .collect::<Result<Vec<_>>>()?;
        match self.client.inspect_image(image).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(404) => {
                return Err(DockerError::ImageMissing {
                    image: image.to_owned(),
                    host: self.host.clone(),
                });
            }
            Err(e) => return Err(self.err(&format!("inspect image {image}"), e)),
        }

        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{SYSCTL_CONTAINER_PREFIX}{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let body = sysctl_container(image, &paths);
        // Armed before the create request leaves: if this future is dropped (a caller's timeout,
        // Ctrl-C) at any point from here, the guard removes the container by name. The explicit
        // cleanup below handles errors.
        let mut guard = RemoveOnDrop {
            client: self.client.clone(),
            name: Some(name.clone()),
            recheck: self.guard_recheck,
            tracker: self.cleanups.clone(),
        };
        let id = match self
            .client
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                body,
            )
            .await
        {
            Ok(r) => r.id,
            Err(e) => {
                guard.name = None;
                return Err(self.err(&format!("create container {name} from {image}"), e));
            }
        };
        let run = tokio::time::timeout(SYSCTL_TIMEOUT, self.run_to_removal(&id, image)).await;
        let output = match run {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                self.force_remove_quietly(&id).await;
                guard.name = None;
                return Err(e);
            }
            Err(_) => {
                self.force_remove_quietly(&id).await;
                guard.name = None;
                return Err(DockerError::SysctlTimeout {
                    container: name,
                    after: SYSCTL_TIMEOUT,
                });
            }
        };
        guard.name = None;

        sysctl_answer(&output, keys, image)
    }

    /// Attaches, starts, collects stdout until the container exits, then waits until the daemon has
    /// auto-removed it, so the caller sees no leftover container.
    async fn run_to_removal(&self, id: &str, image: &str) -> Result<String> {
        // Attach before start: with auto-removal, output read any later may be gone with the container.
        let attach = self
            .client
            .attach_container(
                id,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stream(true)
                        .stdout(true)
                        .stderr(true)
                        .build(),
                ),
            )
            .await
            .map_err(|e| self.err("attach to the sysctl container", e))?;
        if let Err(e) = self
            .client
            .start_container(id, None::<StartContainerOptions>)
            .await
        {
            // The daemon answers 500 when the image has no /bin/sh: not something a retry fixes.
            return Err(DockerError::NoShell {
                image: image.to_owned(),
                source: Box::new(self.err(&format!("start a container of {image}"), e)),
            });
        }
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut output = attach.output;
        while let Some(item) = output.next().await {
            match item.map_err(|e| self.err("read the sysctl container's output", e))? {
                LogOutput::StdOut { message } | LogOutput::Console { message } => {
                    stdout.extend_from_slice(&message)
                }
                LogOutput::StdErr { message } => stderr.extend_from_slice(&message),
                LogOutput::StdIn { .. } => {}
            }
        }
        self.await_removal(id).await?;
        let stdout = String::from_utf8_lossy(&stdout).into_owned();
        if stdout.trim().is_empty() && !stderr.is_empty() {
            return Err(DockerError::SysctlStderr {
                image: image.to_owned(),
                stderr: String::from_utf8_lossy(&stderr).trim().to_owned(),
            });
        }
        Ok(stdout)
    }

    /// Waits until the daemon has auto-removed an exited container; removes it ourselves if that does
    /// not happen soon.
    ///
    /// Not `wait?condition=removed`: sent after the container had exited, that wait hung here for the
    /// full minute under parallel test load on Docker 20.10 (the auto-removal apparently completed
    /// between the daemon finding the container and registering the wait). Polling inspect until 404
    /// cannot miss the removal.
    async fn await_removal(&self, id: &str) -> Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match self
                .client
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
            {
                Err(e) if status(&e) == Some(404) => return Ok(()),
                Err(e) => return Err(self.err("check the sysctl container's removal", e)),
                Ok(_) if tokio::time::Instant::now() >= deadline => {
                    return match remove_container(&self.client, id).await {
                        Ok(()) => Ok(()),
                        Err(e) if is_gone(&e) => Ok(()),
                        Err(e) => Err(self.err("remove the sysctl container", e)),
                    };
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            }
        }
    }

    /// Force-removes a container, logging instead of failing: used on paths that already fail.
    async fn force_remove_quietly(&self, id: &str) {
        if let Err(e) = remove_container(&self.client, id).await
            && !is_gone(&e)
        {
            tracing::warn!(container = id, error = %e, "could not remove a throwaway container");
        }
    }

    /// Creates network `name` exactly as kind v0.32.0 does (`pkg/cluster/internal/providers/docker/
    /// network.go`): a bridge with IP masquerading, the default bridge's MTU when it
    /// has one, and an IPv6 ULA /64 derived from the name ([`kind_ula_subnet`]); no labels. When the
    /// daemon cannot do IPv6 it is created without; when the subnet overlaps another network the next
    /// of kind's five attempts is tried. Returns the new network's ID, or `None` when a network of that
    /// name appeared meanwhile.
    async fn create_kind_network(&self, name: &str) -> Result<Option<String>> {
        let mtu = self.default_bridge_mtu().await;
        let request = |ipv6_subnet: Option<String>| {
            let mut options = HashMap::from([(
                "com.docker.network.bridge.enable_ip_masquerade".to_owned(),
                "true".to_owned(),
            )]);
            if let Some(mtu) = mtu {
                options.insert("com.docker.network.driver.mtu".to_owned(), mtu.to_string());
            }
            NetworkCreateRequest {
                name: name.to_owned(),
                driver: Some("bridge".to_owned()),
                options: Some(options),
                enable_ipv6: ipv6_subnet.as_ref().map(|_| true),
                ipam: ipv6_subnet.map(|subnet| Ipam {
                    driver: Some("default".to_owned()),
                    config: Some(vec![IpamConfig {
                        subnet: Some(subnet),
                        ..Default::default()
                    }]),
                    options: None,
                }),
                ..Default::default()
            }
        };
        for attempt in 0..KIND_NETWORK_ATTEMPTS {
            let subnet = kind_ula_subnet(name, attempt);
            match self
                .client
                .create_network(request(Some(subnet.clone())))
                .await
            {
                Ok(r) => return Ok(Some(r.id)),
                Err(e) if status(&e) == Some(409) => return Ok(None),
                Err(e) if is_ipv6_unavailable(&e) => {
                    tracing::debug!(network = name, error = %e, "IPv6 unavailable: creating the network without it, as kind does");
                    return match self.client.create_network(request(None)).await {
                        Ok(r) => Ok(Some(r.id)),
                        Err(e) if status(&e) == Some(409) => Ok(None),
                        Err(e) => Err(self.err(&format!("create Docker network {name}"), e)),
                    };
                }
                Err(e) if is_pool_overlap(&e) => {
                    if !self.networks_named(name).await?.is_empty() {
                        return Ok(None);
                    }
                    tracing::debug!(network = name, %subnet, "subnet overlaps another network; trying the next");
                }
                Err(e) => return Err(self.err(&format!("create Docker network {name}"), e)),
            }
        }
        Err(DockerError::SubnetsExhausted {
            network: name.to_owned(),
        })
    }

    /// The MTU of Docker's default `bridge` network, when it sets one above 0 (kind's
    /// `getDefaultNetworkMTU`); `None` otherwise, including when it cannot be read.
    async fn default_bridge_mtu(&self) -> Option<u32> {
        let bridge = self
            .client
            .inspect_network("bridge", None::<InspectNetworkOptions>)
            .await
            .ok()?;
        bridge
            .options?
            .get("com.docker.network.driver.mtu")?
            .trim()
            .parse()
            .ok()
            .filter(|mtu| *mtu > 0)
    }

    /// Networks named exactly `name` (Docker's `name` filter matches substrings, so filter here).
    async fn networks_named(&self, name: &str) -> Result<Vec<Network>> {
        let all = self
            .client
            .list_networks(None::<ListNetworksOptions>)
            .await
            .map_err(|e| self.err("list Docker networks", e))?;
        Ok(all
            .into_iter()
            .filter(|n| n.name.as_deref() == Some(name))
            .collect())
    }

    fn err(&self, what: &str, e: BollardError) -> DockerError {
        map_error(&self.host, what, e)
    }
}

#[async_trait]
impl ContainerRuntime for Docker {
    async fn ping(&self) -> Result<String> {
        // bollard's ping answers "OK"; the version is what callers show and check.
        self.version().await
    }

    async fn ensure_network(&self, name: &str) -> Result<bool> {
        if name.is_empty() {
            return Err(DockerError::EmptyName {
                what: "Docker network name",
            });
        }
        // Docker ≥ 25 refuses a second network of the same name (409). Older daemons (API < 1.44)
        // create it, because bollard cannot send CheckDuplicate. So after creating, look again: a racer
        // that then sees only its own network reports `true`; one that sees another removes its own
        // and reports `false`. At most one racer can see only its own (whoever looks second sees the
        // first's, which is never removed), so at most one reports `true`. If every racer removed its
        // own, nobody reported anything yet: try again after a jittered pause.
        for attempt in 0..5u32 {
            if !self.networks_named(name).await?.is_empty() {
                return Ok(false);
            }
            let Some(mine) = self.create_kind_network(name).await? else {
                return Ok(false);
            };
            let same = self.networks_named(name).await?;
            if same.iter().all(|n| n.id.as_deref() == Some(mine.as_str())) {
                return Ok(true);
            }
            tracing::debug!(network = name, id = %mine, "removing our duplicate of a network created concurrently");
            match self.client.remove_network(&mine).await {
                Ok(()) => {}
                Err(e) if status(&e) == Some(404) => {}
                Err(e) => {
                    // Already in use (a container joined it by id): keep it; the name is taken either way.
                    tracing::warn!(network = name, id = %mine, error = %e, "could not remove a duplicate network");
                    return Ok(false);
                }
            }
            if !self.networks_named(name).await?.is_empty() {
                return Ok(false);
            }
            tokio::time::sleep(jitter(attempt)).await;
        }
        Err(DockerError::NetworkRace {
            network: name.to_owned(),
        })
    }

    async fn network_id(&self, name: &str) -> Result<Option<String>> {
        Ok(self
            .networks_named(name)
            .await?
            .into_iter()
            .find_map(|n| n.id))
    }

    async fn remove_network_if_unused(&self, id: &str) -> Result<NetworkRemoval> {
        // Stopped containers keep their network settings (and fail to start once it is gone), so they
        // count as users too: list all containers attached, not only the running endpoints.
        let filters = HashMap::from([("network", vec![id.to_owned()])]);
        let users = match self
            .client
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
        {
            Ok(list) => list,
            Err(e) if status(&e) == Some(404) => return Ok(NetworkRemoval::Gone),
            Err(e) => return Err(self.err(&format!("list containers on Docker network {id}"), e)),
        };
        if !users.is_empty() {
            let mut names: Vec<String> = users
                .into_iter()
                .filter_map(|c| c.names.and_then(|n| n.into_iter().next()))
                .map(|n| n.trim_start_matches('/').to_owned())
                .collect();
            names.sort();
            return Ok(NetworkRemoval::InUse(names));
        }
        match self.client.remove_network(id).await {
            Ok(()) => Ok(NetworkRemoval::Removed),
            Err(e) if status(&e) == Some(404) => Ok(NetworkRemoval::Gone),
            // A container joined since the look: Docker refuses a network with active endpoints.
            Err(e) if matches!(status(&e), Some(403 | 409)) => {
                Ok(NetworkRemoval::InUse(Vec::new()))
            }
            Err(e) => Err(self.err(&format!("remove Docker network {id}"), e)),
        }
    }

    async fn node_containers(&self, cluster: &str) -> Result<Vec<NodeContainer>> {
        if cluster.is_empty() {
            return Err(DockerError::EmptyName {
                what: "kind cluster name",
            });
        }
        let mut nodes = Vec::new();
        for id in self.cluster_container_ids(cluster).await? {
            let c = match self
                .client
                .inspect_container(&id, None::<InspectContainerOptions>)
                .await
            {
                Ok(c) => c,
                // Removed between list and inspect: it is no longer a node.
                Err(e) if status(&e) == Some(404) => continue,
                Err(e) => return Err(self.err(&format!("inspect container {id}"), e)),
            };
            let labels = c
                .config
                .as_ref()
                .and_then(|c| c.labels.clone())
                .unwrap_or_default();
            if labels.get(CLUSTER_LABEL).map(String::as_str) != Some(cluster) {
                continue;
            }
            let ip = c
                .network_settings
                .and_then(|s| s.networks)
                .and_then(|mut n| n.remove(&self.network))
                .and_then(|e| e.ip_address)
                .filter(|ip| !ip.is_empty());
            nodes.push(NodeContainer {
                name: c
                    .name
                    .as_deref()
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_else(|| id.clone()),
                id: c.id.unwrap_or(id),
                role: labels.get(ROLE_LABEL).cloned().unwrap_or_default().into(),
                running: c.state.and_then(|s| s.running).unwrap_or(false),
                ip,
            });
        }
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(nodes)
    }

    async fn remove_cluster_containers(&self, cluster: &str) -> Result<usize> {
        // An empty name would become the filter `io.x-k8s.kind.cluster=`: refuse rather than guess.
        if cluster.is_empty() {
            return Err(DockerError::EmptyName {
                what: "kind cluster name",
            });
        }
        let ids = self.cluster_container_ids(cluster).await?;
        self.remove_ids(ids, &format!(" of kind cluster {cluster}"))
            .await
    }

    async fn look_alikes(&self, cluster: &str) -> Result<Vec<LookAlike>> {
        if cluster.is_empty() {
            return Err(DockerError::EmptyName {
                what: "kind cluster name",
            });
        }
        // All containers, filtered here: Docker's `name` filter matches substrings and cannot express
        // "this name or that label".
        let list = self
            .client
            .list_containers(Some(
                ListContainersOptionsBuilder::default().all(true).build(),
            ))
            .await
            .map_err(|e| self.err("list containers", e))?;
        let mut out: Vec<LookAlike> = list
            .into_iter()
            .filter_map(|c| {
                let name = c
                    .names
                    .as_ref()
                    .and_then(|n| n.first())
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .unwrap_or_default();
                let label = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(CLUSTER_LABEL))
                    .cloned();
                let hit = label.as_deref() == Some(cluster) || is_kind_node_name(cluster, &name);
                let api_port = c
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.private_port == 6443)
                    .and_then(|p| p.public_port);
                Some(LookAlike {
                    id: c.id?,
                    name,
                    kind_cluster: label,
                    api_port,
                    image: c.image,
                })
                .filter(|_| hit)
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    async fn remove_containers(&self, ids: &[String]) -> Result<usize> {
        self.remove_ids(ids.to_vec(), "").await
    }

    async fn ensure_registry(&self, spec: &super::RegistryContainer) -> Result<(String, bool)> {
        self.run_registry(spec).await
    }

    async fn node_images(&self, node: &str) -> Result<Vec<super::NodeImage>> {
        self.node_image_refs(node).await
    }

    async fn import_node_image(&self, node: &str, archive: &super::ImageArchive) -> Result<()> {
        let what = format!(
            "the archive of {} in bundle {}",
            archive.image,
            archive.file.display()
        );
        self.import_range_into_node(node, &archive.file, archive.offset, archive.size, &what)
            .await
    }

    async fn pull_in_node(&self, node: &str, image: &str) -> Result<()> {
        self.pull_image_in_node(node, image).await
    }
}

impl Docker {
    /// Force-removes these containers, four at a time; containers already gone are not an error. Tries
    /// them all and reports the first failure (`what` follows the container id in it).
    async fn remove_ids(&self, ids: Vec<String>, what: &str) -> Result<usize> {
        let results: Vec<_> = futures::stream::iter(ids)
            .map(|id| async move {
                let r = remove_container(&self.client, &id).await;
                (id, r)
            })
            .buffer_unordered(4)
            .collect()
            .await;
        let mut removed = 0;
        let mut first_err = None;
        for (id, r) in results {
            match r {
                Ok(()) => removed += 1,
                // Someone else removed it, or is removing it: gone either way, not by us.
                Err(e) if is_gone(&e) => {}
                Err(e) => {
                    first_err.get_or_insert_with(|| {
                        self.err(&format!("remove container {id}{what}"), e)
                    });
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }

    /// The name the engine knows `image` by: `image` as written, or, for an image pinned by tag and digest
    /// (`kindest/node:v1.36.1@sha256:…`) that it knows by its tag only, the tag (`docker load` on an engine
    /// with the classic image store keeps no digest: Docker's behaviour, not confirmed in moby's source).
    /// `None` when it has neither. kind inspects the reference as written and pulls when that fails
    /// (kubernetes-sigs/kind v0.32.0 `pkg/cluster/internal/providers/docker/images.go`), so a tag-only
    /// image would be pulled.
    pub async fn local_name(&self, image: &str) -> Result<Option<String>> {
        if self.image_present(image).await? {
            return Ok(Some(image.to_owned()));
        }
        let (repository, tag, digest) = super::split_reference(image);
        let (Some(tag), Some(_)) = (tag, digest) else {
            return Ok(None);
        };
        let tagged = format!("{repository}:{tag}");
        Ok(self.image_present(&tagged).await?.then_some(tagged))
    }

    /// The ID (`sha256:<config digest>`) of `image` on the daemon, `None` when it lacks it.
    pub async fn image_id(&self, image: &str) -> Result<Option<String>> {
        match self.client.inspect_image(image).await {
            Ok(i) => Ok(i.id),
            Err(e) if status(&e) == Some(404) => Ok(None),
            Err(e) => Err(self.err(&format!("inspect image {image}"), e)),
        }
    }

    /// Tags `image` as `name` (`<repository>:<tag>`), as `docker tag` does.
    pub async fn tag_image(&self, image: &str, name: &str) -> Result<()> {
        let (repository, tag, _) = super::split_reference(name);
        let mut options =
            bollard::query_parameters::TagImageOptionsBuilder::default().repo(&repository);
        if let Some(tag) = &tag {
            options = options.tag(tag);
        }
        self.client
            .tag_image(image, Some(options.build()))
            .await
            .map_err(|e| self.err(&format!("tag image {image} as {name}"), e))
    }

    /// Whether `image` is present on the daemon (nothing is pulled).
    pub async fn image_present(&self, image: &str) -> Result<bool> {
        match self.client.inspect_image(image).await {
            Ok(_) => Ok(true),
            Err(e) if status(&e) == Some(404) => Ok(false),
            Err(e) => Err(self.err(&format!("inspect image {image}"), e)),
        }
    }

    /// Ids of the containers, running or not, labelled `io.x-k8s.kind.cluster=<cluster>` exactly.
    async fn cluster_container_ids(&self, cluster: &str) -> Result<Vec<String>> {
        let filters = HashMap::from([("label", vec![format!("{CLUSTER_LABEL}={cluster}")])]);
        let list = self
            .client
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| self.err(&format!("list containers of kind cluster {cluster}"), e))?;
        // The daemon filtered already; checking the label again costs nothing and guards the one
        // operation here that destroys things.
        Ok(list
            .into_iter()
            .filter(|c| {
                c.labels
                    .as_ref()
                    .and_then(|l| l.get(CLUSTER_LABEL))
                    .map(String::as_str)
                    == Some(cluster)
            })
            .filter_map(|c| c.id)
            .collect())
    }
}

/// Force-removes a container by name when dropped while still armed (the future was cancelled).
struct RemoveOnDrop {
    client: bollard::Docker,
    name: Option<String>,
    /// The pause before the second look.
    recheck: Duration,
    tracker: tokio_util::task::TaskTracker,
}

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let Some(name) = self.name.take() else { return };
        let client = self.client.clone();
        // Best effort: only possible while a runtime is around to run the requests.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let recheck = self.recheck;
            self.tracker.spawn_on(async move {
                // A create request cut off mid-flight may still complete at the daemon after our
                // first removal found nothing: look once more a little later.
                for pause in [Duration::ZERO, recheck] {
                    tokio::time::sleep(pause).await;
                    match remove_container(&client, &name).await {
                        Ok(()) => return,
                        Err(e) if is_gone(&e) => {}
                        Err(e) => {
                            tracing::warn!(container = %name, error = %e, "could not remove a throwaway container");
                            return;
                        }
                    }
                }
            }, &handle);
        }
    }
}

/// Force-removes a container and its anonymous volumes (kind nodes keep `/var` in one).
async fn remove_container(client: &bollard::Docker, id: &str) -> Result<(), BollardError> {
    client
        .remove_container(
            id,
            Some(
                RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .v(true)
                    .build(),
            ),
        )
        .await
}

/// 404, or 409 "removal … already in progress": the container is gone or going, not by our hand.
fn is_gone(e: &BollardError) -> bool {
    match e {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => true,
        BollardError::DockerResponseServerError {
            status_code: 409,
            message,
        } => message.contains("already in progress"),
        _ => false,
    }
}

/// The HTTP status of a daemon's error answer.
fn status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// How many subnets kind tries before giving up (network.go `maxAttempts`).
const KIND_NETWORK_ATTEMPTS: i32 = 5;

/// The IPv6 ULA subnet kind gives network `name` on attempt `attempt` (network.go
/// `generateULASubnetFromName`): `fc00:` followed by bytes 2..8 of SHA-1(name ‖ attempt as a
/// little-endian i32), as a /64. For `kind`, attempt 0, that is `fc00:f853:ccd:e793::/64`.
pub fn kind_ula_subnet(name: &str, attempt: i32) -> String {
    use sha1::Digest as _;
    let mut h = sha1::Sha1::new();
    h.update(name.as_bytes());
    h.update(attempt.to_le_bytes());
    let sum = h.finalize();
    let mut ip = [0u8; 16];
    ip[0] = 0xfc;
    ip[2..8].copy_from_slice(&sum[2..8]);
    format!("{}/64", std::net::Ipv6Addr::from(ip))
}

/// The daemon cannot make IPv6 networks (kind's `isIPv6UnavailableError`).
fn is_ipv6_unavailable(e: &BollardError) -> bool {
    matches!(e, BollardError::DockerResponseServerError { message, .. }
        if message.contains("Cannot read IPv6 setup for bridge") || message.contains("ip6tables"))
}

/// The subnet overlaps another network's (kind's `isPoolOverlapError`).
fn is_pool_overlap(e: &BollardError) -> bool {
    matches!(e, BollardError::DockerResponseServerError { message, .. }
        if message.contains("Pool overlaps with other one on this address space")
            || message.contains("networks have overlapping"))
}

/// The Docker network kind puts its nodes on: `KIND_EXPERIMENTAL_DOCKER_NETWORK` when set (kind
/// honours it, kind@v0.32.0 `provider.go`), else `kind`. The one place the lab decides this name: the
/// planner gives it to workflows as `kindNetwork`, and the Docker backend reports addresses on it.
pub fn kind_network() -> String {
    // Read where kind reads it, so the adapter and kind agree; the command layer passes the same name to
    // the planner and the actions (`topology::Host::kind_network`).
    std::env::var(NETWORK_ENV)
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| DEFAULT_NETWORK.to_owned())
}

/// Whether the docker CLI's variable `name` is set: the adapter explains a failed connection in the terms
/// of the docker CLI's own environment.
fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// Whether `host` reaches the daemon over the network.
fn is_remote(host: &str) -> bool {
    ["tcp://", "http://", "https://", "ssh://"]
        .iter()
        .any(|p| host.starts_with(p))
}

/// Turns a bollard error into a [`DockerError`] that says what failed, whether a retry can help, and
/// what the user can do.
///
/// - daemon answers: 5xx and 409 are transient (the daemon or another client may be busy), other
///   statuses permanent;
/// - cannot reach the daemon (socket missing, refused, permission denied, bad `DOCKER_HOST`): permanent,
///   with help, since retrying does not start Docker;
/// - a request timeout is transient.
pub fn map_error(host: &str, what: &str, e: BollardError) -> DockerError {
    let (what, host) = (what.to_owned(), host.to_owned());
    match &e {
        BollardError::DockerResponseServerError {
            status_code,
            message,
        } => DockerError::Daemon {
            what,
            status: *status_code,
            message: message.clone(),
        },
        BollardError::SocketNotFoundError(_) => DockerError::NotRunning { host },
        BollardError::UnsupportedURISchemeError { uri } => DockerError::UnsupportedHost {
            what,
            uri: uri.clone(),
        },
        BollardError::RequestTimeoutError => DockerError::Timeout { what, host },
        _ => match connection_error_kind(&e) {
            Some(io::ErrorKind::PermissionDenied) => DockerError::PermissionDenied { host },
            Some(io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused) => {
                DockerError::NotRunning { host }
            }
            Some(_) => DockerError::Connection {
                what,
                host,
                detail: e.to_string(),
            },
            None => DockerError::Client {
                what,
                detail: e.to_string(),
            },
        },
    }
}

/// For errors that are about the connection itself, the I/O error kind underneath; `None` otherwise.
fn connection_error_kind(e: &BollardError) -> Option<io::ErrorKind> {
    match e {
        // `#[error(transparent)]` hides the io::Error from `source()`: look at it directly.
        BollardError::IOError { err } => Some(err.kind()),
        BollardError::HyperLegacyError { .. } | BollardError::HyperResponseError { .. } => {
            let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
            while let Some(err) = cur {
                if let Some(io) = err.downcast_ref::<io::Error>() {
                    return Some(io.kind());
                }
                cur = err.source();
            }
            // A hyper error without an I/O cause (connection closed mid-answer, protocol error).
            Some(io::ErrorKind::Other)
        }
        _ => None,
    }
}

/// How to point ocm-lab at the right daemon: the context gotcha, plus any Docker socket we can see.
fn reach_help(host: &str) -> String {
    let mut help = vec![
        "ocm-lab talks to the Docker Engine API itself and does not read docker CLI contexts: with Docker Desktop, rootless Docker or a remote daemon, set DOCKER_HOST to its endpoint, e.g. export DOCKER_HOST=$(docker context inspect --format '{{.Endpoints.docker.Host}}')".to_owned(),
    ];
    if !env_set("DOCKER_HOST")
        && let Some(ctx) = cli_context()
    {
        help.push(format!(
            "your docker CLI uses context {ctx:?}: export DOCKER_HOST=$(docker context inspect {ctx} --format '{{{{.Endpoints.docker.Host}}}}')"
        ));
    }
    for sock in candidate_sockets() {
        let uri = format!("unix://{}", sock.display());
        if uri != host && sock.exists() {
            help.push(format!(
                "a Docker socket exists at {}: export DOCKER_HOST={uri}",
                sock.display()
            ));
        }
    }
    help.join("\n")
}

/// Sockets of the usual non-default setups: rootless Docker, Docker Desktop (Linux, macOS), Colima,
/// OrbStack, and the default one.
fn candidate_sockets() -> Vec<PathBuf> {
    // Where those setups put their sockets depends on the user's environment, as it does for `docker`.
    let mut v = Vec::new();
    if let Some(run) = std::env::var_os("XDG_RUNTIME_DIR") {
        v.push(Path::new(&run).join("docker.sock"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = Path::new(&home);
        v.push(home.join(".docker/desktop/docker.sock"));
        v.push(home.join(".docker/run/docker.sock"));
        v.push(home.join(".colima/default/docker.sock"));
        v.push(home.join(".orbstack/run/docker.sock"));
    }
    v.push(PathBuf::from("/var/run/docker.sock"));
    v
}

/// The docker CLI's current context when it is not `default`: `DOCKER_CONTEXT`, else `currentContext`
/// in `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`).
fn cli_context() -> Option<String> {
    // The docker CLI's own configuration, read as the CLI reads it, to name its context in a help.
    let ctx = match std::env::var("DOCKER_CONTEXT") {
        Ok(c) if !c.is_empty() => c,
        _ => {
            let dir = std::env::var_os("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")))?;
            let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            v.get("currentContext")?.as_str()?.to_owned()
        }
    };
    (!ctx.is_empty() && ctx != "default").then_some(ctx)
}

/// `fs.inotify.max_user_watches` or `fs/inotify/max_user_watches` → `/proc/sys/fs/inotify/max_user_watches`.
///
/// The path goes into a shell script, so only sysctl-name characters are accepted.
fn sysctl_path(key: &str) -> Result<String> {
    let rel = key.strip_prefix("/proc/sys/").unwrap_or(key);
    let ok = !rel.is_empty()
        && rel
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
        && !rel.starts_with(['.', '/'])
        && !rel.contains("..");
    if !ok {
        return Err(DockerError::NotSysctl {
            key: key.to_owned(),
        });
    }
    Ok(format!("/proc/sys/{}", rel.replace('.', "/")))
}

/// A script that prints `<index>=<value>` for each readable path, and always exits 0.
///
/// It reads with `cat`, not the shell's `read`: shells read byte by byte so as not to consume past a
/// newline, and the kernel answers a /proc/sys read at a non-zero offset with end-of-file, so `read`
/// gets only the first digit (seen with busybox ash). Images with only busybox get `busybox cat`.
/// The throwaway container that prints the kernel settings at `paths`: no network, auto-removed, labelled as ours.
fn sysctl_container(image: &str, paths: &[String]) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(image.to_owned()),
        // An explicit entrypoint: kind node images have their own, which would boot systemd.
        entrypoint: Some(vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            sysctl_script(paths),
        ]),
        // Images made by `docker import` have no PATH; `command -v cat` needs one.
        env: Some(vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        ]),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(false),
        network_disabled: Some(true),
        labels: Some(HashMap::from([(
            CREATED_BY_LABEL.to_owned(),
            CREATED_BY_VALUE.to_owned(),
        )])),
        host_config: Some(HostConfig {
            // Auto-removal covers the case where we die after start: the container exits in
            // milliseconds and the daemon removes it without us.
            auto_remove: Some(true),
            network_mode: Some("none".to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The settings the container printed (`<index>=<value>` lines), in the order of `keys`; a key it could not
/// read is left out (and logged).
fn sysctl_answer(output: &str, keys: &[&str], image: &str) -> Result<Vec<(String, String)>> {
    if output.lines().any(|l| l == "E=no cat") {
        return Err(DockerError::NoCat {
            image: image.to_owned(),
        });
    }
    let mut found: HashMap<usize, String> = HashMap::new();
    for line in output.lines() {
        if let Some((i, v)) = line.split_once('=')
            && let Ok(i) = i.trim().parse::<usize>()
            && i < keys.len()
        {
            found.insert(i, v.trim().to_owned());
        }
    }
    let mut out = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        match found.remove(&i) {
            Some(v) => out.push(((*key).to_owned(), v)),
            None => tracing::warn!(key, image, "kernel setting not readable in a container"),
        }
    }
    Ok(out)
}

fn sysctl_script(paths: &[String]) -> String {
    let mut s = String::from(
        "if command -v cat >/dev/null 2>&1; then C=cat\n\
         elif [ -x /bin/busybox ]; then C='/bin/busybox cat'\n\
         else echo 'E=no cat'; exit 0; fi\n",
    );
    for (i, p) in paths.iter().enumerate() {
        s.push_str(&format!(
            "if v=$($C {p} 2>/dev/null); then echo \"{i}=$v\"; fi\n"
        ));
    }
    s.push_str("exit 0\n");
    s
}

/// A pause of 20–120 ms times the attempt, different per process and moment, so racers that collided
/// do not collide again in lockstep.
fn jitter(attempt: u32) -> Duration {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().wrapping_mul(2_654_435_761);
    Duration::from_millis(u64::from(20 + seed % 100) * u64::from(attempt + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_keys_become_proc_paths_and_odd_ones_are_refused() {
        assert_eq!(
            sysctl_path("fs.inotify.max_user_watches").unwrap(),
            "/proc/sys/fs/inotify/max_user_watches"
        );
        assert_eq!(
            sysctl_path("/proc/sys/fs/inotify/max_user_instances").unwrap(),
            "/proc/sys/fs/inotify/max_user_instances"
        );
        for bad in [
            "",
            "fs.inotify;rm -rf /",
            "../etc/passwd",
            "a b",
            "$(x)",
            "/etc/x",
        ] {
            assert!(sysctl_path(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn daemon_statuses_map_to_transience() {
        let server = |status_code| BollardError::DockerResponseServerError {
            status_code,
            message: "boom".into(),
        };
        assert!(map_error("unix:///s", "x", server(500)).is_transient());
        assert!(map_error("unix:///s", "x", server(503)).is_transient());
        assert!(map_error("unix:///s", "x", server(409)).is_transient());
        assert!(!map_error("unix:///s", "x", server(404)).is_transient());
        assert!(!map_error("unix:///s", "x", server(400)).is_transient());
        assert!(map_error("unix:///s", "x", BollardError::RequestTimeoutError).is_transient());
    }

    #[test]
    fn connection_errors_are_permanent_and_say_what_to_do() {
        let e = map_error(
            "unix:///var/run/docker.sock",
            "ping Docker",
            BollardError::IOError {
                err: io::Error::from(io::ErrorKind::PermissionDenied),
            },
        );
        assert!(!e.is_transient());
        let message = e.to_string();
        assert!(message.contains("docker group"), "{message}");
        assert!(message.contains("rootless"), "{message}");

        let e = map_error(
            "unix:///nope.sock",
            "connect to Docker",
            BollardError::SocketNotFoundError("/nope.sock".into()),
        );
        assert!(!e.is_transient());
        let message = e.to_string();
        assert!(message.contains("unix:///nope.sock"), "{message}");
        assert!(message.contains("start Docker"), "{message}");
        let help = e.help().unwrap_or_default();
        assert!(help.contains("docker CLI contexts"), "{help}");

        let e = map_error(
            "ssh://h",
            "connect to Docker",
            BollardError::UnsupportedURISchemeError {
                uri: "ssh://h".into(),
            },
        );
        assert!(e.to_string().contains("ssh://h"), "{e}");
        assert!(e.help().unwrap_or_default().contains("unix://"));
    }

    #[test]
    fn gone_means_404_or_removal_in_progress() {
        let server = |status_code, message: &str| BollardError::DockerResponseServerError {
            status_code,
            message: message.into(),
        };
        assert!(is_gone(&server(404, "No such container: x")));
        assert!(is_gone(&server(
            409,
            "removal of container x is already in progress"
        )));
        assert!(!is_gone(&server(409, "conflict")));
        assert!(!is_gone(&server(500, "boom")));
    }

    #[test]
    fn ula_subnets_are_kinds() {
        // kind@v0.32.0 network_test.go: `name: "kind", subnet: "fc00:f853:ccd:e793::/64"`.
        assert_eq!(kind_ula_subnet("kind", 0), "fc00:f853:ccd:e793::/64");
        assert_ne!(kind_ula_subnet("kind", 1), kind_ula_subnet("kind", 0));
        assert_ne!(kind_ula_subnet("other", 0), kind_ula_subnet("kind", 0));
    }

    #[test]
    fn remote_hosts() {
        assert!(is_remote("tcp://10.0.0.1:2375"));
        assert!(is_remote("ssh://me@host"));
        assert!(!is_remote("unix:///var/run/docker.sock"));
    }
}
