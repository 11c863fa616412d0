//! Benchmark and linear-growth guard: `up` on the simulated lab with 1 hub and 10, 50 and 100 spokes.
//!
//! `cargo bench -p ocm-lab --bench up_sim`. Each sample is one `up` from nothing (plan, run, and the save of
//! the simulated world the command line does when it ends) in a fresh child process, so that its peak
//! memory is its own. For each size it prints the fastest sample's wall time (the one other work on the
//! machine disturbed least: on a shared machine the median moves by tens of percent from run to run) and
//! the highest peak memory above the process's memory before the `up`, both in all and per spoke.
//!
//! It fails (exit code 1) when the time or the memory per spoke at 100 spokes is more than 25 % above the
//! figure at 10 spokes: the simulation's cost must grow linearly with the spokes, not faster. This is a
//! guard against accidental quadratic work, not a race: the simulated lab is a test double, and a real
//! lab's time is kind, image pulls and rollouts (docs/performance.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ocm_lab::actions::Registry;
use ocm_lab::engine::{self, RunOptions};
use ocm_lab::patch::PatchSet;
use ocm_lab::state::StateDir;
use ocm_lab::step::RunCtx;
use ocm_lab::step::events::Events;
use ocm_lab::workflow::Sources;
use ocm_lab_sim::SimLab;
use tokio_util::sync::CancellationToken;

const SIZES: [usize; 3] = [10, 50, 100];
/// Samples per size; the fastest one's time is reported.
const SAMPLES: usize = 5;
/// How much the cost per spoke may grow from the smallest size to the largest.
const MAX_GROWTH: f64 = 1.25;

/// A topology with `n` spokes, each with two properties, one exclusive set bound in two namespaces.
fn topology(n: usize) -> String {
    ocm_lab_testkit::fleet_topology(&format!("bench-{n}"), n, |i| {
        format!("region: r-{}, tier.lab.example.com: t-{i}", i % 7)
    })
}

/// Peak resident set size of this process so far, in MiB (Linux `VmHWM`; 0 elsewhere).
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// One `up` from nothing on `n` spokes; returns its wall time.
fn up_once(n: usize) -> Duration {
    let text = topology(n);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let state = StateDir {
        path: dir.path().to_owned(),
    };
    let t0 = Instant::now();
    let lab =
        ocm_lab::topology::load_str(&ocm_lab::commands::host(None, None), "bench.yaml", &text)
            .expect("valid topology")
            .lab;
    let patches = PatchSet::embedded().expect("patches");
    let plan = ocm_lab::workflow::plan::plan(&lab, &Sources::embedded(), &Registry, &patches, "up")
        .expect("plan");
    let ok = runtime.block_on(async {
        let sim = SimLab::new();
        let (events, mut rx) = Events::channel();
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let world = state.sim_world();
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
        // As the command line does when a command ends.
        sim.save(&world).expect("save the simulated world");
        drop(ctx);
        let _ = drain.await;
        r.ok
    });
    let took = t0.elapsed();
    assert!(ok, "up on {n} spokes failed");
    took
}

/// What one `up` in a fresh process measured.
struct Sample {
    time: Duration,
    /// Peak resident memory above what the process held before the `up`, MiB.
    memory_mib: f64,
}

/// Runs one `up` in a child process (`<bench> --one N`).
fn sample_in_child(n: usize) -> Sample {
    let out = std::process::Command::new(std::env::current_exe().expect("bench executable"))
        .args(["--one", &n.to_string()])
        .output()
        .expect("run the bench child");
    assert!(
        out.status.success(),
        "bench child failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let f: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    Sample {
        time: Duration::from_secs_f64(f[0]),
        memory_mib: f[1],
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let n = args
            .get(i + 1)
            .and_then(|a| a.parse().ok())
            .expect("--one needs a number of spokes");
        let before = peak_rss_mib();
        let time = up_once(n);
        println!(
            "{} {}",
            time.as_secs_f64(),
            (peak_rss_mib() - before).max(0.0)
        );
        return std::process::ExitCode::SUCCESS;
    }
    println!(
        "{:>7} {:>10} {:>12} {:>12} {:>14}",
        "spokes", "up", "up/spoke", "memory MiB", "MiB/spoke"
    );
    // (time per spoke, memory per spoke) for each size.
    let mut per_spoke: Vec<(f64, f64)> = Vec::new();
    for n in SIZES {
        let samples: Vec<Sample> = (0..SAMPLES).map(|_| sample_in_child(n)).collect();
        let time = samples
            .iter()
            .map(|s| s.time)
            .min()
            .expect("samples")
            .as_secs_f64();
        let memory = samples.iter().map(|s| s.memory_mib).fold(0.0, f64::max);
        let (t, m) = (time / n as f64, memory / n as f64);
        println!(
            "{n:>7} {:>9.0}ms {:>10.2}ms {memory:>12.1} {m:>14.3}",
            time * 1e3,
            t * 1e3
        );
        per_spoke.push((t, m));
    }
    let (first, last) = (per_spoke[0], per_spoke[per_spoke.len() - 1]);
    let mut grew = Vec::new();
    if last.0 > first.0 * MAX_GROWTH {
        grew.push(format!(
            "time per spoke grew {:.0} % (at most {:.0} %)",
            (last.0 / first.0 - 1.0) * 100.0,
            (MAX_GROWTH - 1.0) * 100.0
        ));
    }
    if last.1 > first.1 * MAX_GROWTH {
        grew.push(format!(
            "memory per spoke grew {:.0} % (at most {:.0} %)",
            (last.1 / first.1 - 1.0) * 100.0,
            (MAX_GROWTH - 1.0) * 100.0
        ));
    }
    if grew.is_empty() {
        println!(
            "linear: per spoke, {} spokes cost at most {:.0} % more than {} spokes",
            SIZES[SIZES.len() - 1],
            (MAX_GROWTH - 1.0) * 100.0,
            SIZES[0]
        );
        std::process::ExitCode::SUCCESS
    } else {
        eprintln!(
            "the simulated lab grew faster than linearly from {} to {} spokes: {}",
            SIZES[0],
            SIZES[SIZES.len() - 1],
            grew.join("; ")
        );
        std::process::ExitCode::FAILURE
    }
}
