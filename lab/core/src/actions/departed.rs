//! Converging on removal: what the lab made for a spoke that left the topology goes too.
//!
//! `lab.departed` (`up`) observes what the lab owns, never what a journal says it did: the ManagedClusters
//! on the hub that carry the lab's label, and the kind clusters the ownership record holds (whose node
//! containers still carry the IDs it recorded), minus what the topology declares. It removes them in
//! the order OCM needs:
//!
//! 1. the spoke's kind cluster, which takes its klusterlet and addon agents with it, so that no agent
//!    registers the cluster again once its ManagedCluster is gone;
//! 2. the ManagedCluster, whose deletion the hub finishes: with the `ResourceCleanup` gate its gc
//!    controller deletes the ManagedClusterAddOns and ManifestWorks in the cluster namespace, then the
//!    cluster's RBAC, and only then removes its finalizer (ocm `pkg/registration/hub/gc/controller.go`,
//!    `gc_resources.go`, `gc_cluster_rbac.go`, v1.3.1); the lab waits until it is gone;
//! 3. ManagedClusterAddOns still in the cluster namespace (a hub without `ResourceCleanup` leaves them).
//!
//! The hub's ClusterProfile controller deletes the cluster's ClusterProfiles on the ManagedCluster's
//! delete event. The cluster namespace on the hub stays, as real OCM leaves it.
//!
//! A departed ManagedCluster whose agent still reports Available and whose cluster is not one the lab
//! just deleted is registered from a cluster the lab cannot reach any more (an `existing:` spoke taken
//! out of the topology): deleting it would only make that agent register it again, so the step fails
//! naming what to do.
//!
//! `cluster.delete-departed` (`down`) deletes every kind cluster the ownership record proves the lab's
//! that the topology it was given does not declare, so `down` with an edited topology removes them too.

use std::collections::BTreeSet;

use serde_json::json;

use super::cluster::delete_owned;
use super::state_error;
use super::{ActionError, ActionResult, StepCtx, outputs};
use crate::backend::kinds::{HasConditions, ManagedCluster, ManagedClusterAddOn, name_of};
use crate::backend::{Api, Condition};
use crate::topology::LAB_LABEL;

/// Deletes every kind cluster the ownership record holds that the topology does not declare, each only
/// when the record proves it the lab's (see `cluster.delete`); returns the ones deleted.
async fn delete_departed(ctx: &StepCtx<'_>) -> Result<Vec<String>, ActionError> {
    let owned = ctx.run.state.owned_lenient().map_err(state_error)?;
    let mut deleted = Vec::new();
    for name in owned.departed(|n| ctx.run.lab.cluster(n).is_some()) {
        ctx.progress(format!(
            "{name} left the topology: deleting its kind cluster"
        ));
        let (changed, _) = delete_owned(ctx, &name).await?;
        if changed {
            ctx.note(format!("deleted kind cluster {name}: it left the topology"));
            deleted.push(name);
        }
    }
    Ok(deleted)
}

/// `cluster.delete-departed` (`down`): the kind clusters the ownership record proves the lab's that the
/// given topology no longer declares.
pub async fn delete_departed_clusters(ctx: &StepCtx<'_>) -> ActionResult {
    let deleted = delete_departed(ctx).await?;
    Ok((!deleted.is_empty(), outputs([("deleted", json!(deleted))])))
}

/// `lab.departed` (`up`): deregisters the spokes that left the topology and deletes the kind clusters
/// the lab made for them (see the module documentation for the order).
pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let hub = ctx.run.api(&lab.hub.cluster.name).await?;
    let declared: BTreeSet<&str> = lab
        .managed_clusters
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let managed_clusters = Api::<ManagedCluster>::all(hub.as_ref());
    let registered = if managed_clusters.served().await? {
        let selector = format!("{LAB_LABEL}={}", lab.name);
        managed_clusters.list(Some(&selector)).await?
    } else {
        Vec::new()
    };
    let departed: Vec<&ManagedCluster> = registered
        .iter()
        .filter(|o| !declared.contains(name_of(*o)))
        .collect();
    // 1. The kind clusters first: their klusterlets and addon agents go with them.
    let deleted = delete_departed(ctx).await?;
    // 2. Then the registrations, unless an agent the lab cannot reach still keeps one alive.
    let mut deregistered = Vec::new();
    let mut unreachable = Vec::new();
    for mc in departed {
        let name = name_of(mc);
        let alive = mc.condition_true("ManagedClusterConditionAvailable");
        if alive && !deleted.iter().any(|d| d == name) {
            unreachable.push(name.to_owned());
            continue;
        }
        ctx.progress(format!(
            "{name} left the topology: deregistering its ManagedCluster"
        ));
        managed_clusters.delete(name).await?;
        let gone = Condition::gone("it is gone (the hub's cleanup finished)");
        managed_clusters
            .wait(name, &gone, ctx.timeout())
            .await
            .map_err(|e| super::kube::wait_error(e, None))?;
        // 3. What a hub without `ResourceCleanup` leaves in the cluster namespace.
        let addons = Api::<ManagedClusterAddOn>::namespaced(hub.as_ref(), name);
        if addons.served().await? {
            for addon in addons.list_metadata(None).await? {
                let addon_name = addon.metadata.name.unwrap_or_default();
                addons.delete(&addon_name).await?;
            }
        }
        ctx.note(format!(
            "deregistered {name} (ManagedCluster, its addons and ClusterProfiles): it left the topology"
        ));
        deregistered.push(name.to_owned());
    }
    if !unreachable.is_empty() {
        let list = unreachable.join(", ");
        return Err(ActionError::permanent(format!(
            "{list} left the topology, but the klusterlet registering it still runs on a cluster this lab did not create or can no longer reach: deleting the ManagedCluster would only make it register again"
        ))
        .with_help(format!(
            "put {list} back into the topology and run `ocm-lab down` with it (that uninstalls what the lab installed there), or uninstall the klusterlet on that cluster (`helm uninstall klusterlet -n open-cluster-management`) and run `ocm-lab up` again; if an earlier `up` already deleted its kind cluster, run `ocm-lab up` again once the hub marks it unavailable (its lease grace period, a few minutes)"
        )));
    }
    let changed = !deleted.is_empty() || !deregistered.is_empty();
    Ok((
        changed,
        outputs([
            ("deleted", json!(deleted)),
            ("deregistered", json!(deregistered)),
        ]),
    ))
}
