//! Benchmark: `up` on the simulated lab with 1 hub and N spokes, zero latencies.
//!
//! `cargo bench --bench up_sim` (or `-- 500` for one size). Each sample is one `up` from nothing in a
//! fresh child process. Reports, for growing N, the median sample's plan, run and total wall time, and the
//! highest peak resident memory of any sample, so cost per spoke can be read off. Measures the engine,
//! planner and the simulation together; real labs are dominated by kind and rollouts instead.
//! `UP_SIM_PHASES=1` prints, on stderr, the resident and peak memory after planning and after the run, and
//! the size of the saved simulated world: where the memory of a run goes.

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

/// A topology with `n` spokes, each with two properties, one exclusive set bound in two namespaces.
fn topology(n: usize) -> String {
    ocm_lab_testkit::fleet_topology(&format!("bench-{n}"), n, |i| {
        format!("region: r-{}, tier.lab.example.com: t-{i}", i % 7)
    })
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

/// With `UP_SIM_PHASES=1`, prints to stderr the resident and peak memory after `what`.
fn phase(what: &str) {
    if std::env::var_os("UP_SIM_PHASES").is_none() {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |f: &str| {
        status
            .lines()
            .find(|l| l.starts_with(f))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|k| k.parse::<f64>().ok())
            .map_or(f64::NAN, |kb| kb / 1024.0)
    };
    eprintln!(
        "{what}: resident {:.1} MiB, peak {:.1} MiB",
        field("VmRSS:"),
        field("VmHWM:")
    );
}

/// One `up` from nothing; returns (plan time, run time, steps).
fn up_once(n: usize) -> (Duration, Duration, usize) {
    phase("started");
    let text = topology(n);
    let t0 = Instant::now();
    let lab = ocm_lab::topology::load_str("bench.yaml", &text)
        .expect("valid topology")
        .lab;
    let patches = PatchSet::embedded().expect("patches");
    let plan = ocm_lab::workflow::plan::plan(&lab, &Sources::embedded(), &Registry, &patches, "up")
        .expect("plan");
    let planned = t0.elapsed();
    phase("planned");
    if std::env::var_os("UP_SIM_PHASES").is_some() {
        let mut by_step: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
        for st in &plan.steps {
            let e = by_step.entry(st.step.as_str()).or_default();
            e.0 += 1;
            e.1 += serde_json::to_string(&**st).map_or(0, |t| t.len());
        }
        for (step, (count, bytes)) in by_step {
            eprintln!(
                "  plan: {step}: {count} instances, {:.1} KiB as JSON",
                bytes as f64 / 1024.0
            );
        }
    }
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
    let (ok, sim) = runtime.block_on(async {
        let sim = SimLab::new();
        let (events, mut rx) = Events::channel();
        let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
        // As the CLI runs it: the simulated world is saved (atomically) once, when the run ends.
        // `UP_SIM_NO_SAVE=1` leaves the save out, to measure what it costs.
        let world = state.sim_world();
        let ctx = RunCtx::new(
            lab,
            sim.backends(),
            state,
            patches,
            events,
            CancellationToken::new(),
        );
        let ctx = Arc::new(ctx);
        let r = engine::run(&plan, ctx.clone(), &RunOptions { concurrency: 8 })
            .await
            .expect("journal");
        if std::env::var_os("UP_SIM_NO_SAVE").is_none() {
            sim.save(&world).expect("the world saves");
        }
        phase("ran");
        if std::env::var_os("UP_SIM_PHASES").is_some() {
            let len = std::fs::metadata(&world).map(|m| m.len()).unwrap_or(0);
            eprintln!("saved simulated world: {:.1} MiB", len as f64 / 1048576.0);
        }
        drop(ctx);
        let _ = drain.await;
        phase("run context dropped");
        (r.ok, sim)
    });
    let ran = t1.elapsed();
    // Freeing the simulated world (hundreds of thousands of small objects) is the harness's cleanup,
    // not part of `up`: the CLI saves the world and exits.
    drop(sim);
    assert!(ok, "up on {n} spokes failed");
    (planned, ran, plan.steps.len())
}

/// What one `up` in a fresh process measured.
struct Sample {
    plan: Duration,
    run: Duration,
    steps: usize,
    peak_rss_mib: f64,
}

/// Runs one `up` in a child process (`<bench> --one N`), so that each sample's peak memory is its own and
/// not what earlier samples left in the allocator.
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
        plan: Duration::from_secs_f64(f[0]),
        run: Duration::from_secs_f64(f[1]),
        steps: f[2] as usize,
        peak_rss_mib: f[3],
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--one") {
        let n = args
            .get(i + 1)
            .and_then(|a| a.parse().ok())
            .expect("--one needs a number of spokes");
        let (plan, run, steps) = up_once(n);
        println!(
            "{} {} {steps} {}",
            plan.as_secs_f64(),
            run.as_secs_f64(),
            peak_rss_mib().unwrap_or(f64::NAN)
        );
        return;
    }
    let sizes: Vec<usize> = match args.iter().find_map(|a| a.parse().ok()) {
        Some(n) => vec![n],
        None => vec![50, 100, 250, 500],
    };
    println!(
        "{:>7} {:>7} {:>10} {:>10} {:>10} {:>12} {:>14}",
        "spokes", "steps", "plan", "run", "total", "run/spoke", "peak RSS MiB"
    );
    for n in sizes {
        let runs = if n >= 250 { 5 } else { 7 };
        let mut samples: Vec<Sample> = (0..runs).map(|_| sample_in_child(n)).collect();
        samples.sort_by_key(|s| s.plan + s.run);
        let median = &samples[runs / 2];
        let peak = samples
            .iter()
            .map(|s| s.peak_rss_mib)
            .fold(f64::NAN, f64::max);
        println!(
            "{n:>7} {:>7} {:>9.0}ms {:>9.0}ms {:>9.0}ms {:>10.2}ms {:>14.1}",
            median.steps,
            median.plan.as_secs_f64() * 1e3,
            median.run.as_secs_f64() * 1e3,
            (median.plan + median.run).as_secs_f64() * 1e3,
            median.run.as_secs_f64() * 1e3 / n as f64,
            peak
        );
    }
}
