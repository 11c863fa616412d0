//! What an `up` on a default lab that is up costs, step by step, counted in the simulated lab's call log:
//! API reads, Helm calls, Docker calls and kind calls (a no-op `up` makes no mutating call at all). Each
//! step runs alone, in plan order, so every call is its own; a whole run connects once per cluster
//! instead of once per step. `cargo test -p ocm-lab --test it noop_up -- --nocapture` prints the table.
//! And join and accept observe first: a joined, accepted spoke gets no new bootstrap token and no restart.

use std::collections::BTreeMap;
use std::sync::Arc;

use ocm_lab::backend::ObjectRef;
use ocm_lab::step::events::{Event, Outcome};
use ocm_lab_sim::Call;
use tokio_util::sync::CancellationToken;

use crate::engine::{Harness, failure};

/// API calls that change something; every other `kube.*` call but `kube.connect` is a read.
const MUTATING: &[&str] = &[
    "kube.apply",
    "kube.merge-patch",
    "kube.delete",
    "kube.approve-csr",
    "kube.token-request",
];

/// The calls of one step, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Cost {
    reads: usize,
    helm: usize,
    docker: usize,
    kind: usize,
}

impl Cost {
    fn of(calls: &[Call]) -> Self {
        let mut c = Cost::default();
        for call in calls {
            let v = call.verb.as_str();
            assert!(
                !MUTATING.contains(&v)
                    && v != "kind.create"
                    && v != "kind.delete"
                    && v != "helm.upgrade-install"
                    && v != "helm.uninstall",
                "a mutating call on a lab that is up: {call:?}"
            );
            match v.split_once('.').map(|(k, _)| k) {
                Some("kube") if v != "kube.connect" => c.reads += 1,
                Some("helm") => c.helm += 1,
                Some("docker") => c.docker += 1,
                Some("kind") => c.kind += 1,
                _ => {}
            }
        }
        c
    }

    fn add(&mut self, o: Cost) {
        self.reads += o.reads;
        self.helm += o.helm;
        self.docker += o.docker;
        self.kind += o.kind;
    }
}

/// Bounds on the whole no-op `up` of the default lab (measured when written: 199 API reads, 207 since the prune lists the `consumer` check's kinds, 10 Helm calls
/// (each of the 5 charts: `helm template` and a look at its release), 14 Docker calls (3 of them an exec
/// into a node: the images it holds), no kind call).
const READS: usize = 220;
const HELM: usize = 10;
const DOCKER: usize = 16;
/// The most API reads one step may make (measured: 51, the prune, which lists every kind it may remove:
/// on the hub also the four kinds the `consumer` check creates and removes).
const STEP_READS: usize = 56;

#[tokio::test(start_paused = true)]
async fn a_noop_up_of_the_default_lab_costs_a_bounded_number_of_calls_per_step() {
    let h = Harness::default_lab();
    let plan = crate::common::plan(&h.lab);
    // What the front puts into the nodes (the chart images, pre-pulled), as `ocm-lab up` does.
    let supply = || ocm_lab::commands::bundle::node_images(&h.lab, &plan).unwrap();
    let (r, _) = h
        .run_plan_with(&plan, CancellationToken::new(), |_| {}, supply())
        .await;
    assert!(r.ok, "first up: {}", failure(&r));
    let mutations = h.sim.mutations();

    let mut per_step: BTreeMap<String, Cost> = BTreeMap::new();
    let mut total = Cost::default();
    for step in &plan.steps {
        let mut alone = (**step).clone();
        alone.needs.clear();
        let one = ocm_lab::workflow::Plan {
            workflow: plan.workflow.clone(),
            lab: plan.lab.clone(),
            steps: vec![Arc::new(alone)],
        };
        let before = h.sim.calls().len();
        let (r, _) = h
            .run_plan_with(&one, CancellationToken::new(), |_| {}, supply())
            .await;
        assert!(r.ok && r.changed == 0, "{}: {}", step.id, failure(&r));
        let cost = Cost::of(&h.sim.calls()[before..]);
        assert!(
            cost.reads <= STEP_READS,
            "{} makes {} API reads (bound {STEP_READS})",
            step.id,
            cost.reads
        );
        total.add(cost);
        per_step.insert(step.id.clone(), cost);
    }
    println!("{:<54} reads  helm  docker  kind", "step");
    for (id, c) in &per_step {
        println!(
            "{id:<54} {:>5} {:>5} {:>7} {:>5}",
            c.reads, c.helm, c.docker, c.kind
        );
    }
    println!(
        "{:<54} {:>5} {:>5} {:>7} {:>5}",
        "total", total.reads, total.helm, total.docker, total.kind
    );
    assert_eq!(h.sim.mutations(), mutations, "a no-op up mutates nothing");
    assert!(total.reads <= READS, "{total:?} (bound {READS} reads)");
    assert!(total.helm <= HELM, "{total:?} (bound {HELM} helm calls)");
    assert!(
        total.docker <= DOCKER,
        "{total:?} (bound {DOCKER} docker calls)"
    );
    assert_eq!(total.kind, 0, "{total:?}: a no-op up asks Docker, not kind");

    // A whole run makes the same calls (and connects once per cluster).
    let before = h.sim.calls().len();
    let (r, _) = h
        .run_plan_with(&plan, CancellationToken::new(), |_| {}, supply())
        .await;
    assert!(r.ok && r.changed == 0, "{}", failure(&r));
    let calls = h.sim.calls();
    let whole = Cost::of(&calls[before..]);
    let mut verbs: BTreeMap<&str, usize> = BTreeMap::new();
    for c in &calls[before..] {
        *verbs.entry(c.verb.as_str()).or_default() += 1;
    }
    println!("a whole no-op up, by call: {verbs:?}");
    assert_eq!(whole, total, "a whole run costs what its steps cost alone");
}

#[tokio::test(start_paused = true)]
async fn a_joined_accepted_spoke_gets_no_new_bootstrap_token_and_no_agent_restart_on_a_second_up() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "first up: {}", failure(&r));
    let spokes = ["cluster1", "cluster2"];
    let watched = |spoke: &str| {
        let api = h.sim.api(spoke);
        async move {
            let secret = ObjectRef::new(
                "v1",
                "Secret",
                Some("open-cluster-management-agent"),
                "bootstrap-hub-kubeconfig",
            );
            let agent = ObjectRef::new(
                "apps/v1",
                "Deployment",
                Some("open-cluster-management-agent"),
                "klusterlet-registration-agent",
            );
            (
                api.get(&secret).await.unwrap().expect("a bootstrap Secret"),
                api.get(&agent)
                    .await
                    .unwrap()
                    .expect("a registration agent"),
            )
        }
    };
    let mut before = Vec::new();
    for s in spokes {
        before.push(watched(s).await);
    }
    let calls_before = h.sim.calls().len();

    let (r, events) = h.run("up").await;
    assert!(r.ok, "second up: {}", failure(&r));
    for c in &h.sim.calls()[calls_before..] {
        assert!(
            c.verb != "kube.token-request" && c.verb != "kube.approve-csr",
            "no new bootstrap token, no CSR approval: {c:?}"
        );
        assert!(
            !(c.verb == "kube.apply" && c.object.contains("bootstrap-hub-kubeconfig")),
            "the bootstrap Secret is not written again: {c:?}"
        );
    }
    for (s, was) in spokes.iter().zip(&before) {
        assert_eq!(
            &watched(s).await,
            was,
            "{s}: the bootstrap Secret and the registration agent are as they were (no restart)"
        );
    }
    for step in [
        "join[cluster1]",
        "join[cluster2]",
        "accept[cluster1]",
        "accept[cluster2]",
    ] {
        let outcome = events.iter().find_map(|e| match &e.event {
            Event::StepFinished {
                step: s, outcome, ..
            } if s == step => Some(*outcome),
            _ => None,
        });
        assert_eq!(outcome, Some(Outcome::Unchanged), "{step}");
    }
}
