//! The `consumer` check on the SIMULATED lab (a test double, not real clusters): a Pod on the hub, under a
//! ServiceAccount the check creates, reaches each spoke through the provider file and `cp-creds`; breaking
//! one hop of that path fails the check naming it, and `reset` heals it.

use serde_json::Value;

use crate::common;
use crate::engine::{Harness, failure};
use crate::verify_hops::{result, saved_results};
use ocm_lab::backend::ObjectRef;
use ocm_lab::topology::Check;
use ocm_lab::verify::consumer::{CHECK_SA, cp_creds_role};
use ocm_lab_sim::{Behaviour, Fault};

const INVENTORY: &str = "cluster-inventory";

/// The default lab with the consumer check on (it needs an image of the consumer to run).
fn harness() -> Harness {
    let text = common::default_with(
        "checks: [properties, access-providers, reachable, credentials, conditions]",
        "checks: [properties, access-providers, reachable, credentials, conditions, consumer]\n    consumerImage: ocm-lab-consumer:test",
    );
    Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    )
}

async fn up(h: &Harness) {
    let (r, _) = h.run("up").await;
    assert!(r.ok, "up: {}", failure(&r));
}

/// `reset` as `ocm-lab reset` runs it (the reset workflow, then `up`), the faults the test set cleared.
async fn reset_heals(h: &Harness) {
    h.sim.clear_faults();
    let (r, _) = h.run("reset").await;
    assert!(r.ok, "reset: {}", failure(&r));
    up(h).await;
    let results = saved_results(h);
    for spoke in ["cluster1", "cluster2"] {
        let r = result(&results, spoke, Check::Consumer);
        assert_eq!(r["ok"], true, "after reset: {r:#}");
    }
}

/// What the check created, as the hub still holds it.
fn leftovers(h: &Harness) -> Vec<String> {
    let mut left = Vec::new();
    for (api_version, kind, name) in [
        ("v1", "Pod", CHECK_SA.to_owned()),
        ("v1", "ServiceAccount", CHECK_SA.to_owned()),
        ("v1", "ConfigMap", format!("{CHECK_SA}-provider-file")),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            cp_creds_role(CHECK_SA),
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            cp_creds_role(CHECK_SA),
        ),
    ] {
        let r = ObjectRef::new(api_version, kind, Some(INVENTORY), &name);
        if h.sim.object("hub", &r).is_some() {
            left.push(r.to_string());
        }
    }
    left
}

/// `spoke`'s consumer result failed at `hop`, saying `says`.
fn assert_failed(results: &[Value], spoke: &str, hop: &str, says: &str) {
    let r = result(results, spoke, Check::Consumer);
    assert_eq!(r["ok"], false, "{r:#}");
    assert_eq!(r["hop"], hop, "{r:#}");
    let text = format!("{} {}", r["detail"], r["next"]);
    assert!(text.contains(says), "`{says}` not in: {text}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_on_the_hub_reaches_every_spoke_through_cp_creds_and_leaves_nothing_behind() {
    let h = harness();
    up(&h).await;
    let results = saved_results(&h);
    for spoke in ["cluster1", "cluster2"] {
        let r = result(&results, spoke, Check::Consumer);
        assert_eq!(r["ok"], true, "{r:#}");
        let detail = r["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("ServiceAccount cluster-inventory/{CHECK_SA}, through cp-creds and https://cluster-proxy-addon-user.open-cluster-management-addon:9092/{spoke}, got v1.")),
            "{detail}"
        );
    }
    assert_eq!(leftovers(&h), Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_synced_secret_that_is_gone_is_the_plugin_refused_hop_and_reset_heals_it() {
    let h = harness();
    up(&h).await;
    // The credential syncer stops and cluster2's copied token is gone.
    h.sim.set_fault(
        Behaviour::MsaCredSync,
        Fault::FailAlways("simulated".into()),
    );
    let secret = ObjectRef::new("v1", "Secret", Some(INVENTORY), "cluster2-inventory-reader");
    assert!(h.sim.api("hub").delete(&secret).await.unwrap());
    let (r, _) = h.run("verify").await;
    assert!(!r.ok);
    let results = saved_results(&h);
    assert_failed(
        &results,
        "cluster2",
        "plugin-refused",
        "failed to get synced credential secret cluster-inventory/cluster2-inventory-reader: secrets \\\"cluster2-inventory-reader\\\" not found",
    );
    assert_eq!(result(&results, "cluster1", Check::Consumer)["ok"], true);
    assert_eq!(
        leftovers(&h),
        Vec::<String>::new(),
        "removed after a failed check too"
    );
    reset_heals(&h).await;
}

#[tokio::test(start_paused = true)]
async fn a_profile_without_the_access_provider_is_the_provider_hop_and_reset_heals_it() {
    let h = harness();
    up(&h).await;
    // cluster-proxy's serving cert is gone and cannot be made again: a new profile gets no provider.
    h.sim.set_fault(
        Behaviour::ProxyServingCert,
        Fault::FailAlways("simulated".into()),
    );
    let hub = h.sim.api("hub");
    let cert = ObjectRef::new(
        "v1",
        "Secret",
        Some("open-cluster-management-addon"),
        "cluster-proxy-user-serving-cert",
    );
    assert!(hub.delete(&cert).await.unwrap());
    let profile = ObjectRef::new(
        "multicluster.x-k8s.io/v1alpha1",
        "ClusterProfile",
        Some(INVENTORY),
        "cluster2",
    );
    assert!(hub.delete(&profile).await.unwrap());
    let mut h = h;
    h.lab.verify.checks = vec![Check::Consumer];
    let (r, _) = h.run("verify").await;
    assert!(!r.ok);
    assert_failed(
        &saved_results(&h),
        "cluster2",
        "no-access-provider",
        "ClusterProfile cluster2 has none of the provider file's access providers (open-cluster-management; it has: none)",
    );
    reset_heals(&h).await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_role_removed_before_the_pod_runs_is_the_plugin_refused_hop_and_reset_heals_it()
{
    let h = harness();
    up(&h).await;
    // The kubelet takes its time to run the Pod; meanwhile someone removes the Role cp-creds needs.
    h.sim.set_fault(
        Behaviour::PodRun,
        Fault::Delay(std::time::Duration::from_secs(30)),
    );
    let role = ObjectRef::new(
        "rbac.authorization.k8s.io/v1",
        "Role",
        Some(INVENTORY),
        &cp_creds_role(CHECK_SA),
    );
    let hub = h.sim.api("hub");
    // As soon as the check has created it (the simulated clock stands still while nothing waits).
    let remove_role = async {
        for _ in 0..200 {
            if hub.delete(&role).await.unwrap() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("the check never created its Role {role}");
    };
    let ((r, _), ()) = tokio::join!(h.run("verify"), remove_role);
    assert!(!r.ok);
    let results = saved_results(&h);
    for spoke in ["cluster1", "cluster2"] {
        assert_failed(
            &results,
            spoke,
            "plugin-refused",
            &format!(
                "secrets \\\"{spoke}-inventory-reader\\\" is forbidden: User \\\"system:serviceaccount:cluster-inventory:{CHECK_SA}\\\" cannot get resource \\\"secrets\\\""
            ),
        );
    }
    reset_heals(&h).await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_pod_left_behind_by_a_killed_run_is_removed_by_reset() {
    let h = harness();
    up(&h).await;
    // A run killed while its Pod ran: the Pod and the identity are still there, labelled as the check's.
    let lab = &h.lab;
    let hub = h.sim.api("hub");
    for obj in ocm_lab::verify::consumer::check_objects(&lab.name, INVENTORY, "inventory-reader") {
        hub.apply(&obj).await.unwrap();
    }
    h.sim
        .set_fault(Behaviour::PodRun, Fault::FailAlways("simulated".into()));
    let pod =
        ocm_lab::verify::consumer::check_pod(&lab.name, INVENTORY, "img", "ocm-lab-consumer:test");
    hub.apply(&serde_json::to_value(&pod).unwrap())
        .await
        .unwrap();
    assert_eq!(leftovers(&h).len(), 5);
    h.sim.clear_faults();
    let (r, _) = h.run("reset").await;
    assert!(r.ok, "reset: {}", failure(&r));
    let mut h = h;
    // `up` without its verify step: what removes the leftovers is its prune, not the check.
    h.lab.verify.checks = vec![Check::Conditions];
    up(&h).await;
    assert_eq!(leftovers(&h), Vec::<String>::new());
}

#[test]
fn the_check_needs_a_consumer_image_and_with_one_is_a_default_check() {
    let listed = common::default_with(
        "checks: [properties, access-providers, reachable, credentials, conditions]",
        "checks: [properties, consumer]",
    );
    let err = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &listed).unwrap_err();
    let text = ocm_lab::render(&err);
    assert!(
        text.contains(
            "check `consumer` cannot run in this lab: it needs `spec.verify.consumerImage`"
        ),
        "{text}"
    );
    let defaults = common::default_with(
        "checks: [properties, access-providers, reachable, credentials, conditions]",
        "consumerImage: ocm-lab-consumer:dev",
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &defaults)
        .unwrap()
        .lab;
    assert!(
        lab.verify.checks.contains(&Check::Consumer),
        "{:?}",
        lab.verify.checks
    );
    let without = common::default_with(
        "    checks: [properties, access-providers, reachable, credentials, conditions]\n",
        "",
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &without)
        .unwrap()
        .lab;
    assert!(
        !lab.verify.checks.contains(&Check::Consumer),
        "{:?}",
        lab.verify.checks
    );
}
