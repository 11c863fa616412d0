//! The resolved lab: defaults applied, names checked, derived collections computed. Everything downstream
//! (plan, engine, verification) reads this, never the raw file model.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

use super::catalog::{ClusterProxyRelease, MsaRelease, OcmRelease};
use super::model::{Check, Selector};

/// Label OCM uses for exclusive cluster set membership (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/webhook/v1/managedcluster_mutating.go`).
pub const CLUSTERSET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
/// Label the lab puts on everything it creates, naming the lab.
pub const LAB_LABEL: &str = "ocm-lab.open-cluster-management.io/lab";
/// The ManagedCluster name of a self-joined hub (open-cluster-management-io/ocm v1.3.1
/// `solutions/setup-dev-environment/local-up.sh`).
pub const LOCAL_CLUSTER: &str = "local-cluster";
/// Namespace the addon charts are installed in unless a topology says otherwise.
pub const ADDON_NAMESPACE: &str = "open-cluster-management-addon";
/// Where the managed-serviceaccount agent (and so the spoke ServiceAccounts) lives
/// (open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/agent/agent.go`).
pub const MSA_AGENT_NAMESPACE: &str = "open-cluster-management-agent-addon";

/// A resolved lab.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lab {
    pub name: String,
    pub description: Option<String>,
    pub versions: LabVersions,
    pub hub: Hub,
    pub spokes: Vec<Spoke>,
    /// Every ManagedCluster the lab registers: the spokes and, with `selfJoin`, `local-cluster`.
    pub managed_clusters: Vec<ManagedCluster>,
    pub cluster_sets: Vec<ClusterSet>,
    /// Every ManagedClusterSetBinding, from sets' `bindTo` and explicit bindings, without duplicates.
    pub bindings: Vec<Binding>,
    /// Hub namespaces the lab creates for bindings (sorted, unique).
    pub namespaces: Vec<String>,
    pub addons: Addons,
    /// ManagedServiceAccounts, one per (account, cluster).
    pub service_accounts: Vec<ServiceAccount>,
    pub verify: Verify,
    pub timeouts: Timeouts,
    /// Registry mirrors and the local registry (`spec.registry`).
    pub registry: Registry,
    /// The lab bundle to bring the lab up from (`spec.bundle`, resolved against the topology file's
    /// folder; `up --bundle` replaces it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bundle: Option<std::path::PathBuf>,
    /// What the command line and the environment said when the lab was loaded (not part of the lab's
    /// description: never serialized).
    #[serde(skip)]
    pub host: super::Host,
}

/// Host port of the local registry, as in kind's local-registry guide (kubernetes-sigs/kind v0.32.0
/// `site/static/examples/kind-with-registry.sh`).
pub const LOCAL_REGISTRY_PORT: u16 = 5001;
/// The image of the local registry: kind's local-registry guide runs `registry:3` since kind v0.32.0
/// (kubernetes-sigs/kind v0.32.0 `site/static/examples/kind-with-registry.sh`; `registry:2` up to v0.31.0).
pub const LOCAL_REGISTRY_IMAGE: &str = "registry:3";

/// Where the kind nodes pull images from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Registry {
    /// Mirrors in file order, each host once.
    pub mirrors: Vec<Mirror>,
    /// The local registry container, with `spec.registry.local: true`.
    pub local: Option<LocalRegistry>,
}

/// A registry host and the mirror the nodes pull its images from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mirror {
    /// `quay.io`, `docker.io`, `localhost:5001`.
    pub host: String,
    /// `http://mirror.classroom:5000` (no trailing slash).
    pub url: String,
}

/// The lab's local registry container (kubernetes-sigs/kind v0.32.0
/// `site/static/examples/kind-with-registry.sh`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalRegistry {
    /// Container name, also its name on the kind network: `<lab>-registry`.
    pub container: String,
    pub image: String,
    /// On 127.0.0.1 of this machine.
    pub host_port: u16,
}

impl Registry {
    /// Every mirror the nodes use: the topology's, and the local registry as the mirror of
    /// `localhost:<port>` (so `localhost:5001/x` works on the host and in the nodes alike).
    pub fn node_mirrors(&self) -> Vec<Mirror> {
        let mut out = self.mirrors.clone();
        if let Some(l) = &self.local {
            out.push(Mirror {
                host: format!("localhost:{}", l.host_port),
                url: format!("http://{}:5000", l.container),
            });
        }
        out
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LabVersions {
    pub kind_node_image: String,
    pub ocm: OcmRelease,
}

/// How the lab reaches a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "type")]
pub enum Provider {
    /// Created and deleted by the lab with kind.
    Kind,
    /// Run by someone else; the lab only connects to it.
    Existing { kubeconfig: String, context: String },
}

/// A Kubernetes cluster of the lab (hub or spoke).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    pub name: String,
    pub role: Role,
    pub provider: Provider,
    /// Context name in the user's kubeconfig: `kind-<name>` for kind clusters, as kind names them.
    pub context: String,
    /// The API server address other clusters' pods use, when known before the cluster runs:
    /// `https://<name>-control-plane:6443` on kind (kubernetes-sigs/kind v0.32.0
    /// `pkg/cluster/internal/providers/docker/provider.go`, `GetAPIServerInternalEndpoint`), an existing
    /// cluster's `existing.joinEndpoint`.
    pub internal_endpoint: Option<String>,
    /// `existing.adopt`: an OCM install already on this existing cluster is used, not refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopt: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    Hub,
    Spoke,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hub {
    #[serde(flatten)]
    pub cluster: Cluster,
    /// Registration feature gates enabled on the ClusterManager, `DefaultClusterSet` first.
    pub feature_gates: Vec<String>,
    pub self_join: bool,
}

impl Hub {
    pub fn has_gate(&self, gate: &str) -> bool {
        self.feature_gates.iter().any(|g| g == gate)
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spoke {
    #[serde(flatten)]
    pub cluster: Cluster,
    pub labels: BTreeMap<String, String>,
    pub properties: Vec<Property>,
    /// Registration feature gates enabled on the Klusterlet.
    pub feature_gates: Vec<String>,
}

impl Spoke {
    pub fn has_gate(&self, gate: &str) -> bool {
        self.feature_gates.iter().any(|g| g == gate)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Property {
    pub name: String,
    pub value: String,
}

/// A cluster registered on the hub.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedCluster {
    /// ManagedCluster name.
    pub name: String,
    /// The lab cluster the klusterlet runs on.
    pub cluster: String,
    /// Labels the lab sets on the ManagedCluster, including the exclusive set label when it has one.
    pub labels: BTreeMap<String, String>,
    /// The exclusive set it belongs to, if any.
    pub exclusive_set: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSet {
    pub name: String,
    pub selector: Selector,
    /// ManagedCluster names in the set (for a label selector: the lab clusters whose labels match).
    pub members: Vec<String>,
    pub bind_to: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Binding {
    pub cluster_set: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Addons {
    pub cluster_proxy: Option<ClusterProxy>,
    pub managed_serviceaccount: Option<ManagedServiceaccount>,
}

impl Addons {
    /// The ManagedClusters `addon` reaches, or `None` when the lab does not enable it.
    pub fn clusters(&self, addon: Addon) -> Option<&[String]> {
        match addon {
            Addon::ClusterProxy => self.cluster_proxy.as_ref().map(|a| a.clusters.as_slice()),
            Addon::ManagedServiceaccount => self
                .managed_serviceaccount
                .as_ref()
                .map(|a| a.clusters.as_slice()),
        }
    }
}

/// An addon the lab installs, by its ClusterManagementAddOn name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Addon {
    ClusterProxy,
    ManagedServiceaccount,
}

impl Addon {
    pub const ALL: [Addon; 2] = [Addon::ClusterProxy, Addon::ManagedServiceaccount];

    /// Its ClusterManagementAddOn (and ManagedClusterAddOn) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Addon::ClusterProxy => "cluster-proxy",
            Addon::ManagedServiceaccount => "managed-serviceaccount",
        }
    }
}

impl std::fmt::Display for Addon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProxy {
    pub release: ClusterProxyRelease,
    pub namespace: String,
    pub cluster_set: String,
    /// Placement created for the addon in its namespace.
    pub placement: String,
    /// ManagedCluster names the addon reaches (members of its set).
    pub clusters: Vec<String>,
    pub access_provider: bool,
    pub user_server: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedServiceaccount {
    pub release: MsaRelease,
    pub namespace: String,
    pub cluster_set: String,
    /// ManagedCluster names that get an explicit ManagedClusterAddOn.
    pub clusters: Vec<String>,
    pub credential_sync: bool,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceAccount {
    pub name: String,
    /// ManagedCluster name (the MSA lives in this namespace on the hub).
    pub cluster: String,
    pub sync_to_cluster_profile: bool,
    pub cluster_role: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verify {
    pub namespaces: Vec<String>,
    pub checks: Vec<Check>,
    #[serde(with = "duration_text")]
    pub timeout: Duration,
    /// The image whose entrypoint is `ocm-lab-consumer`, run by the `consumer` check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_image: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timeouts {
    #[serde(with = "duration_text")]
    pub cluster_create: Duration,
    #[serde(with = "duration_text")]
    pub rollout: Duration,
    #[serde(with = "duration_text")]
    pub join: Duration,
    #[serde(with = "duration_text")]
    pub default: Duration,
}

impl Lab {
    /// Every cluster of the lab, hub first.
    pub fn clusters(&self) -> impl Iterator<Item = &Cluster> {
        std::iter::once(&self.hub.cluster).chain(self.spokes.iter().map(|s| &s.cluster))
    }

    pub fn cluster(&self, name: &str) -> Option<&Cluster> {
        self.clusters().find(|c| c.name == name)
    }

    pub fn spoke(&self, name: &str) -> Option<&Spoke> {
        self.spokes.iter().find(|s| s.cluster.name == name)
    }

    pub fn managed_cluster(&self, name: &str) -> Option<&ManagedCluster> {
        self.managed_clusters.iter().find(|m| m.name == name)
    }
}

/// Durations as short human text (`5m`, `90s`) in serialized output and templates.
pub mod duration_text {
    use std::time::Duration;

    pub fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }
}
