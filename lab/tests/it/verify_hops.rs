//! Verification names the broken hop: one test per hop. Each brings the default lab up on the SIMULATED
//! lab (a test double, not real clusters), breaks exactly one link of the chain for `cluster2`, runs
//! `verify`, and reads the report `verify` saved (what `status` and `--junit` read too): `cluster2` must
//! fail that check with that hop, and `cluster1` must still pass it.

use serde_json::{Value, json};

use crate::common;
use crate::engine::{Harness, failure};
use ocm_lab::backend::ObjectRef;
use ocm_lab::topology::Check;
use ocm_lab_sim::{Behaviour, Fault};

const INVENTORY: &str = "cluster-inventory";

fn profile(spoke: &str) -> ObjectRef {
    ObjectRef::new(
        "multicluster.x-k8s.io/v1alpha1",
        "ClusterProfile",
        Some(INVENTORY),
        spoke,
    )
}

fn property(name: &str) -> ObjectRef {
    ObjectRef::new("about.k8s.io/v1alpha1", "ClusterProperty", None, name)
}

fn property_object(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": name},
        "spec": {"value": value},
    })
}

/// A simulated controller or call stops working for good.
fn fail_always(h: &Harness, b: Behaviour) {
    h.sim.set_fault(b, Fault::FailAlways("simulated".into()));
}

async fn up(h: &Harness) {
    let (r, _) = h.run("up").await;
    assert!(r.ok, "up: {}", failure(&r));
}

/// Brings the default lab up, lets `break_it` break one link, and returns what `verify` then reports.
async fn verify_after(break_it: impl AsyncFnOnce(&Harness)) -> Vec<Value> {
    let h = Harness::default_lab();
    up(&h).await;
    break_it(&h).await;
    verify(&h).await
}

/// Runs `verify` and returns the saved report's results.
async fn verify(h: &Harness) -> Vec<Value> {
    let (r, _) = h.run("verify").await;
    assert!(!r.ok, "verify passed although a hop is broken");
    saved_results(h)
}

/// The results of the last verification, as `verify` saved them.
pub(crate) fn saved_results(h: &Harness) -> Vec<Value> {
    let text = std::fs::read_to_string(h.state.path.join("last-verification.json"))
        .expect("verify saves its report");
    let report: Value = serde_json::from_str(&text).unwrap();
    report["results"].as_array().unwrap().clone()
}

/// The result of `check` for `spoke`.
pub(crate) fn result<'a>(results: &'a [Value], spoke: &str, check: Check) -> &'a Value {
    results
        .iter()
        .find(|r| r["spoke"] == spoke && r["check"] == check.as_str())
        .unwrap_or_else(|| panic!("no {check} result for {spoke}: {results:#?}"))
}

/// `cluster2` fails `check` at `hop` with a detail containing `says`; `cluster1` passes it (unless the
/// break is lab-wide, `both`).
fn assert_hop(results: &[Value], check: Check, hop: &str, says: &str, both: bool) {
    let broken = result(results, "cluster2", check);
    assert_eq!(broken["ok"], false, "{broken:#}");
    assert_eq!(broken["hop"], hop, "{broken:#}");
    let text = format!("{} {}", broken["detail"], broken["next"]);
    assert!(text.contains(says), "`{says}` not in: {text}");
    let other = result(results, "cluster1", check);
    if both {
        assert_eq!(other["hop"], hop, "{other:#}");
    } else {
        assert_eq!(other["ok"], true, "only cluster2 was broken: {other:#}");
    }
}

#[tokio::test(start_paused = true)]
async fn hop_hub_gate_off() {
    let text = common::default_with(
        "featureGates: [ClusterProfile, ResourceCleanup]",
        "featureGates: [ResourceCleanup]",
    );
    let h = Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    );
    let (r, _) = h.run("up").await;
    assert_eq!(r.failed.as_ref().map(|f| f.0.as_str()), Some("verify"));
    let results = saved_results(&h);
    assert_hop(
        &results,
        Check::Properties,
        "hub-gate-off",
        "hub registration gate `ClusterProfile`",
        true,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_no_bound_binding() {
    let results = verify_after(async |h| {
        // Someone unbinds the fleet from the inventory namespace: no profile there for any spoke.
        let binding = ObjectRef::new(
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSetBinding",
            Some(INVENTORY),
            "sandbox-fleet",
        );
        assert!(h.sim.api("hub").delete(&binding).await.unwrap());
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "no-bound-binding",
        "no Bound ManagedClusterSetBinding in `cluster-inventory`",
        true,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_profile_missing() {
    let results = verify_after(async |h| {
        // The hub's profile controller stops working and cluster2's profile is gone.
        fail_always(h, Behaviour::ProfileLifecycle);
        assert!(h.sim.api("hub").delete(&profile("cluster2")).await.unwrap());
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "profile-missing",
        "ClusterProfile cluster-inventory/cluster2 does not exist",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_spoke_gate_off() {
    // cluster2's Klusterlet lacks the ClusterProperty gate: `up` stops at its properties; verify says why.
    let text = common::default_with(
        "    - name: cluster2\n",
        "    - name: cluster2\n      featureGates: [ClusterClaim]\n",
    )
    .replace("timeout: 5m", "timeout: 5m\n  timeouts: {join: 2m}");
    let h = Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    );
    let (r, _) = h.run("up").await;
    assert_eq!(
        r.failed.as_ref().map(|f| f.0.as_str()),
        Some("properties[cluster2]")
    );
    let results = verify(&h).await;
    assert_hop(
        &results,
        Check::Properties,
        "spoke-gate-off",
        "registration gate `ClusterProperty` on cluster2's Klusterlet",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_property_missing_on_spoke() {
    let results = verify_after(async |h| {
        assert!(
            h.sim
                .api("cluster2")
                .delete(&property("region"))
                .await
                .unwrap()
        );
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "property-missing-on-spoke",
        "property `region=eu-west-1` is not on the spoke",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_spoke_only() {
    let results = verify_after(async |h| {
        let mut p = property_object("region", "eu-west-1");
        p["metadata"]["labels"] = json!({"open-cluster-management.io/spoke-only": ""});
        h.sim.api("cluster2").apply(&p).await.unwrap();
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "spoke-only",
        "labelled open-cluster-management.io/spoke-only",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_claims_truncated() {
    let results = verify_after(async |h| {
        // 21 properties that sort before the lab's: OCM keeps the first 20 custom claims by name.
        let api = h.sim.api("cluster2");
        for i in 0..21 {
            api.apply(&property_object(&format!("a{i:02}"), "x"))
                .await
                .unwrap();
        }
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "claims-truncated",
        "OCM keeps the first 20 by name",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_claims_blocked() {
    let results = verify_after(async |h| {
        // One value over 1024 characters: the hub rejects every claim update of cluster2, the probe included.
        h.sim
            .api("cluster2")
            .apply(&property_object("notes", &"n".repeat(1025)))
            .await
            .unwrap();
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "claims-blocked",
        "ClusterProperty `notes` has a value over 1024 characters",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_not_in_claims() {
    let results = verify_after(async |h| {
        // The registration agents stop syncing claims: the probe never reaches a ManagedCluster.
        fail_always(h, Behaviour::ClaimSync);
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "not-in-claims",
        "is on the spoke but not in ManagedCluster.status.clusterClaims",
        true,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_not_in_profile() {
    let results = verify_after(async |h| {
        // The hub's profile status controller stops: the probe is claimed but never reaches a profile.
        fail_always(h, Behaviour::ProfileStatus);
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "not-in-profile",
        "is in ManagedCluster.status.clusterClaims but not in ClusterProfile cluster-inventory/cluster2",
        true,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_not_joined() {
    let results = verify_after(async |h| {
        // cluster2's agent loses its hub credentials and re-bootstraps; nobody approves it again.
        h.sim.with_world(|w| w.unjoin("cluster2"));
    })
    .await;
    assert_hop(
        &results,
        Check::Properties,
        "not-joined",
        "ManagedCluster `cluster2` has not joined",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_no_access_provider() {
    let results = verify_after(async |h| {
        // cluster-proxy's serving cert is gone and cannot be made again: a new profile gets no provider.
        fail_always(h, Behaviour::ProxyServingCert);
        let hub = h.sim.api("hub");
        let cert = ObjectRef::new(
            "v1",
            "Secret",
            Some("open-cluster-management-addon"),
            "cluster-proxy-user-serving-cert",
        );
        assert!(hub.delete(&cert).await.unwrap());
        assert!(hub.delete(&profile("cluster2")).await.unwrap());
    })
    .await;
    assert_hop(
        &results,
        Check::AccessProviders,
        "no-access-provider",
        "Secret cluster-proxy-user-serving-cert exists",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_bad_access_provider() {
    let results = verify_after(async |h| {
        // cluster2's provider points at the wrong namespace (as with a mismatched chart install).
        fail_always(h, Behaviour::ProxyAccessProvider);
        h.sim.with_world(|w| {
            let mut p = w.get_object("hub", &profile("cluster2")).unwrap();
            for a in p["status"]["accessProviders"].as_array_mut().unwrap() {
                a["cluster"]["server"] =
                    json!("https://cluster-proxy-addon-user.elsewhere:9092/cluster2");
            }
            w.put_object("hub", p).unwrap();
        });
    })
    .await;
    assert_hop(
        &results,
        Check::AccessProviders,
        "bad-access-provider",
        "expected https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster2",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_not_reachable() {
    let results = verify_after(async |h| {
        // Requests through the user server fail (port-forward, TLS or the proxy path).
        fail_always(h, Behaviour::ServiceRequest);
    })
    .await;
    assert_hop(
        &results,
        Check::Reachable,
        "not-reachable",
        "the request did not get through",
        true,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_no_synced_credential() {
    let results = verify_after(async |h| {
        // The credential syncer stops and cluster2's copied token is gone.
        fail_always(h, Behaviour::MsaCredSync);
        let secret = ObjectRef::new("v1", "Secret", Some(INVENTORY), "cluster2-inventory-reader");
        assert!(h.sim.api("hub").delete(&secret).await.unwrap());
    })
    .await;
    assert_hop(
        &results,
        Check::Credentials,
        "no-synced-credential",
        "no Secret cluster-inventory/cluster2-inventory-reader",
        false,
    );
}

#[tokio::test(start_paused = true)]
async fn hop_condition_false() {
    let h = Harness::default_lab();
    up(&h).await;
    // cluster2's API server stops answering its agent's health checks: the agent marks the cluster
    // unavailable (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/spoke/managedcluster/joining_reconcile.go`), and the profile controller copies that
    // into the profile's conditions. (A lease that expired instead is hop `agent-stopped`: verify_run.rs.)
    h.sim.with_world(|w| {
        w.set_running("cluster2", false);
        let mc_ref = ObjectRef::new(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            "cluster2",
        );
        let mut mc = w.get_object("hub", &mc_ref).unwrap();
        for c in mc["status"]["conditions"].as_array_mut().unwrap() {
            if c["type"] == "ManagedClusterConditionAvailable" {
                c["status"] = json!("False");
                c["reason"] = json!("ManagedClusterKubeAPIServerUnavailable");
            }
        }
        w.put_object("hub", mc).unwrap();
    });
    // The other checks need cluster2's API server, which is down: check conditions alone.
    let mut h = h;
    h.lab.verify.checks = vec![Check::Conditions];
    let results = verify(&h).await;
    assert_hop(
        &results,
        Check::Conditions,
        "condition-false",
        "ControlPlaneHealthy=False",
        false,
    );
}
