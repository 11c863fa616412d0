//! Runs cut short, and the runs after them: every `up` runs every step and converges from whatever the lab
//! is, with or without a journal. Driven through the real binary on the simulated lab, as a user would;
//! a kill comes from outside, at a step boundary the `--output json` event stream shows.

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

    /// The summary of a `--output json` run: its `run-finished` event.
    pub fn finished(&self) -> Value {
        self.events()
            .into_iter()
            .find(|e| e["event"] == "run-finished")
            .expect("a run-finished event")
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

    /// Runs a command with `--output json` and SIGKILLs it from outside as soon as its event stream says
    /// the `n`-th step finished, as an OOM kill or `kill -9` would end it, and asserts the kill landed.
    pub fn killed_after(&self, args: &[&str], n: usize) -> Ended {
        self.killed_after_finished(args, n, "")
    }

    /// [`Sandbox::killed_after`] the `n`-th finished step whose id starts with `prefix` (`delete[`).
    pub fn killed_after_finished(&self, args: &[&str], n: usize, prefix: &str) -> Ended {
        let r = self.signal_after(args, n, prefix, false);
        assert_eq!(
            r.signal,
            Some(9),
            "`ocm-lab {}` was not killed after step boundary {n}: {:?}\n{}",
            args.join(" "),
            r.code,
            r.stderr
        );
        r
    }

    /// [`Sandbox::killed_after`] for a boundary near the end of a run: the kill lands a moment after the
    /// test reads the boundary, and by then the run may have finished (it must then have finished well).
    pub fn kill_after(&self, args: &[&str], n: usize) -> Ended {
        self.signal_after(args, n, "", false)
    }

    /// Runs a command with `--output json` and presses Ctrl-C (SIGINT) once its event stream says the
    /// `n`-th step whose id starts with `prefix` finished; returns how it ended. The rest of the run must
    /// outlast the moment between that event and the signal (a simulated step takes a millisecond or so),
    /// so pick an early step.
    pub fn interrupted_after(&self, args: &[&str], n: usize, prefix: &str) -> Ended {
        self.signal_after(args, n, prefix, true)
    }

    /// SIGKILL, or with `interrupt` SIGINT, after the `n`-th step boundary (of the steps whose id starts
    /// with `prefix`).
    fn signal_after(&self, args: &[&str], n: usize, prefix: &str, interrupt: bool) -> Ended {
        use std::io::{BufRead as _, Read as _};
        use std::os::unix::process::ExitStatusExt;
        let mut child = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
            .args(args)
            .args(["--output", "json"])
            .env("OCM_LAB_STATE_DIR", self.dir.path())
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("ocm-lab runs");
        let mut stderr = child.stderr.take().unwrap();
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let mut stdout = String::new();
        let mut boundaries = 0;
        for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
            let line = line.unwrap();
            stdout.push_str(&line);
            stdout.push('\n');
            let event: Value = serde_json::from_str(&line).unwrap_or_default();
            if event["event"] == "step-finished"
                && event["step"]
                    .as_str()
                    .is_some_and(|s| s.starts_with(prefix))
            {
                boundaries += 1;
                if boundaries == n && interrupt {
                    // kill(2) itself, not a `kill` process: starting one takes long enough on a loaded
                    // machine for the simulated run to finish first.
                    let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
                    // SAFETY: kill(2) with a valid signal number has no memory-safety preconditions.
                    let sent = unsafe { libc::kill(pid, libc::SIGINT) };
                    assert_eq!(
                        sent,
                        0,
                        "kill -INT failed: {}",
                        std::io::Error::last_os_error()
                    );
                } else if boundaries == n {
                    child.kill().unwrap();
                    break;
                }
            }
        }
        let status = child.wait().unwrap();
        let r = Ended {
            code: status.code(),
            signal: status.signal(),
            stdout,
            stderr: errors.join().unwrap(),
        };
        assert!(
            interrupt || r.signal == Some(9) || (boundaries >= n && r.code == Some(0)),
            "`ocm-lab {}` ended before step boundary {n} ({boundaries} seen): {:?}\n{}",
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
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn an_up_on_a_lab_that_is_up_changes_nothing_also_without_its_journal() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    std::fs::remove_file(s.state().join("journal.jsonl")).unwrap();
    let r = s.ok(&["up", "--simulate"]);
    assert!(
        r.stderr.contains(": 0 changed, "),
        "nothing differs, so nothing changes: {}",
        r.stderr
    );
    let r = s.ok(&["up", "--simulate", "--output", "json"]);
    assert_eq!(r.finished()["changed"], 0);
    assert_eq!(
        r.started().len(),
        up_steps(),
        "every step runs and observes"
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn an_edit_after_a_kill_is_applied_by_the_next_up_and_verification_passes() {
    let s = Sandbox::new();
    let before = s.topology(ocm_lab::embedded::topology("default").unwrap());
    // Killed late in the run (the clusters are all there, most of OCM too).
    s.killed_after(
        &["up", "--simulate", "-t", path(&before)],
        up_steps() * 2 / 3,
    );

    let edited = s.topology(&crate::common::default_with(
        "region: eu-west-1",
        "region: eu-north-1",
    ));
    let r = s.ok(&["up", "--simulate", "-t", path(&edited), "--output", "json"]);
    assert_eq!(r.started().len(), up_steps(), "every step runs");
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
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_kill_of_a_later_up_loses_nothing_the_last_command_saved() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    let edited = s.topology(&crate::common::default_with(
        "region: eu-west-1",
        "region: eu-north-1",
    ));
    // Killed mid-way: the simulated world is the one the first `up` saved.
    s.killed_after(&["up", "--simulate", "-t", path(&edited)], up_steps() / 2);
    let world = std::fs::read_to_string(s.state().join("sim-world.json")).unwrap();
    assert!(
        !world.contains("eu-north-1"),
        "nothing of the killed run was saved"
    );
    let r = s.ok(&["up", "--simulate", "-t", path(&edited), "--output", "json"]);
    assert_ne!(r.finished()["changed"], 0, "the edit is applied");
    s.ok(&["verify", "--simulate", "-t", path(&edited)]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_ctrl_c_saves_the_simulated_world_and_the_next_up_keeps_what_was_done() {
    let s = Sandbox::new();
    // Right after the hub's cluster was created: the next `up` must find it, and the dozens of steps
    // still to run leave the signal time to land before the run could end on its own.
    let r = s.interrupted_after(&["up", "--simulate"], 1, "create[hub]");
    assert_eq!(r.code, Some(130), "cancelled: {}", r.stderr);
    let r = s.ok(&["up", "--simulate", "--output", "json"]);
    let outcome = |step: &str| {
        r.events()
            .iter()
            .find(|e| e["event"] == "step-finished" && e["step"] == step)
            .map(|e| e["outcome"].clone())
    };
    assert_eq!(
        outcome("create[hub]"),
        Some(Value::from("unchanged")),
        "the cluster the cancelled run created was saved with the simulated world"
    );
    s.ok(&["verify", "--simulate"]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_down_after_an_interrupted_up_removes_the_lab_and_the_next_up_builds_it_again() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    s.killed_after(&["up", "--simulate"], up_steps() / 2);
    s.ok(&["down", "--simulate"]);
    let r = s.ok(&["up", "--simulate", "--output", "json"]);
    assert_eq!(
        r.events()
            .iter()
            .find(|e| e["event"] == "step-finished" && e["step"] == "create[hub]")
            .map(|e| e["outcome"].clone()),
        Some(Value::from("changed")),
        "the hub is created again"
    );
    s.ok(&["verify", "--simulate"]);
}

/// A killed `down --simulate` leaves the ownership record ahead of the simulated world (saved before the
/// `down`): the next `up` refuses the clusters it can no longer prove it owns, and the recovery README
/// names (`down`, then `up`) builds the lab again.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn after_a_killed_down_a_second_down_and_an_up_build_the_lab_again() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    // Killed once `down` deleted a cluster (its ownership record says so; the simulated world, saved when
    // a command ends, still holds it).
    s.killed_after_finished(&["down", "--simulate"], 1, "delete[");
    let r = s.run(&["up", "--simulate"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("did not create them"), "{}", r.stderr);
    s.ok(&["down", "--simulate"]);
    s.ok(&["up", "--simulate"]);
    s.ok(&["verify", "--simulate"]);
}

/// Built without the simulated lab (`--no-default-features`), `--simulate` says so, names what to do,
/// and leaves no simulated state behind.
#[cfg(not(feature = "simulate"))]
#[test]
fn without_the_simulate_feature_simulate_says_this_build_has_no_simulated_lab() {
    let s = Sandbox::new();
    let r = s.run(&["up", "--simulate"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("built without the simulated lab")
            && r.stderr.contains("run without `--simulate`"),
        "{}",
        r.stderr
    );
    assert!(!s.state().join("sim-world.json").exists());
}

/// `down` leaves nothing of the lab behind, not even its lock file or emptied folders (also for a lab
/// that was never up), and `status` on a lab that is not up creates nothing.
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
#[test]
fn down_leaves_no_lock_or_folder_and_status_creates_none() {
    let s = Sandbox::new();
    let entries = |s: &Sandbox| -> Vec<String> {
        std::fs::read_dir(s.dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let r = s.run(&["status", "--simulate"]);
    assert_ne!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(entries(&s), Vec::<String>::new(), "status created state");
    let r = s.run(&["down", "--simulate"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert_eq!(entries(&s), Vec::<String>::new(), "down of a lab never up");
    s.ok(&["up", "--simulate"]);
    assert!(s.state().join("lock").exists());
    s.ok(&["down", "--simulate"]);
    assert_eq!(entries(&s), Vec::<String>::new(), "down after up");
}

/// A node image `up` cannot apply without re-creating the clusters is refused, naming `down` then `up`,
/// instead of reported as `0 changed`; the lab is left as it was.
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
#[test]
fn a_node_image_change_is_refused_with_down_then_up() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate", "-t", "minimal"]);
    let older = ocm_lab::topology::catalog::KNOWN_KIND_NODE_IMAGES
        .iter()
        .find(|i| i.contains("v1.35."))
        .expect("the catalog knows a 1.35 node image");
    let r = s.run(&["up", "--simulate", "-t", "minimal", "--node-image", older]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("cannot change in place")
            && r.stderr.contains("ocm-lab down --simulate")
            && r.stderr.contains("v1.35.0"),
        "{}",
        r.stderr
    );
    let again = s.ok(&["up", "--simulate", "-t", "minimal", "--output", "json"]);
    assert_eq!(again.finished()["changed"], 0, "{}", again.stdout);
}
