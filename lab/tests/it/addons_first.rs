//! The addon charts go in while the hub's cluster-manager still rolls out: in the
//! simulated lab they wait for the hub CRDs they apply to be served, install, and the addons become
//! Available once the hub is ready and the spokes joined.

use std::time::Duration;

use ocm_lab::backend::ObjectRef;
use ocm_lab_sim::{Behaviour, Fault};
use tokio_util::sync::CancellationToken;

use crate::common;
use crate::engine::Harness;

#[tokio::test(start_paused = true)]
async fn addon_charts_installed_while_the_hub_rolls_out_wait_for_its_crds_then_work() {
    let h = Harness::default_lab();
    // The operator's first pass takes a minute, as on a real runner, so the charts start before the hub
    // CRDs exist; the hub's Deployments then take another half minute to roll out (their Pods pull and
    // start), so the charts are in before the hub is ready.
    h.sim.set_fault(
        Behaviour::HubOperator,
        Fault::Delay(Duration::from_secs(60)),
    );
    h.sim.set_fault(
        Behaviour::DeploymentRollout,
        Fault::Delay(Duration::from_secs(30)),
    );
    let mut plan = common::plan_workflow(&h.lab, "up");
    plan.steps.retain(|s| {
        matches!(
            s.step.as_str(),
            "preflight"
                | "network"
                | "create"
                | "node-images"
                | "hub-manager"
                | "cluster-proxy"
                | "msa"
        )
    });
    assert!(plan.steps.iter().any(|s| s.id == "cluster-proxy"));
    assert!(plan.steps.iter().any(|s| s.id == "msa"));
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{:?}", r.failed);

    let hub = h.sim.api(&h.lab.hub.cluster.name);
    let cm = hub
        .get(&ObjectRef::new(
            "operator.open-cluster-management.io/v1",
            "ClusterManager",
            None,
            "cluster-manager",
        ))
        .await
        .unwrap()
        .expect("the cluster-manager chart created the ClusterManager");
    let progressing = cm["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Progressing" && c["status"] == "True");
    assert!(
        progressing,
        "the addon charts were meant to go in before the hub is ready: {}",
        cm["status"]
    );
    for addon in ["cluster-proxy", "managed-serviceaccount"] {
        let cma = ObjectRef::new(
            "addon.open-cluster-management.io/v1alpha1",
            "ClusterManagementAddOn",
            None,
            addon,
        );
        assert!(hub.get(&cma).await.unwrap().is_some(), "{addon}");
    }

    // The full `up` then places, joins and verifies as before.
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{:?}", r.failed);
    for c in ["cluster1", "cluster2"] {
        let mca = hub
            .get(&ObjectRef::new(
                "addon.open-cluster-management.io/v1alpha1",
                "ManagedClusterAddOn",
                Some(c),
                "cluster-proxy",
            ))
            .await
            .unwrap()
            .expect("the addon manager created the ManagedClusterAddOn from the lab's Placement");
        let available = mca["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        assert!(available, "{}", mca["status"]);
    }
}
