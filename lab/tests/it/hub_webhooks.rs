//! Hub readiness and the default retry policy on the simulated lab: the simulated
//! cluster-manager operator registers the hub webhooks only once its six Deployments are ready
//! (open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_webhook_reconcile.go`), a webhook
//! with no ready Pod answers HTTP 500, `ocm.hub-ready` waits for what the ClusterManager's status establishes
//! (open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_runtime_reconcile.go`), and every
//! step retries transient errors until its deadline while permanent ones fail at once.

use std::time::Duration;

use ocm_lab::backend::{ClusterApi, ObjectRef, condition_status};
use ocm_lab::step::events::{Event, Stamped};
use ocm_lab::workflow::Plan;
use ocm_lab_sim::{Behaviour, Fault};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::engine::{Harness, failure};

const BINDING_WEBHOOK: &str =
    "managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io";

fn cluster_manager() -> ObjectRef {
    ObjectRef::new(
        "operator.open-cluster-management.io/v1",
        "ClusterManager",
        None,
        "cluster-manager",
    )
}

fn binding_webhook() -> ObjectRef {
    ObjectRef::new(
        "admissionregistration.k8s.io/v1",
        "ValidatingWebhookConfiguration",
        None,
        BINDING_WEBHOOK,
    )
}

fn hub_deployment(name: &str) -> ObjectRef {
    ObjectRef::new(
        "apps/v1",
        "Deployment",
        Some("open-cluster-management-hub"),
        name,
    )
}

/// How many times a step instance started.
fn attempts(events: &[Stamped], step: &str) -> usize {
    events
        .iter()
        .filter(|e| matches!(&e.event, Event::StepStarted { step: s, .. } if s == step))
        .count()
}

/// The backoffs the engine announced for a step, in order.
fn backoffs(events: &[Stamped], step: &str) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepRetrying {
                step: s,
                backoff_ms,
                ..
            } if s == step => Some(*backoff_ms),
            _ => None,
        })
        .collect()
}

/// `plan` cut down to the steps `keep` accepts, their needs limited to the steps kept.
fn only(plan: &Plan, keep: impl Fn(&str) -> bool) -> Plan {
    let mut p = plan.clone();
    p.steps.retain(|s| keep(&s.id));
    let ids: Vec<String> = p.steps.iter().map(|s| s.id.clone()).collect();
    for s in &mut p.steps {
        std::sync::Arc::make_mut(s)
            .needs
            .retain(|n| ids.contains(n));
    }
    p
}

fn until_hub_manager(id: &str) -> bool {
    id == "preflight" || id == "network" || id.starts_with("create[") || id == "hub-manager"
}

#[tokio::test(start_paused = true)]
async fn up_rides_out_a_500_from_the_binding_webhook_not_ready_yet() {
    let h = Harness::default_lab();
    // The first request through a hub webhook gets the API server's 500 for a webhook it cannot call.
    h.sim.set_fault(
        Behaviour::HubWebhooks,
        Fault::FailOnce("dial tcp 10.96.0.40:9443: connect: connection refused".into()),
    );
    // On the simulated lab spokes join fast, so the accept (a ManagedCluster update, which goes
    // through the same webhook Deployment) would often come first: accept after the bindings, so that
    // the first binding apply is the request that meets the webhook not ready yet.
    let mut plan = crate::common::plan_workflow(&h.lab, "up");
    let bindings: Vec<String> = plan
        .steps
        .iter()
        .filter(|s| s.id.starts_with("bindings["))
        .map(|s| s.id.clone())
        .collect();
    for s in plan
        .steps
        .iter_mut()
        .filter(|s| s.id.starts_with("accept["))
    {
        std::sync::Arc::make_mut(s)
            .needs
            .extend(bindings.iter().cloned());
    }
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    let failed: Vec<_> = h
        .sim
        .calls()
        .into_iter()
        .filter(|c| c.outcome.is_err())
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let call = &failed[0];
    assert_eq!(call.verb, "kube.apply");
    assert!(
        call.object.contains("ManagedClusterSetBinding"),
        "the first request through a hub webhook was {}",
        call.object
    );
    let err = call.outcome.as_ref().unwrap_err();
    assert!(
        err.contains("HTTP 500") && err.contains(BINDING_WEBHOOK),
        "{err}"
    );
    // The bindings step had no `retry:` of its own: the default policy retried it, once.
    let step = events
        .iter()
        .find_map(|e| match &e.event {
            Event::StepRetrying { step, error, .. } if error.contains(BINDING_WEBHOOK) => {
                Some(step.clone())
            }
            _ => None,
        })
        .expect("the binding step was retried");
    assert!(step.starts_with("bindings["), "{step}");
    assert_eq!(attempts(&events, &step), 2);
    assert_eq!(backoffs(&events, &step), vec![2000]);
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_not_retried() {
    let h = Harness::default_lab();
    let mut plan = crate::common::plan_workflow(&h.lab, "up");
    // A binding named unlike its set: the binding webhook denies it (HTTP 400), which no retry fixes.
    let step = std::sync::Arc::make_mut(
        plan.steps
            .iter_mut()
            .find(|s| s.id.starts_with("bindings["))
            .expect("a bindings step"),
    );
    let id = step.id.clone();
    let binding = &mut step.objects[0];
    binding["spec"]["clusterSet"] = json!("some-other-set");
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(!r.ok);
    let (failed, err) = r.failed.clone().expect("a failure");
    assert_eq!(failed, id);
    assert!(!err.is_transient(), "{err:?}");
    assert!(
        err.message.contains("must have the same name"),
        "{}",
        err.message
    );
    assert_eq!(attempts(&events, &id), 1);
    assert!(backoffs(&events, &id).is_empty());
    // The Kubernetes API's answer is kept as its typed error, not only as text.
    assert_eq!(err.backend, Some(ocm_lab::backend::Backend::Kube));
    assert!(
        err.source_as::<ocm_lab::backend::KubeError>().is_some(),
        "{err:?}"
    );
    // and a person reads which backend answered on the step's line.
    let text =
        ocm_lab::engine::report::human_text(&events, ocm_lab::engine::report::ShowTiming::Never);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("  ✗ {id} failed after"))
                && l.contains(" (Kubernetes API): ")
                && l.contains("must have the same name")),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_webhook_that_never_answers_fails_the_step_at_its_deadline_after_capped_backoff() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::HubWebhooks,
        Fault::FailAlways("dial tcp 10.96.0.40:9443: i/o timeout".into()),
    );
    let (r, events) = h.run("up").await;
    assert!(!r.ok);
    let (step, err) = r.failed.clone().expect("a failure");
    assert!(step.starts_with("bindings["), "{step}");
    assert!(err.is_transient(), "{err:?}");
    assert!(err.message.contains(BINDING_WEBHOOK), "{}", err.message);
    let n = attempts(&events, &step);
    assert!(
        err.message.ends_with(&format!("(after {n} attempts)")),
        "{}",
        err.message
    );
    // 2 s doubling, capped at 30 s, within the step's deadline (the lab's default timeout, 5 min).
    let b = backoffs(&events, &step);
    assert_eq!(b.len(), n - 1);
    assert_eq!(&b[..5], &[2000, 4000, 8000, 16000, 30000]);
    assert!(b[5..].iter().all(|&x| x == 30000), "{b:?}");
    let waited: u64 = b.iter().sum();
    assert!(
        waited <= h.lab.timeouts.default.as_millis() as u64,
        "{waited}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_simulated_operator_registers_the_webhooks_only_after_its_deployments_are_ready() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::DeploymentRollout,
        Fault::Delay(Duration::from_secs(120)),
    );
    let plan = only(
        &crate::common::plan_workflow(&h.lab, "up"),
        until_hub_manager,
    );
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    let hub = h.sim.api(&h.lab.hub.cluster.name);
    let cm = hub.get(&cluster_manager()).await.unwrap().unwrap();
    // open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_controller.go`: Applied comes
    // first; Progressing stays True while the Deployments roll.
    assert_eq!(condition_status(&cm, "Applied"), Some("True"));
    assert_eq!(condition_status(&cm, "Progressing"), Some("True"));
    assert_eq!(
        condition_status(&cm, "HubRegistrationDegraded"),
        Some("True")
    );
    assert!(hub.get(&binding_webhook()).await.unwrap().is_none());

    // Not registered yet: a binding is not validated at all (open-cluster-management-io/ocm v1.3.1
    // `pkg/operator/.../clustermanager_webhook_reconcile.go`).
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "early"}});
    hub.apply(&ns).await.unwrap();
    let mismatched = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2",
        "kind": "ManagedClusterSetBinding",
        "metadata": {"name": "not-the-set", "namespace": "early"},
        "spec": {"clusterSet": "default"},
    });
    hub.apply(&mismatched).await.unwrap();

    // The rollout finishes: the operator reports it and registers the webhooks.
    tokio::time::sleep(Duration::from_secs(121)).await;
    let cm = hub.get(&cluster_manager()).await.unwrap().unwrap();
    assert_eq!(condition_status(&cm, "Progressing"), Some("False"));
    assert_eq!(
        condition_status(&cm, "HubRegistrationDegraded"),
        Some("False")
    );
    assert_eq!(condition_status(&cm, "HubPlacementDegraded"), Some("False"));
    assert!(hub.get(&binding_webhook()).await.unwrap().is_some());
    for name in [
        "cluster-manager-registration-webhook",
        "cluster-manager-addon-webhook",
    ] {
        let d = hub.get(&hub_deployment(name)).await.unwrap();
        assert!(d.is_some(), "{name} exists");
    }
    let again = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2",
        "kind": "ManagedClusterSetBinding",
        "metadata": {"name": "still-not-the-set", "namespace": "early"},
        "spec": {"clusterSet": "default"},
    });
    let e = hub.apply(&again).await.unwrap_err();
    assert!(e.to_string().contains(BINDING_WEBHOOK), "{}", e.to_string());
}

#[tokio::test(start_paused = true)]
async fn hub_ready_waits_until_the_cluster_manager_reports_the_current_generation() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    // The operator is slow to reconcile a changed ClusterManager (a new generation).
    h.sim.set_fault(
        Behaviour::HubOperator,
        Fault::Delay(Duration::from_secs(45)),
    );
    let hub = h.sim.api(&h.lab.hub.cluster.name);
    let mut cm = hub.get(&cluster_manager()).await.unwrap().unwrap();
    cm.as_object_mut().unwrap().remove("status");
    cm["spec"]["nodePlacement"]["nodeSelector"] = json!({"lab.example.com/test": "x"});
    hub.apply(&cm).await.unwrap();
    let stale = hub.get(&cluster_manager()).await.unwrap().unwrap();
    assert_ne!(
        stale["status"]["observedGeneration"],
        stale["metadata"]["generation"]
    );

    let plan = only(&crate::common::plan_workflow(&h.lab, "up"), |id| {
        id == "hub-ready"
    });
    let (r, _) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    let cm: Value = hub.get(&cluster_manager()).await.unwrap().unwrap();
    assert_eq!(
        cm["status"]["observedGeneration"], cm["metadata"]["generation"],
        "hub-ready finished before the operator reported the current generation"
    );
}

#[tokio::test(start_paused = true)]
async fn a_v1beta1_addon_object_needs_the_addon_conversion_webhook() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let hub: std::sync::Arc<dyn ClusterApi> = h.sim.api(&h.lab.hub.cluster.name);
    let cma = |version: &str, name: &str| {
        json!({
            "apiVersion": format!("addon.open-cluster-management.io/{version}"),
            "kind": "ClusterManagementAddOn",
            "metadata": {"name": name},
            "spec": {"installStrategy": {"type": "Manual"}},
        })
    };
    // The addon webhook's Pod stops being ready (and its rollout cannot finish).
    h.sim.set_fault(
        Behaviour::DeploymentRollout,
        Fault::FailAlways("simulated: image pull back-off".into()),
    );
    h.sim.with_world(|w| {
        let r = hub_deployment("cluster-manager-addon-webhook");
        let mut d = w.get_object(&h.lab.hub.cluster.name, &r).unwrap();
        d["status"]["conditions"] = json!([{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}]);
        w.put_object(&h.lab.hub.cluster.name, d).unwrap();
    });
    let e = hub.apply(&cma("v1beta1", "lab-test")).await.unwrap_err();
    assert!(e.is_transient(), "{e:?}");
    assert!(
        e.to_string().contains("HTTP 500")
            && e.to_string().contains(
                "conversion webhook for addon.open-cluster-management.io/v1beta1, Kind=ClusterManagementAddOn failed"
            )
            && e.to_string().contains("cluster-manager-addon-webhook"),
        "{}",
        e.to_string()
    );
    // The storage version needs no conversion.
    hub.apply(&cma("v1alpha1", "lab-test")).await.unwrap();
    // Ready again: v1beta1 goes through.
    h.sim.clear_faults();
    hub.apply(&cma("v1beta1", "lab-test-2")).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn an_accept_denied_while_the_cluster_namespace_terminates_is_retried_until_it_is_gone() {
    let h = Harness::default_lab();
    let hub = h.lab.hub.cluster.name.clone();
    // What a `down` or `reset` can leave on a hub: namespace cluster1 still Terminating.
    let plan = crate::common::plan_workflow(&h.lab, "up");
    let (r, _) = h
        .run_plan(
            &only(&plan, |id| {
                id == "preflight" || id == "network" || id.starts_with("create[")
            }),
            CancellationToken::new(),
            |_| {},
        )
        .await;
    assert!(r.ok, "{}", failure(&r));
    let ns = ObjectRef::new("v1", "Namespace", None, "cluster1");
    h.sim.with_world(|w| {
        w.put_object(
            &hub,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cluster1"},
                   "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Terminating"}}),
        )
        .unwrap();
    });
    // The namespace controller finishes the deletion a while later (a mechanism, not an assertion).
    let sim = h.sim.clone();
    let hub2 = hub.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(40)).await;
        sim.with_world(|w| {
            w.delete_object(&hub2, &ns);
        });
    });
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    let denied: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepRetrying { step, error, .. } if step == "accept[cluster1]" => {
                Some(error.clone())
            }
            _ => None,
        })
        .collect();
    assert!(!denied.is_empty(), "the accept was never denied");
    assert!(
        denied.iter().all(|e| e.contains("HTTP 403")
            && e.contains("cluster namespace \"cluster1\" is terminating")),
        "{denied:?}"
    );
}
