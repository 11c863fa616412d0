//! The klusterlet chart goes in before the hub is ready: in the simulated lab, a
//! klusterlet without its bootstrap Secret waits (BootstrapSecretMissing) and registers nothing; the
//! join's Secret is what lets it register (open-cluster-management-io/ocm v1.3.1
//! `deploy/klusterlet/chart/klusterlet/templates/`, `pkg/registration/spoke/spokeagent.go`).

use ocm_lab::backend::ObjectRef;
use tokio_util::sync::CancellationToken;

use crate::common;
use crate::engine::Harness;

#[tokio::test(start_paused = true)]
async fn a_klusterlet_installed_before_the_hub_waits_for_its_bootstrap_secret_then_joins() {
    let h = Harness::default_lab();
    let mut plan = common::plan_workflow(&h.lab, "up");
    // Only what the klusterlet step needs: no hub chart, no join.
    plan.steps.retain(|s| {
        matches!(
            s.step.as_str(),
            "preflight" | "network" | "create" | "node-images" | "klusterlet"
        )
    });
    assert!(plan.steps.iter().any(|s| s.id == "klusterlet[cluster1]"));
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{:?}", r.failed);

    let spoke = h.sim.api("cluster1");
    let hub = h.sim.api(&h.lab.hub.cluster.name);
    let secret = ObjectRef::new(
        "v1",
        "Secret",
        Some("open-cluster-management-agent"),
        "bootstrap-hub-kubeconfig",
    );
    assert!(
        spoke.get(&secret).await.unwrap().is_none(),
        "the chart must not render the bootstrap Secret: the join is its only writer"
    );
    let k = spoke
        .get(&ObjectRef::new(
            "operator.open-cluster-management.io/v1",
            "Klusterlet",
            None,
            "klusterlet",
        ))
        .await
        .unwrap()
        .expect("the chart created the Klusterlet");
    let degraded = k["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "HubConnectionDegraded"))
        .cloned()
        .unwrap_or_default();
    assert!(
        degraded["reason"]
            .as_str()
            .is_some_and(|r| r.contains("BootstrapSecretMissing")),
        "{degraded}"
    );
    let mcs = hub
        .list(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            None,
        )
        .await
        .unwrap_or_default();
    assert!(
        mcs.is_empty(),
        "registered without a bootstrap Secret: {mcs:?}"
    );

    // The full `up` then joins every spoke through the Secret the join writes.
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{:?}", r.failed);
    assert!(spoke.get(&secret).await.unwrap().is_some());
}

/// The registration agent's pod, installed before its bootstrap Secret, waits in Pending while the
/// kubelet backs off retrying the Secret's volume (up to about two minutes): the join restarts such a pod
/// once it has written the Secret, and leaves running pods and other pods alone. (The simulated lab has
/// no kubelet: the pods here stand in for the ones the registration agent's Deployment would have.)
#[tokio::test(start_paused = true)]
async fn the_join_restarts_a_registration_pod_that_waited_for_the_bootstrap_secret() {
    let h = Harness::default_lab();
    // The waiting Pods mount the Secret only at the kubelet's next retry, here the longest backoff.
    h.sim.set_fault(
        ocm_lab_sim::Behaviour::BootstrapMount,
        ocm_lab_sim::Fault::Delay(std::time::Duration::from_millis(122_000)),
    );
    let mut plan = common::plan_workflow(&h.lab, "up");
    plan.steps.retain(|s| {
        matches!(
            s.step.as_str(),
            "preflight" | "network" | "create" | "node-images" | "klusterlet"
        )
    });
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{:?}", r.failed);
    let ns = "open-cluster-management-agent";
    let pod = |name: &str, app: &str, phase: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
            "status": {"phase": phase}})
    };
    h.sim.with_world(|w| {
        for p in [
            pod(
                "registration-waiting",
                "klusterlet-registration-agent",
                "Pending",
            ),
            pod(
                "registration-running",
                "klusterlet-registration-agent",
                "Running",
            ),
            pod("other-waiting", "something-else", "Pending"),
        ] {
            w.put_object("cluster1", p).unwrap();
        }
    });

    let (r, _) = h.run("up").await;
    assert!(r.ok, "{:?}", r.failed);
    let spoke = h.sim.api("cluster1");
    let mut left = Vec::new();
    for name in [
        "registration-waiting",
        "registration-running",
        "other-waiting",
    ] {
        if spoke
            .get(&ObjectRef::new("v1", "Pod", Some(ns), name))
            .await
            .unwrap()
            .is_some()
        {
            left.push(name);
        }
    }
    assert_eq!(left, ["registration-running", "other-waiting"]);
}

/// The registration agent's Pod, started by the klusterlet step before the join wrote the bootstrap
/// Secret, waits for the kubelet's next mount retry, modelled here as the longest backoff (2 min 2 s,
/// `Behaviour::BootstrapMount`). The join restarts it once the Secret is in place, so the spoke registers
/// and is accepted right after the Secret, not a backoff later (simulated time, paused clock).
#[tokio::test(start_paused = true)]
async fn the_join_does_not_wait_for_the_kubelets_mount_backoff() {
    let backoff = std::time::Duration::from_millis(122_000);
    let h = Harness::default_lab();
    h.sim.set_fault(
        ocm_lab_sim::Behaviour::BootstrapMount,
        ocm_lab_sim::Fault::Delay(backoff),
    );
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{:?}", r.failed);
    let calls = h.sim.calls();
    let secret = calls
        .iter()
        .find(|c| {
            c.cluster == "cluster1"
                && c.verb == "kube.apply"
                && c.object.contains("bootstrap-hub-kubeconfig")
                && c.outcome.is_ok()
        })
        .expect("the join wrote cluster1's bootstrap Secret");
    let approved = calls
        .iter()
        .find(|c| {
            c.verb == "kube.approve-csr" && c.object.contains("cluster1") && c.outcome.is_ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "cluster1's CSR was approved: {:?}",
                calls
                    .iter()
                    .filter(|c| c.verb == "kube.approve-csr")
                    .collect::<Vec<_>>()
            )
        });
    assert!(
        approved.at < secret.at + backoff,
        "cluster1 was accepted {:?} after its bootstrap Secret: the join waited for the kubelet's mount backoff",
        approved.at - secret.at
    );
}
