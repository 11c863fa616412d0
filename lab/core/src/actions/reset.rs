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

use serde_json::{Value, json};

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::{ClusterApi, ObjectRef};
use crate::topology::{LAB_LABEL, Provider};
use crate::verify::PROBE_PROPERTY;

/// Sets the hub maintains itself (OCM-FACTS §2.2).
const HUB_SETS: &[&str] = &["default", "global"];

fn name(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

fn managed_by_ocm(o: &Value) -> bool {
    let labels = &o["metadata"]["labels"];
    labels
        .get("open-cluster-management.io/addon-name")
        .is_some()
        || o["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|r| !r.is_empty())
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
async fn prune(
    ctx: &StepCtx<'_>,
    t: &Target,
    (api_version, kind): (&str, &str),
    namespaces: &[Option<String>],
    keep: impl Fn(Option<&str>, &Value) -> bool,
) -> Result<Vec<String>, ActionError> {
    let api = t.api.as_ref();
    let mut removed = Vec::new();
    if !api.served(api_version, kind).await? {
        return Ok(removed);
    }
    for ns in namespaces {
        for o in api
            .list(api_version, kind, ns.as_deref(), t.only.as_deref())
            .await?
        {
            // Listing all namespaces (`None`) gives objects of many: each is deleted where it is.
            let own_ns = o["metadata"]["namespace"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| ns.clone());
            if keep(own_ns.as_deref(), &o) {
                continue;
            }
            let r = ObjectRef::new(api_version, kind, own_ns.as_deref(), name(&o));
            ctx.progress(format!("removing {r}"));
            if api.delete(&r).await? {
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
            (
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSetBinding",
            ),
            // Bindings of the lab's sets in any namespace (a participant's binding in a namespace of
            // their own makes ClusterProfiles there too); bindings of other sets are not the lab's.
            &[None],
            |ns, o| {
                let set = o["spec"]["clusterSet"].as_str().unwrap_or_else(|| name(o));
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
        prune(
            ctx,
            &hub,
            ("cluster.open-cluster-management.io/v1beta1", "Placement"),
            &lab_namespaces,
            |ns, o| {
                managed_by_ocm(o)
                    || lab
                        .addons
                        .cluster_proxy
                        .as_ref()
                        .is_some_and(|p| Some(p.namespace.as_str()) == ns && p.placement == name(o))
            },
        )
        .await?,
    );
    removed.extend(
        prune(
            ctx,
            &hub,
            (
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
            ),
            &[None],
            |_, o| {
                HUB_SETS.contains(&name(o)) || lab.cluster_sets.iter().any(|s| s.name == name(o))
            },
        )
        .await?,
    );
    removed.extend(
        prune(
            ctx,
            &hub,
            (
                "authentication.open-cluster-management.io/v1beta1",
                "ManagedServiceAccount",
            ),
            &cluster_namespaces,
            |ns, o| {
                lab.service_accounts
                    .iter()
                    .any(|a| Some(a.cluster.as_str()) == ns && a.name == name(o))
            },
        )
        .await?,
    );
    removed.extend(
        prune(
            ctx,
            &hub,
            ("work.open-cluster-management.io/v1", "ManifestWork"),
            &cluster_namespaces,
            |_, o| managed_by_ocm(o),
        )
        .await?,
    );
    for s in &lab.spokes {
        let spoke = target(ctx, &s.cluster).await?;
        removed.extend(
            prune(
                ctx,
                &spoke,
                ("about.k8s.io/v1alpha1", "ClusterProperty"),
                &[None],
                |_, o| name(o) == PROBE_PROPERTY || s.properties.iter().any(|p| p.name == name(o)),
            )
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
