//! Open Cluster Management's kinds, with the fields the lab reads or writes. Field names and scopes follow
//! the Go types at the versions the lab installs: open-cluster-management-io/api v1.3.0
//! (`cluster/v1/types.go`, `cluster/v1beta1/types_placement.go`, `cluster/v1beta2/types_managedclusterset.go`,
//! `cluster/v1beta2/types_managedclustersetbinding.go`, `addon/v1alpha1/types_managedclusteraddon.go`,
//! `work/v1/types.go`, `operator/v1/types_clustermanager.go`, `operator/v1/types_klusterlet.go`),
//! cluster-proxy v0.10.0 (`pkg/apis/proxy/v1alpha1/managedproxyconfiguration_types.go`) and
//! managed-serviceaccount v0.10.0 (`apis/authentication/v1beta1/managedserviceaccount_types.go`).
//! A test reads every object recorded from real OCM into these types and finds each field again.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A cluster registered with the hub (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    status = "ManagedClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// The hub accepts the cluster's registration (what `clusteradm accept` sets).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hub_accepts_client: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The claims the registration agent synced from the spoke's ClusterClaims and ClusterProperties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_claims: Vec<ManagedClusterClaim>,
}

/// `status.clusterClaims[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ManagedClusterClaim {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// A set of ManagedClusters (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSet",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetSpec {
    /// Which clusters belong: absent or `ExclusiveClusterSetLabel` means those labelled
    /// `cluster.open-cluster-management.io/clusterset=<set>`; `LabelSelector` those its selector matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<ManagedClusterSelector>,
}

/// `spec.clusterSelector` of a ManagedClusterSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
}

/// Binds a ManagedClusterSet to a namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta2",
    kind = "ManagedClusterSetBinding",
    namespaced,
    status = "ConditionsStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSetBindingSpec {
    /// The bound set (a binding's name must equal it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster_set: String,
}

/// A status that holds only conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ConditionsStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Selects clusters (the lab's cluster-proxy install uses one).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "Placement",
    namespaced,
    schema = "disabled"
)]
pub struct PlacementSpec {}

/// An addon on one managed cluster (in the cluster's namespace on the hub).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterAddOn",
    namespaced,
    status = "ConditionsStatus",
    schema = "disabled"
)]
pub struct ManagedClusterAddOnSpec {}

/// Resources the hub applies on a managed cluster through its work agent.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    schema = "disabled"
)]
pub struct ManifestWorkSpec {}

/// The hub's OCM operator configuration (cluster-scoped, one: `cluster-manager`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "operator.open-cluster-management.io",
    version = "v1",
    kind = "ClusterManager",
    status = "OperatorStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration_configuration: Option<RegistrationConfiguration>,
}

/// A spoke's OCM operator configuration (cluster-scoped, one: `klusterlet`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "operator.open-cluster-management.io",
    version = "v1",
    kind = "Klusterlet",
    status = "OperatorStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct KlusterletSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registration_configuration: Option<RegistrationConfiguration>,
}

/// `spec.registrationConfiguration` of a ClusterManager or Klusterlet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RegistrationConfiguration {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feature_gates: Vec<FeatureGate>,
}

/// One feature gate: `{feature: ClusterProfile, mode: Enable}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct FeatureGate {
    pub feature: String,
    /// `Enable` or `Disable` (the operator's default is `Disable`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

impl RegistrationConfiguration {
    /// The gates set to `Enable`.
    pub fn enabled(&self) -> impl Iterator<Item = &str> {
        let on = self.feature_gates.iter().filter(|g| g.mode == "Enable");
        on.map(|g| g.feature.as_str())
    }
}

/// The status the OCM operators write on their CRs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OperatorStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// cluster-proxy's configuration (cluster-scoped).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "proxy.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedProxyConfiguration",
    schema = "disabled"
)]
pub struct ManagedProxyConfigurationSpec {}

/// A ServiceAccount on a managed cluster whose token the hub receives (in the cluster's namespace).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "authentication.open-cluster-management.io",
    version = "v1beta1",
    kind = "ManagedServiceAccount",
    namespaced,
    schema = "disabled"
)]
pub struct ManagedServiceAccountSpec {}
