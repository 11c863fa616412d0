//! Engine robustness: a cluster whose connection hangs delays only the steps that need it, and a step
//! that panics fails with its own id, in the journal and as a failure event, and `reset` holds one lock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use ocm_lab::backend::{Backends, ClusterApi, Connector, KubeError};
use ocm_lab::engine::{self, RunOptions, RunResult};
use ocm_lab::state::StateDir;
use ocm_lab::step::RunCtx;
use ocm_lab::step::events::{Event, Events, Stamped};
use ocm_lab::topology::{Cluster, Lab};
use ocm_lab_sim::SimLab;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::common;

/// What the test connector does for the cluster it singles out.
#[derive(Clone, Copy)]
enum Mishap {
    /// Connecting never returns (a probe that hangs).
    Hang,
    /// Connecting panics (a bug).
    Panic,
}

/// Connects through the simulated lab, except for one cluster.
struct Troubled {
    inner: Arc<dyn Connector>,
    cluster: &'static str,
    mishap: Mishap,
    entered: Arc<Notify>,
}

#[async_trait]
impl Connector for Troubled {
    async fn connect(
        &self,
        cluster: &Cluster,
        kubeconfig: &std::path::Path,
    ) -> Result<Arc<dyn ClusterApi>, KubeError> {
        if cluster.name == self.cluster {
            self.entered.notify_one();
            match self.mishap {
                Mishap::Hang => std::future::pending::<()>().await,
                Mishap::Panic => panic!("simulated bug while connecting to {}", cluster.name),
            }
        }
        self.inner.connect(cluster, kubeconfig).await
    }
}

struct Setup {
    ctx: Arc<RunCtx>,
    entered: Arc<Notify>,
    rx: tokio::sync::mpsc::UnboundedReceiver<Stamped>,
    state: StateDir,
    _dir: tempfile::TempDir,
}

fn setup(lab: Lab, cluster: &'static str, mishap: Mishap) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let state = StateDir {
        path: dir.path().join(&lab.name),
    };
    std::fs::create_dir_all(&state.path).unwrap();
    let sim = SimLab::new();
    let entered = Arc::new(Notify::new());
    let sim_backends = sim.backends();
    let backends = Backends {
        kube: Arc::new(Troubled {
            inner: sim_backends.kube.clone(),
            cluster,
            mishap,
            entered: entered.clone(),
        }),
        ..sim_backends
    };
    let (events, rx) = Events::channel();
    let ctx = Arc::new(RunCtx::new(
        lab,
        backends,
        state.clone(),
        ocm_lab::patch::PatchSet::embedded().unwrap(),
        events,
        CancellationToken::new(),
    ));
    Setup {
        ctx,
        entered,
        rx,
        state,
        _dir: dir,
    }
}

/// Runs `up`; returns its result, its events and the state folder (alive as long as the `TempDir`).
async fn run_up(s: Setup) -> (RunResult, Vec<Stamped>, StateDir, tempfile::TempDir) {
    let Setup {
        ctx,
        mut rx,
        state,
        _dir: dir,
        ..
    } = s;
    let plan = common::plan(&ctx.lab);
    let result = engine::run(&plan, ctx.clone(), &RunOptions { concurrency: 8 })
        .await
        .unwrap();
    drop(ctx);
    let mut events = Vec::new();
    while let Some(e) = rx.recv().await {
        events.push(e);
    }
    (result, events, state, dir)
}

#[tokio::test(start_paused = true)]
async fn a_cluster_whose_connection_hangs_does_not_block_another_clusters_api() {
    let s = setup(common::lab("default"), "cluster2", Mishap::Hang);
    let slow = tokio::spawn({
        let ctx = s.ctx.clone();
        async move { ctx.api("cluster2").await.map(|_| ()) }
    });
    s.entered.notified().await;
    // Paused time: if cluster1 waited on cluster2's connection, the clock would jump to this deadline.
    let fast = tokio::time::timeout(Duration::from_secs(60), s.ctx.api("cluster1")).await;
    assert!(
        fast.is_ok(),
        "connecting to cluster1 waited for cluster2's hanging connection"
    );
    assert!(!slow.is_finished());
    slow.abort();
}

#[tokio::test(start_paused = true)]
async fn steps_on_other_clusters_finish_while_one_clusters_connection_hangs() {
    let s = setup(common::lab("default"), "cluster2", Mishap::Hang);
    let (r, events, _, _dir) = run_up(s).await;
    assert!(!r.ok);
    let finished = |step: &str| {
        events
            .iter()
            .any(|e| matches!(&e.event, Event::StepFinished { step: s, .. } if s == step))
    };
    assert!(
        finished("properties[cluster1]"),
        "cluster1's steps must not wait for cluster2's connection"
    );
    assert!(!finished("create[cluster2]"));
}

#[tokio::test(start_paused = true)]
async fn a_panicking_step_fails_with_its_id_in_the_journal_and_a_failure_event() {
    let s = setup(common::lab("default"), "cluster2", Mishap::Panic);
    let (r, events, state, _dir) = run_up(s).await;
    assert!(!r.ok);
    let (step, e) = r.failed.expect("the run names the failed step");
    assert_eq!(step, "create[cluster2]");
    assert!(e.message.contains("panicked"), "{}", e.message);
    assert!(
        e.message.contains("simulated bug while connecting"),
        "{}",
        e.message
    );
    assert!(
        events.iter().any(|e| matches!(
            &e.event,
            Event::StepFailed { step, error, .. } if step == "create[cluster2]" && error.contains("panicked")
        )),
        "a failure event names the step"
    );
    let journal = std::fs::read_to_string(state.journal()).unwrap();
    assert!(
        journal.lines().any(|l| l.contains("\"step-failed\"")
            && l.contains("\"create[cluster2]\"")
            && l.contains("panicked")),
        "{journal}"
    );
    assert!(!journal.contains("\"step\":\"?\""), "{journal}");
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn reset_takes_the_lab_lock_once_for_its_prune_and_its_up() {
    let s = crate::resume::Sandbox::new();
    s.ok(&["up", "--simulate"]);
    s.ok(&["reset", "--simulate"]);
    // Taken once, by `reset`: a second lock for the `up` half would have rewritten the note.
    let note = std::fs::read_to_string(s.state().join("lock")).unwrap();
    assert!(note.contains("`ocm-lab reset`"), "{note}");
    s.ok(&["verify", "--simulate"]);
}
