//! Lifecycle on the simulated lab: `reset` between workshop sessions, and `status` following the lab.

use std::path::Path;

use ocm_lab::backend::{ClusterApi, ObjectRef, condition_status};
use serde_json::{Value, json};

use crate::engine::{Harness, failure};

async fn api(h: &Harness, cluster: &str) -> std::sync::Arc<dyn ClusterApi> {
    let c = h.lab.cluster(cluster).unwrap();
    h.sim
        .backends()
        .kube
        .connect(c, Path::new("unused"))
        .await
        .unwrap()
}

fn r(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, ns, name)
}

const PROP: &str = "about.k8s.io/v1alpha1";
const SETS: &str = "cluster.open-cluster-management.io/v1beta2";

#[tokio::test(start_paused = true)]
async fn reset_removes_what_participants_added_restores_what_they_changed_and_verifies() {
    let h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    let c1 = api(&h, "cluster1").await;
    let c2 = api(&h, "cluster2").await;

    // A workshop session: participants add, change and delete things.
    hub.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-x"}}))
        .await
        .unwrap();
    hub.apply(&json!({"apiVersion": SETS, "kind": "ManagedClusterSetBinding", "metadata": {"name": "sandbox-fleet", "namespace": "team-x"}, "spec": {"clusterSet": "sandbox-fleet"}})).await.unwrap();
    hub.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "notes", "namespace": "team-x"}, "data": {"a": "b"}})).await.unwrap();
    hub.apply(&json!({"apiVersion": "authentication.open-cluster-management.io/v1beta1", "kind": "ManagedServiceAccount", "metadata": {"name": "mine", "namespace": "cluster1"}, "spec": {"rotation": {"enabled": true}}})).await.unwrap();
    hub.apply(&json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork", "metadata": {"name": "hello", "namespace": "cluster1"}, "spec": {"workload": {"manifests": []}}})).await.unwrap();
    hub.merge_patch(
        &r(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            "cluster1",
        ),
        &json!({"metadata": {"labels": {"env": "hacked"}}}),
    )
    .await
    .unwrap();
    c1.apply(&json!({"apiVersion": PROP, "kind": "ClusterProperty", "metadata": {"name": "gpu.lab.example.com"}, "spec": {"value": "a100"}})).await.unwrap();
    c1.apply(&json!({"apiVersion": PROP, "kind": "ClusterProperty", "metadata": {"name": "tier.lab.example.com"}, "spec": {"value": "platinum"}})).await.unwrap();
    assert!(
        c2.delete(&r(PROP, "ClusterProperty", None, "region"))
            .await
            .unwrap()
    );
    let calls_before = h.sim.calls();

    let (res, _) = h.run("reset").await;
    assert!(res.ok, "{}", failure(&res));
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));

    // Added things in the lab's kinds are gone.
    assert!(
        hub.get(&r(
            SETS,
            "ManagedClusterSetBinding",
            Some("team-x"),
            "sandbox-fleet"
        ))
        .await
        .unwrap()
        .is_none()
    );
    assert!(
        hub.get(&r(
            "authentication.open-cluster-management.io/v1beta1",
            "ManagedServiceAccount",
            Some("cluster1"),
            "mine"
        ))
        .await
        .unwrap()
        .is_none()
    );
    assert!(
        hub.get(&r(
            "work.open-cluster-management.io/v1",
            "ManifestWork",
            Some("cluster1"),
            "hello"
        ))
        .await
        .unwrap()
        .is_none()
    );
    assert!(
        c1.get(&r(PROP, "ClusterProperty", None, "gpu.lab.example.com"))
            .await
            .unwrap()
            .is_none()
    );
    // What is not the lab's is kept.
    assert!(
        hub.get(&r("v1", "ConfigMap", Some("team-x"), "notes"))
            .await
            .unwrap()
            .is_some()
    );
    // Changed and deleted things are back.
    let tier = c1
        .get(&r(PROP, "ClusterProperty", None, "tier.lab.example.com"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(tier["spec"]["value"], "gold");
    let region = c2
        .get(&r(PROP, "ClusterProperty", None, "region"))
        .await
        .unwrap()
        .expect("restored");
    assert_eq!(region["spec"]["value"], "eu-west-1");
    let mc = hub
        .get(&r(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            "cluster1",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(mc["metadata"]["labels"]["env"], "dev");
    // The profile shows the restored properties, and nothing was re-created or re-registered.
    let profile = hub
        .get(&r(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            "cluster1",
        ))
        .await
        .unwrap()
        .unwrap();
    let profile: ocm_lab::backend::kinds::ClusterProfile = serde_json::from_value(profile).unwrap();
    let props: Vec<(String, String)> = ocm_lab::verify::profile_properties(&profile);
    assert!(
        props.contains(&("tier.lab.example.com".into(), "gold".into()))
            && !props.iter().any(|(n, _)| n == "gpu.lab.example.com"),
        "{props:?}"
    );
    let after = h.sim.calls();
    let count =
        |calls: &[ocm_lab_sim::Call], verb: &str| calls.iter().filter(|c| c.verb == verb).count();
    for verb in ["kind.create", "kube.token-request", "kube.approve-csr"] {
        assert_eq!(
            count(&after, verb),
            count(&calls_before, verb),
            "reset must not {verb}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn status_reflects_a_spoke_going_unavailable() {
    let h = Harness::default_lab();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let status = |h: &Harness| {
        let (events, _rx) = ocm_lab::step::events::Events::channel();
        let ctx = ocm_lab::step::RunCtx::new(
            h.lab.clone(),
            h.sim.backends(),
            h.state.clone(),
            ocm_lab::patch::PatchSet::embedded().unwrap(),
            events,
            Default::default(),
        );
        async move { ocm_lab::commands::status::collect(&ctx).await }
    };
    let s = status(&h).await;
    assert!(s.healthy(), "{s:#?}");

    // cluster2's node stops; after its lease expires the hub marks it unavailable
    // (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/lease/controller.go`).
    h.sim.with_world(|w| {
        w.set_running("cluster2", false);
        let mc_ref = r(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            "cluster2",
        );
        let mut mc: Value = w.get_object("hub", &mc_ref).unwrap();
        for c in mc["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == "ManagedClusterConditionAvailable" {
                c["status"] = json!("Unknown");
                c["reason"] = json!("ManagedClusterLeaseUpdateStopped");
            }
        }
        w.put_object("hub", mc).unwrap();
    });
    let s = status(&h).await;
    assert!(!s.healthy());
    let c2 = s.clusters.iter().find(|c| c.name == "cluster2").unwrap();
    assert!(!c2.reachable, "{c2:?}");
    let m2 = s
        .managed_clusters
        .iter()
        .find(|m| m.name == "cluster2")
        .unwrap();
    assert!(m2.joined && !m2.available, "{m2:?}");
    let m1 = s
        .managed_clusters
        .iter()
        .find(|m| m.name == "cluster1")
        .unwrap();
    assert!(m1.available);
    assert!(
        ocm_lab::commands::status::render(&s).contains("cluster2         joined, NOT available")
    );
    let hub = api(&h, "hub").await;
    let p = hub
        .get(&r(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            "cluster2",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        condition_status(&p, "ControlPlaneHealthy"),
        Some("True"),
        "the profile follows the ManagedCluster"
    );
}
