//! SIG Multicluster's kinds the lab reads and writes: ClusterProfile (kubernetes-sigs/cluster-inventory-api
//! v0.1.2 `apis/v1alpha1/clusterprofile_types.go`) and ClusterProperty (kubernetes-sigs/about-api at the
//! commit ocm v1.3.1 pins, `clusterproperty/api/v1alpha1/clusterproperty_types.go`; the klusterlet operator
//! installs its CRD from ocm v1.3.1 `manifests/klusterlet/managed/clusterproperties.crd.yaml`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// A cluster as the hub's inventory describes it to consumers (in a namespace bound to its set).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterProfile",
    namespaced,
    status = "ClusterProfileStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileSpec {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub display_name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileStatus {
    /// Copied from the ManagedCluster (`ControlPlaneHealthy`, `Joined`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// `name → value` pairs: the cluster's properties.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    /// How a consumer reaches the cluster: each a client-go `Cluster` (server, CA, exec extension).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_providers: Vec<AccessProvider>,
}

/// `status.properties[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Property {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// `status.accessProviders[]`: a provider's name and the client-go `Cluster` (kubeconfig shape) to use.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct AccessProvider {
    pub name: String,
    #[serde(default)]
    pub cluster: kube::config::Cluster,
}

impl ClusterProfileStatus {
    /// The access provider named `name`.
    pub fn access_provider(&self, name: &str) -> Option<&AccessProvider> {
        self.access_providers.iter().find(|p| p.name == name)
    }
}

/// A property of the cluster it is on (cluster-scoped, on a spoke): what reaches the hub as a claim.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "about.k8s.io",
    version = "v1alpha1",
    kind = "ClusterProperty",
    schema = "disabled"
)]
pub struct ClusterPropertySpec {
    pub value: String,
}
