//! Cluster sets, bindings, ClusterProfiles and placements on the hub (open-cluster-management-io/ocm v1.3.1
//! `pkg/registration/hub/clusterprofile/`,
//! `pkg/registration/webhook/v1beta2/managedclustersetbinding_validating.go`; recorded from kube-apiserver
//! v1.36.2 and open-cluster-management-io/ocm 00f84c32).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::{
    CLUSTER_MANAGER_LABEL, CLUSTER_NAME_LABEL, Controller, OCM, Op, Queue, Resync, is_hub, mark,
    mark_work, namespace_exists, owner_ref, profiles_enabled, s, spec_of,
};
use crate::apiserver::gk;
use crate::faults::Behaviour;
use crate::util::{self, set_condition};
use crate::world::{ChangeKind, World};
use ocm_lab_core::topology::CLUSTERSET_LABEL;

const PROFILE_SET_LABEL: &str = "multicluster.x-k8s.io/clusterset";
pub(super) const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";
const PROFILES_SYNCED: &str = "ClusterProfilesSynced";

/// A `metav1.LabelSelector` (matchLabels, matchExpressions In/NotIn/Exists/DoesNotExist); an empty or
/// missing selector matches everything.
fn label_selector_matches(sel: Option<&Value>, obj: &Value) -> bool {
    let Some(sel) = sel else { return true };
    let labels_ok = sel["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| util::label(obj, k) == v.as_str()));
    let exprs_ok = sel["matchExpressions"].as_array().is_none_or(|es| {
        es.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or("");
            let v = util::label(obj, key);
            let mut values = e["values"].as_array().into_iter().flatten();
            let listed = v.is_some_and(|v| values.any(|x| x == v));
            match e["operator"].as_str().unwrap_or("") {
                "In" => listed,
                "NotIn" => !listed,
                "Exists" => v.is_some(),
                "DoesNotExist" => v.is_none(),
                _ => false,
            }
        })
    });
    labels_ok && exprs_ok
}

/// Set membership (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/managedclusterset/`):
/// `ExclusiveClusterSetLabel` (the default) selects clusters labelled
/// `cluster.open-cluster-management.io/clusterset=<set>`; `LabelSelector` its selector (`global`: all).
pub(super) fn is_member(set: &Value, mc: &Value) -> bool {
    if mc["metadata"].get("deletionTimestamp").is_some() {
        return false;
    }
    let sel = &set["spec"]["clusterSelector"];
    match sel["selectorType"]
        .as_str()
        .unwrap_or("ExclusiveClusterSetLabel")
    {
        "LabelSelector" => label_selector_matches(sel.get("labelSelector"), mc),
        _ => util::label(mc, CLUSTERSET_LABEL) == Some(util::name(set)),
    }
}

fn members(w: &World, hub: &str, set: &Value) -> BTreeSet<String> {
    w.list(hub, gk::MANAGED_CLUSTER, None)
        .filter(|m| is_member(set, m))
        .map(|m| s(util::name(m)))
        .collect()
}

/// ManagedClusterSet status (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/managedclusterset/`):
/// `ClusterSetEmpty` with the number of clusters selected
/// (fixtures/recorded/2-clusterprofiles/managedclusterset-*.yaml).
pub(super) fn set_status(w: &World, hub: &str, name: &str) -> Vec<Op> {
    let (Some(set), true) = (w.get(hub, gk::CLUSTER_SET, "", name), is_hub(w, hub)) else {
        return Vec::new();
    };
    let mut new = set.clone();
    let (status, reason, msg) = match members(w, hub, set).len() {
        0 => ("True", "NoClusterMatched", s("No ManagedCluster selected")),
        n => {
            let msg = format!("{n} ManagedClusters selected");
            ("False", "ClustersSelected", msg)
        }
    };
    set_condition(&mut new, "ClusterSetEmpty", status, reason, &msg);
    vec![Op::Put(s(hub), new)]
}

/// A binding is `Bound=True` (ClusterSetBound) as soon as its set exists, else `Bound=False`
/// (ClusterSetNotFound) (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/managedclustersetbinding/controller.go`).
pub(super) fn binding(w: &World, hub: &str, ns: &str, name: &str) -> Vec<Op> {
    let (Some(b), true) = (w.get(hub, gk::SET_BINDING, ns, name), is_hub(w, hub)) else {
        return Vec::new();
    };
    let set = util::str_at(b, "/spec/clusterSet").unwrap_or("");
    let mut new = b.clone();
    let (status, reason, msg) = match w.get(hub, gk::CLUSTER_SET, "", set) {
        Some(_) => ("True", "ClusterSetBound", String::new()),
        None => {
            let msg = format!("Unable to find ManagedClusterSet {set}");
            ("False", "ClusterSetNotFound", msg)
        }
    };
    set_condition(&mut new, "Bound", status, reason, &msg);
    vec![Op::Put(s(hub), new)]
}

/// Sets with a Bound binding in `ns`.
fn bound_sets<'a>(w: &'a World, hub: &str, ns: &str) -> Vec<&'a Value> {
    w.list(hub, gk::SET_BINDING, Some(ns))
        .filter(|b| util::condition_is(b, "Bound", "True"))
        .filter_map(|b| util::str_at(b, "/spec/clusterSet"))
        .filter_map(|set| w.get(hub, gk::CLUSTER_SET, "", set))
        .collect()
}

pub(super) fn is_ocm_profile(p: &Value) -> bool {
    util::label(p, CLUSTER_MANAGER_LABEL) == Some(OCM)
}

/// A new ClusterProfile as the lifecycle controller creates it: no status, no clusterset label yet
/// (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/clusterprofile/`; recorded from kube-apiserver
/// v1.36.2 and open-cluster-management-io/ocm 00f84c32).
fn new_profile(ns: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {
            "name": cluster,
            "namespace": ns,
            "labels": {CLUSTER_MANAGER_LABEL: OCM, CLUSTER_NAME_LABEL: cluster},
        },
        "spec": {"displayName": cluster, "clusterManager": {"name": OCM}},
    })
}

/// `ClusterProfileLifecycleController` for one namespace (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/clusterprofile/`): every Bound binding there → its set's clusters → one profile each;
/// extra OCM profiles deleted; namespaces that do not exist or are terminating are skipped.
pub(super) fn lifecycle_ns(w: &World, hub: &str, ns: &str) -> Vec<Op> {
    if !profiles_enabled(w, hub) || !namespace_exists(w, hub, ns) {
        return Vec::new();
    }
    let mut desired = BTreeSet::new();
    for set in bound_sets(w, hub, ns) {
        desired.extend(members(w, hub, set));
    }
    let existing: BTreeSet<String> = w
        .list(hub, gk::CLUSTER_PROFILE, Some(ns))
        .filter(|p| is_ocm_profile(p))
        .map(|p| s(util::name(p)))
        .collect();
    let (missing, extra) = (desired.difference(&existing), existing.difference(&desired));
    let create = missing.map(|c| Op::Create(s(hub), new_profile(ns, c)));
    let delete = extra.map(|c| Op::delete(hub, [gk::CLUSTER_PROFILE, ns, c]));
    create.chain(delete).collect()
}

/// `ClusterProfileStatusController` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/clusterprofile/`; recorded from kube-apiserver v1.36.2 and
/// open-cluster-management-io/ocm 00f84c32): version, all claims as properties (same order, no
/// lastObservedTime), `ControlPlaneHealthy` ← `ManagedClusterConditionAvailable`, `Joined` ←
/// `ManagedClusterJoined` (type/status/reason/message; the profile keeps its own transition time), and the
/// labels including `multicluster.x-k8s.io/clusterset` (`""` when the cluster has no set label). It never
/// touches `accessProviders`.
pub(super) fn profile_status(w: &World, hub: &str, mc: &str) -> Vec<Op> {
    let m = w.get(hub, gk::MANAGED_CLUSTER, "", mc);
    let (Some(m), true) = (m, profiles_enabled(w, hub)) else {
        return Vec::new();
    };
    let mut ops = Vec::new();
    for ns in w.namespaces_with(hub, gk::CLUSTER_PROFILE) {
        let Some(p) = w.get(hub, gk::CLUSTER_PROFILE, &ns, mc) else {
            continue;
        };
        if util::label(p, CLUSTER_NAME_LABEL) != Some(mc)
            || util::str_at(p, "/spec/clusterManager/name") != Some(OCM)
        {
            continue;
        }
        let mut n = p.clone();
        util::set_label(&mut n, CLUSTER_MANAGER_LABEL, OCM);
        let set = util::label(m, CLUSTERSET_LABEL).unwrap_or("");
        util::set_label(&mut n, PROFILE_SET_LABEL, set);
        util::set_label(&mut n, CLUSTER_NAME_LABEL, mc);
        if let Some(v) = m.pointer("/status/version/kubernetes") {
            n["status"]["version"] = json!({"kubernetes": v});
        }
        match m.pointer("/status/clusterClaims").and_then(Value::as_array) {
            Some(claims) => {
                let props: Vec<Value> = claims
                    .iter()
                    .map(|c| json!({"name": c["name"], "value": c["value"]}))
                    .collect();
                n["status"]["properties"] = Value::Array(props);
            }
            None => {
                if let Some(st) = n.get_mut("status").and_then(Value::as_object_mut) {
                    st.remove("properties");
                }
            }
        }
        for (from, to) in [
            ("ManagedClusterConditionAvailable", "ControlPlaneHealthy"),
            ("ManagedClusterJoined", "Joined"),
        ] {
            if let Some(c) = util::condition(m, from) {
                let status = c["status"].as_str().unwrap_or("Unknown");
                let text = |k: &str| c[k].as_str().unwrap_or_default();
                set_condition(&mut n, to, status, text("reason"), text("message"));
            }
        }
        ops.push(Op::Put(s(hub), n));
    }
    ops
}

/// The placement controller (open-cluster-management-io/ocm v1.3.1 `pkg/placement/controllers/scheduling/`):
/// the clusters of the Placement's sets (all bound sets when it names none) that have a Bound binding in its
/// namespace, narrowed by label predicates, in a PlacementDecision `<placement>-decision-1`.
pub(super) fn placement(w: &World, hub: &str, ns: &str, name: &str) -> Vec<Op> {
    let served = is_hub(w, hub) && w.served(hub, gk::PLACEMENT_DECISION);
    let (Some(p), true) = (w.get(hub, gk::PLACEMENT, ns, name), served) else {
        return Vec::new();
    };
    let wanted: Option<BTreeSet<&str>> = p["spec"]["clusterSets"]
        .as_array()
        .filter(|a| !a.is_empty())
        .map(|a| a.iter().filter_map(Value::as_str).collect());
    let bound = bound_sets(w, hub, ns);
    let predicates: Vec<&Value> = p["spec"]["predicates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pr| pr.pointer("/requiredClusterSelector/labelSelector"))
        .collect();
    let selected: BTreeSet<String> = bound
        .iter()
        .filter(|set| wanted.as_ref().is_none_or(|w| w.contains(util::name(set))))
        .flat_map(|set| {
            w.list(hub, gk::MANAGED_CLUSTER, None)
                .filter(|m| is_member(set, m))
        })
        .filter(|m| {
            predicates.is_empty()
                || predicates
                    .iter()
                    .any(|sel| label_selector_matches(Some(sel), m))
        })
        .map(|m| s(util::name(m)))
        .collect();
    let decision_name = format!("{name}-decision-1");
    let mut decision = w
        .get(hub, gk::PLACEMENT_DECISION, ns, &decision_name)
        .cloned()
        .unwrap_or_else(|| {
            json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "PlacementDecision",
                "metadata": {
                    "name": decision_name,
                    "namespace": ns,
                    "labels": {
                        PLACEMENT_LABEL: name,
                        "cluster.open-cluster-management.io/decision-group-index": "0",
                        "cluster.open-cluster-management.io/decision-group-name": "",
                    },
                    "ownerReferences": [owner_ref(p, true)],
                },
            })
        });
    let decisions: Vec<Value> = selected
        .iter()
        .map(|c| json!({"clusterName": c, "reason": ""}))
        .collect();
    decision["status"] = json!({ "decisions": decisions });
    let mut n = p.clone();
    n["status"]["numberOfSelectedClusters"] = json!(selected.len());
    let (reason, ok) = ("Succeedconfigured", "Placement configurations check pass");
    set_condition(&mut n, "PlacementMisconfigured", "False", reason, ok);
    let (status, reason, msg) = if bound.is_empty() {
        let msg = "No valid ManagedClusterSetBindings found in placement namespace";
        ("False", "NoManagedClusterSetBindings", msg)
    } else if selected.is_empty() {
        let msg = "No ManagedCluster matches any of the cluster predicate";
        ("False", "NoManagedClusterMatched", msg)
    } else {
        let msg = "All cluster decisions scheduled";
        ("True", "AllDecisionsScheduled", msg)
    };
    set_condition(&mut n, "PlacementSatisfied", status, reason, msg);
    vec![Op::Put(s(hub), decision), Op::Put(s(hub), n)]
}

/// Clusters a Placement decided on.
pub(super) fn decided(w: &World, hub: &str, ns: &str, placement: &str) -> BTreeSet<String> {
    w.list(hub, gk::PLACEMENT_DECISION, Some(ns))
        .filter(|d| util::label(d, PLACEMENT_LABEL) == Some(placement))
        .filter_map(|d| d.pointer("/status/decisions")?.as_array())
        .flatten()
        .filter_map(|x| x["clusterName"].as_str())
        .map(str::to_owned)
        .collect()
}

/// A set's membership or selector may have changed (not just its status).
fn set_membership_may_change(kind: ChangeKind) -> bool {
    kind.membership() || matches!(kind, ChangeKind::Updated { spec: true, .. })
}

/// Queues the work about every namespace of cluster `c` that holds objects of one of `kinds`.
fn in_namespaces_with(w: &World, c: &str, kinds: &[&str], q: &mut Queue<'_>) {
    for ns in kinds.iter().flat_map(|k| w.namespaces_with(c, k)) {
        q.add(c, &ns, "");
    }
}

fn all_placements(w: &World, c: &str, ns: Option<&str>, q: &mut Queue<'_>) {
    for p in w.list(c, gk::PLACEMENT, ns) {
        q.object(c, util::namespace(p), util::name(p));
    }
}

// ---- the controllers: what each watches, and how it fails ----------------------------------------
//
// A set's, placement's or ClusterProfile's own status write changes nothing these controllers read (and
// recomputing a set or placement is O(clusters)), so status-only changes of those kinds queue nothing.

/// This file's controllers, in the order a reconcile runs their work.
pub(super) static CONTROLLERS: &[&Controller] = &[
    &SET_STATUS,
    &BINDING,
    &LIFECYCLE_NS,
    &PROFILE_STATUS,
    &PLACEMENT,
];

static SET_STATUS: Controller = Controller {
    name: "clusterset-status",
    behaviour: Behaviour::SetBinding,
    watches: &[
        (gk::CLUSTER_SET, spec_of),
        // A cluster joined, left or was relabelled: every set counts again.
        (gk::MANAGED_CLUSTER, |w, ch, q| {
            if ch.kind.membership() {
                q.every(w, &ch.cluster, gk::CLUSTER_SET);
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::CLUSTER_SET)),
    run: |w, k| set_status(w, k.cluster(), &k.key()[0]),
    fail: |w, k, msg| mark_work(w, k, gk::CLUSTER_SET, ["ClusterSetEmpty", "Unknown"], msg),
};

static BINDING: Controller = Controller {
    name: "clusterset-binding",
    behaviour: Behaviour::SetBinding,
    watches: &[
        (gk::CLUSTER_SET, |w, ch, q| {
            if !ch.kind.status_only() {
                q.every(w, &ch.cluster, gk::SET_BINDING);
            }
        }),
        (gk::SET_BINDING, |_, ch, q| {
            q.add(&ch.cluster, &ch.ns, &ch.name)
        }),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::SET_BINDING)),
    run: |w, k| {
        let [ns, name] = k.key();
        binding(w, k.cluster(), ns, name)
    },
    fail: |w, k, msg| mark_work(w, k, gk::SET_BINDING, ["Bound", "False"], msg),
};

static LIFECYCLE_NS: Controller = Controller {
    name: "clusterprofile-lifecycle-namespace",
    behaviour: Behaviour::ProfileLifecycle,
    watches: &[
        (gk::NAMESPACE, |_, ch, q| q.add(&ch.cluster, &ch.name, "")),
        (gk::CLUSTER_SET, |w, ch, q| {
            if !ch.kind.status_only() && set_membership_may_change(ch.kind) {
                in_namespaces_with(w, &ch.cluster, &[gk::SET_BINDING], q);
            }
        }),
        (gk::SET_BINDING, |_, ch, q| q.add(&ch.cluster, &ch.ns, "")),
        (gk::CLUSTER_PROFILE, |_, ch, q| {
            if ch.kind == ChangeKind::Deleted {
                q.add(&ch.cluster, &ch.ns, "");
            }
        }),
        // A cluster joined, left or was relabelled: its profiles may come or go wherever a set is bound
        // or a profile is.
        (gk::MANAGED_CLUSTER, |w, ch, q| {
            if ch.kind.membership() {
                let kinds = [gk::SET_BINDING, gk::CLUSTER_PROFILE];
                in_namespaces_with(w, &ch.cluster, &kinds, q);
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| in_namespaces_with(w, c, &[gk::SET_BINDING], q)),
    run: |w, k| lifecycle_ns(w, k.cluster(), &k.key()[0]),
    fail: |w, k, msg| {
        let (hub, ns) = (k.cluster(), &k.key()[0]);
        let cond = [PROFILES_SYNCED, "False"];
        w.list(hub, gk::SET_BINDING, Some(ns))
            .flat_map(|b| mark(w, hub, [gk::SET_BINDING, ns, util::name(b)], cond, msg))
            .collect()
    },
};

static PROFILE_STATUS: Controller = Controller {
    name: "clusterprofile-status",
    behaviour: Behaviour::ProfileStatus,
    watches: &[
        (gk::MANAGED_CLUSTER, |_, ch, q| {
            q.add(&ch.cluster, &ch.name, "")
        }),
        (gk::CLUSTER_PROFILE, |_, ch, q| {
            if !ch.kind.status_only() {
                q.add(&ch.cluster, &ch.name, "");
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::MANAGED_CLUSTER)),
    run: |w, k| profile_status(w, k.cluster(), &k.key()[0]),
    fail: |w, k, msg| {
        let (hub, mc) = (k.cluster(), &k.key()[0]);
        let cond = ["ControlPlaneHealthy", "Unknown"];
        w.namespaces_with(hub, gk::CLUSTER_PROFILE)
            .iter()
            .flat_map(|ns| mark(w, hub, [gk::CLUSTER_PROFILE, ns, mc], cond, msg))
            .collect()
    },
};

static PLACEMENT: Controller = Controller {
    name: "placement",
    behaviour: Behaviour::Placement,
    watches: &[
        (gk::PLACEMENT, spec_of),
        (gk::CLUSTER_SET, |w, ch, q| {
            if !ch.kind.status_only() && set_membership_may_change(ch.kind) {
                all_placements(w, &ch.cluster, None, q);
            }
        }),
        (gk::SET_BINDING, |w, ch, q| {
            all_placements(w, &ch.cluster, Some(&ch.ns), q);
        }),
        // A cluster joined, left or was relabelled: every Placement decides again.
        (gk::MANAGED_CLUSTER, |w, ch, q| {
            if ch.kind.membership() {
                all_placements(w, &ch.cluster, None, q);
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| all_placements(w, c, None, q)),
    run: |w, k| {
        let [ns, name] = k.key();
        placement(w, k.cluster(), ns, name)
    },
    fail: |w, k, msg| mark_work(w, k, gk::PLACEMENT, ["PlacementSatisfied", "False"], msg),
};
