//! `lab.prune`: makes `up` converge on topology edits. Everything the lab applies carries its ownership
//! label (`ocm-lab.open-cluster-management.io/lab=<lab>`); this step deletes, in the lab's kinds, the
//! labelled objects the plan no longer renders (a ClusterProperty, a set, a binding, a
//! ManagedServiceAccount the topology dropped). The planner lists what it renders in the step's `keep`
//! input. Fields dropped from an object that stays are server-side apply's job (same field manager).
//!
//! Never deleted: ManagedClusters (deleting one unregisters the cluster), objects with ownerReferences
//! (their owner's controller manages them), Helm's release records, the verification probe, and Namespaces on `existing:`
//! clusters (deleting a namespace takes everything in it, whoever made it).

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::json;

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::api::list_metadata_of;
use crate::backend::kinds::{
    Klusterlet, ManagedCluster, ManagedClusterAddOn, ManifestWork, Namespace, ObjectMeta,
    Placement, Secret, has_owner, label,
};
use crate::backend::{Api, ClusterApi, Condition, ObjectRef};
use crate::topology::{Cluster, LAB_LABEL, Provider};
use crate::verify::PROBE_PROPERTY;
use crate::workflow::plan::keep_id;

/// The kinds the lab's templates and actions apply with its label (apiVersion, kind): a table pruning
/// walks, whose entries a test checks against the kinds' types. ManagedCluster is missing on purpose.
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
    // `local-registry-hosting` in kube-public (spec.registry.local); the `consumer` check's provider file.
    ("v1", "ConfigMap"),
];

/// Kinds the lab labels on the hub only: what the `consumer` check creates for its run and removes after
/// it. A run killed midway leaves them behind, for `up` (and so `reset`) and `down` to remove.
pub const HUB_KINDS: &[(&str, &str)] = &[
    ("v1", "Pod"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
];

/// The kinds to prune on `cluster`: [`LAB_KINDS`], and on the hub [`HUB_KINDS`] too.
fn kinds_on<'a>(
    lab: &crate::topology::Lab,
    cluster: &Cluster,
) -> impl Iterator<Item = &'a (&'static str, &'static str)> + use<'a> {
    let hub = cluster.name == lab.hub.cluster.name;
    LAB_KINDS
        .iter()
        .chain(HUB_KINDS.iter().filter(move |_| hub))
}

/// Helm's own release records carry the labels given with `--labels` too; with `HELM_DRIVER=configmap`
/// they are ConfigMaps with the lab's label. They are Helm's to remove (`helm uninstall`), never prune's.
fn is_helm_record(meta: &ObjectMeta) -> bool {
    label(meta, "owner") == Some("helm")
}

/// What pruning one kind on one cluster did: objects removed, or a warning.
type KindOutcome = Result<(Vec<String>, Option<String>), ActionError>;

/// Deletes the lab-labelled objects of one kind on one cluster, except those with an owner, Helm's
/// release records and, given a `keep` list (`lab.prune`), the probe and what the plan renders. Without
/// one (`lab.remove-objects`, `down` on an existing cluster) every other labelled object goes.
async fn prune_kind(
    ctx: &StepCtx<'_>,
    cluster: &Cluster,
    api: &dyn ClusterApi,
    (api_version, kind): (&str, &str),
    keep: Option<&BTreeSet<&str>>,
) -> KindOutcome {
    let mut removed = Vec::new();
    if !api.served(api_version, kind).await? {
        return Ok((removed, None));
    }
    let selector = format!("{LAB_LABEL}={}", ctx.run.lab.name);
    let objects = match list_metadata_of(api, (api_version, kind), None, Some(&selector)).await {
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
        let name = o.name.as_deref().unwrap_or_default();
        let ns = o.namespace.as_deref();
        // With a keep list (prune), the probe and what the plan renders stay; without one (`down` on an
        // existing cluster), every labelled object goes.
        let kept = keep.is_some_and(|keep| {
            (kind == "ClusterProperty" && name == PROBE_PROPERTY)
                || keep.contains(keep_id(kind, ns.unwrap_or_default(), name).as_str())
        });
        if has_owner(&o) || is_helm_record(&o) || kept {
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

/// The inputs of `lab.prune`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PruneInputs {
    /// Filled by the planner: per lab cluster, the `keep_id` of every object the plan applies there.
    #[serde(default)]
    pub keep: BTreeMap<String, BTreeSet<String>>,
}

/// Prunes every lab kind on one cluster, the kinds at once.
async fn prune_cluster(
    ctx: &StepCtx<'_>,
    cluster: &Cluster,
) -> Result<Vec<KindOutcome>, ActionError> {
    let inputs: PruneInputs = ctx.inputs()?;
    let keep: BTreeSet<&str> = inputs
        .keep
        .get(&cluster.name)
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let existing = matches!(cluster.provider, Provider::Existing { .. });
    let api = ctx.run.api(&cluster.name).await?;
    let kinds = kinds_on(&ctx.run.lab, cluster)
        .filter(|(_, kind)| !(*kind == "Namespace" && existing))
        .map(|k| prune_kind(ctx, cluster, api.as_ref(), *k, Some(&keep)));
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

/// The existing cluster a `down` step is about, refusing a kind cluster (its deletion takes everything).
fn existing_cluster<'a>(ctx: &'a StepCtx<'_>) -> Result<&'a Cluster, ActionError> {
    let inputs: super::OnCluster = ctx.inputs()?;
    let name = inputs.cluster.as_str();
    let cluster = ctx.run.lab.cluster(name).ok_or_else(|| {
        ActionError::permanent(format!(
            "`{name}` is not a cluster of lab `{}`",
            ctx.run.lab.name
        ))
    })?;
    if !matches!(cluster.provider, Provider::Existing { .. }) {
        return Err(ActionError::permanent(format!(
            "`{name}` is a kind cluster: `down` deletes it whole"
        )));
    }
    Ok(cluster)
}

/// `lab.remove-objects` (`down`, existing clusters): deletes every object of the lab's kinds that carries
/// the lab's label (what `up` and `verify` applied) and the bootstrap Secret the lab wrote on an existing
/// spoke it joined. Never a ManagedCluster (see `lab.remove-registrations`) or Namespace (see
/// `lab.remove-namespaces`), never an object with an owner (its owner's controller or the
/// garbage collector removes it), nothing without the label, and nothing on an adopted spoke's klusterlet.
pub async fn remove_objects(ctx: &StepCtx<'_>) -> ActionResult {
    let cluster = existing_cluster(ctx)?;
    let lab = &ctx.run.lab;
    let api = ctx.run.api(&cluster.name).await?;
    let mut removed = Vec::new();
    let mut warnings = Vec::new();
    let kinds: Vec<(&str, &str)> = kinds_on(lab, cluster)
        .copied()
        .filter(|(_, kind)| *kind != "Namespace")
        .collect();
    for k in kinds {
        let (gone, warning) = prune_kind(ctx, cluster, api.as_ref(), k, None).await?;
        removed.extend(gone);
        warnings.extend(warning);
    }
    // The bootstrap Secret `ocm.join` wrote (it holds a token): the lab's, unless the spoke's klusterlet
    // is someone else's (adopted).
    let hosts = lab
        .managed_clusters
        .iter()
        .any(|m| m.cluster == cluster.name);
    if hosts && lab_klusterlet(ctx, &cluster.name).await? {
        let secrets = Api::<Secret>::namespaced(api.as_ref(), "open-cluster-management-agent");
        let r = secrets.object_ref("bootstrap-hub-kubeconfig");
        if secrets.delete(&r.name).await? {
            removed.push(format!("{}: {r}", cluster.name));
        }
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

/// `lab.remove-registrations` (`down`, on an existing hub, once the klusterlets the lab installed are
/// uninstalled or their clusters deleted, so that no agent registers again): deletes the ManagedClusters of
/// the lab's own joins (those carrying the lab's label whose klusterlet the lab installed). An adopted
/// spoke's registration was there before the lab: it stays.
pub async fn remove_registrations(ctx: &StepCtx<'_>) -> ActionResult {
    let cluster = existing_cluster(ctx)?;
    let lab = &ctx.run.lab;
    if cluster.name != lab.hub.cluster.name {
        return Ok((false, outputs([("removed", json!([]))])));
    }
    let api = ctx.run.api(&cluster.name).await?;
    let managed_clusters = Api::<ManagedCluster>::all(api.as_ref());
    let mut removed = Vec::new();
    if managed_clusters.served().await? {
        let selector = format!("{LAB_LABEL}={}", lab.name);
        for o in managed_clusters.list_metadata(Some(&selector)).await? {
            let name = o.metadata.name.unwrap_or_default();
            if !joined_by_lab(ctx, &name).await? {
                continue;
            }
            let r = managed_clusters.object_ref(&name);
            ctx.progress(format!("removing {r} from {}", cluster.name));
            if managed_clusters.delete(&name).await? {
                removed.push(format!("{}: {r}", cluster.name));
            }
        }
    }
    if !removed.is_empty() {
        ctx.note(super::reset::removed_summary(&removed));
    }
    Ok((!removed.is_empty(), outputs([("removed", json!(removed))])))
}

/// `ocm.remove-addons` (`down`): before a klusterlet the lab installed on an existing spoke goes, the
/// hub removes the lab's addons from that spoke and this waits until their agents are gone from it.
///
/// Real OCM deletes an addon's agent only while the spoke's work agent runs: the addon's manager deletes
/// the addon's ManifestWorks (`addon-<addon>-deploy-<n>`) when its ManagedClusterAddOn goes
/// (addon-framework v1.2.0 `pkg/addonmanager/controllers/agentdeploy`), and the work agent deletes what
/// they applied before it lets them go. A klusterlet removed first only strips the AppliedManifestWorks'
/// finalizers and orphans everything (ocm v1.3.1
/// `pkg/operator/operators/klusterlet/controllers/klusterletcontroller/klusterlet_managed_reconcile.go`
/// `cleanUpAppliedManifestWorks`), and a kind hub deleted first leaves them too. So: the lab's
/// ManagedClusterAddOns in the spokes' namespaces (managed-serviceaccount) and the lab's Placement that
/// installs cluster-proxy (the addon manager then deletes the ManagedClusterAddOns it made, ocm v1.3.1
/// `pkg/addon/controllers/addonmanagement/addon_install_reconciler.go`) are deleted, then each addon and
/// its ManifestWorks are waited for until gone. The install namespace cluster-proxy marks
/// `deletion-orphan` stays; `lab.remove-namespaces` removes it when the lab recorded it absent before.
pub async fn remove_addons(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let mut spokes = Vec::new();
    for m in &lab.managed_clusters {
        let existing = lab
            .cluster(&m.cluster)
            .is_some_and(|c| matches!(c.provider, Provider::Existing { .. }));
        if existing && lab_klusterlet(ctx, &m.cluster).await? {
            spokes.push(m.name.clone());
        }
    }
    let none = || Ok((false, outputs([("removed", json!([]))])));
    if spokes.is_empty() {
        return none();
    }
    let hub_cluster = &lab.hub.cluster;
    let hub = match ctx.run.api(&hub_cluster.name).await {
        Ok(api) => api,
        // A kind hub that is not there (never made, or deleted already): nothing to remove the addons from.
        Err(e) if hub_cluster.provider == Provider::Kind => {
            ctx.progress(format!(
                "the hub {} does not answer ({e}): no addon to remove from the existing spokes",
                hub_cluster.name
            ));
            return none();
        }
        Err(e) => return Err(e.into()),
    };
    if !Api::<ManagedClusterAddOn>::all(hub.as_ref())
        .served()
        .await?
    {
        return none();
    }
    let ours = |meta: &ObjectMeta| label(meta, LAB_LABEL) == Some(lab.name.as_str());
    let mut removed = Vec::new();
    if let Some(cp) = &lab.addons.cluster_proxy {
        let placements = Api::<Placement>::namespaced(hub.as_ref(), &cp.namespace);
        let r = placements.object_ref(&cp.placement);
        if placements.served().await?
            && placements
                .get(&cp.placement)
                .await?
                .is_some_and(|p| ours(&p.metadata))
            && placements.delete(&cp.placement).await?
        {
            removed.push(format!("{}: {r}", hub_cluster.name));
        }
    }
    let selector = format!("{LAB_LABEL}={}", lab.name);
    let mut waits = Vec::new();
    for spoke in &spokes {
        let addons = Api::<ManagedClusterAddOn>::namespaced(hub.as_ref(), spoke);
        for a in addons.list_metadata(Some(&selector)).await? {
            let name = a.metadata.name.unwrap_or_default();
            let r = addons.object_ref(&name);
            if addons.delete(&name).await? {
                removed.push(format!("{}: {r}", hub_cluster.name));
            }
        }
        let enabled = [
            lab.addons
                .cluster_proxy
                .as_ref()
                .filter(|cp| cp.clusters.contains(spoke))
                .map(|_| "cluster-proxy"),
            lab.addons
                .managed_serviceaccount
                .as_ref()
                .filter(|m| m.clusters.contains(spoke))
                .map(|_| "managed-serviceaccount"),
        ];
        for addon in enabled.into_iter().flatten() {
            waits.push((spoke.clone(), addon));
        }
    }
    wait_addons_gone(ctx, hub.as_ref(), waits).await?;
    if !removed.is_empty() {
        ctx.note(super::reset::removed_summary(&removed));
    }
    Ok((!removed.is_empty(), outputs([("removed", json!(removed))])))
}

/// Waits until each (spoke, addon) ManagedClusterAddOn is gone from the hub, and then the addon's ManifestWorks
/// in the spoke's namespace (`addon-<addon>-…`).
async fn wait_addons_gone(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    waits: Vec<(String, &str)>,
) -> Result<(), ActionError> {
    let works_served = Api::<ManifestWork>::all(hub).served().await?;
    for (spoke, addon) in waits {
        ctx.progress(format!(
            "waiting for the {addon} addon to leave {spoke} (its agent removed by the spoke's work agent)"
        ));
        Api::<ManagedClusterAddOn>::namespaced(hub, &spoke)
            .wait(addon, &Condition::gone("it is gone"), ctx.timeout())
            .await
            .map_err(|e| super::kube::wait_error(e, Some(ADDON_HINT)))?;
        if !works_served {
            continue;
        }
        let prefix = format!("addon-{addon}-");
        let works = Api::<ManifestWork>::namespaced(hub, &spoke);
        for w in works.list_metadata(None).await? {
            let name = w.metadata.name.unwrap_or_default();
            if name.starts_with(&prefix) {
                works
                    .wait(&name, &Condition::gone("it is gone"), ctx.timeout())
                    .await
                    .map_err(|e| super::kube::wait_error(e, Some(ADDON_HINT)))?;
            }
        }
    }
    Ok(())
}

/// Why an addon or its ManifestWork does not go.
const ADDON_HINT: &str = "the addon's ManifestWork goes once the spoke's work agent deleted what it applied: check that the spoke's klusterlet runs (`kubectl -n open-cluster-management-agent get pods`)";

/// Whether ManagedCluster `name` was registered by the lab's own join: one of the lab's managed clusters
/// whose klusterlet the lab installed (see [`lab_klusterlet`]), or, on an adopted cluster after the lab's
/// releases were uninstalled, one whose cluster no longer runs a Klusterlet (someone else's still would).
async fn joined_by_lab(ctx: &StepCtx<'_>, name: &str) -> Result<bool, ActionError> {
    let lab = &ctx.run.lab;
    let Some(m) = lab.managed_clusters.iter().find(|m| m.name == name) else {
        return Ok(false);
    };
    if lab_klusterlet(ctx, &m.cluster).await? {
        return Ok(true);
    }
    let Some(c) = lab.cluster(&m.cluster) else {
        return Ok(false);
    };
    if c.provider == Provider::Kind {
        return Ok(true);
    }
    let api = ctx.run.api(&m.cluster).await?;
    let klusterlets = Api::<Klusterlet>::all(api.as_ref());
    Ok(!klusterlets.served().await? || klusterlets.get("klusterlet").await?.is_none())
}

/// Whether the klusterlet on lab cluster `cluster` is the lab's: always on a cluster that is not adopted
/// (the preflight refused any other), on an adopted one only while the klusterlet release there is
/// labelled as the lab's (the adopted cluster had no klusterlet, so the lab installed it).
async fn lab_klusterlet(ctx: &StepCtx<'_>, cluster: &str) -> Result<bool, ActionError> {
    let Some(c) = ctx.run.lab.cluster(cluster) else {
        return Ok(false);
    };
    if !c.adopt {
        return Ok(true);
    }
    let target = super::helm_target(ctx, cluster)?;
    Ok(ctx
        .run
        .backends
        .helm
        .release_of_lab(&target, "klusterlet", "open-cluster-management")
        .await?)
}

/// `lab.remove-namespaces` (`down`, existing clusters, after the Helm releases are gone): deletes the
/// namespaces the ownership record says the lab created there, each only while it still has the uid it
/// had then (or, recorded without a uid, an OCM operator's namespace that did not exist before the lab
/// installed that operator's chart). A namespace that was there before the lab is never in the record, so
/// never deleted.
pub async fn remove_namespaces(ctx: &StepCtx<'_>) -> ActionResult {
    let cluster = existing_cluster(ctx)?;
    let owned = ctx.run.state.owned_lenient().map_err(super::state_error)?;
    let Some(namespaces) = owned.namespaces.get(&cluster.name) else {
        return Ok((false, outputs([("removed", json!([]))])));
    };
    let api = ctx.run.api(&cluster.name).await?;
    let all = Api::<Namespace>::all(api.as_ref());
    let mut removed = Vec::new();
    for (name, uid) in namespaces {
        let r = all.object_ref(name);
        match all.get(name).await? {
            // No uid: an operator namespace that came with the lab's own install of its chart.
            Some(ns) if uid.is_empty() || ns.metadata.uid.as_deref() == Some(uid.as_str()) => {
                ctx.progress(format!(
                    "removing namespace {name} from {} (created by this lab)",
                    cluster.name
                ));
                if api.delete(&r).await? {
                    removed.push(format!("{}: {r}", cluster.name));
                }
            }
            Some(_) => ctx.progress(format!(
                "namespace {name} on {} is not the one this lab created: left alone",
                cluster.name
            )),
            None => {}
        }
        ctx.run
            .state
            .forget_namespace(&cluster.name, name)
            .map_err(super::state_error)?;
    }
    if !removed.is_empty() {
        ctx.note(super::reset::removed_summary(&removed));
    }
    Ok((!removed.is_empty(), outputs([("removed", json!(removed))])))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        let labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()));
        ObjectMeta {
            labels: Some(labels.collect()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn helm_release_records_are_recognised_whatever_the_driver_labelled() {
        let record = meta(&[
            ("owner", "helm"),
            ("name", "cluster-manager"),
            (LAB_LABEL, "lab"),
        ]);
        assert!(is_helm_record(&record));
        let hosting = meta(&[(LAB_LABEL, "lab")]);
        assert!(!is_helm_record(&hosting));
    }

    /// The table names each kind as its type does, so a typo in it cannot hide a kind from pruning.
    #[test]
    fn the_lab_kinds_are_the_kinds_of_their_types() {
        use crate::backend::kinds::{
            ClusterProperty, ClusterRoleBinding, ConfigMap, ManagedClusterSet,
            ManagedClusterSetBinding, ManagedServiceAccount, gvk,
        };
        let typed = [
            gvk::<ClusterProperty>(),
            gvk::<ManagedServiceAccount>(),
            gvk::<ManagedClusterAddOn>(),
            gvk::<ClusterRoleBinding>(),
            gvk::<ManagedClusterSetBinding>(),
            gvk::<Placement>(),
            gvk::<ManagedClusterSet>(),
            gvk::<Namespace>(),
            gvk::<ConfigMap>(),
        ];
        let table: Vec<(String, String)> = LAB_KINDS
            .iter()
            .map(|(v, k)| ((*v).to_owned(), (*k).to_owned()))
            .collect();
        let types: Vec<(String, String)> = typed
            .iter()
            .map(|g| (g.api_version(), g.kind.clone()))
            .collect();
        assert_eq!(table, types);
    }
}
