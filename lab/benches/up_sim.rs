//! Benchmark: `up` on the simulated lab with 1 hub and N spokes, zero latencies.
//!
//! `cargo bench --bench up_sim` (or `-- 500` for one size). Reports wall time per run (median of several),
//! and the process's peak resident memory, for growing N, so cost per spoke can be read off. Measures the
//! engine, planner and the simulation together; real labs are dominated by kind and rollouts instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ocm_lab::engine::events::Events;
use ocm_lab::engine::{self, RunCtx, RunOptions};
use ocm_lab::patch::PatchSet;
use ocm_lab::sim::SimLab;
use ocm_lab::state::StateDir;
use ocm_lab::workflow::Sources;
use tokio_util::sync::CancellationToken;

/// A topology with `n` spokes, each with two properties, one exclusive set bound in two namespaces.
fn topology(n: usize) -> String {
    let mut spokes = String::new();
    let mut members = Vec::new();
    for i in 0..n {
        spokes.push_str(&format!("    - name: spoke-{i}\n      properties: {{region: r-{}, tier.lab.example.com: t-{i}}}\n", i % 7));
        members.push(format!("spoke-{i}"));
    }
    format!(
        "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: Topology
metadata: {{name: bench-{n}}}
spec:
  hub: {{name: hub, featureGates: [ClusterProfile]}}
  spokes:
{spokes}  clusterSets:
    - name: fleet
      clusters: [{}]
      bindTo: [cluster-inventory, open-cluster-management-addon]
  addons:
    cluster-proxy: {{clusterSet: fleet}}
    managed-serviceaccount: {{clusterSet: fleet}}
  serviceAccounts:
    - name: reader
  verify: {{namespaces: [cluster-inventory], checks: [properties, access-providers, credentials, conditions]}}
",
        members.join(", ")
    )
}

/// Peak resident set size of this process so far, in MiB (Linux `VmHWM`).
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// One `up` from nothing; returns (plan time, run time, steps).
fn up_once(n: usize) -> (Duration, Duration, usize) {
    let text = topology(n);
    let t0 = Instant::now();
    let lab = ocm_lab::topology::load_str("bench.yaml", &text)
        .expect("valid topology")
        .lab;
    let patches = PatchSet::embedded().expect("patches");
    let plan =
        ocm_lab::workflow::plan::plan(&lab, &Sources::embedded(), &patches, "up").expect("plan");
    let planned = t0.elapsed();
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir {
        path: dir.path().to_owned(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let t1 = Instant::now();
    let ok = runtime.block_on(async {
        let sim = SimLab::new();
        let (events, mut rx) = Events::channel();
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let ctx = Arc::new(RunCtx::new(
            lab,
            sim.backends(),
            state,
            patches,
            events,
            CancellationToken::new(),
        ));
        let r = engine::run(&plan, ctx.clone(), &RunOptions { concurrency: 8 })
            .await
            .expect("journal");
        drop(ctx);
        let _ = drain.await;
        r.ok
    });
    assert!(ok, "up on {n} spokes failed");
    (planned, t1.elapsed(), plan.steps.len())
}

fn main() {
    let sizes: Vec<usize> = match std::env::args().skip(1).find_map(|a| a.parse().ok()) {
        Some(n) => vec![n],
        None => vec![50, 100, 250, 500],
    };
    println!(
        "{:>7} {:>7} {:>10} {:>10} {:>12} {:>14}",
        "spokes", "steps", "plan", "run", "run/spoke", "peak RSS MiB"
    );
    for n in sizes {
        let runs = if n >= 250 { 3 } else { 5 };
        let mut samples: Vec<(Duration, Duration, usize)> = (0..runs).map(|_| up_once(n)).collect();
        samples.sort_by_key(|s| s.1);
        let (plan, run, steps) = samples[runs / 2];
        println!(
            "{n:>7} {steps:>7} {:>9.0}ms {:>9.0}ms {:>10.2}ms {:>14.1}",
            plan.as_secs_f64() * 1e3,
            run.as_secs_f64() * 1e3,
            run.as_secs_f64() * 1e3 / n as f64,
            peak_rss_mib().unwrap_or(f64::NAN)
        );
    }
}
