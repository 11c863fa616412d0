//! Chart installs: which chart, which pinned version, which values, and which of our patches apply.
//!
//! Values are computed here from the resolved lab and the version catalog, never written by hand in a
//! topology, because the keys that matter differ per chart version (open-cluster-management-io/cluster-proxy
//! v0.10.0 `charts/cluster-proxy/`; open-cluster-management-io/managed-serviceaccount v0.10.0
//! `charts/managed-serviceaccount/`; open-cluster-management-io/cluster-proxy PR #274).

use serde::Serialize;
use serde_json::{Value, json};

use crate::patch::PatchSet;
use crate::topology::catalog::{self, Chart};
use crate::topology::{Lab, MSA_AGENT_NAMESPACE, Provider};

/// One chart release the lab installs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChartPlan {
    /// Lab cluster it is installed on.
    pub cluster: String,
    pub release: String,
    pub namespace: String,
    pub repo: String,
    pub chart: Chart,
    pub version: String,
    /// Values passed to `helm template` (without the run-time values below).
    pub values: Value,
    /// Values only known at run time (and secret), filled by the action.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtime_values: Vec<RuntimeValue>,
    /// Our chart patches that apply to this chart version.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<PatchRef>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RuntimeValue {
    pub key: &'static str,
    pub from: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PatchRef {
    pub name: String,
    pub file: String,
    pub reason: String,
}

/// Why a chart cannot be planned.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(
        "unknown chart `{0}`; charts: cluster-manager, klusterlet, cluster-proxy, managed-serviceaccount"
    )]
    Unknown(String),
    #[error("chart `{0}` is not enabled in this topology")]
    NotEnabled(Chart),
    #[error("`{0}` is not a cluster of this lab")]
    NoCluster(String),
}

pub fn parse_chart(name: &str) -> Result<Chart, ChartError> {
    [
        Chart::ClusterManager,
        Chart::Klusterlet,
        Chart::ClusterProxy,
        Chart::ManagedServiceaccount,
    ]
    .into_iter()
    .find(|c| c.name() == name)
    .ok_or_else(|| ChartError::Unknown(name.to_owned()))
}

/// Plans one chart release. `managed_cluster` names the ManagedCluster for the klusterlet.
pub fn plan_chart(
    lab: &Lab,
    chart: Chart,
    cluster: &str,
    namespace: &str,
    managed_cluster: Option<&str>,
    patches: &PatchSet,
) -> Result<ChartPlan, ChartError> {
    let target = lab
        .cluster(cluster)
        .ok_or_else(|| ChartError::NoCluster(cluster.to_owned()))?;
    let mut runtime_values = Vec::new();
    let (version, values) = match chart {
        Chart::ClusterManager => {
            let gates: Vec<Value> = lab
                .hub
                .feature_gates
                .iter()
                .map(|g| json!({"feature": g, "mode": "Enable"}))
                .collect();
            let values = json!({
                // The chart creates the bootstrap identity only when asked (open-cluster-management-io/ocm
                // v1.3.1 `deploy/*/chart/*/values.yaml`); the join step mints a TokenRequest for it.
                "createBootstrapSA": true,
                "images": {"tag": lab.versions.ocm.image_tag},
                // The list replaces the chart's default, so DefaultClusterSet is listed explicitly.
                "clusterManager": {"registrationConfiguration": {"featureGates": gates}},
            });
            (lab.versions.ocm.version.to_owned(), values)
        }
        Chart::Klusterlet => klusterlet_values(lab, target, managed_cluster, &mut runtime_values),
        Chart::ClusterProxy => {
            let cp = lab
                .addons
                .cluster_proxy
                .as_ref()
                .ok_or(ChartError::NotEnabled(chart))?;
            let mut values = json!({
                // The user server is rendered only with enableServiceProxy, and it needs the serving cert
                // that userServer.enabled makes the controller create (open-cluster-management-io/cluster-proxy
                // v0.10.0 `charts/cluster-proxy/templates/user-deployment.yaml`).
                "enableServiceProxy": cp.user_server,
                "userServer": {"enabled": cp.user_server},
                // Our own Placement on the lab's set, so the chart creates no `global` binding
                // (open-cluster-management-io/cluster-proxy v0.10.0
                // `charts/cluster-proxy/templates/clustersetbinding.yaml`).
                "installByPlacement": {"placementName": cp.placement, "placementNamespace": cp.namespace},
            });
            set_path(
                &mut values,
                cp.release.access_provider_gate_key,
                json!(cp.access_provider),
            );
            (cp.release.version.to_owned(), values)
        }
        Chart::ManagedServiceaccount => {
            let m = lab
                .addons
                .managed_serviceaccount
                .as_ref()
                .ok_or(ChartError::NotEnabled(chart))?;
            // agentInstallAll would create a `global` binding and Placement
            // (open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/managed-serviceaccount/`); the
            // lab creates explicit ManagedClusterAddOns instead.
            let mut values = json!({"agentInstallAll": false});
            set_path(
                &mut values,
                m.release.cred_syncer_gate_key,
                json!(m.credential_sync),
            );
            (m.release.version.to_owned(), values)
        }
    };
    let semver = semver::Version::parse(&version).expect("catalog versions are semver");
    let patches = patches
        .for_chart(chart.name(), &semver)
        .into_iter()
        .map(|p| PatchRef {
            name: p.name.clone(),
            file: p.source.clone(),
            reason: p.reason.clone(),
        })
        .collect();
    Ok(ChartPlan {
        cluster: cluster.to_owned(),
        release: chart.name().to_owned(),
        namespace: namespace.to_owned(),
        repo: catalog::OCM_HELM_REPO.to_owned(),
        chart,
        version,
        values,
        runtime_values,
        patches,
    })
}

/// The klusterlet's version and values on `target`, registering as `managed_cluster` (the cluster's own name
/// when none); a hub endpoint only known at run time is added to `runtime_values`.
fn klusterlet_values(
    lab: &Lab,
    target: &crate::topology::Cluster,
    managed_cluster: Option<&str>,
    runtime_values: &mut Vec<RuntimeValue>,
) -> (String, Value) {
    let cluster = target.name.as_str();
    let name = managed_cluster.unwrap_or(cluster);
    let gates: Vec<String> = match lab.spoke(cluster) {
        Some(s) => s.feature_gates.clone(),
        // The self-joined hub gets the same gate so its properties sync too.
        None => vec!["ClusterProperty".to_owned()],
    };
    let gates: Vec<Value> = gates
        .iter()
        .map(|g| json!({"feature": g, "mode": "Enable"}))
        .collect();
    let mut klusterlet = json!({
        // The chart defaults to Singleton; clusteradm and the walkthrough use Default
        // (open-cluster-management-io/ocm v1.3.1 `deploy/*/chart/*/values.yaml`).
        "mode": "Default",
        "name": "klusterlet",
        "clusterName": name,
        "namespace": "open-cluster-management-agent",
        "registrationConfiguration": {"featureGates": gates},
    });
    match &target.internal_endpoint {
        Some(url) => klusterlet["externalServerURLs"] = json!([{"url": url}]),
        None => runtime_values.push(RuntimeValue {
            key: "klusterlet.externalServerURLs",
            from: format!("the server in `{}`'s kube-public/cluster-info", target.name),
        }),
    }
    // No `bootstrapHubKubeConfig`: the chart then renders no bootstrap Secret
    // (open-cluster-management-io/ocm v1.3.1
    // `deploy/klusterlet/chart/klusterlet/templates/bootstrap_kubeconfig_secret.yaml`) and `ocm.join`
    // writes it, once the hub is ready (see bootstrap-kubeconfig.template.yaml).
    let values = json!({"images": {"tag": lab.versions.ocm.image_tag}, "klusterlet": klusterlet});
    (lab.versions.ocm.version.to_owned(), values)
}

/// The Helm releases the lab installs on lab cluster `cluster`, as (release, namespace), in install
/// order. Names and namespaces as OCM's chart READMEs use them (`helm install cluster-manager
/// ocm/cluster-manager --namespace=open-cluster-management`, klusterlet likewise; the add-ons in their
/// topology namespace) and as `workflows/up.yaml` installs them.
pub fn releases_on(lab: &Lab, cluster: &str) -> Vec<(String, String)> {
    const OCM_NS: &str = "open-cluster-management";
    let mut out = Vec::new();
    if lab.hub.cluster.name == cluster {
        out.push((Chart::ClusterManager.name().to_owned(), OCM_NS.to_owned()));
    }
    if lab.managed_clusters.iter().any(|m| m.cluster == cluster) {
        out.push((Chart::Klusterlet.name().to_owned(), OCM_NS.to_owned()));
    }
    if lab.hub.cluster.name == cluster {
        if let Some(cp) = &lab.addons.cluster_proxy {
            out.push((Chart::ClusterProxy.name().to_owned(), cp.namespace.clone()));
        }
        if let Some(m) = &lab.addons.managed_serviceaccount {
            out.push((
                Chart::ManagedServiceaccount.name().to_owned(),
                m.namespace.clone(),
            ));
        }
    }
    out
}

/// Why a chart's values would not do what the lab needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{chart} {version}: {problem}")]
pub struct ValuesError {
    pub chart: Chart,
    pub version: String,
    pub problem: String,
}

/// Checks the values that turn ClusterProfile features on against what this chart version reads, before
/// anything is installed: Helm ignores a key a chart does not read, so a wrong key means a feature that is
/// silently off and a verification that times out much later (open-cluster-management-io/cluster-proxy
/// PR #274).
pub fn check_values(plan: &ChartPlan, lab: &Lab) -> Result<(), ValuesError> {
    let err = |problem: String| ValuesError {
        chart: plan.chart,
        version: plan.version.clone(),
        problem,
    };
    let values = &plan.values;
    let get = |path: &str| path.split('.').try_fold(values, |v, k| v.get(k));
    match plan.chart {
        Chart::ClusterProxy => {
            let Some(cp) = &lab.addons.cluster_proxy else {
                return Ok(());
            };
            let release = catalog::cluster_proxy(&plan.version).map_err(|known| {
                err(format!(
                    "not in the version catalog (known: {})",
                    known.join(", ")
                ))
            })?;
            for other in catalog::CLUSTER_PROXY_RELEASES
                .iter()
                .filter(|r| r.access_provider_gate_key != release.access_provider_gate_key)
            {
                if get(other.access_provider_gate_key).is_some() {
                    return Err(err(format!(
                        "`{}` is the {} key and this version ignores it; it reads `{}`",
                        other.access_provider_gate_key,
                        other.version,
                        release.access_provider_gate_key
                    )));
                }
            }
            if cp.access_provider && get(release.access_provider_gate_key) != Some(&json!(true)) {
                return Err(err(format!(
                    "`{}` must be true for the ClusterProfile access provider",
                    release.access_provider_gate_key
                )));
            }
            if cp.user_server
                && (get("enableServiceProxy") != Some(&json!(true))
                    || get("userServer.enabled") != Some(&json!(true)))
            {
                return Err(err(
                    "the user server needs both `enableServiceProxy` and `userServer.enabled`"
                        .into(),
                ));
            }
        }
        Chart::ManagedServiceaccount => {
            let Some(m) = &lab.addons.managed_serviceaccount else {
                return Ok(());
            };
            let release = catalog::msa(&plan.version).map_err(|known| {
                err(format!(
                    "not in the version catalog (known: {})",
                    known.join(", ")
                ))
            })?;
            if m.credential_sync && get(release.cred_syncer_gate_key) != Some(&json!(true)) {
                return Err(err(format!(
                    "`{}` must be true to sync credentials to ClusterProfiles",
                    release.cred_syncer_gate_key
                )));
            }
        }
        Chart::ClusterManager => {
            let gates = get("clusterManager.registrationConfiguration.featureGates")
                .and_then(Value::as_array);
            let on = |g: &str| {
                gates.is_some_and(|gs| {
                    gs.iter()
                        .any(|x| x["feature"] == g && x["mode"] == "Enable")
                })
            };
            for g in &lab.hub.feature_gates {
                if !on(g) {
                    return Err(err(format!(
                        "hub feature gate `{g}` is not enabled in clusterManager.registrationConfiguration.featureGates"
                    )));
                }
            }
        }
        Chart::Klusterlet => {}
    }
    Ok(())
}

/// The bootstrap kubeconfig a spoke's klusterlet gets, with the token left as a placeholder
/// (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/join/exec.go`: cluster `hub`, user `bootstrap`,
/// context `bootstrap`).
pub fn bootstrap_kubeconfig_template(lab: &Lab) -> String {
    let server = lab.hub.cluster.internal_endpoint.clone().unwrap_or_else(|| {
        format!(
            "<the server of context `{}` in the hub's kubeconfig, else the hub's kube-public/cluster-info>",
            lab.hub.cluster.context
        )
    });
    let existing = matches!(lab.hub.cluster.provider, Provider::Existing { .. });
    format!(
        "# Written into Secret open-cluster-management-agent/bootstrap-hub-kubeconfig (key `kubeconfig`) on each spoke.\n\
         # The token is minted at run time by a TokenRequest on open-cluster-management/agent-registration-bootstrap\n\
         # and is never written to disk.{}\n\
         apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n    certificate-authority-data: <CA from the hub's kube-public/cluster-info>\n\
         users:\n- name: bootstrap\n  user:\n    token: <TokenRequest token>\n\
         contexts:\n- name: bootstrap\n  context:\n    cluster: hub\n    user: bootstrap\n    namespace: default\ncurrent-context: bootstrap\n",
        match (existing, lab.hub.cluster.internal_endpoint.is_some()) {
            (true, true) =>
                "\n# The hub is an existing cluster: the server is its `existing.joinEndpoint`.",
            (true, false) =>
                "\n# The hub is an existing cluster: set `existing.joinEndpoint` when its spokes reach it at another address.",
            (false, _) => "",
        }
    )
}

/// Sets a dotted Helm value path (`featureGates.clusterProfile`) in a values tree.
pub fn set_path(values: &mut Value, path: &str, v: Value) {
    let mut cur = values;
    let mut parts = path.split('.').peekable();
    while let Some(p) = parts.next() {
        if !cur.is_object() {
            *cur = json!({});
        }
        let map = cur.as_object_mut().expect("just made an object");
        if parts.peek().is_none() {
            map.insert(p.to_owned(), v);
            return;
        }
        cur = map.entry(p.to_owned()).or_insert_with(|| json!({}));
    }
}

/// The namespace the managed-serviceaccount agent installs into on spokes (set explicitly on each
/// ManagedClusterAddOn so the RBAC the lab grants names the right ServiceAccount).
pub const MSA_INSTALL_NAMESPACE: &str = MSA_AGENT_NAMESPACE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_path_builds_nested_maps() {
        let mut v = json!({"featureGates": {"ephemeralIdentity": false}});
        set_path(&mut v, "featureGates.clusterProfileCredSyncer", json!(true));
        assert_eq!(
            v,
            json!({"featureGates": {"ephemeralIdentity": false, "clusterProfileCredSyncer": true}})
        );
    }
}
