//! `existing.adopt`: an `existing:` cluster that already runs Open Cluster Management the lab did not
//! install. Without `adopt: true` the preflight refuses it, before anything is written; with it, the lab
//! installs none of its charts over someone else's release of the same name and leaves their ClusterManager
//! or Klusterlet as it is (see the field's documentation in `topology::model::Existing`).

use serde::de::DeserializeOwned;

use super::ActionError;
use super::StepCtx;
use crate::backend::kinds::ocm::RegistrationConfiguration;
use crate::backend::kinds::{ClusterManager, Kind, Klusterlet, Namespace};
use crate::backend::{Api, ClusterApi};
use crate::topology::{Cluster, Lab, Provider, Role};

/// The Klusterlet's agent namespace (the chart's `klusterlet.namespace`, what the operator creates).
const AGENT_NS: &str = "open-cluster-management-agent";

/// What one existing cluster runs of OCM that this lab did not install.
#[derive(Debug, Clone)]
pub struct Found {
    pub cluster: String,
    /// `spec.hub.existing` or `spec.spokes[i].existing`.
    pub field: String,
    pub adopt: bool,
    /// Each thing found, e.g. `ClusterManager cluster-manager`.
    pub what: Vec<String>,
    /// With `adopt: true`: what the adopted install lacks that the lab needs (its feature gates).
    pub lacks: Vec<String>,
}

/// The topology field of a cluster's `existing:`.
fn existing_field(lab: &Lab, cluster: &Cluster) -> String {
    if cluster.role == Role::Hub {
        return "spec.hub.existing".to_owned();
    }
    let i = lab
        .spokes
        .iter()
        .position(|s| s.cluster.name == cluster.name)
        .unwrap_or_default();
    format!("spec.spokes[{i}].existing")
}

async fn get_if_served<K: Kind + DeserializeOwned + 'static>(
    api: &dyn ClusterApi,
    name: &str,
) -> Result<Option<K>, ActionError> {
    let objects = Api::<K>::all(api);
    if !objects.served().await? {
        return Ok(None);
    }
    Ok(objects.get(name).await?)
}

/// The feature gates an OCM operator CR enables (`spec.registrationConfiguration.featureGates`).
fn enabled_gates(config: Option<&RegistrationConfiguration>) -> Vec<String> {
    let on = config
        .into_iter()
        .flat_map(RegistrationConfiguration::enabled);
    on.map(str::to_owned).collect()
}

/// Looks at one existing cluster: the lab's Helm releases that exist there but are not labelled as this
/// lab's, a ClusterManager (hub) or Klusterlet and its agent namespace (a cluster that hosts a managed
/// cluster) that no release of this lab installed. Reads only.
pub async fn foreign_ocm(
    ctx: &StepCtx<'_>,
    cluster: &Cluster,
) -> Result<Option<Found>, ActionError> {
    let lab = &ctx.run.lab;
    let api = ctx.run.api(&cluster.name).await?;
    let helm = &ctx.run.backends.helm;
    let target = super::helm_target(ctx, &cluster.name)?;
    let mut what = Vec::new();
    let mut lacks = Vec::new();
    let mut ours = std::collections::BTreeSet::new();
    for (name, namespace) in crate::charts::releases_on(lab, &cluster.name) {
        if helm.release_of_lab(&target, &name, &namespace).await? {
            ours.insert(name);
        } else if helm.release(&target, &name, &namespace).await?.is_some() {
            what.push(format!(
                "Helm release {namespace}/{name} (not installed by lab `{}`)",
                lab.name
            ));
        }
    }
    let is_hub = lab.hub.cluster.name == cluster.name;
    if is_hub && !ours.contains("cluster-manager") {
        let cm = get_if_served::<ClusterManager>(api.as_ref(), "cluster-manager").await?;
        if let Some(cm) = cm {
            what.push("ClusterManager cluster-manager".to_owned());
            let on = enabled_gates(cm.spec.registration_configuration.as_ref());
            for g in lab.hub.feature_gates.iter().filter(|g| !on.contains(g)) {
                lacks.push(format!(
                    "hub feature gate `{g}` is not enabled on ClusterManager cluster-manager"
                ));
            }
        }
    }
    let hosts = lab
        .managed_clusters
        .iter()
        .any(|m| m.cluster == cluster.name);
    if hosts && !ours.contains("klusterlet") {
        if let Some(k) = get_if_served::<Klusterlet>(api.as_ref(), "klusterlet").await? {
            what.push("Klusterlet klusterlet".to_owned());
            let on = enabled_gates(k.spec.registration_configuration.as_ref());
            let wanted = lab
                .spokes
                .iter()
                .find(|s| s.cluster.name == cluster.name)
                .map(|s| s.feature_gates.clone())
                .unwrap_or_default();
            for g in wanted.iter().filter(|g| !on.contains(g)) {
                lacks.push(format!(
                    "spoke feature gate `{g}` is not enabled on Klusterlet klusterlet"
                ));
            }
        } else if Api::<Namespace>::all(api.as_ref())
            .get(AGENT_NS)
            .await?
            .is_some()
        {
            what.push(format!("namespace {AGENT_NS}"));
        }
    }
    if what.is_empty() {
        return Ok(None);
    }
    Ok(Some(Found {
        cluster: cluster.name.clone(),
        field: existing_field(lab, cluster),
        adopt: cluster.adopt,
        what,
        lacks,
    }))
}

/// The preflight's check of every existing cluster: refuses (permanently, before anything is written) a
/// cluster that runs OCM the lab did not install unless its `existing:` says `adopt: true`, and an adopted
/// install that lacks a feature gate the topology needs (the lab does not change what it does not own).
pub async fn check(ctx: &StepCtx<'_>) -> Result<Vec<Found>, ActionError> {
    let lab = &ctx.run.lab;
    let existing: Vec<&Cluster> = lab
        .clusters()
        .filter(|c| matches!(c.provider, Provider::Existing { .. }))
        .collect();
    let found: Vec<Found> =
        futures::future::try_join_all(existing.iter().map(|c| foreign_ocm(ctx, c)))
            .await?
            .into_iter()
            .flatten()
            .collect();
    let refused: Vec<&Found> = found.iter().filter(|f| !f.adopt).collect();
    if !refused.is_empty() {
        let message = refused
            .iter()
            .map(|f| {
                format!(
                    "cluster `{}` already runs Open Cluster Management that this lab did not install: {}",
                    f.cluster,
                    f.what.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        let fields = refused
            .iter()
            .map(|f| format!("`{}`", f.field))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(ActionError::permanent(format!(
            "{message}; nothing was installed"
        ))
        .with_help(format!(
            "to use that install, set `adopt: true` in {fields}: the lab then installs no chart over a release it did not install and leaves the ClusterManager or Klusterlet as it is (they must already have the feature gates the topology asks for; an adopted spoke must already be registered with the lab's hub), applies only its own labelled objects, and `down` removes only what the lab created. Or point the topology at a cluster without OCM"
        )));
    }
    let lacking: Vec<String> = found
        .iter()
        .flat_map(|f| {
            f.lacks
                .iter()
                .map(move |l| format!("`{}` (adopted): {l}", f.cluster))
        })
        .collect();
    if !lacking.is_empty() {
        return Err(ActionError::permanent(format!(
            "the OCM install the lab adopts lacks what the topology needs: {}; nothing was installed",
            lacking.join("; ")
        ))
        .with_help("an adopted install is not changed by the lab: enable the gates on it yourself (`kubectl edit clustermanager cluster-manager` or `kubectl edit klusterlet klusterlet`), or drop them from the topology"));
    }
    for f in &found {
        ctx.progress(format!(
            "adopting the OCM already on `{}`: {}",
            f.cluster,
            f.what.join(", ")
        ));
    }
    Ok(found)
}

/// Whether the lab leaves release `release` in `namespace` on `cluster` alone: the cluster is adopted and
/// someone else installed a release of that name (the lab uses theirs).
pub async fn leave_release(
    ctx: &StepCtx<'_>,
    cluster: &str,
    release: &str,
    namespace: &str,
) -> Result<bool, ActionError> {
    let Some(c) = ctx.run.lab.cluster(cluster) else {
        return Ok(false);
    };
    if !c.adopt {
        return Ok(false);
    }
    let helm = &ctx.run.backends.helm;
    let target = super::helm_target(ctx, cluster)?;
    if helm.release_of_lab(&target, release, namespace).await? {
        return Ok(false);
    }
    if helm.release(&target, release, namespace).await?.is_some() {
        return Ok(true);
    }
    // No release of that name, but an operator CR someone else made (installed without Helm, or by a
    // release of another name): the lab installs no second operator over it.
    let api = ctx.run.api(cluster).await?;
    match release {
        "cluster-manager" => Ok(
            get_if_served::<ClusterManager>(api.as_ref(), "cluster-manager")
                .await?
                .is_some(),
        ),
        "klusterlet" => Ok(get_if_served::<Klusterlet>(api.as_ref(), "klusterlet")
            .await?
            .is_some()),
        _ => Ok(false),
    }
}
