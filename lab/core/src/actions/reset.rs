//! `lab.reset`: between workshop sessions, remove what participants added in the lab's kinds and
//! namespaces. Restoring what they changed or deleted is the `up` workflow's job, which `ocm-lab reset`
//! runs right after (every step of `up` is idempotent, so that re-applies only what differs).
//!
//! Removed: bindings of the lab's sets (anywhere) and Placements in the lab's namespaces, ManagedClusterSets,
//! ManagedServiceAccounts and ManifestWorks in the cluster namespaces, and spoke ClusterProperties that
//! the topology does not declare. Kept: everything else, including every object OCM and the addons
//! manage themselves (their ManifestWorks carry `open-cluster-management.io/addon-name` or an owner),
//! namespaces, clusters and registrations.
//!
//! On `existing:` clusters (someone else runs them) only objects that carry the lab's ownership label are
//! removed: what someone made there without the lab is theirs, whatever its kind.

use serde::de::DeserializeOwned;
use serde_json::json;

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::kinds::{
    ClusterProperty, Kind, ManagedClusterSet, ManagedClusterSetBinding, ManagedServiceAccount,
    ManifestWork, Placement, has_owner, label, name_of,
};
use crate::backend::{Api, ClusterApi};
use crate::topology::{LAB_LABEL, Provider};
use crate::verify::PROBE_PROPERTY;

/// Sets the hub maintains itself (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/managedclusterset/`).
const HUB_SETS: &[&str] = &["default", "global"];

fn name<K: Kind>(o: &K) -> &str {
    name_of(o)
}

fn managed_by_ocm<K: Kind>(o: &K) -> bool {
    let meta = o.meta();
    label(meta, "open-cluster-management.io/addon-name").is_some() || has_owner(meta)
}

/// One cluster to prune: its API, and on an `existing:` cluster the label selector an object must match
/// to be deleted at all.
struct Target {
    api: std::sync::Arc<dyn ClusterApi>,
    only: Option<String>,
    /// The cluster's name, in what the step says it removed.
    cluster: String,
}

async fn target(
    ctx: &StepCtx<'_>,
    cluster: &crate::topology::Cluster,
) -> Result<Target, ActionError> {
    Ok(Target {
        api: ctx.run.api(&cluster.name).await?,
        only: matches!(cluster.provider, Provider::Existing { .. })
            .then(|| format!("{LAB_LABEL}={}", ctx.run.lab.name)),
        cluster: cluster.name.clone(),
    })
}

/// Deletes every listed object for which `keep` is false. Kinds the cluster does not serve hold nothing.
async fn prune<K: Kind + DeserializeOwned + 'static>(
    ctx: &StepCtx<'_>,
    t: &Target,
    namespaces: &[Option<String>],
    keep: impl Fn(Option<&str>, &K) -> bool,
) -> Result<Vec<String>, ActionError> {
    let api = t.api.as_ref();
    let mut removed = Vec::new();
    if !Api::<K>::all(api).served().await? {
        return Ok(removed);
    }
    for ns in namespaces {
        let listed = Api::<K>::within(api, ns.as_deref());
        for o in listed.list(t.only.as_deref()).await? {
            // Listing all namespaces (`None`) gives objects of many: each is deleted where it is.
            let own_ns = o.meta().namespace.clone().or_else(|| ns.clone());
            if keep(own_ns.as_deref(), &o) {
                continue;
            }
            let here = Api::<K>::within(api, own_ns.as_deref());
            let r = here.object_ref(name(&o));
            ctx.progress(format!("removing {r}"));
            if here.delete(&r.name).await? {
                removed.push(format!("{}: {r}", t.cluster));
            }
        }
    }
    Ok(removed)
}

pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let hub = target(ctx, &lab.hub.cluster).await?;
    let lab_namespaces: Vec<Option<String>> = lab
        .namespaces
        .iter()
        .cloned()
        .chain(lab.addons.cluster_proxy.iter().map(|p| p.namespace.clone()))
        .chain(
            lab.addons
                .managed_serviceaccount
                .iter()
                .map(|m| m.namespace.clone()),
        )
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(Some)
        .collect();
    let cluster_namespaces: Vec<Option<String>> = lab
        .managed_clusters
        .iter()
        .map(|m| Some(m.name.clone()))
        .collect();
    let mut removed = Vec::new();

    removed.extend(
        prune(
            ctx,
            &hub,
            // Bindings of the lab's sets in any namespace (a participant's binding in a namespace of
            // their own makes ClusterProfiles there too); bindings of other sets are not the lab's.
            &[None],
            |ns, o: &ManagedClusterSetBinding| {
                let set = Some(o.spec.cluster_set.as_str())
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| name(o));
                !lab.cluster_sets.iter().any(|s| s.name == set)
                    || lab
                        .bindings
                        .iter()
                        .any(|b| Some(b.namespace.as_str()) == ns && b.cluster_set == name(o))
            },
        )
        .await?,
    );
    removed.extend(
        prune(ctx, &hub, &lab_namespaces, |ns, o: &Placement| {
            managed_by_ocm(o)
                || lab
                    .addons
                    .cluster_proxy
                    .as_ref()
                    .is_some_and(|p| Some(p.namespace.as_str()) == ns && p.placement == name(o))
        })
        .await?,
    );
    removed.extend(
        prune(ctx, &hub, &[None], |_, o: &ManagedClusterSet| {
            HUB_SETS.contains(&name(o)) || lab.cluster_sets.iter().any(|s| s.name == name(o))
        })
        .await?,
    );
    removed.extend(
        prune(
            ctx,
            &hub,
            &cluster_namespaces,
            |ns, o: &ManagedServiceAccount| {
                lab.service_accounts
                    .iter()
                    .any(|a| Some(a.cluster.as_str()) == ns && a.name == name(o))
            },
        )
        .await?,
    );
    removed.extend(
        prune(ctx, &hub, &cluster_namespaces, |_, o: &ManifestWork| {
            managed_by_ocm(o)
        })
        .await?,
    );
    for s in &lab.spokes {
        let spoke = target(ctx, &s.cluster).await?;
        removed.extend(
            prune(ctx, &spoke, &[None], |_, o: &ClusterProperty| {
                name(o) == PROBE_PROPERTY || s.properties.iter().any(|p| p.name == name(o))
            })
            .await?,
        );
    }
    if !removed.is_empty() {
        ctx.note(removed_summary(&removed));
    }
    Ok((!removed.is_empty(), outputs([("removed", json!(removed))])))
}

/// `removed 2 objects: a, b`: what a prune or reset step removed, for its line in the output.
pub(crate) fn removed_summary(removed: &[String]) -> String {
    format!(
        "removed {}: {}",
        crate::text::count(removed.len(), "object", "objects"),
        removed.join(", ")
    )
}
