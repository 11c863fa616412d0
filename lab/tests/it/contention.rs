//! The simulated lab's optional CPU contention (issue 17, item 2): kind creates and operator rollouts that
//! run at once share the machine's cores, so a lab of many clusters on a small runner is modelled slower
//! than one cluster alone. Off by default: then every delay is a plain wait, as before.

use std::time::Duration;

use ocm_lab::step::events::{Event, Stamped};
use ocm_lab_sim::{Behaviour, Contention, Fault};
use tokio_util::sync::CancellationToken;

use crate::common;
use crate::engine::{Harness, failure};

/// A hub and `n` spokes.
fn fleet(n: usize) -> Harness {
    let text = ocm_lab_testkit::fleet_topology("contention", n, |i| format!("region: r-{i}"));
    Harness::new(
        ocm_lab::topology::load_str("fleet.yaml", &text)
            .unwrap()
            .lab,
    )
}

/// When each instance of `step` finished, in modelled seconds since the run started.
fn finished(events: &[Stamped], step: &str) -> Vec<u64> {
    let prefix = format!("{step}[");
    let mut t: Vec<u64> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepFinished { step: s, .. } if s.starts_with(&prefix) => Some(e.t_ms / 1000),
            _ => None,
        })
        .collect();
    t.sort_unstable();
    t
}

/// Creates every cluster, then installs each spoke's klusterlet chart: a kind create and the klusterlet
/// operator's pass each take a minute alone.
async fn creates_and_klusterlets(h: &Harness) -> Vec<Stamped> {
    h.sim
        .set_fault(Behaviour::KindCreate, Fault::Delay(Duration::from_secs(60)));
    h.sim.set_fault(
        Behaviour::KlusterletOperator,
        Fault::Delay(Duration::from_secs(60)),
    );
    let mut plan = common::plan_workflow(&h.lab, "up");
    plan.steps.retain(|s| {
        matches!(
            s.step.as_str(),
            "preflight" | "network" | "create" | "node-images" | "klusterlet"
        )
    });
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    events
}

fn four_cores() -> Contention {
    Contention::cores(4.0)
        .demand(Behaviour::KindCreate, 1.0)
        .demand(Behaviour::KlusterletOperator, 1.0)
}

#[tokio::test(start_paused = true)]
async fn without_contention_every_create_and_klusterlet_takes_its_minute_however_many_run() {
    let h = fleet(5);
    let events = creates_and_klusterlets(&h).await;
    assert_eq!(finished(&events, "create"), [60; 6]);
    assert_eq!(finished(&events, "klusterlet"), [120; 5]);
}

#[tokio::test(start_paused = true)]
async fn six_creates_on_four_cores_take_ninety_seconds_and_five_klusterlets_seventy_five() {
    let h = fleet(5);
    h.sim.set_contention(Some(four_cores()));
    let events = creates_and_klusterlets(&h).await;
    // 6 one-core creates on 4 cores: each at 4/6 speed, 60 s of work in 90 s.
    assert_eq!(finished(&events, "create"), [90; 6]);
    // Then 5 klusterlet operator passes at 4/5 speed: 75 s more.
    assert_eq!(finished(&events, "klusterlet"), [165; 5]);
}

#[tokio::test(start_paused = true)]
async fn work_that_fits_the_cores_is_not_slowed() {
    let h = fleet(2);
    h.sim.set_contention(Some(four_cores()));
    let events = creates_and_klusterlets(&h).await;
    assert_eq!(finished(&events, "create"), [60; 3]);
    assert_eq!(finished(&events, "klusterlet"), [120; 2]);
}
