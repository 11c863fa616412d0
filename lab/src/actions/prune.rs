//! `lab.prune`: makes `up` converge on topology edits. Everything the lab applies carries its ownership
//! label (`ocm-lab.open-cluster-management.io/lab=<lab>`); this step deletes, in the lab's kinds, the
//! labelled objects the plan no longer renders (a ClusterProperty, a set, a binding, a
//! ManagedServiceAccount the topology dropped). The planner lists what it renders in the step's `keep`
//! input. Fields dropped from an object that stays are server-side apply's job (same field manager).
//!
//! Never deleted: ManagedClusters (deleting one unregisters the cluster), objects with ownerReferences
//! (their owner's controller manages them), Helm's release records, the verification probe, and Namespaces on `existing:`
//! clusters (deleting a namespace takes everything in it, whoever made it).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::{ClusterApi, ObjectRef};
use crate::topology::{Cluster, LAB_LABEL, Provider};
use crate::verify::PROBE_PROPERTY;
use crate::workflow::plan::keep_id;

/// The kinds the lab's templates and actions apply with its label (apiVersion, kind). ManagedCluster is
/// missing on purpose.
pub const LAB_KINDS: &[(&str, &str)] = &[
    ("about.k8s.io/v1alpha1", "ClusterProperty"),
    (
        "authentication.open-cluster-management.io/v1beta1",
        "ManagedServiceAccount",
    ),
    (
        "addon.open-cluster-management.io/v1alpha1",
        "ManagedClusterAddOn",
    ),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    (
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
    ),
    ("cluster.open-cluster-management.io/v1beta1", "Placement"),
    (
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSet",
    ),
    ("v1", "Namespace"),
    // `local-registry-hosting` in kube-public (spec.registry.local).
    ("v1", "ConfigMap"),
];

/// Helm's own release records carry the labels given with `--labels` too; with `HELM_DRIVER=configmap`
/// they are ConfigMaps with the lab's label. They are Helm's to remove (`helm uninstall`), never prune's.
fn is_helm_record(o: &Value) -> bool {
    o["metadata"]["labels"]["owner"] == "helm"
}

fn has_owner(o: &Value) -> bool {
    o["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
}

/// What pruning one kind on one cluster did: objects removed, or a warning.
type KindOutcome = Result<(Vec<String>, Option<String>), ActionError>;

/// Prunes one kind on one cluster.
async fn prune_kind(
    ctx: &StepCtx<'_>,
    cluster: &Cluster,
    api: &dyn ClusterApi,
    (api_version, kind): (&str, &str),
    keep: &BTreeSet<&str>,
) -> KindOutcome {
    let mut removed = Vec::new();
    if !api.served(api_version, kind).await? {
        return Ok((removed, None));
    }
    let selector = format!("{LAB_LABEL}={}", ctx.run.lab.name);
    let objects = match api.list(api_version, kind, None, Some(&selector)).await {
        Ok(o) => o,
        // The lab may not list everything on a cluster someone else runs: what it cannot see it
        // cannot have applied there either, or it will show up once the lab may list it.
        Err(e) if e.status_code() == Some(403) => {
            let w = format!("warning: cannot list {kind} on {}: {e}", cluster.name);
            ctx.progress(w.clone());
            tracing::warn!("{w}");
            return Ok((removed, Some(w)));
        }
        Err(e) => return Err(e.into()),
    };
    for o in objects {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let ns = o["metadata"]["namespace"].as_str();
        if has_owner(&o)
            || is_helm_record(&o)
            || (kind == "ClusterProperty" && name == PROBE_PROPERTY)
            || keep.contains(keep_id(kind, ns.unwrap_or_default(), name).as_str())
        {
            continue;
        }
        let r = ObjectRef::new(api_version, kind, ns, name);
        ctx.progress(format!("removing {r} from {}", cluster.name));
        if api
            .delete(&r)
            .await
            .map_err(|e| ActionError::from(e).context(format_args!("failed to delete {r}")))?
        {
            removed.push(format!("{}: {r}", cluster.name));
        }
    }
    Ok((removed, None))
}

/// Prunes every lab kind on one cluster, the kinds at once.
async fn prune_cluster(
    ctx: &StepCtx<'_>,
    cluster: &Cluster,
) -> Result<Vec<KindOutcome>, ActionError> {
    let keep: BTreeSet<&str> = ctx
        .step
        .with
        .get("keep")
        .and_then(|k| k.get(&cluster.name))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let existing = matches!(cluster.provider, Provider::Existing { .. });
    let api = ctx.run.api(&cluster.name).await?;
    let kinds = LAB_KINDS
        .iter()
        .filter(|(_, kind)| !(*kind == "Namespace" && existing))
        .map(|k| prune_kind(ctx, cluster, api.as_ref(), *k, &keep));
    Ok(futures::future::join_all(kinds).await)
}

pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    let clusters = ctx.run.lab.clusters().map(|c| prune_cluster(ctx, c));
    let mut removed = Vec::new();
    let mut warnings = Vec::new();
    for outcome in futures::future::try_join_all(clusters)
        .await?
        .into_iter()
        .flatten()
    {
        let (r, w) = outcome?;
        removed.extend(r);
        warnings.extend(w);
    }
    removed.sort();
    if !removed.is_empty() {
        ctx.note(super::reset::removed_summary(&removed));
    }
    Ok((
        !removed.is_empty(),
        outputs([("removed", json!(removed)), ("warnings", json!(warnings))]),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helm_release_records_are_recognised_whatever_the_driver_labelled() {
        let record = json!({"kind": "ConfigMap", "metadata": {"name": "sh.helm.release.v1.cluster-manager.v1",
            "labels": {"owner": "helm", "name": "cluster-manager", LAB_LABEL: "lab"}}});
        assert!(is_helm_record(&record));
        let hosting = json!({"kind": "ConfigMap", "metadata": {"name": "local-registry-hosting",
            "labels": {LAB_LABEL: "lab"}}});
        assert!(!is_helm_record(&hosting));
    }
}
