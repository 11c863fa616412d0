//! The engine on the simulated lab: concurrency, retries, failure, resume, idempotency, verification.

use std::sync::Arc;
use std::time::Duration;

use ocm_lab::engine::{self, RunOptions, RunResult};
use ocm_lab::state::StateDir;
use ocm_lab::step::RunCtx;
use ocm_lab::step::events::{Event, Events, Outcome, ResultStatus, Stamped};
use ocm_lab::topology::Lab;
use ocm_lab_sim::{Behaviour, Fault, SimLab};
use tokio_util::sync::CancellationToken;

use crate::common;

/// A simulated lab with its own state folder.
pub struct Harness {
    pub sim: Arc<SimLab>,
    pub state: StateDir,
    pub lab: Lab,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub fn new(lab: Lab) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().join(&lab.name),
        };
        std::fs::create_dir_all(&state.path).unwrap();
        Harness {
            sim: SimLab::recording(),
            state,
            lab,
            _dir: dir,
        }
    }

    pub fn default_lab() -> Self {
        Self::new(common::lab("default"))
    }

    /// Runs a workflow to the end; returns its result and every event.
    pub async fn run(&self, workflow: &str) -> (RunResult, Vec<Stamped>) {
        self.run_with(workflow, CancellationToken::new(), |_| {})
            .await
    }

    /// Runs a workflow; `watch` sees each event as it is emitted (and may cancel the run).
    pub async fn run_with(
        &self,
        workflow: &str,
        cancel: CancellationToken,
        watch: impl Fn(&Stamped) + Send + 'static,
    ) -> (RunResult, Vec<Stamped>) {
        let plan = common::plan_workflow(&self.lab, workflow);
        self.run_plan(&plan, cancel, watch).await
    }

    /// Runs a given plan (tests tamper with plans to model mistakes the planner itself prevents).
    pub async fn run_plan(
        &self,
        plan: &ocm_lab::workflow::Plan,
        cancel: CancellationToken,
        watch: impl Fn(&Stamped) + Send + 'static,
    ) -> (RunResult, Vec<Stamped>) {
        self.run_plan_with(plan, cancel, watch, Default::default())
            .await
    }

    /// [`Harness::run_plan`] with what the `node-images` step puts into the nodes (the front fills it from
    /// the plan's chart images and the bundle; empty, the step does nothing).
    pub async fn run_plan_with(
        &self,
        plan: &ocm_lab::workflow::Plan,
        cancel: CancellationToken,
        watch: impl Fn(&Stamped) + Send + 'static,
        node_images: ocm_lab::step::NodeImages,
    ) -> (RunResult, Vec<Stamped>) {
        let (events, mut rx) = Events::channel();
        let collector = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(e) = rx.recv().await {
                watch(&e);
                seen.push(e);
            }
            seen
        });
        let patches = ocm_lab::patch::PatchSet::embedded().unwrap();
        let mut ctx = RunCtx::new(
            self.lab.clone(),
            self.sim.backends(),
            self.state.clone(),
            patches,
            events,
            cancel,
        );
        ctx.node_images = node_images;
        let ctx = Arc::new(ctx);
        let result = engine::run(plan, ctx.clone(), &RunOptions { concurrency: 8 })
            .await
            .unwrap();
        drop(ctx);
        (result, collector.await.unwrap())
    }
}

pub fn started(events: &[Stamped], step: &str) -> Option<u64> {
    events.iter().find_map(|e| match &e.event {
        Event::StepStarted { step: s, .. } if s == step => Some(e.t_ms),
        _ => None,
    })
}

fn finished(events: &[Stamped], step: &str) -> Option<u64> {
    events.iter().find_map(|e| match &e.event {
        Event::StepFinished { step: s, .. } if s == step => Some(e.t_ms),
        _ => None,
    })
}

/// How `step` ended well, if it did.
fn outcome(events: &[Stamped], step: &str) -> Option<Outcome> {
    events.iter().find_map(|e| match &e.event {
        Event::StepFinished {
            step: s, outcome, ..
        } if s == step => Some(*outcome),
        _ => None,
    })
}

pub fn failure(r: &RunResult) -> String {
    r.failed
        .as_ref()
        .map(|(s, e)| format!("{s}: {} ({:?})", e.message, e.help))
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn up_on_the_simulated_lab_reaches_verification_and_passes() {
    let h = Harness::default_lab();
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let passes: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Result {
                check,
                subject,
                status: ResultStatus::Pass,
                ..
            } if check == "properties" => Some(subject.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        passes,
        [
            "cluster1 in cluster-inventory",
            "cluster2 in cluster-inventory"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn independent_steps_overlap_and_dependent_ones_never_do() {
    let h = Harness::default_lab();
    // Modelled on a CI runner: a kind create takes about a minute.
    h.sim
        .set_fault(Behaviour::KindCreate, Fault::Delay(Duration::from_secs(60)));
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let creates = ["create[hub]", "create[cluster1]", "create[cluster2]"];
    let starts: Vec<u64> = creates
        .iter()
        .map(|s| started(&events, s).unwrap())
        .collect();
    let ends: Vec<u64> = creates
        .iter()
        .map(|s| finished(&events, s).unwrap())
        .collect();
    // All three creates run at once: each starts before any of them ends.
    assert!(
        starts.iter().all(|s| ends.iter().all(|e| s < e)),
        "starts {starts:?} ends {ends:?}"
    );
    // The whole run takes about one create, not three.
    let total = events.last().unwrap().t_ms;
    assert!(total < 3 * 60_000, "{total} ms: creates did not overlap");
    // No step starts before every step it needs has finished.
    let plan = common::plan_workflow(&h.lab, "up");
    for s in &plan.steps {
        let Some(start) = started(&events, &s.id) else {
            continue;
        };
        for n in &s.needs {
            let end = finished(&events, n).unwrap_or_else(|| panic!("{n} never finished"));
            assert!(
                end <= start,
                "{} started at {start} before its need {n} finished at {end}",
                s.id
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_transient_failure_is_retried_and_the_run_succeeds() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::KindCreate,
        Fault::FailOnce(
            "simulated: could not find a log line that matches \"Reached target\"".into(),
        ),
    );
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let retries: Vec<&Stamped> = events
        .iter()
        .filter(
            |e| matches!(&e.event, Event::StepRetrying { step, .. } if step.starts_with("create[")),
        )
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_stops_the_run_and_names_the_step() {
    let h = Harness::default_lab();
    h.sim.set_fault(
        Behaviour::HelmTemplate,
        Fault::FailAlways("simulated: chart not found".into()),
    );
    let (r, events) = h.run("up").await;
    assert!(!r.ok);
    let (step, err) = r.failed.clone().unwrap();
    assert_eq!(step, "hub-manager");
    assert!(err.message.contains("chart not found"), "{}", err.message);
    // The run's result and its event say which backend failed, and the typed error is kept.
    assert_eq!(err.backend, Some(ocm_lab::backend::Backend::Helm));
    assert!(
        err.source_as::<ocm_lab::backend::HelmError>().is_some(),
        "{err:?}"
    );
    assert!(events.iter().any(|e| matches!(&e.event, Event::StepFailed { step, backend: Some(ocm_lab::backend::Backend::Helm), .. } if step == "hub-manager")));
    // A person reads it on the step's line too.
    let text =
        ocm_lab::engine::report::human_text(&events, ocm_lab::engine::report::ShowTiming::Never);
    let line = text
        .split("\n  ")
        .find(|l| l.starts_with("✗ hub-manager failed after"))
        .unwrap_or_else(|| panic!("no failure line for hub-manager:\n{text}"));
    assert!(
        line.contains(" (helm): ") && line.contains("chart not found"),
        "{line}"
    );
    // Not retried (permanent), and nothing that needs the hub started afterwards.
    assert!(
        !events
            .iter()
            .any(|e| matches!(&e.event, Event::StepRetrying { step, .. } if step == "hub-manager"))
    );
    assert!(started(&events, "hub-ready").is_none());
    assert!(started(&events, "join[cluster1]").is_none());
}

#[tokio::test(start_paused = true)]
async fn a_run_cancelled_midway_is_finished_by_the_next_which_runs_every_step_and_redoes_nothing() {
    let h = Harness::default_lab();
    let cancel = CancellationToken::new();
    let stop = cancel.clone();
    // Stopped as soon as the first spoke starts joining.
    let (r, first) = h
        .run_with("up", cancel, move |e| {
            if matches!(&e.event, Event::StepStarted { step, .. } if step.starts_with("join[")) {
                stop.cancel();
            }
        })
        .await;
    assert!(!r.ok && r.cancelled);
    let done_first: Vec<String> = first
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepFinished { step, .. } => Some(step.clone()),
            _ => None,
        })
        .collect();
    assert!(
        done_first.contains(&"create[hub]".to_owned()),
        "{done_first:?}"
    );
    let creates_before = h
        .sim
        .calls()
        .iter()
        .filter(|c| c.verb == "kind.create")
        .count();

    let (r, second) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    // Level-triggered: every step runs again, and a step the first run finished finds its work done.
    for step in &common::plan(&h.lab).steps {
        assert!(
            started(&second, &step.id).is_some(),
            "{} did not run",
            step.id
        );
    }
    for step in done_first.iter().filter(|s| s.starts_with("create[")) {
        assert_eq!(
            outcome(&second, step),
            Some(Outcome::Unchanged),
            "{step} was finished by the first run"
        );
    }
    assert_eq!(
        h.sim
            .calls()
            .iter()
            .filter(|c| c.verb == "kind.create")
            .count(),
        creates_before,
        "no cluster was created twice"
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_up_makes_no_mutating_call() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let before = h.sim.mutations();
    let (r, events) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    assert_eq!(
        h.sim.mutations(),
        before,
        "mutating calls: {:?}",
        h.sim.calls().iter().rev().take(5).collect::<Vec<_>>()
    );
    assert!(events.iter().all(|e| !matches!(
        e.event,
        Event::StepFinished {
            outcome: Outcome::Changed,
            ..
        }
    )));
}

#[tokio::test(start_paused = true)]
async fn a_lab_without_the_hub_gate_fails_verification_naming_it() {
    let text = common::default_with(
        "featureGates: [ClusterProfile, ResourceCleanup]",
        "featureGates: [ResourceCleanup]",
    );
    let h = Harness::new(
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap()
            .lab,
    );
    let (r, events) = h.run("up").await;
    assert!(!r.ok);
    let (step, err) = r.failed.unwrap();
    assert_eq!(step, "verify");
    let text = format!("{} {:?}", err.message, err.help);
    assert!(text.contains("ClusterProfile"), "{text}");
    assert!(events.iter().any(|e| matches!(&e.event, Event::Result { status: ResultStatus::Fail, detail, .. } if detail.contains("hub registration gate `ClusterProfile`"))));
}

#[tokio::test(start_paused = true)]
async fn a_namespace_without_a_binding_fails_verification_naming_it() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    // Someone deletes the lab's binding in the inventory namespace.
    let api = h
        .sim
        .backends()
        .kube
        .connect(&h.lab.hub.cluster, std::path::Path::new("unused"))
        .await
        .unwrap();
    let binding = ocm_lab::backend::ObjectRef::new(
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
        Some("cluster-inventory"),
        "sandbox-fleet",
    );
    assert!(api.delete(&binding).await.unwrap());
    let (r, events) = h.run("verify").await;
    assert!(!r.ok);
    assert!(
        events.iter().any(|e| matches!(&e.event, Event::Result { status: ResultStatus::Fail, detail, .. } if detail.contains("no Bound ManagedClusterSetBinding in `cluster-inventory`"))),
        "{:#?}",
        events.iter().filter(|e| matches!(e.event, Event::Result { .. })).collect::<Vec<_>>()
    );
}
