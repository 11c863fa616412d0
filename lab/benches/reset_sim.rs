//! Benchmark: `reset` against `down` + `up` on the simulated lab, with latencies modelled on what CI runners
//! show: a kind create takes about 60 s, an OCM rollout (cluster-manager, a klusterlet, an addon's agent)
//! about 60 s, charged once per rollout (`Behaviour::is_rollout`: an operator's later passes react to its
//! Deployments at once), a kind delete about 5 s; and from recorded real clusters (shared fixtures
//! `recorded/3-propagation-timing`): a property reaches its ClusterProfile in about 46 ms. Every write to an
//! API server is given 20 ms and every read 5 ms, a local kind API server's round trips under load. Time is Tokio's paused clock, so the numbers are the modelled wall
//! time of the workflows (the critical path through the step graph), not this machine's speed.
//!
//! It also prints, on their own lines, a contention-aware figure beside today's model's for fleets of 1, 2, 4
//! and 8 spokes (`ocm_lab_testkit::fleet_topology`, as `up_sim`): the same delays, but the kind creates and
//! the OCM and addon stages that run at once share a 4-vCPU machine (`contention()`). Today's model, which
//! the `first up:` line keeps using, gives each of them a machine of its own.
//!
//! `cargo bench --bench reset_sim [-- TOPOLOGY]`

use std::sync::Arc;
use std::time::Duration;

use ocm_lab::actions::Registry;
use ocm_lab::engine::{self, RunOptions};
use ocm_lab::patch::PatchSet;
use ocm_lab::state::StateDir;
use ocm_lab::step::RunCtx;
use ocm_lab::step::events::{Event, Events};
use ocm_lab::topology::Lab;
use ocm_lab::workflow::Sources;
use ocm_lab_sim::{Behaviour, Contention, Fault, SimLab};
use tokio_util::sync::CancellationToken;

fn model(sim: &SimLab) {
    sim.set_fault(Behaviour::KindCreate, Fault::Delay(Duration::from_secs(60)));
    sim.set_fault(Behaviour::KindDelete, Fault::Delay(Duration::from_secs(5)));
    for b in [
        Behaviour::HubOperator,
        Behaviour::KlusterletOperator,
        Behaviour::AddonInstall,
    ] {
        sim.set_fault(b, Fault::Delay(Duration::from_secs(60)));
    }
    for b in [Behaviour::Apply, Behaviour::MergePatch, Behaviour::Delete] {
        sim.set_fault(b, Fault::Delay(Duration::from_millis(20)));
    }
    sim.set_fault(Behaviour::KubeRead, Fault::Delay(Duration::from_millis(5)));
    sim.set_fault(
        Behaviour::ClaimSync,
        Fault::Delay(Duration::from_millis(46)),
    );
}

/// The contention-aware model: today's delays, on a machine of the size of a GitHub-hosted runner for a
/// public repository, `ubuntu-latest`: 4 vCPU, 16 GB (docs.github.com, "GitHub-hosted runners reference",
/// standard runners for public repositories). Each kind create and each OCM or addon stage keeps one core
/// busy while it runs: an assumption, not a measurement (kind's maintainers call startup the heaviest part
/// and advise creating two clusters and then two more rather than four at once, kubernetes-sigs/kind#1288;
/// a rollout's image pull, its decompression and its Go binaries' start are charged the same). With k of
/// them at once on 4 cores, each
/// progresses at min(1, 4/k) (`ocm_lab_sim::Contention`).
fn contention() -> Contention {
    [
        Behaviour::KindCreate,
        Behaviour::HubOperator,
        Behaviour::KlusterletOperator,
        Behaviour::AddonInstall,
    ]
    .into_iter()
    .fold(Contention::cores(4.0), |c, b| c.demand(b, 1.0))
}

/// One fleet's first `up`, modelled.
struct FleetUp {
    /// Today's model, seconds.
    today: f64,
    /// With contention, seconds.
    contended: f64,
    /// With contention, the slowest step and its seconds.
    slowest: (String, f64),
}

/// A fleet's first `up` with today's model, and with contention on top of it. The timeouts are raised
/// to 30 minutes so that a step slower than its default deadline is measured, not failed; the caller
/// says when one is.
async fn fleet_first_up(n: usize) -> FleetUp {
    let text = ocm_lab_testkit::fleet_topology(&format!("fleet-{n}"), n, |i| {
        format!("region: r-{}, tier.lab.example.com: t-{i}", i % 7)
    })
    .replacen(
        "spec:\n",
        "spec:\n  timeouts: {clusterCreate: 30m, rollout: 30m, join: 30m, default: 30m}\n",
        1,
    );
    let lab = ocm_lab::topology::load_str("fleet.yaml", &text)
        .expect("fleet topology")
        .lab;
    let mut runs = Vec::new();
    for contended in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        let sim = SimLab::new();
        model(&sim);
        if contended {
            sim.set_contention(Some(contention()));
        }
        runs.push(run_timed(&lab, &sim, &state, "up").await);
    }
    FleetUp {
        today: runs[0].0.as_secs_f64(),
        contended: runs[1].0.as_secs_f64(),
        slowest: runs[1].2.clone(),
    }
}

async fn run(lab: &Lab, sim: &Arc<SimLab>, state: &StateDir, workflow: &str) -> Duration {
    run_timed(lab, sim, state, workflow).await.0
}

/// A run, the critical path its timing summary names (step and seconds each), and its slowest step.
async fn run_timed(
    lab: &Lab,
    sim: &Arc<SimLab>,
    state: &StateDir,
    workflow: &str,
) -> (Duration, String, (String, f64)) {
    let patches = PatchSet::embedded().expect("patches");
    let plan =
        ocm_lab::workflow::plan::plan(lab, &Sources::embedded(), &Registry, &patches, workflow)
            .expect("plan");
    let (events, mut rx) = Events::channel();
    let drain = tokio::spawn(async move {
        let mut path = String::new();
        let mut slowest = (String::new(), 0.0);
        while let Some(e) = rx.recv().await {
            if let Event::Timing { timing, .. } = e.event {
                if let Some(s) = timing.steps.first() {
                    slowest = (s.step.clone(), s.elapsed_ms() as f64 / 1000.0);
                }
                path = timing
                    .critical_path
                    .iter()
                    .map(|s| format!("{} {:.0} s", s.step, s.elapsed_ms() as f64 / 1000.0))
                    .collect::<Vec<_>>()
                    .join(" → ");
            }
        }
        (path, slowest)
    });
    let ctx = Arc::new(RunCtx::new(
        lab.clone(),
        sim.backends(),
        state.clone(),
        patches,
        events,
        CancellationToken::new(),
    ));
    let start = tokio::time::Instant::now();
    let r = engine::run(&plan, ctx.clone(), &RunOptions::default())
        .await
        .expect("journal");
    let took = start.elapsed();
    drop(ctx);
    let (path, slowest) = drain.await.expect("drained");
    assert!(r.ok, "{workflow} failed: {:?}", r.failed);
    (took, path, slowest)
}

/// A workshop session's leftovers: a participant's binding and property, and a lab property changed.
async fn dirty(lab: &Lab, sim: &Arc<SimLab>) {
    let hub = sim.api(&lab.hub.cluster.name);
    let spoke = sim.api(&lab.spokes[0].cluster.name);
    let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "participant"}});
    hub.apply(&ns).await.expect("namespace");
    let set = &lab.cluster_sets[0].name;
    let binding = serde_json::json!({"apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": {"name": set, "namespace": "participant"}, "spec": {"clusterSet": set}});
    hub.apply(&binding).await.expect("binding");
    let prop = serde_json::json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": "mine.example.com"}, "spec": {"value": "x"}});
    spoke.apply(&prop).await.expect("property");
    if let Some(p) = lab.spokes[0].properties.first() {
        let changed = serde_json::json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": p.name}, "spec": {"value": "changed-by-a-participant"}});
        spoke.apply(&changed).await.expect("changed property");
    }
}

fn main() {
    let name = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_else(|| "default".into());
    let lab = ocm_lab::topology::load_arg(Some(&name))
        .expect("topology")
        .lab;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    let (reset, down_up) = rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        let sim = SimLab::new();
        model(&sim);
        let (first_up, path, _) = run_timed(&lab, &sim, &state, "up").await;
        println!(
            "first up:          {:>6.0} s (modelled)",
            first_up.as_secs_f64()
        );
        println!("  critical path: {path}");
        {
            let dir = tempfile::tempdir().expect("tempdir");
            let state = StateDir {
                path: dir.path().to_owned(),
            };
            let sim = SimLab::new();
            model(&sim);
            sim.set_contention(Some(contention()));
            let (up, path, _) = run_timed(&lab, &sim, &state, "up").await;
            println!(
                "first up, contention-aware (4 vCPU): {:.0} s (modelled)",
                up.as_secs_f64()
            );
            println!("  critical path: {path}");
        }
        dirty(&lab, &sim).await;
        let prune = run(&lab, &sim, &state, "reset").await;
        let restore = run(&lab, &sim, &state, "up").await;
        println!(
            "  prune {:.3} s, restore and verify {:.3} s",
            prune.as_secs_f64(),
            restore.as_secs_f64()
        );
        let reset = prune + restore;
        dirty(&lab, &sim).await;
        let down = run(&lab, &sim, &state, "down").await;
        let up = run(&lab, &sim, &state, "up").await;
        (reset, down + up)
    });
    println!(
        "reset (prune + up): {:>6.1} s (modelled)",
        reset.as_secs_f64()
    );
    println!(
        "first up of a fleet (modelled): spokes | today's model | contention-aware (4 vCPU) | its slowest step"
    );
    for n in [1, 2, 4, 8] {
        let f = rt.block_on(fleet_first_up(n));
        // The default rollout and join deadlines are 5 minutes (spec.timeouts).
        let over = if f.slowest.1 > 300.0 {
            " (over the default 5m timeout)"
        } else {
            ""
        };
        println!(
            "  fleet first up: {n:>2} | {:>5.0} s | {:>5.0} s | {} {:.0} s{over}",
            f.today, f.contended, f.slowest.0, f.slowest.1
        );
    }
    println!(
        "down + up:          {:>6.1} s (modelled)",
        down_up.as_secs_f64()
    );
    println!(
        "down + up / reset:  {:>6.0}x ({name})",
        down_up.as_secs_f64() / reset.as_secs_f64().max(0.001)
    );
}
