//! The topology file as written: typed, strict (`deny_unknown_fields`) and spanned.
//!
//! Every field a semantic check may complain about is a [`Spanned`], so the error can point at the line and
//! column where the user wrote it (serde-saphyr's `Spanned`). Downstream code never reads these types: it reads
//! the resolved [`super::Lab`], with defaults applied and spans dropped.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use serde_saphyr::Spanned;

/// The API version of a topology document.
pub const API_VERSION: &str = "ocm-lab.open-cluster-management.io/v1alpha1";
/// The kind of a topology document.
pub const KIND: &str = "Topology";

/// A lab: a hub, its spokes, cluster sets, addons and what to verify.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[schemars(title = "ocm-lab Topology")]
pub struct Topology {
    /// Always `ocm-lab.open-cluster-management.io/v1alpha1`.
    #[schemars(with = "String")]
    pub api_version: Spanned<String>,
    /// Always `Topology`.
    #[schemars(with = "String")]
    pub kind: Spanned<String>,
    pub metadata: Metadata,
    pub spec: TopologySpec,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Metadata {
    /// The lab's name: its state folder, the label on everything it creates, its lock.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// What this lab is for, shown by `ocm-lab plan`.
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TopologySpec {
    /// Versions of kind's node image and the OCM charts; defaults come from the version catalog.
    #[serde(default)]
    pub versions: Versions,
    pub hub: Hub,
    #[schemars(with = "Vec<Spoke>")]
    pub spokes: Spanned<Vec<Spoke>>,
    /// ManagedClusterSets and the namespaces they are bound to.
    #[serde(default)]
    pub cluster_sets: Vec<ClusterSet>,
    /// Extra ManagedClusterSetBindings, for sets the lab does not declare (for example `global`).
    #[serde(default)]
    pub bindings: Vec<Binding>,
    #[serde(default)]
    pub addons: Addons,
    /// ManagedServiceAccounts created on the hub for spokes.
    #[serde(default)]
    pub service_accounts: Vec<ServiceAccount>,
    #[serde(default)]
    pub verify: Verify,
    #[serde(default)]
    pub timeouts: Timeouts,
    /// Where the kind nodes pull images from: mirrors per registry, and a local registry.
    #[serde(default)]
    pub registry: Registry,
    /// A lab bundle (`ocm-lab bundle save`) to bring the lab up from, as `up --bundle` does: its images
    /// are loaded into Docker and into every kind node before the charts, so no node pulls anything. A
    /// relative path is read from the topology file's folder.
    #[schemars(with = "Option<String>")]
    pub bundle: Option<Spanned<String>>,
}

/// Registry settings for every kind cluster of the lab (written into each node's containerd config).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Registry {
    /// Registry host → mirror URL, for example `quay.io: http://mirror.classroom:5000`. The nodes pull
    /// that registry's images from the mirror first and fall back to the registry itself.
    #[serde(default, deserialize_with = "spanned_map")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub mirrors: SpannedMap,
    /// Run a local registry container (`registry:3`, as kind's local-registry guide does) on the kind
    /// network; images pushed to `localhost:5001/…` on this machine are pulled by the nodes from it.
    #[serde(default)]
    pub local: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Versions {
    /// The kindest/node image for every kind cluster (default: kind v0.32.0's).
    #[schemars(with = "Option<String>")]
    pub kind_node_image: Option<Spanned<String>>,
    /// OCM release: the `cluster-manager` and `klusterlet` charts.
    #[schemars(with = "Option<String>")]
    pub ocm: Option<Spanned<String>>,
}

/// A cluster someone already runs, reached through a kubeconfig context instead of being created by kind.
/// The lab never deletes it: `down` removes only what the lab installed and applied there.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Existing {
    /// Path to the kubeconfig file (`~` is expanded). Default: as kubectl, the global `--kubeconfig` flag,
    /// else `$KUBECONFIG` (all of its paths, merged), else `~/.kube/config`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub kubeconfig: Option<Spanned<String>>,
    /// Context in that kubeconfig. May be left out by one existing cluster of the lab, which then takes the
    /// global `--context` flag (required then: the kubeconfig's current-context is never used, so that a
    /// `kubectl config use-context` cannot silently point the lab at another cluster).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub context: Option<Spanned<String>>,
    /// Use an Open Cluster Management install that is already on this cluster instead of refusing it
    /// (default false: `up` refuses a cluster that runs OCM the lab did not install, naming what it found).
    /// With `adopt: true` the lab installs no OCM chart there and changes nothing it does not own: on a
    /// hub, the ClusterManager `cluster-manager` stays as it is (it must already have the hub gates the
    /// topology asks for, or `up` stops and says which are missing); on a spoke, the Klusterlet and its
    /// bootstrap Secret stay as they are (the spoke's klusterlet must already be registered with the lab's
    /// hub as a ManagedCluster of the spoke's name; the lab still accepts it on a hub it installed). The
    /// lab's own objects (sets, bindings, properties, addons, service accounts) are applied as on any
    /// cluster and carry the lab's label, and `down` removes only those, the Helm releases labelled as
    /// the lab's, and the namespaces the lab created.
    #[serde(default)]
    pub adopt: bool,
    /// The API server URL other clusters' agents reach this cluster at (https). For a hub: the server of
    /// the bootstrap kubeconfig its spokes join with; for a spoke: its Klusterlet's `externalServerURLs`.
    /// Default: the server of this cluster's context in its kubeconfig (the address the lab itself uses),
    /// else the server in its `kube-public/cluster-info`. A kind cluster always uses
    /// `https://<name>-control-plane:6443` on the kind network.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub join_endpoint: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Hub {
    /// The hub cluster's name (kind cluster `<name>`, context `kind-<name>`).
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Hub registration feature gates. `DefaultClusterSet` is always on; the lab needs `ClusterProfile`.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub feature_gates: Vec<Spanned<String>>,
    /// Also join the hub to itself as ManagedCluster `local-cluster` (as OCM's local-up.sh does).
    #[serde(default)]
    pub self_join: bool,
    #[serde(default)]
    pub existing: Option<Existing>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Spoke {
    /// The spoke's name: kind cluster name and ManagedCluster name.
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Labels put on the ManagedCluster.
    #[serde(default, deserialize_with = "spanned_map")]
    #[schemars(schema_with = "scalar_map_schema")]
    pub labels: SpannedMap,
    /// ClusterProperty objects created on the spoke (name: value); they appear in ClusterProfile status.
    /// Values are strings; an unquoted number or boolean is taken as written (`gpus: 4` is "4", `1.50` stays
    /// "1.50", `true` is "true").
    #[serde(default, deserialize_with = "spanned_map")]
    #[schemars(schema_with = "scalar_map_schema")]
    pub properties: SpannedMap,
    /// Spoke registration feature gates (default: `ClusterProperty`).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub feature_gates: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub existing: Option<Existing>,
}

/// How a ManagedClusterSet selects its clusters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub enum Selector {
    /// `ExclusiveClusterSetLabel`: members carry `cluster.open-cluster-management.io/clusterset=<set>`.
    Exclusive,
    /// `LabelSelector`: members are the clusters whose labels match.
    LabelSelector(LabelSelector),
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterSet {
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// `exclusive` (default) or `{labelSelector: {matchLabels: {...}}}`.
    #[serde(default)]
    #[schemars(with = "Option<Selector>")]
    pub selector: Option<Spanned<Selector>>,
    /// Members of an `exclusive` set (spoke names, or `local-cluster`).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub clusters: Vec<Spanned<String>>,
    /// Namespaces on the hub that get a ManagedClusterSetBinding for this set (and so ClusterProfiles).
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub bind_to: Vec<Spanned<String>>,
}

/// An explicit ManagedClusterSetBinding. Its name must equal the set (the hub webhook enforces it).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Binding {
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    #[schemars(with = "String")]
    pub cluster_set: Spanned<String>,
    #[schemars(with = "String")]
    pub namespace: Spanned<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Addons {
    #[serde(rename = "cluster-proxy", default)]
    pub cluster_proxy: Option<ClusterProxy>,
    #[serde(rename = "managed-serviceaccount", default)]
    pub managed_serviceaccount: Option<ManagedServiceaccount>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterProxy {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Chart version (default 0.10.0; 0.11.0 supported).
    #[schemars(with = "Option<String>")]
    pub version: Option<Spanned<String>>,
    /// Namespace the chart is installed in on the hub (default `open-cluster-management-addon`).
    #[schemars(with = "Option<String>")]
    pub namespace: Option<Spanned<String>>,
    /// The set the addon is placed on. Its binding must exist in the addon's namespace.
    #[schemars(with = "String")]
    pub cluster_set: Spanned<String>,
    /// Fill `ClusterProfile.status.accessProviders` (the chart's ClusterProfile gate).
    #[serde(default = "yes")]
    pub access_provider: bool,
    /// Deploy the user server (`enableServiceProxy` + `userServer.enabled`: the chart gates it on the first).
    #[serde(default = "yes")]
    pub user_server: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ManagedServiceaccount {
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Chart version (default 0.10.0).
    #[schemars(with = "Option<String>")]
    pub version: Option<Spanned<String>>,
    #[schemars(with = "Option<String>")]
    pub namespace: Option<Spanned<String>>,
    /// The set whose clusters get the addon (explicit ManagedClusterAddOns; `agentInstallAll` is off).
    #[schemars(with = "String")]
    pub cluster_set: Spanned<String>,
    /// Copy synced tokens into ClusterProfile namespaces (`clusterProfileCredSyncer`).
    #[serde(default = "yes")]
    pub credential_sync: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServiceAccount {
    #[schemars(with = "String")]
    pub name: Spanned<String>,
    /// Spokes that get this ManagedServiceAccount (default: every spoke the addon reaches).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub clusters: Option<Vec<Spanned<String>>>,
    /// Label the MSA with `authentication.open-cluster-management.io/sync-to-clusterprofile: "true"`.
    #[serde(default = "yes")]
    pub sync_to_cluster_profile: bool,
    /// ClusterRole bound to the service account on each spoke (default `view`; `cluster-admin` only when asked).
    #[schemars(with = "Option<String>")]
    pub cluster_role: Option<Spanned<String>>,
}

/// A verification check (see docs/verification.md).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Check {
    Properties,
    AccessProviders,
    Reachable,
    Credentials,
    Conditions,
    /// A short-lived Pod on the hub reaches every spoke the way a ClusterProfile consumer does: provider
    /// file, `cp-creds`, its own ServiceAccount, the provider's in-hub address.
    Consumer,
}

impl Check {
    pub const ALL: [Check; 6] = [
        Check::Properties,
        Check::AccessProviders,
        Check::Reachable,
        Check::Credentials,
        Check::Conditions,
        Check::Consumer,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Check::Properties => "properties",
            Check::AccessProviders => "access-providers",
            Check::Reachable => "reachable",
            Check::Credentials => "credentials",
            Check::Conditions => "conditions",
            Check::Consumer => "consumer",
        }
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Verify {
    /// Namespaces whose ClusterProfiles are verified (default: every namespace a lab set is bound to).
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub namespaces: Option<Vec<Spanned<String>>>,
    /// Checks to run (default: all that the lab's addons make possible).
    #[serde(default)]
    #[schemars(with = "Option<Vec<Check>>")]
    pub checks: Option<Vec<Spanned<Check>>>,
    /// How long verification may wait for the whole chain, e.g. `5m`.
    #[schemars(with = "Option<String>")]
    pub timeout: Option<Spanned<String>>,
    /// The image the `consumer` check runs on the hub: one whose entrypoint is `ocm-lab-consumer`
    /// (examples/consumer, built static), already in the hub's nodes. With it, `consumer` is a default check.
    #[schemars(with = "Option<String>")]
    pub consumer_image: Option<Spanned<String>>,
}

/// Deadlines for the waits of `up` (durations such as `90s`, `5m`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Timeouts {
    /// Creating one kind cluster (default 10m).
    #[schemars(with = "Option<String>")]
    pub cluster_create: Option<Spanned<String>>,
    /// A chart's rollout, including its CRDs becoming Established (default 5m).
    #[schemars(with = "Option<String>")]
    pub rollout: Option<Spanned<String>>,
    /// A spoke joining: CSR, acceptance, `ManagedClusterJoined` (default 5m).
    #[schemars(with = "Option<String>")]
    pub join: Option<Spanned<String>>,
    /// Any other wait (default 3m).
    #[schemars(with = "Option<String>")]
    pub default: Option<Spanned<String>>,
}

/// The schema of a [`SpannedMap`]: names to scalars. Numbers and booleans are accepted because they are
/// taken as written (`gpus: 4` is the string "4"), so an editor should not flag them.
fn scalar_map_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {"type": ["string", "number", "boolean"]}
    })
}

/// A YAML mapping of strings as spanned `(key, value)` pairs, in file order.
pub type SpannedMap = Vec<(Spanned<String>, Spanned<String>)>;

/// Reads a YAML mapping into spanned `(key, value)` pairs, in file order, so that both a bad key and a bad
/// value can be pointed at.
fn spanned_map<'de, D>(de: D) -> Result<SpannedMap, D::Error>
where
    D: Deserializer<'de>,
{
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = SpannedMap;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a mapping of names to string values")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(k) = map.next_key::<Spanned<String>>()? {
                let v = map.next_value::<Spanned<String>>()?;
                out.push((k, v));
            }
            Ok(out)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }
    }
    de.deserialize_map(V)
}
