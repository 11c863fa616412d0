//! Converging on topology edits, on the simulated lab: `up` after an edit makes the lab equal to the new
//! topology, removing objects (prune) and fields (server-side apply by the same field manager) it applied
//! before and the topology no longer declares; and `reset` deletes only what it may.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use ocm_lab::actions::prune::LAB_KINDS;
use ocm_lab::backend::fieldset;
use ocm_lab::backend::kube::FIELD_MANAGER;
use ocm_lab::backend::{ClusterApi, ObjectRef};
use ocm_lab::topology::{LAB_LABEL, Lab};
use ocm_lab::verify::PROBE_PROPERTY;
use ocm_lab::workflow::plan::keep_id_of;
use serde_json::{Value, json};

use crate::engine::{Harness, failure};

const PROP: &str = "about.k8s.io/v1alpha1";
const SETS: &str = "cluster.open-cluster-management.io/v1beta2";
const MC: &str = "cluster.open-cluster-management.io/v1";
const MSA: &str = "authentication.open-cluster-management.io/v1beta1";

fn r(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, ns, name)
}

async fn api(h: &Harness, cluster: &str) -> Arc<dyn ClusterApi> {
    let c = h.lab.cluster(cluster).unwrap();
    h.sim
        .backends()
        .kube
        .connect(c, Path::new("unused"))
        .await
        .unwrap()
}

/// The embedded workshop topology with each `(from, to)` replaced once (each must occur).
fn workshop(edits: &[(&str, &str)]) -> Lab {
    let mut text = ocm_lab::embedded::topology("workshop")
        .expect("embedded workshop")
        .to_owned();
    for (from, to) in edits {
        assert!(text.contains(from), "workshop topology lacks {from:?}");
        text = text.replacen(from, to, 1);
    }
    match ocm_lab::topology::load_str(&crate::common::host(), "workshop.yaml", &text) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

/// The first lab: the workshop with one more label key in a set's selector.
const BEFORE: &[(&str, &str)] = &[(
    "matchLabels: {env: prod}",
    "matchLabels: {env: prod, region: east}",
)];

/// The edit: a label, a property, a spoke from a set, a binding, a ManagedServiceAccount (and its RBAC)
/// and a selector key are gone.
const AFTER: &[(&str, &str)] = &[
    ("labels: {region: west, env: dev}", "labels: {region: west}"),
    (
        "properties: {region: us-east-1, tier.lab.example.com: gold}",
        "properties: {region: us-east-1}",
    ),
    ("clusters: [ws-east-1, ws-east-2]", "clusters: [ws-east-1]"),
    ("bindTo: [team-west, platform]", "bindTo: [team-west]"),
    (
        "- name: workshop-reader",
        "- name: workshop-reader\n      clusters: [ws-east-1, ws-west-1, ws-west-2]",
    ),
];

/// Per cluster, the `Kind/namespace/name` of every object in the lab's kinds that carries its label
/// (the verification probe left out: `verify` owns it).
async fn labelled(h: &Harness) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for c in h.lab.clusters() {
        let api = api(h, &c.name).await;
        let mut ids = BTreeSet::new();
        for (av, kind) in LAB_KINDS {
            if !api.served(av, kind).await.unwrap() {
                continue;
            }
            let sel = format!("{LAB_LABEL}={}", h.lab.name);
            for o in api.list(av, kind, None, Some(&sel)).await.unwrap() {
                if o["metadata"]["name"] != PROBE_PROPERTY {
                    ids.insert(keep_id_of(&o));
                }
            }
        }
        out.insert(c.name.clone(), ids);
    }
    out
}

/// Asserts the simulated lab is what the plan of `h.lab` renders: every rendered object is in place
/// with no field the lab applied beyond it, and no other object carries the lab's label.
async fn assert_lab_is_the_topology(h: &Harness) {
    let plan = crate::common::plan(&h.lab);
    for step in &plan.steps {
        let Some(cluster) = step.cluster() else {
            continue;
        };
        let api = api(h, cluster).await;
        for o in step.objects.iter() {
            let o = &o;
            let live = api
                .get(&ObjectRef::of(o).unwrap())
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{}: missing on {cluster}", keep_id_of(o)));
            assert!(
                ocm_lab::actions::contains(&live, o),
                "{}: not as rendered on {cluster}:\n{live:#}",
                keep_id_of(o)
            );
            assert!(
                !fieldset::owns_more(&live, o, FIELD_MANAGER),
                "{}: holds fields the lab no longer applies:\n{live:#}",
                keep_id_of(o)
            );
        }
    }
    let keep = &plan.step("prune").expect("up prunes").with["keep"];
    let rendered: BTreeMap<String, BTreeSet<String>> =
        serde_json::from_value(keep.clone()).unwrap();
    let live = labelled(h).await;
    for (cluster, ids) in &live {
        // ManagedClusters carry the label too, but are never pruned (not a lab kind for prune).
        let want: BTreeSet<String> = rendered
            .get(cluster)
            .into_iter()
            .flatten()
            .filter(|id| {
                LAB_KINDS
                    .iter()
                    .any(|(_, k)| id.starts_with(&format!("{k}/")))
            })
            .cloned()
            .collect();
        assert_eq!(ids, &want, "labelled objects on {cluster}");
    }
}

#[tokio::test(start_paused = true)]
async fn up_after_a_topology_edit_removes_what_the_topology_no_longer_declares() {
    let mut h = Harness::new(workshop(BEFORE));
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_lab_is_the_topology(&h).await;
    let hub = api(&h, "ws-hub").await;
    let east1 = api(&h, "ws-east-1").await;
    // Before the edit, everything the edit drops is there.
    let mc = |name: &'static str| r(MC, "ManagedCluster", None, name);
    let west2 = hub.get(&mc("ws-west-2")).await.unwrap().unwrap();
    assert_eq!(west2["metadata"]["labels"]["env"], "dev");
    let binding = r(SETS, "ManagedClusterSetBinding", Some("platform"), "west");
    assert!(hub.get(&binding).await.unwrap().is_some());
    let account = r(
        MSA,
        "ManagedServiceAccount",
        Some("ws-east-2"),
        "workshop-reader",
    );
    assert!(hub.get(&account).await.unwrap().is_some());
    let tier = r(PROP, "ClusterProperty", None, "tier.lab.example.com");
    assert!(east1.get(&tier).await.unwrap().is_some());
    // Someone else's property on a lab spoke: not the lab's, so never pruned.
    east1
        .apply(&json!({"apiVersion": PROP, "kind": "ClusterProperty", "metadata": {"name": "gpu.someone.example.com"}, "spec": {"value": "a100"}}))
        .await
        .unwrap();

    h.lab = workshop(AFTER);
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_lab_is_the_topology(&h).await;

    // Each edit, as a user would check it.
    let west2 = hub.get(&mc("ws-west-2")).await.unwrap().unwrap();
    assert!(
        west2["metadata"]["labels"].get("env").is_none(),
        "{west2:#}"
    );
    assert_eq!(west2["metadata"]["labels"]["region"], "west");
    assert!(east1.get(&tier).await.unwrap().is_none());
    let east2 = hub.get(&mc("ws-east-2")).await.unwrap().unwrap();
    assert_ne!(
        east2["metadata"]["labels"]["cluster.open-cluster-management.io/clusterset"], "east",
        "{east2:#}"
    );
    assert!(hub.get(&binding).await.unwrap().is_none());
    assert!(
        hub.get(&r(
            SETS,
            "ManagedClusterSetBinding",
            Some("platform"),
            "east"
        ))
        .await
        .unwrap()
        .is_some()
    );
    assert!(hub.get(&account).await.unwrap().is_none());
    let rbac = api(&h, "ws-east-2")
        .await
        .list(
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            None,
            Some(&format!("{LAB_LABEL}=workshop")),
        )
        .await
        .unwrap();
    assert!(rbac.is_empty(), "{rbac:#?}");
    // A field dropped from an object that stays: the selector key.
    let production = hub
        .get(&r(SETS, "ManagedClusterSet", None, "production"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        production["spec"]["clusterSelector"]["labelSelector"]["matchLabels"],
        json!({"env": "prod"})
    );
    // What the lab never applied stays.
    assert!(
        east1
            .get(&r(PROP, "ClusterProperty", None, "gpu.someone.example.com"))
            .await
            .unwrap()
            .is_some()
    );

    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{}", failure(&res));
    // Converged: another `up` changes nothing.
    let before = h.sim.mutations();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(
        h.sim.mutations(),
        before,
        "a converged lab changes nothing: {:?}",
        h.sim.calls().iter().rev().take(5).collect::<Vec<_>>()
    );
}

#[tokio::test(start_paused = true)]
async fn a_field_dropped_from_an_applied_object_disappears() {
    let mut h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    let account = r(
        MSA,
        "ManagedServiceAccount",
        Some("cluster1"),
        "inventory-reader",
    );
    let sync = "authentication.open-cluster-management.io/sync-to-clusterprofile";
    let msa: Value = hub.get(&account).await.unwrap().unwrap();
    assert_eq!(msa["metadata"]["labels"][sync], "true");

    // Credentials are no longer synced, so the checks that need them go too.
    let text =
        crate::common::default_with("syncToClusterProfile: true", "syncToClusterProfile: false")
            .replacen(
                "checks: [properties, access-providers, reachable, credentials, conditions]",
                "checks: [properties, access-providers, conditions]",
                1,
            );
    h.lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap()
        .lab;
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let msa: Value = hub.get(&account).await.unwrap().unwrap();
    assert!(msa["metadata"]["labels"].get(sync).is_none(), "{msa:#}");
    assert_eq!(msa["metadata"]["labels"][LAB_LABEL], "sandbox");
}

/// The default lab with its hub and cluster1 run by someone else (`existing:`); cluster2 is a kind
/// cluster the lab creates. The simulated world gets the two existing clusters first.
fn mixed_lab() -> Harness {
    let text = crate::common::default_with(
        "    name: hub\n",
        "    name: hub\n    existing: {kubeconfig: /nonexistent/hub.kubeconfig, context: their-hub}\n",
    )
    .replacen(
        "    - name: cluster1\n",
        "    - name: cluster1\n      existing: {kubeconfig: /nonexistent/c1.kubeconfig, context: their-c1}\n",
        1,
    );
    let lab = match ocm_lab::topology::load_str(&crate::common::host(), "mixed.yaml", &text) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    };
    let h = Harness::new(lab);
    h.sim.with_world(|w| {
        w.add_foreign_cluster("hub");
        w.add_foreign_cluster("cluster1");
    });
    h
}

fn property(name: &str, labels: Value) -> Value {
    json!({"apiVersion": PROP, "kind": "ClusterProperty", "metadata": {"name": name, "labels": labels}, "spec": {"value": "x"}})
}

fn set(name: &str, labels: Value) -> Value {
    json!({"apiVersion": SETS, "kind": "ManagedClusterSet", "metadata": {"name": name, "labels": labels}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}})
}

#[tokio::test(start_paused = true)]
async fn reset_on_existing_clusters_removes_only_what_carries_the_lab_label() {
    let h = mixed_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    let c1 = api(&h, "cluster1").await;
    let c2 = api(&h, "cluster2").await;
    let ours = json!({LAB_LABEL: "sandbox"});
    // Someone else's objects on the clusters they run ...
    hub.apply(&set("someone-elses-set", json!({})))
        .await
        .unwrap();
    c1.apply(&property("team.someone-else.example.com", json!({})))
        .await
        .unwrap();
    // ... and what participants added: labelled on existing clusters, anything on the lab's own.
    hub.apply(&set("participants-set", ours.clone()))
        .await
        .unwrap();
    c1.apply(&property("gpu.lab.example.com", ours.clone()))
        .await
        .unwrap();
    c2.apply(&property("gpu.lab.example.com", json!({})))
        .await
        .unwrap();

    let (res, _) = h.run("reset").await;
    assert!(res.ok, "{}", failure(&res));
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));

    let prop = |name: &str| r(PROP, "ClusterProperty", None, name);
    let set_ref = |name: &str| r(SETS, "ManagedClusterSet", None, name);
    assert!(
        hub.get(&set_ref("someone-elses-set"))
            .await
            .unwrap()
            .is_some(),
        "a set someone else made on their hub survives"
    );
    assert!(
        c1.get(&prop("team.someone-else.example.com"))
            .await
            .unwrap()
            .is_some(),
        "a property someone else made on their cluster survives"
    );
    assert!(
        hub.get(&set_ref("participants-set"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        c1.get(&prop("gpu.lab.example.com"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        c2.get(&prop("gpu.lab.example.com"))
            .await
            .unwrap()
            .is_none(),
        "on a cluster the lab created, reset removes what participants added"
    );
    assert!(
        hub.get(&set_ref("sandbox-fleet")).await.unwrap().is_some(),
        "the lab's own set stays"
    );
    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{}", failure(&res));
}

#[tokio::test(start_paused = true)]
async fn a_reset_whose_preflight_fails_deletes_nothing() {
    let h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    let c1 = api(&h, "cluster1").await;
    hub.apply(&set("participants-set", json!({})))
        .await
        .unwrap();
    c1.apply(&property("gpu.lab.example.com", json!({})))
        .await
        .unwrap();
    let deletes = |h: &Harness| {
        h.sim
            .calls()
            .iter()
            .filter(|c| c.verb == "kube.delete")
            .count()
    };
    let before = deletes(&h);
    h.sim.set_fault(
        ocm_lab_sim::Behaviour::DockerPing,
        ocm_lab_sim::Fault::FailAlways("the Docker daemon is not running (simulated)".into()),
    );

    let (res, _) = h.run("reset").await;
    assert!(!res.ok, "the reset must stop in preflight");
    assert_eq!(
        res.failed.as_ref().map(|(s, _)| s.as_str()),
        Some("preflight"),
        "{}",
        failure(&res)
    );
    assert_eq!(deletes(&h), before, "nothing was deleted");
    assert!(
        hub.get(&r(SETS, "ManagedClusterSet", None, "participants-set"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        c1.get(&r(PROP, "ClusterProperty", None, "gpu.lab.example.com"))
            .await
            .unwrap()
            .is_some()
    );
}

#[test]
fn every_object_the_lab_applies_carries_its_label_so_prune_can_find_it() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let lab = crate::common::lab(name);
        let plan = crate::common::plan(&lab);
        for (cluster, o) in plan.objects() {
            let o = &o;
            assert_eq!(
                o["metadata"]["labels"][LAB_LABEL],
                lab.name.as_str(),
                "{name}: {} on {cluster} lacks the lab's label",
                keep_id_of(o)
            );
        }
        // Each rendered object is in the prune step's `keep` list of its cluster.
        let keep = &plan.step("prune").expect("up prunes").with["keep"];
        for (cluster, o) in plan.objects() {
            let o = &o;
            assert!(
                keep[cluster]
                    .as_array()
                    .is_some_and(|k| k.contains(&json!(keep_id_of(o)))),
                "{name}: {} not kept on {cluster}",
                keep_id_of(o)
            );
        }
    }
}

/// The default topology without `cluster2`: its spoke entry, its place in the set and its service account.
fn default_without_cluster2() -> Lab {
    let text = ocm_lab::embedded::topology("default").expect("embedded default");
    let (start, end) = (
        text.find("    - name: cluster2").expect("cluster2's entry"),
        text.find("  clusterSets:").expect("clusterSets"),
    );
    let text =
        format!("{}{}", &text[..start], &text[end..]).replace("[cluster1, cluster2]", "[cluster1]");
    assert!(!text.contains("cluster2"), "{text}");
    match ocm_lab::topology::load_str(&crate::common::host(), "default.yaml", &text) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

/// Everything on the hub and in the Docker engine that is about `cluster2`: its ManagedCluster, its
/// ClusterProfiles (any namespace), the addons in its namespace, and its node containers.
async fn traces_of_cluster2(h: &Harness) -> Vec<String> {
    let hub = api(h, "hub").await;
    let mut out = Vec::new();
    if hub
        .get(&r(MC, "ManagedCluster", None, "cluster2"))
        .await
        .unwrap()
        .is_some()
    {
        out.push("ManagedCluster cluster2".to_owned());
    }
    for p in hub
        .list(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            None,
            None,
        )
        .await
        .unwrap()
    {
        if p["metadata"]["name"] == "cluster2" {
            out.push(format!(
                "ClusterProfile {}/cluster2",
                p["metadata"]["namespace"]
            ));
        }
    }
    for a in hub
        .list(
            "addon.open-cluster-management.io/v1alpha1",
            "ManagedClusterAddOn",
            Some("cluster2"),
            None,
        )
        .await
        .unwrap()
    {
        out.push(format!(
            "ManagedClusterAddOn cluster2/{}",
            a["metadata"]["name"]
        ));
    }
    for c in h
        .sim
        .backends()
        .docker
        .look_alikes("cluster2")
        .await
        .unwrap()
    {
        out.push(format!("container {}", c.name));
    }
    out
}

#[tokio::test(start_paused = true)]
async fn a_spoke_that_left_the_topology_is_deregistered_and_its_kind_cluster_deleted_by_up() {
    let mut h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let before = traces_of_cluster2(&h).await;
    assert!(
        before.contains(&"ManagedCluster cluster2".to_owned()),
        "{before:?}"
    );
    assert!(
        before.iter().any(|t| t.starts_with("ClusterProfile")),
        "{before:?}"
    );
    assert!(
        before.iter().any(|t| t.starts_with("container")),
        "{before:?}"
    );

    h.lab = default_without_cluster2();
    let (res, events) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(traces_of_cluster2(&h).await, Vec::<String>::new());
    let notes = format!("{events:?}");
    assert!(
        notes.contains("deleted kind cluster cluster2: it left the topology")
            && notes.contains("deregistered cluster2"),
        "up says what it removed: {notes}"
    );
    // The hub's inventory is the topology: one ManagedCluster with the lab's label, cluster1.
    let hub = api(&h, "hub").await;
    let names: Vec<Value> = hub
        .list(MC, "ManagedCluster", None, None)
        .await
        .unwrap()
        .iter()
        .map(|m| m["metadata"]["name"].clone())
        .collect();
    assert_eq!(names, [json!("cluster1")]);
    assert!(
        h.state
            .owned()
            .unwrap()
            .departed(|n| h.lab.cluster(n).is_some())
            .is_empty()
    );
    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{}", failure(&res));
    // Converged: another `up` changes nothing.
    let before = h.sim.mutations();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(h.sim.mutations(), before);
}

#[tokio::test(start_paused = true)]
async fn a_spoke_that_left_after_a_run_was_stopped_mid_join_goes_too() {
    let mut h = Harness::default_lab();
    let cancel = tokio_util::sync::CancellationToken::new();
    let stop = cancel.clone();
    let (res, _) = h
        .run_with("up", cancel, move |e| {
            if format!("{:?}", e.event).contains("klusterlet[cluster2]") {
                stop.cancel();
            }
        })
        .await;
    assert!(!res.ok, "the run was stopped");
    assert!(
        !h.sim
            .backends()
            .docker
            .look_alikes("cluster2")
            .await
            .unwrap()
            .is_empty()
    );

    h.lab = default_without_cluster2();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(traces_of_cluster2(&h).await, Vec::<String>::new());
    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{}", failure(&res));
}

#[tokio::test(start_paused = true)]
async fn down_with_a_topology_that_dropped_a_spoke_still_deletes_its_cluster_and_only_then_the_record()
 {
    let mut h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    h.lab = default_without_cluster2();
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    let docker = h.sim.backends().docker;
    for c in ["hub", "cluster1", "cluster2"] {
        assert_eq!(docker.look_alikes(c).await.unwrap(), [], "{c} is left");
    }
    let owned = h.state.owned().unwrap();
    assert!(!owned.holds_anything(), "{owned:?}");
}
