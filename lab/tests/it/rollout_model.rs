//! How the simulated lab charges a rollout's delay: once per rollout, on the
//! controller's first act on it. The cluster-manager operator's later pass, which reports its Deployments
//! ready, reacts to them at once (open-cluster-management-io/ocm v1.3.1
//! `pkg/operator/.../clustermanager_controller.go`), and an addon's ManagedClusterAddOn is created by the hub's
//! running addon manager at once; the addon's minute is its agent's rollout, up to `Available`. A cluster
//! created again under the same name rolls out again.

use std::time::Duration;

use ocm_lab::step::events::{Event, Stamped};
use ocm_lab_sim::{Behaviour, Fault};

use crate::engine::{Harness, failure};

/// When `step` finished, in whole modelled seconds since the run started.
fn finished_s(events: &[Stamped], step: &str) -> u64 {
    events
        .iter()
        .find_map(|e| match &e.event {
            Event::StepFinished { step: s, .. } if s == step => Some(e.t_ms / 1000),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{step} did not finish"))
}

/// Modelled latencies for the slow parts: a kind create and each rollout a minute.
fn minute_rollouts(h: &Harness) {
    for b in [
        Behaviour::KindCreate,
        Behaviour::HubOperator,
        Behaviour::KlusterletOperator,
        Behaviour::AddonInstall,
    ] {
        h.sim.set_fault(b, Fault::Delay(Duration::from_secs(60)));
    }
}

/// Create, then the hub's and the spokes' rollouts side by side, then the addons' agents: three minutes.
fn assert_three_minutes(events: &[Stamped]) {
    assert_eq!(finished_s(events, "create[hub]"), 60);
    // The klusterlet rolls out while the hub does.
    assert_eq!(finished_s(events, "klusterlet[cluster1]"), 120);
    // One minute for the cluster-manager: the pass that reports its Deployments ready is not charged again.
    assert_eq!(finished_s(events, "hub-ready"), 120);
    // The join and accept cost no rollout; the addon's agent does, once.
    assert_eq!(finished_s(events, "accept[cluster2]"), 120);
    assert_eq!(finished_s(events, "cluster-proxy-ready"), 180);
    assert_eq!(finished_s(events, "msa-ready"), 180);
    assert_eq!(finished_s(events, "verify"), 180);
}

#[tokio::test(start_paused = true)]
async fn each_rollout_costs_its_minute_once_and_a_lab_created_again_pays_again() {
    let h = Harness::default_lab();
    minute_rollouts(&h);
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert_three_minutes(&events);

    // A second `up` on the lab that is up rolls nothing out.
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert_eq!(finished_s(&events, "verify"), 0);

    // After `down`, the clusters are new: every rollout is charged again.
    let (r, _) = h.run("down").await;
    assert!(r.ok, "{}", failure(&r));
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert_three_minutes(&events);
}

#[tokio::test(start_paused = true)]
async fn a_delay_set_again_charges_the_next_pass_of_a_rolled_out_operator() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::KlusterletOperator,
        Fault::Delay(Duration::from_secs(60)),
    );
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert_eq!(finished_s(&events, "klusterlet[cluster1]"), 60);

    // The operator has to act again (its Klusterlet's spec changed), and is slow now.
    h.sim.set_fault(
        Behaviour::KlusterletOperator,
        Fault::Delay(Duration::from_secs(45)),
    );
    let spoke = h.sim.api("cluster1");
    let klusterlet = ocm_lab::backend::ObjectRef::new(
        "operator.open-cluster-management.io/v1",
        "Klusterlet",
        None,
        "klusterlet",
    );
    let before = spoke.get(&klusterlet).await.unwrap().unwrap();
    let mut k = before.clone();
    k.as_object_mut().unwrap().remove("status");
    k["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("managedFields");
    k["spec"]["nodePlacement"] = serde_json::json!({"nodeSelector": {"lab.example.com/test": "x"}});
    spoke.apply(&k).await.unwrap();
    let generation = |o: &serde_json::Value| o["metadata"]["generation"].as_i64();
    let observed = |o: &serde_json::Value| o["status"]["observedGeneration"].as_i64();
    let now = spoke.get(&klusterlet).await.unwrap().unwrap();
    assert!(generation(&now) > generation(&before));
    assert_ne!(
        observed(&now),
        generation(&now),
        "reported before its delay"
    );
    tokio::time::sleep(Duration::from_secs(46)).await;
    let later = spoke.get(&klusterlet).await.unwrap().unwrap();
    assert_eq!(observed(&later), generation(&later), "{}", later["status"]);
}
