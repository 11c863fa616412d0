//! Backends: the outside systems the lab drives, each behind a small trait shaped by what actions need.
//!
//! Actions see only these traits. The real implementations (Docker through bollard, the kind and helm
//! binaries, the Kubernetes API through kube-rs) and the simulated lab (`crate::sim`) implement them, so
//! the same workflow runs on both.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use api::Api;
use kinds::HasConditions;

use crate::charts::ChartPlan;
use crate::topology::Cluster;
pub mod api;
pub mod chart_cache;
pub mod docker;
pub mod fieldset;
pub mod helm;
mod helm_error;
pub mod kind;
pub mod kinds;
pub mod kube;
pub mod tools;
pub mod undeclared;

/// Whether retrying may help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transience {
    /// The world may change: a retry with backoff can succeed (a server's 503, a conflict, a flaky create).
    Transient,
    /// Retrying cannot help: bad input, a schema rejection, a missing tool.
    Permanent,
}

/// What every backend error says besides its message: whether a retry may help, and what the user can
/// do. Each backend has its own typed error (`DockerError`, `KindError`, `HelmError`, `KubeError`,
/// `ToolError`) whose variants carry the facts (status code, object, container, exit status, stderr);
/// actions turn them into their own error at the action boundary.
pub trait Failure: std::error::Error {
    /// The outside system that failed.
    fn backend(&self) -> Backend;
    /// Whether a retry with backoff may succeed.
    fn transience(&self) -> Transience;
    /// What the user should do, when we know.
    fn help(&self) -> Option<String>;
    fn is_transient(&self) -> bool {
        self.transience() == Transience::Transient
    }
}

/// The outside systems the lab drives, each behind its adapter: which one a [`Failure`] is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    Docker,
    Kind,
    Helm,
    /// The Kubernetes API of a lab cluster.
    Kube,
    /// Finding or downloading kind and helm.
    Tools,
    /// The chart cache (chart downloads).
    ChartCache,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Docker => "docker",
            Backend::Kind => "kind",
            Backend::Helm => "helm",
            Backend::Kube => "kube",
            Backend::Tools => "tools",
            Backend::ChartCache => "chart-cache",
        }
    }
}

impl Backend {
    /// What a person calls it, in a step's failure line: `(helm)`, `(Kubernetes API)`.
    pub fn human(self) -> &'static str {
        match self {
            Backend::Docker => "Docker",
            Backend::Kind => "kind",
            Backend::Helm => "helm",
            Backend::Kube => "Kubernetes API",
            Backend::Tools => "tool download",
            Backend::ChartCache => "chart cache",
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The [`Failure`] methods as inherent methods too, so callers need not import the trait.
macro_rules! inherent_failure_methods {
    ($($t:ty),*) => {$(
        impl $t {
            /// Whether a retry with backoff may succeed.
            pub fn transience(&self) -> Transience {
                Failure::transience(self)
            }
            /// What the user should do, when we know.
            pub fn help(&self) -> Option<String> {
                Failure::help(self)
            }
            pub fn is_transient(&self) -> bool {
                Failure::is_transient(self)
            }
        }
    )*};
}
// Not `ToolError`: its `help` is miette's `Diagnostic::help`, which an inherent method would shadow.
inherent_failure_methods!(DockerError, KindError, HelmError, KubeError);

pub use docker::DockerError;
pub use helm_error::HelmError;
pub use kind::KindError;
pub use kube::KubeError;
pub use tools::ToolError;

/// The container runtime (Docker).
#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// Engine version, or an error saying how to reach the daemon.
    async fn ping(&self) -> Result<String, DockerError>;
    /// Creates the network if absent; `true` when it was created now.
    async fn ensure_network(&self, name: &str) -> Result<bool, DockerError>;
    /// The ID of the network named `name`, if there is one.
    async fn network_id(&self, name: &str) -> Result<Option<String>, DockerError>;
    /// Removes the network with this ID unless a container, running or not, is attached to it.
    async fn remove_network_if_unused(&self, id: &str) -> Result<NetworkRemoval, DockerError>;
    /// The node containers of a kind cluster (label `io.x-k8s.kind.cluster=<name>`).
    async fn node_containers(&self, cluster: &str) -> Result<Vec<NodeContainer>, DockerError>;
    /// Removes a kind cluster's leftover node containers; returns how many were removed.
    async fn remove_cluster_containers(&self, cluster: &str) -> Result<usize, DockerError>;
    /// Every container, running or not, that looks like a node of kind cluster `cluster`, labelled or
    /// not: named `<cluster>-control-plane`, `<cluster>-worker`, `<cluster>-worker<N>` or
    /// `<cluster>-external-load-balancer` (kind's names), or labelled `io.x-k8s.kind.cluster=<cluster>`.
    /// Sorted by name.
    async fn look_alikes(&self, cluster: &str) -> Result<Vec<LookAlike>, DockerError>;
    /// Force-removes these containers (and their anonymous volumes); returns how many it removed.
    /// Containers already gone are not an error.
    async fn remove_containers(&self, ids: &[String]) -> Result<usize, DockerError>;
    /// Runs a lab's local registry container if it is not running yet (kubernetes-sigs/kind v0.32.0
    /// `site/static/examples/kind-with-registry.sh`): created from `spec.image` with `spec.labels`, published
    /// on `127.0.0.1:<host_port>`, on network `spec.network`. A container of that name without `spec.labels` is
    /// someone else's: an error, left alone. Returns its ID and whether it was created now.
    async fn ensure_registry(
        &self,
        spec: &RegistryContainer,
    ) -> Result<(String, bool), DockerError>;
    /// The images containerd holds in node container `node`, in the `k8s.io` namespace the kubelet uses
    /// (`ctr --namespace=k8s.io images ls`): each reference with the digest it points at.
    async fn node_images(&self, node: &str) -> Result<Vec<NodeImage>, DockerError>;
    /// Imports a `docker save` archive (a byte range of a file: one entry of a bundle) into containerd's
    /// `k8s.io` namespace in node container `node`, as `kind load image-archive` does (kubernetes-sigs/kind
    /// v0.32.0 `pkg/cluster/nodeutils/util.go`); the copy put into the node is removed whatever the outcome.
    async fn import_node_image(
        &self,
        node: &str,
        archive: &ImageArchive,
    ) -> Result<(), DockerError>;
    /// Pulls `image` in node container `node` with `crictl pull`, through the node's containerd (its
    /// registry mirrors and credentials), as the kubelet would.
    async fn pull_in_node(&self, node: &str, image: &str) -> Result<(), DockerError>;
}

/// An image reference containerd holds in a node, and the digest it points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeImage {
    /// `quay.io/open-cluster-management/work:v1.3.1`, `docker.io/library/busybox:latest`,
    /// `quay.io/x/y@sha256:…` (containerd names images fully: registry, and `library/` for Docker Hub).
    pub reference: String,
    /// `sha256:…` of the manifest (or index) the reference points at.
    pub digest: String,
}

/// A `docker save` archive of one image, as bytes `offset..offset + size` of `file` (an entry of a bundle,
/// read in place: nothing is extracted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArchive {
    /// The image reference the archive was saved from (the bundle manifest's `name`).
    pub image: String,
    pub file: std::path::PathBuf,
    pub offset: u64,
    pub size: u64,
}

/// The parts of an image reference: `(repository, tag, digest)`. The tag is what follows the last `:`
/// after the last `/` (so a registry port is not a tag).
pub fn split_reference(image: &str) -> (String, Option<String>, Option<String>) {
    let (rest, digest) = match image.split_once('@') {
        Some((r, d)) => (r, Some(d.to_owned())),
        None => (image, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    match rest[last_slash..].rfind(':') {
        Some(i) => (
            rest[..last_slash + i].to_owned(),
            Some(rest[last_slash + i + 1..].to_owned()),
            digest,
        ),
        None => (rest.to_owned(), None, digest),
    }
}

/// `image` as containerd names it (Docker's normalisation): a registry host first (`docker.io` when the
/// first component is not one), `library/` for Docker Hub's official images, and `:latest` when neither
/// a tag nor a digest is given. `busybox` → `docker.io/library/busybox:latest`.
pub fn full_reference(image: &str) -> String {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let first = name.split('/').next().unwrap_or_default();
    let has_host =
        name.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut out = if has_host {
        name.to_owned()
    } else if name.contains('/') {
        format!("docker.io/{name}")
    } else {
        format!("docker.io/library/{name}")
    };
    let last = out.rsplit('/').next().unwrap_or_default();
    if !last.contains(':') && digest.is_none() {
        out.push_str(":latest");
    }
    if let Some(d) = digest {
        out.push('@');
        out.push_str(d);
    }
    out
}

/// Whether `have` (what a node holds) holds `want` as the kubelet asks for it: the same full reference,
/// or, for a reference pinned by digest, an image of the same repository whose target is that digest.
pub fn node_has(have: &[NodeImage], want: &str) -> bool {
    let full = full_reference(want);
    if have.iter().any(|i| i.reference == full) {
        return true;
    }
    let Some((name, digest)) = full.split_once('@') else {
        return false;
    };
    // The repository: the name without its tag (a `:` after the last `/`).
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    let repo = match name[slash..].rfind(':') {
        Some(i) => &name[..slash + i],
        None => name,
    };
    have.iter().any(|i| {
        i.digest == digest
            && i.reference
                .strip_prefix(repo)
                .is_some_and(|rest| rest.starts_with(':') || rest.starts_with('@'))
    })
}

/// What [`ContainerRuntime::remove_network_if_unused`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkRemoval {
    Removed,
    /// No network has that ID (any more).
    Gone,
    /// Containers are attached (their names; empty when Docker refused for that reason without naming them).
    InUse(Vec<String>),
}

/// A lab's local registry container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistryContainer {
    pub name: String,
    /// `registry:2`; pulled when the engine does not have it.
    pub image: String,
    pub host_port: u16,
    /// The kind network, so the nodes reach it as `<name>:5000`.
    pub network: String,
    /// The lab's labels: what proves the container is the lab's.
    pub labels: std::collections::BTreeMap<String, String>,
    /// The command, when the image's own is not the registry (a test's stand-in image).
    pub command: Option<Vec<String>>,
}

/// A container that looks like a kind node (see [`ContainerRuntime::look_alikes`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LookAlike {
    pub id: String,
    pub name: String,
    /// Its `io.x-k8s.kind.cluster` label, if it has one.
    pub kind_cluster: Option<String>,
    /// The host port its API server port (6443/tcp) is published on, if it publishes one: kind publishes
    /// a control plane's on a free port it picks at create (kind `pkg/cluster/internal/providers/docker/
    /// provision.go` `generatePortMappings`, v0.32.0) and writes it into the kubeconfig it writes.
    #[serde(default)]
    pub api_port: Option<u16>,
    /// The image it runs, as Docker reports the reference it was created from.
    #[serde(default)]
    pub image: Option<String>,
}

impl LookAlike {
    /// `hub-control-plane (unlabelled)`, `hub-worker (labelled io.x-k8s.kind.cluster=hub)`.
    pub fn describe(&self) -> String {
        match &self.kind_cluster {
            Some(c) => format!("{} (labelled io.x-k8s.kind.cluster={c})", self.name),
            None => format!("{} (unlabelled)", self.name),
        }
    }
}

/// Whether a container name is one kind gives a node of `cluster` (`<cluster>-control-plane`,
/// `<cluster>-worker`, `<cluster>-worker2`, …, `<cluster>-external-load-balancer`).
pub fn is_kind_node_name(cluster: &str, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(cluster).and_then(|r| r.strip_prefix('-')) else {
        return false;
    };
    match rest {
        "control-plane" | "external-load-balancer" => true,
        _ => rest
            .strip_prefix("worker")
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit())),
    }
}

/// The role of a kind node container, as its label `io.x-k8s.kind.role` says (kind v0.32.0
/// `pkg/cluster/internal/providers/docker/constants.go`, `nodeRoleLabelKey`; values from
/// `pkg/cluster/constants/constants.go`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum NodeRole {
    ControlPlane,
    Worker,
    ExternalLoadBalancer,
    /// A value kind does not write (or no label), kept as it is.
    Other(String),
}

impl From<String> for NodeRole {
    fn from(label: String) -> Self {
        match label.as_str() {
            "control-plane" => NodeRole::ControlPlane,
            "worker" => NodeRole::Worker,
            "external-load-balancer" => NodeRole::ExternalLoadBalancer,
            _ => NodeRole::Other(label),
        }
    }
}

impl NodeRole {
    /// As kind writes it in the label.
    pub fn as_str(&self) -> &str {
        match self {
            NodeRole::ControlPlane => "control-plane",
            NodeRole::Worker => "worker",
            NodeRole::ExternalLoadBalancer => "external-load-balancer",
            NodeRole::Other(s) => s,
        }
    }
}

impl From<NodeRole> for String {
    fn from(role: NodeRole) -> Self {
        role.as_str().to_owned()
    }
}

/// A kind node container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeContainer {
    pub id: String,
    pub name: String,
    /// Its role (label `io.x-k8s.kind.role`).
    pub role: NodeRole,
    pub running: bool,
    /// Address on the `kind` network.
    pub ip: Option<String>,
}

/// What `kind create cluster` needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateCluster {
    pub name: String,
    pub image: String,
    /// The cluster's own kubeconfig file (never the user's: parallel creates would fight over it).
    pub kubeconfig: std::path::PathBuf,
    /// Registry mirrors for the nodes' containerd (none: kind's defaults).
    #[serde(default)]
    pub registries: kind::NodeRegistries,
}

/// The cluster provisioner (kind).
#[async_trait]
pub trait ClusterProvisioner: Send + Sync {
    async fn list(&self) -> Result<Vec<String>, KindError>;
    async fn create(&self, req: &CreateCluster) -> Result<(), KindError>;
    async fn delete(&self, name: &str) -> Result<(), KindError>;
    /// Writes the cluster's kubeconfig (host endpoint) to `path` with mode 0600.
    async fn export_kubeconfig(&self, name: &str, path: &std::path::Path) -> Result<(), KindError>;
}

/// A chart rendered into objects, CRDs separated from the rest.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rendered {
    pub crds: Vec<Value>,
    pub objects: Vec<Value>,
}

/// The cluster a Helm command talks to: a kubeconfig file and one of its contexts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HelmTarget {
    /// The lab cluster's name (the simulated lab keys its releases by it).
    pub cluster: String,
    pub kubeconfig: std::path::PathBuf,
    pub context: String,
    /// The lab's name: releases are installed labelled `ocm-lab.open-cluster-management.io/lab=<lab>`
    /// (Helm's `--labels`), and only releases carrying it are ever uninstalled.
    pub lab: String,
}

/// The status of a Helm release (helm v3 `pkg/release/status.go`: `unknown`, `deployed`, `uninstalled`,
/// `superseded`, `failed`, `uninstalling`, `pending-install`, `pending-upgrade`, `pending-rollback`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum ReleaseStatus {
    Deployed,
    Failed,
    Superseded,
    Uninstalled,
    Uninstalling,
    PendingInstall,
    PendingUpgrade,
    PendingRollback,
    /// `unknown`, or a status a later Helm adds, kept as it is.
    Other(String),
}

impl ReleaseStatus {
    const NAMES: [(&'static str, ReleaseStatus); 8] = [
        ("deployed", ReleaseStatus::Deployed),
        ("failed", ReleaseStatus::Failed),
        ("superseded", ReleaseStatus::Superseded),
        ("uninstalled", ReleaseStatus::Uninstalled),
        ("uninstalling", ReleaseStatus::Uninstalling),
        ("pending-install", ReleaseStatus::PendingInstall),
        ("pending-upgrade", ReleaseStatus::PendingUpgrade),
        ("pending-rollback", ReleaseStatus::PendingRollback),
    ];

    /// As Helm writes it.
    pub fn as_str(&self) -> &str {
        match self {
            ReleaseStatus::Other(s) => s,
            known => Self::NAMES
                .iter()
                .find(|(_, s)| s == known)
                .map_or("unknown", |(n, _)| n),
        }
    }
}

impl From<String> for ReleaseStatus {
    fn from(s: String) -> Self {
        Self::NAMES
            .iter()
            .find(|(n, _)| *n == s)
            .map_or(ReleaseStatus::Other(s), |(_, st)| st.clone())
    }
}

impl From<&str> for ReleaseStatus {
    fn from(s: &str) -> Self {
        s.to_owned().into()
    }
}

impl From<ReleaseStatus> for String {
    fn from(s: ReleaseStatus) -> Self {
        s.as_str().to_owned()
    }
}

impl std::fmt::Display for ReleaseStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Helm release as Helm stores it: `helm list` plus the values it was installed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Release {
    pub name: String,
    pub namespace: String,
    pub revision: u64,
    pub status: ReleaseStatus,
    /// `<chart>-<version>`, as `helm list` prints it.
    pub chart: String,
    /// The user-supplied values (`helm get values`).
    pub values: Value,
}

/// Helm: renders charts and installs them as releases, with our chart patches applied by Helm's
/// post-renderer (ocm-lab's hidden `__post-render` command) in both cases.
#[async_trait]
pub trait ChartRenderer: Send + Sync {
    /// `helm template --include-crds` through the post-renderer: the objects `upgrade_install` would
    /// send, patched, CRDs separate. Touches no cluster.
    async fn template(&self, chart: &ChartPlan, values: &Value) -> Result<Rendered, HelmError>;
    /// `helm upgrade --install --skip-crds` through the post-renderer (the caller applies the CRDs:
    /// Helm never upgrades `crds/`). Returns the release as stored afterwards.
    async fn upgrade_install(
        &self,
        target: &HelmTarget,
        chart: &ChartPlan,
        values: &Value,
    ) -> Result<Release, HelmError>;
    /// The release `name` in `namespace`, if Helm has one (any status).
    async fn release(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<Option<Release>, HelmError>;
    /// Whether release `name` in `namespace` exists and is labelled as this lab's
    /// (`crate::topology::LAB_LABEL`, `helm list --selector`): what tells the lab's own install from
    /// someone else's of the same name.
    async fn release_of_lab(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError>;
    /// `helm uninstall` of a release labelled as this lab's (`crate::topology::LAB_LABEL`); `false` when there is
    /// no such release of this lab (absent, or someone else's: left alone).
    async fn uninstall(
        &self,
        target: &HelmTarget,
        name: &str,
        namespace: &str,
    ) -> Result<bool, HelmError>;
}

/// Identifies an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        ObjectRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The reference of an object's own `apiVersion`, `kind` and metadata.
    pub fn of(obj: &Value) -> Option<Self> {
        /// `apiVersion`, `kind` and the identifying metadata, borrowed from the object.
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Head<'a> {
            api_version: &'a str,
            kind: &'a str,
            #[serde(borrow)]
            metadata: Meta<'a>,
        }
        #[derive(Deserialize)]
        struct Meta<'a> {
            name: &'a str,
            #[serde(default, borrow)]
            namespace: Option<&'a str>,
        }
        let head = Head::deserialize(obj).ok()?;
        Some(ObjectRef::new(
            head.api_version,
            head.kind,
            head.metadata.namespace,
            head.metadata.name,
        ))
    }

    /// The reference of object `name` of kind `K` (in `namespace`, for a namespaced kind).
    pub fn to<K: kinds::Kind>(namespace: Option<&str>, name: &str) -> Self {
        ObjectRef {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// Whether this refers to an object of kind `K`.
    pub fn is<K: kinds::Kind>(&self) -> bool {
        self.api_version == K::api_version(&()) && self.kind == K::kind(&())
    }

    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// A predicate on an object's current state (`None`: it does not exist).
pub type Check<K = Value> = Arc<dyn Fn(Option<&K>) -> bool + Send + Sync>;

/// A condition to wait for, evaluated on every change of the watched object: kube-runtime's
/// `wait::Condition<K>` with a description. `K` is the kind (`Condition<Deployment>`); [`ClusterApi::wait`]
/// takes the JSON form [`Condition::on_json`] makes of it.
pub struct Condition<K = Value> {
    /// Shown when the wait times out: "condition Bound=True".
    pub description: String,
    pub check: Check<K>,
}

impl<K> Clone for Condition<K> {
    fn clone(&self) -> Self {
        Condition {
            description: self.description.clone(),
            check: self.check.clone(),
        }
    }
}

impl<K> fmt::Debug for Condition<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

impl<K> Condition<K> {
    pub fn new(
        description: impl Into<String>,
        check: impl Fn(Option<&K>) -> bool + Send + Sync + 'static,
    ) -> Self {
        Condition {
            description: description.into(),
            check: Arc::new(check),
        }
    }

    pub fn exists() -> Self {
        Condition::new("it exists", |o| o.is_some())
    }

    /// The object is gone (deleted, its finalizers done).
    pub fn gone(description: &str) -> Self {
        Condition::new(description, |o| o.is_none())
    }
}

impl<K: HasConditions> Condition<K> {
    /// `status.conditions[type=T].status == "True"`.
    pub fn status_true(kind: &str) -> Self {
        let k = kind.to_owned();
        Condition::new(format!("condition {kind}=True"), move |o: Option<&K>| {
            o.is_some_and(|o| o.condition_true(&k))
        })
    }
}

impl<K: serde::de::DeserializeOwned + 'static> Condition<K> {
    /// The same condition on the object's JSON, as [`ClusterApi::wait`] takes it. An object that does not
    /// read as a `K` does not satisfy it (the wait's timeout then shows what it was).
    pub fn on_json(&self) -> Condition<Value> {
        let check = self.check.clone();
        Condition::new(self.description.clone(), move |o: Option<&Value>| match o {
            None => check(None),
            Some(v) => K::deserialize(v).is_ok_and(|k| check(Some(&k))),
        })
    }
}

/// The `status` of condition `kind` in an object's `status.conditions`.
pub fn condition_status<'a, K: HasConditions>(obj: &'a K, kind: &str) -> Option<&'a str> {
    obj.condition_status(kind)
}

/// Why a wait ended without its condition.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WaitError {
    #[error("timed out after {} waiting for {object}: {condition}; last seen: {}", humantime::format_duration(*.after), last_seen(.last.as_ref()))]
    Timeout {
        object: ObjectRef,
        condition: String,
        after: Duration,
        last: Option<Value>,
    },
    #[error(transparent)]
    Backend(#[from] KubeError),
}

impl WaitError {
    /// A wait for `kind` in `api_version` to be served ended before a CRD for it was Established. Names the
    /// CRD when one was seen (`last`), else the pattern its name would have (`*.<group>`).
    pub fn crd_not_established(
        api_version: &str,
        kind: &str,
        after: Duration,
        last: Option<Value>,
    ) -> Self {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let name = last
            .as_ref()
            .and_then(ObjectRef::of)
            .map_or_else(|| format!("*.{group}"), |r| r.name);
        WaitError::Timeout {
            object: ObjectRef::to::<kinds::CustomResourceDefinition>(None, &name),
            condition: format!(
                "a CRD serving {kind} in {api_version} with condition Established=True"
            ),
            after,
            last,
        }
    }
}

/// A short description of the last state a wait saw: its conditions, or that it did not exist.
pub fn last_seen<K: HasConditions>(last: Option<&K>) -> String {
    let Some(o) = last else {
        return "it does not exist".to_owned();
    };
    let conditions = o.conditions();
    if conditions.is_empty() {
        return "it exists, without status conditions".to_owned();
    }
    let shown: Vec<String> = conditions
        .iter()
        .map(|c| {
            let status = if c.status.is_empty() { "?" } else { c.status };
            match c.reason.filter(|r| !r.is_empty()) {
                Some(r) => format!("{}={status} ({r})", c.type_),
                None => format!("{}={status}", c.type_),
            }
        })
        .collect();
    shown.join(", ")
}

/// What an apply changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApplyOutcome {
    pub created: usize,
    pub updated: usize,
    pub unchanged: usize,
}

/// A cluster's Kubernetes API.
#[async_trait]
pub trait ClusterApi: Send + Sync {
    /// Server version (`/version` gitVersion).
    async fn version(&self) -> Result<String, KubeError>;
    /// Whether `apiVersion`/`kind` is served now (discovery).
    async fn served(&self, api_version: &str, kind: &str) -> Result<bool, KubeError>;
    async fn get(&self, r: &ObjectRef) -> Result<Option<Value>, KubeError>;
    /// Lists objects of a kind, in one namespace or all, optionally filtered by a label selector.
    async fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError>;
    /// As [`ClusterApi::list`], but each object as its `apiVersion`, `kind` and `metadata` only (the API
    /// server's PartialObjectMetadata list): for callers that need names, labels and owners, not bodies.
    async fn list_metadata(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        labels: Option<&str>,
    ) -> Result<Vec<Value>, KubeError>;
    /// Server-side apply with field manager `ocm-lab`, force, and Strict field validation.
    async fn apply(&self, obj: &Value) -> Result<(), KubeError>;
    /// JSON merge patch.
    async fn merge_patch(&self, r: &ObjectRef, patch: &Value) -> Result<(), KubeError>;
    /// Deletes; `false` when it did not exist.
    async fn delete(&self, r: &ObjectRef) -> Result<bool, KubeError>;
    /// Watches until `cond` holds or `timeout` passes.
    async fn wait(
        &self,
        r: &ObjectRef,
        cond: &Condition,
        timeout: Duration,
    ) -> Result<Value, WaitError>;
    /// Watches until the kind is served.
    async fn wait_served(
        &self,
        api_version: &str,
        kind: &str,
        timeout: Duration,
    ) -> Result<(), WaitError>;
    /// A TokenRequest for a ServiceAccount; the token is a secret: never log it.
    async fn token_request(
        &self,
        namespace: &str,
        service_account: &str,
        seconds: i64,
    ) -> Result<Secret, KubeError>;
    /// Approves a CertificateSigningRequest through its `/approval` subresource.
    async fn approve_csr(&self, name: &str, reason: &str) -> Result<(), KubeError>;
    /// GETs `path` through port `port` of Service `namespace/service` of this cluster the way a user on the
    /// host would: the Service is port-forwarded to 127.0.0.1, the server is verified with `ca_pem` under
    /// the name `localhost`, and the request carries `token` as a bearer token. Returns status and body.
    async fn get_via_service(
        &self,
        namespace: &str,
        service: &str,
        port: u16,
        path: &str,
        ca_pem: &[u8],
        token: &Secret,
    ) -> Result<(u16, String), KubeError>;
}

/// A secret string: its Debug and Display never show it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Connects to a lab cluster's API.
#[async_trait]
pub trait Connector: Send + Sync {
    /// A client for `cluster`, from its kubeconfig (`kubeconfig` is the lab's per-cluster file for kind
    /// clusters, the user's for existing ones).
    async fn connect(
        &self,
        cluster: &Cluster,
        kubeconfig: &std::path::Path,
    ) -> Result<Arc<dyn ClusterApi>, KubeError>;
}

/// Everything a run talks to.
#[derive(Clone)]
pub struct Backends {
    pub docker: Arc<dyn ContainerRuntime>,
    pub kind: Arc<dyn ClusterProvisioner>,
    pub helm: Arc<dyn ChartRenderer>,
    pub kube: Arc<dyn Connector>,
    /// `true` for the simulated lab: output says so.
    pub simulated: bool,
}

/// A backend that could not be set up (Docker down, a tool missing). Commands that never need it work;
/// any use fails with the error that says what to do. `E` is the error of the trait it stands in for.
#[derive(Debug, Clone)]
pub struct Unavailable<E>(pub E);

#[async_trait]
impl ContainerRuntime for Unavailable<DockerError> {
    async fn ping(&self) -> Result<String, DockerError> {
        Err(self.0.clone())
    }
    async fn ensure_network(&self, _: &str) -> Result<bool, DockerError> {
        Err(self.0.clone())
    }
    async fn network_id(&self, _: &str) -> Result<Option<String>, DockerError> {
        Err(self.0.clone())
    }
    async fn remove_network_if_unused(&self, _: &str) -> Result<NetworkRemoval, DockerError> {
        Err(self.0.clone())
    }
    async fn node_containers(&self, _: &str) -> Result<Vec<NodeContainer>, DockerError> {
        Err(self.0.clone())
    }
    async fn remove_cluster_containers(&self, _: &str) -> Result<usize, DockerError> {
        Err(self.0.clone())
    }
    async fn look_alikes(&self, _: &str) -> Result<Vec<LookAlike>, DockerError> {
        Err(self.0.clone())
    }
    async fn remove_containers(&self, _: &[String]) -> Result<usize, DockerError> {
        Err(self.0.clone())
    }
    async fn ensure_registry(&self, _: &RegistryContainer) -> Result<(String, bool), DockerError> {
        Err(self.0.clone())
    }
    async fn node_images(&self, _: &str) -> Result<Vec<NodeImage>, DockerError> {
        Err(self.0.clone())
    }
    async fn import_node_image(&self, _: &str, _: &ImageArchive) -> Result<(), DockerError> {
        Err(self.0.clone())
    }
    async fn pull_in_node(&self, _: &str, _: &str) -> Result<(), DockerError> {
        Err(self.0.clone())
    }
}

#[async_trait]
impl ClusterProvisioner for Unavailable<KindError> {
    async fn list(&self) -> Result<Vec<String>, KindError> {
        Err(self.0.clone())
    }
    async fn create(&self, _: &CreateCluster) -> Result<(), KindError> {
        Err(self.0.clone())
    }
    async fn delete(&self, _: &str) -> Result<(), KindError> {
        Err(self.0.clone())
    }
    async fn export_kubeconfig(&self, _: &str, _: &std::path::Path) -> Result<(), KindError> {
        Err(self.0.clone())
    }
}

#[async_trait]
impl ChartRenderer for Unavailable<HelmError> {
    async fn template(&self, _: &ChartPlan, _: &Value) -> Result<Rendered, HelmError> {
        Err(self.0.clone())
    }
    async fn upgrade_install(
        &self,
        _: &HelmTarget,
        _: &ChartPlan,
        _: &Value,
    ) -> Result<Release, HelmError> {
        Err(self.0.clone())
    }
    async fn release(
        &self,
        _: &HelmTarget,
        _: &str,
        _: &str,
    ) -> Result<Option<Release>, HelmError> {
        Err(self.0.clone())
    }
    async fn release_of_lab(&self, _: &HelmTarget, _: &str, _: &str) -> Result<bool, HelmError> {
        Err(self.0.clone())
    }
    async fn uninstall(&self, _: &HelmTarget, _: &str, _: &str) -> Result<bool, HelmError> {
        Err(self.0.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_named_as_containerd_names_them() {
        for (given, full) in [
            ("busybox", "docker.io/library/busybox:latest"),
            ("registry:2", "docker.io/library/registry:2"),
            ("amazon/aws-cli:latest", "docker.io/amazon/aws-cli:latest"),
            (
                "quay.io/open-cluster-management/work:v1.3.1",
                "quay.io/open-cluster-management/work:v1.3.1",
            ),
            ("localhost:5001/x", "localhost:5001/x:latest"),
            (
                "kindest/node:v1.36.1@sha256:ab",
                "docker.io/kindest/node:v1.36.1@sha256:ab",
            ),
        ] {
            assert_eq!(full_reference(given), full, "{given}");
        }
    }

    #[test]
    fn a_pinned_reference_is_held_by_an_image_of_its_repository_with_that_digest() {
        let held = |r: &str, d: &str| NodeImage {
            reference: r.into(),
            digest: d.into(),
        };
        let have = vec![
            held("quay.io/o/work:v1", "sha256:aa"),
            held("docker.io/library/busybox:latest", "sha256:bb"),
        ];
        assert!(node_has(&have, "quay.io/o/work:v1"));
        assert!(node_has(&have, "busybox"));
        assert!(node_has(&have, "quay.io/o/work:v1@sha256:aa"));
        // The digest a `docker load`ed image no longer has, another repository's digest, another tag.
        assert!(!node_has(&have, "quay.io/o/work:v1@sha256:cc"));
        assert!(!node_has(&have, "quay.io/o/work-x:v1@sha256:aa"));
        assert!(!node_has(&have, "quay.io/o/work:v2"));
    }

    #[test]
    fn kind_node_names() {
        for n in [
            "hub-control-plane",
            "hub-worker",
            "hub-worker2",
            "hub-worker13",
            "hub-external-load-balancer",
        ] {
            assert!(is_kind_node_name("hub", n), "{n}");
        }
        for n in [
            "hub",
            "hub-control-plane2",
            "hub-worker-x",
            "hubble-control-plane",
            "x-hub-control-plane",
            "hub-2-control-plane",
        ] {
            assert!(!is_kind_node_name("hub", n), "{n}");
        }
    }
}
