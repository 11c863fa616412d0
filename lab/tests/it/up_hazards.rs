//! The real `up` workflow's ordering hazards, proven on the simulated lab (each cited to its upstream source),
//! and plan and run agreeing on what is applied.

use std::collections::BTreeSet;
use std::time::Duration;

use ocm_lab::backend::ObjectRef;
use ocm_lab_sim::{Behaviour, Fault};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common;
use crate::engine::{Harness, failure, started};

fn key(o: &serde_json::Value) -> String {
    ObjectRef::of(o)
        .map(|r| format!("{}/{r}", r.api_version))
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn the_simulated_run_applies_exactly_the_planned_objects() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let plan = common::plan_workflow(&h.lab, "up");
    let helm = h.sim.backends().helm;
    for c in h.lab.clusters() {
        let applied = h.sim.applied(&c.name);
        let applied_keys: BTreeSet<String> = applied.iter().map(key).collect();
        // What the plan says goes to this cluster: its manifests, its charts' objects and release namespaces.
        let mut expected: BTreeSet<String> = BTreeSet::new();
        for (cluster, obj) in plan.objects().filter(|(cl, _)| *cl == c.name) {
            let obj = &obj;
            let k = key(obj);
            let live = applied
                .iter()
                .find(|a| key(a) == k)
                .unwrap_or_else(|| panic!("planned {k} was never applied to {cluster}"));
            assert!(
                ocm_lab_contains(live, obj),
                "{k} was applied differently from the plan"
            );
            expected.insert(k);
        }
        for chart in plan.charts().filter(|ch| ch.cluster == c.name) {
            let rendered = helm.template(chart, &chart.values).await.unwrap();
            expected.extend(rendered.crds.iter().chain(&rendered.objects).map(key));
            expected.insert(format!("v1/Namespace {}", chart.namespace));
            if chart.release == "klusterlet" {
                // Not a chart value: `ocm.join` writes it once the hub is ready (open-cluster-management-io/ocm
                // v1.3.1 `deploy/klusterlet/chart/klusterlet/templates/`,
                // `pkg/registration/spoke/spokeagent.go`).
                expected.insert(
                    "v1/Secret open-cluster-management-agent/bootstrap-hub-kubeconfig".to_owned(),
                );
            }
        }
        let unplanned: Vec<&String> = applied_keys.difference(&expected).collect();
        assert!(
            unplanned.is_empty(),
            "{} got objects the plan does not list: {unplanned:?}",
            c.name
        );
        let missing: Vec<&String> = expected.difference(&applied_keys).collect();
        assert!(missing.is_empty(), "{} never got: {missing:?}", c.name);
    }
}

/// The subset check the actions use.
fn ocm_lab_contains(live: &serde_json::Value, desired: &serde_json::Value) -> bool {
    match (live, desired) {
        (serde_json::Value::Object(l), serde_json::Value::Object(d)) => d
            .iter()
            .all(|(k, dv)| l.get(k).is_some_and(|lv| ocm_lab_contains(lv, dv))),
        (serde_json::Value::Array(l), serde_json::Value::Array(d)) => {
            l.len() == d.len() && l.iter().zip(d).all(|(a, b)| ocm_lab_contains(a, b))
        }
        (l, d) => l == d,
    }
}

#[tokio::test(start_paused = true)]
async fn a_custom_resource_is_never_applied_before_its_crd_is_established() {
    let h = Harness::default_lab();
    // CRDs take a while to become Established, like on a busy API server (helm/helm#5654).
    h.sim.set_fault(
        Behaviour::CrdEstablish,
        Fault::Delay(Duration::from_secs(20)),
    );
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let rejected: Vec<_> = h
        .sim
        .calls()
        .into_iter()
        .filter(|c| {
            c.verb == "kube.apply"
                && c.outcome
                    .as_ref()
                    .is_err_and(|e| e.contains("no matches for kind"))
        })
        .collect();
    assert!(
        rejected.is_empty(),
        "applied before the CRD was served: {rejected:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_join_never_starts_before_the_bootstrap_service_account_exists() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::HubOperator,
        Fault::Delay(Duration::from_secs(30)),
    );
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let calls = h.sim.calls();
    let sa = calls
        .iter()
        .position(|c| {
            // The SA comes with the cluster-manager Helm release (`createBootstrapSA`).
            c.verb == "helm.upgrade-install"
                && c.object.contains("open-cluster-management/cluster-manager")
                && c.outcome.is_ok()
        })
        .expect("the bootstrap SA was applied");
    let first_token = calls
        .iter()
        .position(|c| c.verb == "kube.token-request")
        .expect("tokens were requested");
    assert!(
        sa < first_token,
        "a token was requested (call {first_token}) before the bootstrap SA existed (call {sa})"
    );
}

#[tokio::test(start_paused = true)]
async fn accept_is_idempotent() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let approvals = |h: &Harness| {
        h.sim
            .calls()
            .iter()
            .filter(|c| c.verb == "kube.approve-csr")
            .count()
    };
    let before = approvals(&h);
    assert_eq!(before, 2, "one CSR per spoke");
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert!(
        started(&events, "accept[cluster1]").is_some(),
        "accept runs again and finds the cluster accepted"
    );
    assert_eq!(
        approvals(&h),
        before,
        "an accepted cluster is not approved again"
    );
}

#[tokio::test(start_paused = true)]
async fn cluster_properties_wait_for_their_crd() {
    let h = Harness::default_lab();
    // The klusterlet operator installs the ClusterProperty CRD late (open-cluster-management-io/ocm v1.3.1
    // `pkg/operator/operators/*/controllers/*/*_crd_reconcile.go`); and the properties step is made to start as
    // soon as the spoke exists, long before that.
    h.sim.set_fault(
        Behaviour::KlusterletOperator,
        Fault::Delay(Duration::from_secs(45)),
    );
    let mut plan = common::plan_workflow(&h.lab, "up");
    for s in plan.steps.iter_mut().filter(|s| s.step == "properties") {
        let s = std::sync::Arc::make_mut(s);
        s.needs = vec![format!("create[{}]", s.item.clone().unwrap())];
    }
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    assert!(events.iter().any(|e| matches!(&e.event, ocm_lab::step::events::Event::StepProgress { step, message } if step == "properties[cluster1]" && message.contains("waiting for ClusterProperty"))));
}

#[tokio::test(start_paused = true)]
async fn properties_on_a_spoke_without_its_gate_fail_naming_the_gate() {
    let text = common::default_with(
        "    - name: cluster2\n",
        "    - name: cluster2\n      featureGates: [ClusterClaim]\n",
    )
    .replace("timeout: 5m", "timeout: 5m\n  timeouts: {join: 2m}");
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap_or_else(|e| panic!("{}", ocm_lab::render(&e)))
        .lab;
    let h = Harness::new(lab);
    let (r, _) = h.run("up").await;
    let (step, err) = r.failed.clone().expect("the run fails");
    assert_eq!(step, "properties[cluster2]");
    assert!(err.message.contains("ClusterProperty"), "{}", err.message);
    assert!(
        err.help
            .as_deref()
            .unwrap_or_default()
            .contains("`ClusterProperty` registration gate"),
        "{:?}",
        err.help
    );
}

#[tokio::test(start_paused = true)]
async fn a_gate_value_the_chart_version_ignores_is_caught_before_install() {
    let text = common::default_with(
        "    cluster-proxy:\n      version: 0.10.0",
        "    cluster-proxy:\n      version: 0.11.0",
    );
    let h = Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    );
    let mut plan = common::plan_workflow(&h.lab, "up");
    // The mistake of the argocd guide (open-cluster-management-io/cluster-proxy PR #274): 0.11.0 given the
    // 0.10.0 key.
    let step = std::sync::Arc::make_mut(
        plan.steps
            .iter_mut()
            .find(|s| s.id == "cluster-proxy")
            .unwrap(),
    );
    let chart = step.chart.as_mut().unwrap();
    let mut values = chart.values.clone();
    values["featureGates"] = json!({"clusterProfileAccessProvider": true});
    chart.values = values;
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    let (step, err) = r.failed.clone().expect("the run fails");
    assert_eq!(step, "cluster-proxy");
    assert!(
        err.message
            .contains("featureGates.clusterProfileAccessProvider")
            && err.message.contains("featureGates.clusterProfile`"),
        "{}",
        err.message
    );
    let templated = h
        .sim
        .calls()
        .iter()
        .any(|c| c.verb == "helm.template" && c.object.contains("cluster-proxy"));
    assert!(!templated, "caught before the chart was even rendered");
}

#[tokio::test(start_paused = true)]
async fn a_wait_that_expires_names_the_object_the_condition_and_what_it_last_saw() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::ProxyServingCert,
        Fault::FailAlways("simulated: certificate rotation failed".into()),
    );
    let (r, _) = h.run("up").await;
    let (step, err) = r.failed.clone().expect("the run fails");
    assert_eq!(step, "cluster-proxy-ready");
    assert!(
        err.message
            .contains("Secret open-cluster-management-addon/cluster-proxy-user-serving-cert"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("it exists") && err.message.contains("last seen: it does not exist"),
        "{}",
        err.message
    );
    assert!(
        err.message.contains("timed out after 5m"),
        "the deadline is the topology's rollout timeout: {}",
        err.message
    );
    assert!(err.help.unwrap_or_default().contains("userServer"));
}
