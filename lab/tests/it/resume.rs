//! Resume by content: a run cut short is resumed only with steps whose inputs did not change, only from
//! a run of the same workflow with nothing else run since, and observe-only steps always run again.
//! Driven through the real binary on the simulated lab, as a user would.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// One simulated lab in a private state folder, driven through the real `ocm-lab` binary.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

/// How a child `ocm-lab` ended.
#[derive(Debug)]
pub struct Ended {
    /// The exit code, or `None` when a signal killed it.
    pub code: Option<i32>,
    /// The signal that killed it.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ended {
    /// The events of a `--output json` run.
    pub fn events(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Steps that started (ran) in this run.
    pub fn started(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| e["event"] == "step-started")
            .filter_map(|e| e["step"].as_str().map(str::to_owned))
            .collect()
    }

    /// How many steps the run carried over from the interrupted one.
    pub fn resumed(&self) -> u64 {
        self.events()
            .iter()
            .find(|e| e["event"] == "run-started")
            .and_then(|e| e["resumed"].as_u64())
            .expect("a run-started event")
    }
}

impl Sandbox {
    pub fn new() -> Self {
        Sandbox {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Where the simulated lab `sandbox` keeps its state.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("sandbox/simulated")
    }

    /// Writes a topology file into the sandbox and returns its path.
    pub fn topology(&self, text: &str) -> PathBuf {
        let p = self.dir.path().join("lab.yaml");
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Runs `ocm-lab` with this state folder and extra environment.
    pub fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Ended {
        use std::os::unix::process::ExitStatusExt;
        let out = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
            .args(args)
            .env("OCM_LAB_STATE_DIR", self.dir.path())
            .env_remove("RUST_LOG")
            .env_remove("OCM_LAB_CRASH_POINT")
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .output()
            .expect("ocm-lab runs");
        Ended {
            code: out.status.code(),
            signal: out.status.signal(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn run(&self, args: &[&str]) -> Ended {
        self.run_env(args, &[])
    }

    /// Runs a command and asserts it succeeds.
    pub fn ok(&self, args: &[&str]) -> Ended {
        let r = self.run(args);
        assert_eq!(
            r.code,
            Some(0),
            "`ocm-lab {}` failed:\n{}",
            args.join(" "),
            r.stderr
        );
        r
    }

    /// Runs a command that SIGKILLs itself after its `n`-th step boundary, and asserts it did.
    pub fn killed_after(&self, args: &[&str], n: usize) -> Ended {
        let r = self.run_env(args, &[("OCM_LAB_CRASH_POINT", &n.to_string())]);
        assert_eq!(
            r.signal,
            Some(9),
            "`ocm-lab {}` with crash point {n} was not SIGKILLed: {:?}\n{}",
            args.join(" "),
            r.code,
            r.stderr
        );
        r
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Steps of `up` on the default lab.
fn up_steps() -> usize {
    crate::common::plan(&crate::common::lab("default"))
        .steps
        .len()
}

#[test]
fn an_edit_after_a_kill_runs_the_changed_step_again_and_verification_passes() {
    let s = Sandbox::new();
    let before = s.topology(ocm_lab::embedded::topology("default").unwrap());
    // Killed after every step but the last (verification) is done.
    s.killed_after(&["up", "--simulate", "-t", path(&before)], up_steps() - 1);

    let edited = s.topology(&crate::common::default_with(
        "region: eu-west-1",
        "region: eu-north-1",
    ));
    let r = s.ok(&["up", "--simulate", "-t", path(&edited), "--output", "json"]);
    let started = r.started();
    assert!(
        started.contains(&"properties[cluster2]".to_owned()),
        "the step whose inputs changed must run again: {started:?}"
    );
    assert!(
        !started.contains(&"properties[cluster1]".to_owned()),
        "an unchanged step is carried over: {started:?}"
    );
    assert!(
        started.contains(&"preflight".to_owned()),
        "preflight only observes: it runs again on every resume: {started:?}"
    );
    assert!(r.resumed() > 0);
    let r = s.ok(&["verify", "--simulate", "-t", path(&edited)]);
    assert!(
        r.stdout.contains("cluster2 (cluster-inventory)"),
        "{}",
        r.stdout
    );
    let world = std::fs::read_to_string(s.state().join("sim-world.json")).unwrap();
    assert!(world.contains("eu-north-1"), "the new region is in the lab");
}

#[test]
fn a_down_between_an_interrupted_up_and_the_next_voids_the_resume() {
    let s = Sandbox::new();
    s.killed_after(&["up", "--simulate"], up_steps() / 2);
    // A `down` that stops part-way: one cluster deleted, the rest not.
    s.killed_after(&["down", "--simulate"], 1);
    let r = s.ok(&["up", "--simulate", "--output", "json"]);
    assert_eq!(r.resumed(), 0, "nothing is carried over a `down`");
    assert!(r.started().contains(&"create[hub]".to_owned()));
    s.ok(&["verify", "--simulate"]);
}

#[test]
fn a_journal_from_before_digests_carries_nothing() {
    let s = Sandbox::new();
    s.killed_after(&["up", "--simulate"], up_steps() - 1);
    let journal = s.state().join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let old: String = text
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("digest");
            format!("{v}\n")
        })
        .collect();
    std::fs::write(&journal, old).unwrap();
    let r = s.ok(&["up", "--simulate", "--output", "json"]);
    assert_eq!(r.resumed(), 0);
}
