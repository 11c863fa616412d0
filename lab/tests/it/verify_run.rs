//! How `verify` runs, on the SIMULATED lab (a test double, not real clusters): permanent diagnoses end a
//! check at once, `reachable` retries while the cluster-proxy tunnel comes up and tells a 502 from a 400,
//! spokes are checked concurrently with their own clocks, a stopped registration agent is named as such,
//! and what it reports (hop in JSON events, real contexts, a probe counted as a change).

use std::time::Duration;

use serde_json::{Value, json};

use crate::common;
use crate::engine::{Harness, failure};
use ocm_lab::backend::ObjectRef;
use ocm_lab::step::events::{Event, Outcome, ResultStatus, Stamped};
use ocm_lab::topology::Check;
use ocm_lab_sim::{Behaviour, Call, Fault};

use crate::verify_hops::{result, saved_results};

const INVENTORY: &str = "cluster-inventory";

async fn up(h: &Harness) {
    let (r, _) = h.run("up").await;
    assert!(r.ok, "up: {}", failure(&r));
}

/// Runs `verify` and returns its events and the backend calls it made.
async fn verify_calls(h: &Harness) -> (bool, Vec<Stamped>, Vec<Call>) {
    let before = h.sim.calls().len();
    let (r, events) = h.run("verify").await;
    let calls = h.sim.calls().split_off(before);
    (r.ok, events, calls)
}

/// Waits that ran out of time: what a check that waits out its deadline leaves in the call log.
fn timed_out_waits(calls: &[Call]) -> Vec<&Call> {
    calls
        .iter()
        .filter(|c| c.verb == "kube.wait" && c.outcome.is_err())
        .collect()
}

/// The verification result events, as `--output json` prints them.
fn result_events(events: &[Stamped]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| matches!(e.event, Event::Result { .. }))
        .map(|e| serde_json::to_value(e).unwrap())
        .collect()
}

fn property_object(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": name},
        "spec": {"value": value},
    })
}

// ---- permanent diagnoses ------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn with_the_hub_gate_off_verify_fails_at_once_saying_it_is_permanent() {
    let text = common::default_with(
        "featureGates: [ClusterProfile, ResourceCleanup]",
        "featureGates: [ResourceCleanup]",
    );
    let h = Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    );
    assert_eq!(h.lab.verify.timeout, Duration::from_secs(300));
    let (r, _) = h.run("up").await;
    assert_eq!(r.failed.as_ref().map(|f| f.0.as_str()), Some("verify"));
    let (ok, events, calls) = verify_calls(&h).await;
    assert!(!ok);
    // Nothing waited for what cannot come: no wait ran into the 5-minute deadline.
    assert!(
        timed_out_waits(&calls).is_empty(),
        "verify waited although the hub gate is off: {:#?}",
        timed_out_waits(&calls)
    );
    let results = saved_results(&h);
    assert!(!results.is_empty());
    for r in &results {
        assert_eq!(r["ok"], false, "{r:#}");
        assert_eq!(r["hop"], "hub-gate-off", "{r:#}");
        assert_eq!(r["permanent"], true, "{r:#}");
    }
    let props = result(&results, "cluster1", Check::Properties);
    assert!(
        props["next"]
            .as_str()
            .unwrap()
            .contains("hub registration gate `ClusterProfile`"),
        "{props:#}"
    );
    // The JSON events carry the hop and the permanence too.
    let json = result_events(&events);
    assert!(
        json.iter()
            .all(|e| e["hop"] == "hub-gate-off" && e["permanent"] == true),
        "{json:#?}"
    );
}

/// Brings the default lab up, lets `break_it` break cluster2, runs `verify` and returns its results and
/// calls.
async fn verify_broken(break_it: impl AsyncFnOnce(&Harness)) -> (Vec<Value>, Vec<Call>) {
    let h = Harness::default_lab();
    up(&h).await;
    break_it(&h).await;
    let (ok, _, calls) = verify_calls(&h).await;
    assert!(!ok, "verify passed although cluster2 is broken");
    (saved_results(&h), calls)
}

#[tokio::test(start_paused = true)]
async fn permanent_diagnoses_end_the_properties_check_without_waiting() {
    // (what breaks cluster2, the hop, whether the ClusterProfile is gone with it)
    let no_binding = async |h: &Harness| {
        let binding = ObjectRef::new(
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSetBinding",
            Some(INVENTORY),
            "sandbox-fleet",
        );
        assert!(h.sim.api("hub").delete(&binding).await.unwrap());
    };
    let (results, calls) = verify_broken(no_binding).await;
    let r = result(&results, "cluster2", Check::Properties);
    assert_eq!(
        (r["hop"].as_str(), r["permanent"].as_bool()),
        (Some("no-bound-binding"), Some(true)),
        "{r:#}"
    );
    let conditions = result(&results, "cluster2", Check::Conditions);
    assert_eq!(conditions["permanent"], true, "{conditions:#}");
    assert!(timed_out_waits(&calls).is_empty(), "{calls:#?}");

    let too_many = async |h: &Harness| {
        let api = h.sim.api("cluster2");
        for i in 0..21 {
            api.apply(&property_object(&format!("a{i:02}"), "x"))
                .await
                .unwrap();
        }
    };
    let (results, calls) = verify_broken(too_many).await;
    let r = result(&results, "cluster2", Check::Properties);
    assert_eq!(
        (r["hop"].as_str(), r["permanent"].as_bool()),
        (Some("claims-truncated"), Some(true)),
        "{r:#}"
    );
    assert!(timed_out_waits(&calls).is_empty(), "{calls:#?}");

    let too_long = async |h: &Harness| {
        h.sim
            .api("cluster2")
            .apply(&property_object("notes", &"n".repeat(1025)))
            .await
            .unwrap();
    };
    let (results, calls) = verify_broken(too_long).await;
    let r = result(&results, "cluster2", Check::Properties);
    assert_eq!(
        (r["hop"].as_str(), r["permanent"].as_bool()),
        (Some("claims-blocked"), Some(true)),
        "{r:#}"
    );
    assert!(timed_out_waits(&calls).is_empty(), "{calls:#?}");
}

#[tokio::test(start_paused = true)]
async fn a_diagnosis_that_can_change_is_waited_for_and_not_called_permanent() {
    let (results, calls) = verify_broken(async |h: &Harness| {
        h.sim
            .set_fault(Behaviour::ClaimSync, Fault::FailAlways("simulated".into()));
    })
    .await;
    let r = result(&results, "cluster2", Check::Properties);
    assert_eq!(r["hop"], "not-in-claims", "{r:#}");
    assert!(r.get("permanent").is_none(), "{r:#}");
    assert!(
        !timed_out_waits(&calls).is_empty(),
        "it waited for the claim"
    );
}

// ---- reachable: the tunnel ----------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn reachable_waits_for_a_tunnel_that_comes_up_after_the_addon_is_available() {
    let h = Harness::default_lab();
    // The proxy agents connect 20 s after their addon is Available (open-cluster-management-io/cluster-proxy
    // v0.10.0 `cmd/addon-agent/main.go`).
    h.sim.set_fault(
        Behaviour::ProxyTunnel,
        Fault::Delay(Duration::from_secs(20)),
    );
    let (r, events) = h.run("up").await;
    assert!(r.ok, "up: {}", failure(&r));
    let reachable: Vec<&Stamped> = events
        .iter()
        .filter(|e| matches!(&e.event, Event::Result { check, .. } if check == "reachable"))
        .collect();
    assert_eq!(reachable.len(), 2, "{reachable:#?}");
    for e in reachable {
        let Event::Result { status, detail, .. } = &e.event else {
            unreachable!()
        };
        assert_eq!(*status, ResultStatus::Pass, "{detail}");
        assert!(detail.contains("attempts"), "it had to retry: {detail}");
    }
}

#[tokio::test(start_paused = true)]
async fn reachable_gives_up_at_the_deadline_naming_the_unconnected_proxy_agent() {
    let mut h = Harness::default_lab();
    h.lab.verify.timeout = Duration::from_secs(60);
    h.sim.set_fault(
        Behaviour::ProxyTunnel,
        Fault::FailAlways("simulated".into()),
    );
    let (r, _) = h.run("up").await;
    assert_eq!(r.failed.as_ref().map(|f| f.0.as_str()), Some("verify"));
    let results = saved_results(&h);
    for spoke in ["cluster1", "cluster2"] {
        let r = result(&results, spoke, Check::Reachable);
        assert_eq!(r["hop"], "proxy-agent-not-connected", "{r:#}");
        let detail = r["detail"].as_str().unwrap();
        assert!(
            detail.contains("HTTP 502") && detail.contains("No agent available"),
            "{detail}"
        );
        assert!(detail.contains("attempts"), "{detail}");
        assert!(
            r["next"]
                .as_str()
                .unwrap()
                .contains(&format!("kubectl --context kind-{spoke}")),
            "{r:#}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn reachable_tells_a_proxy_server_it_cannot_reach_from_an_unconnected_agent() {
    let mut h = Harness::default_lab();
    up(&h).await;
    h.sim.set_fault(
        Behaviour::ProxyServer,
        Fault::FailAlways("connection refused".into()),
    );
    h.lab.verify.checks = vec![Check::Reachable];
    h.lab.verify.timeout = Duration::from_secs(30);
    let (ok, _, _) = verify_calls(&h).await;
    assert!(!ok);
    let results = saved_results(&h);
    let r = result(&results, "cluster2", Check::Reachable);
    assert_eq!(r["hop"], "proxy-server-unreachable", "{r:#}");
    assert!(r["detail"].as_str().unwrap().contains("HTTP 400"), "{r:#}");
}

// ---- per-spoke clocks ---------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_spoke_is_not_held_up_or_timed_by_a_failing_one() {
    let mut h = Harness::default_lab();
    up(&h).await;
    // cluster1 (checked first before) loses a property: its check waits out the deadline.
    let region = ObjectRef::new("about.k8s.io/v1alpha1", "ClusterProperty", None, "region");
    assert!(h.sim.api("cluster1").delete(&region).await.unwrap());
    h.lab.verify.checks = vec![Check::Properties];
    h.lab.verify.timeout = Duration::from_secs(60);
    let (ok, events, _) = verify_calls(&h).await;
    assert!(!ok);
    let position = |spoke: &str| {
        events
            .iter()
            .position(
                |e| matches!(&e.event, Event::Result { subject, .. } if subject.starts_with(spoke)),
            )
            .unwrap()
    };
    assert!(
        position("cluster2") < position("cluster1"),
        "cluster2 was only checked after cluster1 gave up"
    );
    let results = saved_results(&h);
    let r = result(&results, "cluster2", Check::Properties);
    assert_eq!(r["ok"], true, "{r:#}");
    assert!(
        r["detail"].as_str().unwrap().contains("probe included"),
        "{r:#}"
    );
    assert!(r["latencyMs"].is_u64(), "{r:#}");
    let failed = result(&results, "cluster1", Check::Properties);
    assert_eq!(failed["hop"], "property-missing-on-spoke", "{failed:#}");
    // The hint names the spoke's real context.
    assert!(
        failed["next"]
            .as_str()
            .unwrap()
            .contains("kubectl --context kind-cluster1 get clusterproperties"),
        "{failed:#}"
    );
}

// ---- a stopped registration agent ---------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_stopped_agent_is_named_not_taken_for_a_gate_that_is_off() {
    let h = Harness::default_lab();
    up(&h).await;
    assert!(h.sim.stop_agent("cluster2"));
    // The hub notices 5 × leaseDurationSeconds (300 s) after the last renewal.
    tokio::time::sleep(Duration::from_secs(301)).await;
    let mc = h
        .sim
        .object(
            "hub",
            &ObjectRef::new(
                "cluster.open-cluster-management.io/v1",
                "ManagedCluster",
                None,
                "cluster2",
            ),
        )
        .unwrap();
    let condition = |o: &Value, t: &str| {
        o["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
            .unwrap()
    };
    let available = condition(&mc, "ManagedClusterConditionAvailable");
    assert_eq!(
        (&available["status"], &available["reason"]),
        (
            &json!("Unknown"),
            &json!("ManagedClusterLeaseUpdateStopped")
        )
    );
    assert_eq!(condition(&mc, "ManagedClusterJoined")["status"], "True");
    let profile = h
        .sim
        .object(
            "hub",
            &ObjectRef::new(
                "multicluster.x-k8s.io/v1alpha1",
                "ClusterProfile",
                Some(INVENTORY),
                "cluster2",
            ),
        )
        .unwrap();
    assert_eq!(
        condition(&profile, "ControlPlaneHealthy")["status"],
        "Unknown"
    );
    assert_eq!(condition(&profile, "Joined")["status"], "True");
    assert!(
        !profile["status"]["accessProviders"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The hub marks the cluster's addons Unknown with the same reason, as recorded.
    let msa = h
        .sim
        .object(
            "hub",
            &ObjectRef::new(
                "addon.open-cluster-management.io/v1alpha1",
                "ManagedClusterAddOn",
                Some("cluster2"),
                "managed-serviceaccount",
            ),
        )
        .unwrap();
    assert_eq!(
        condition(&msa, "Available")["reason"],
        "ManagedClusterLeaseUpdateStopped"
    );

    let mut h = h;
    h.lab.verify.timeout = Duration::from_secs(30);
    let (ok, _, _) = verify_calls(&h).await;
    assert!(!ok);
    let results = saved_results(&h);
    for check in [Check::Properties, Check::Conditions] {
        let r = result(&results, "cluster2", check);
        assert_eq!(r["hop"], "agent-stopped", "{r:#}");
        let text = format!("{} {}", r["detail"], r["next"]);
        assert!(!text.contains("gate"), "{text}");
        assert!(text.contains("stopped updating its lease"), "{text}");
    }
    assert_eq!(result(&results, "cluster1", Check::Properties)["ok"], true);
    // The cluster-proxy agent is another pod: its tunnel still carries requests.
    assert_eq!(result(&results, "cluster2", Check::Reachable)["ok"], true);

    // `status` names it.
    let ctx = std::sync::Arc::new(ocm_lab::step::RunCtx::new(
        h.lab.clone(),
        h.sim.backends(),
        h.state.clone(),
        ocm_lab::patch::PatchSet::embedded().unwrap(),
        ocm_lab::step::events::Events::channel().0,
        tokio_util::sync::CancellationToken::new(),
    ));
    let status = ocm_lab::commands::status::collect(&ctx).await;
    let text = ocm_lab::commands::status::render(&status);
    assert!(
        text.contains("registration agent stopped updating its lease"),
        "{text}"
    );

    // Started again, the agent is Available at once and verify passes.
    h.sim.start_agent("cluster2");
    let (ok, _, _) = verify_calls(&h).await;
    assert!(ok, "{:#?}", saved_results(&h));
}

// ---- reporting ----------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_verify_that_wrote_its_probe_is_a_change() {
    let h = Harness::default_lab();
    up(&h).await;
    let (r, events) = h.run("verify").await;
    assert!(r.ok, "{}", failure(&r));
    assert_eq!(r.changed, 1, "the probe was written and deleted");
    assert!(events.iter().any(|e| matches!(
        &e.event,
        Event::StepFinished {
            step,
            outcome: Outcome::Changed,
            ..
        } if step == "verify"
    )));
}
