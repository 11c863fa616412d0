//! What a run leaves and prints, whichever way it ends: the JSON event stream of a failed preflight, the
//! schema version on every event, no lock file after a run that touched nothing, no empty `kubeconfigs/`
//! after `down`, verification results that reach the command without a side file, and a damaged last
//! verification that `status` reports instead of skipping.

use std::path::Path;

use serde_json::Value;

use crate::common::{Output, ocm_lab_env};

fn write_executable(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn events(out: &Output) -> Vec<Value> {
    out.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON event ({e}): {l}")))
        .collect()
}

/// `up -o json` on a machine whose kind is too old (and `--no-download`): the preflight fails.
fn failed_preflight(root: &Path, output: &str) -> Output {
    let kind = root.join("kind");
    write_executable(
        &kind,
        "#!/bin/sh\necho 'kind v0.31.0 go1.24.3 linux/amd64'\n",
    );
    let helm = root.join("helm");
    write_executable(&helm, "#!/bin/sh\necho v3.19.0\n");
    ocm_lab_env(
        &["up", "-t", "minimal", "--no-download", "-o", output],
        &[
            ("OCM_LAB_KIND", &kind),
            ("OCM_LAB_HELM", &helm),
            ("OCM_LAB_STATE_DIR", &root.join("state")),
            ("OCM_LAB_CACHE_DIR", &root.join("cache")),
            ("HOME", &root.join("home")),
        ],
    )
}

#[test]
fn a_failed_preflight_prints_the_run_event_stream_under_output_json_and_leaves_no_lock() {
    let root = tempfile::tempdir().unwrap();
    let out = failed_preflight(root.path(), "json");
    assert_eq!(out.code, 1, "{out:?}");
    let events = events(&out);
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["run-started", "step-failed", "run-finished"],
        "{out:?}"
    );
    assert_eq!(events[0]["workflow"], "up");
    assert_eq!(events[0]["lab"], "minimal");
    assert_eq!(events[1]["step"], "preflight");
    let error = events[1]["error"].as_str().unwrap();
    assert!(
        error.contains("kind") && error.contains("older than the minimum v0.32.0"),
        "{error}"
    );
    assert!(
        events[1]["help"]
            .as_str()
            .is_some_and(|h| h.contains("install kind v0.32.0 or newer")),
        "{}",
        events[1]
    );
    assert_eq!(events[2]["ok"], false);
    assert_eq!(events[2]["failed"], "preflight");
    for e in &events {
        assert_eq!(e["schema_version"], 2, "{e}");
    }
    // The people's form still goes to stderr, and the run touched nothing: not even a lock file is left.
    assert!(out.stderr.contains("✗ kind"), "{}", out.stderr);
    let state = root.path().join("state/minimal");
    assert!(
        !state.join("lock").exists(),
        "a failed preflight left a lock file"
    );
    assert!(!state.join("journal.jsonl").exists());

    // Without `-o json`, stdout stays empty.
    let human = failed_preflight(root.path(), "human");
    assert_eq!(human.code, 1, "{human:?}");
    assert_eq!(human.stdout, "");
    assert!(
        !state.join("lock").exists(),
        "a failed preflight left a lock file"
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn every_event_of_a_run_carries_the_schema_version_and_down_leaves_no_kubeconfigs_folder() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let up = ocm_lab_env(&["up", "--simulate", "-t", "minimal", "-o", "json"], &env);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let events = events(&up);
    assert!(events.len() > 10, "{}", up.stdout);
    for e in &events {
        assert_eq!(e["schema_version"], 2, "{e}");
    }
    let state = dir.path().join("minimal/simulated");
    assert!(
        state.join("lock").exists(),
        "a run that ran keeps its lock file"
    );

    let down = ocm_lab_env(&["down", "--simulate", "-t", "minimal"], &env);
    assert_eq!(down.code, 0, "{}", down.stderr);
    let left: Vec<String> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !left.iter().any(|f| f == "kubeconfigs"),
        "`down --simulate` left an empty kubeconfigs folder: {left:?}"
    );
    assert!(
        !left
            .iter()
            .any(|f| f.starts_with("journal") || f.starts_with("last-verification")),
        "{left:?}"
    );
}

#[test]
fn a_run_that_finds_the_lab_not_up_leaves_no_lock_file() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let r = ocm_lab_env(&["verify", "--simulate", "-t", "minimal"], &env);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("lab `minimal` is not up"), "{}", r.stderr);
    assert!(!dir.path().join("minimal/simulated/lock").exists());
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn verify_prints_and_writes_its_results_even_when_the_last_verification_cannot_be_kept() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let up = ocm_lab_env(&["up", "--simulate", "-t", "minimal"], &env);
    assert_eq!(up.code, 0, "{}", up.stderr);
    // A folder where the last verification goes: it cannot be written.
    let last = dir.path().join("minimal/simulated/last-verification.json");
    std::fs::remove_file(&last).unwrap();
    std::fs::create_dir(&last).unwrap();
    let junit = dir.path().join("j.xml");
    let r = ocm_lab_env(
        &[
            "verify",
            "--simulate",
            "-t",
            "minimal",
            "--junit",
            junit.to_str().unwrap(),
        ],
        &env,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("mini-spoke"), "the table: {}", r.stdout);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testcase") && xml.contains("mini-spoke/properties"),
        "{xml}"
    );
    assert!(
        r.stderr.contains("last-verification.json"),
        "the failure to keep it is said: {}",
        r.stderr
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn status_reports_a_damaged_last_verification_instead_of_skipping_it() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let up = ocm_lab_env(&["up", "--simulate", "-t", "minimal"], &env);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let status = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert!(
        status.stdout.contains("Last verification: passed at"),
        "{}",
        status.stdout
    );
    let last = dir.path().join("minimal/simulated/last-verification.json");
    std::fs::write(&last, "{\"run\": \"torn").unwrap();

    let status = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert_eq!(
        status.code, 0,
        "the lab itself is healthy: {}",
        status.stderr
    );
    let line = status
        .stdout
        .lines()
        .find(|l| l.starts_with("Last verification:"))
        .unwrap_or_else(|| panic!("{}", status.stdout));
    assert!(
        line.contains("UNREADABLE")
            && line.contains(&last.display().to_string())
            && line.contains("run `ocm-lab verify -t minimal --simulate` to record a new one"),
        "{line}"
    );
    let json = ocm_lab_env(
        &["status", "--simulate", "-t", "minimal", "-o", "json"],
        &env,
    );
    let v: Value = serde_json::from_str(&json.stdout).unwrap();
    assert!(v["lastVerification"].is_null(), "{v}");
    assert!(
        v["lastVerificationError"]
            .as_str()
            .is_some_and(|e| e.contains("last-verification.json")),
        "{v}"
    );

    // `verify` replaces it, and `status` reads it again.
    let verify = ocm_lab_env(&["verify", "--simulate", "-t", "minimal"], &env);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
    let status = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert!(
        status.stdout.contains("Last verification: passed at"),
        "{}",
        status.stdout
    );
}

/// A second Ctrl-C 20 ms after the first stops the run at once, however busy the first one's graceful
/// stop keeps the runtime (it was lost 9 times in 10 when each Ctrl-C needed a fresh listener).
#[cfg(unix)]
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_second_ctrl_c_soon_after_the_first_stops_at_once() {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let mut up = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
        .args(["up", "--simulate", "-t", "workshop"])
        .env("OCM_LAB_STATE_DIR", dir.path())
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(up.stderr.take().unwrap());
    let mut seen = String::new();
    // The run is under way once a step finished: the handler is in place.
    loop {
        let mut line = String::new();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "ended early: {seen}"
        );
        seen.push_str(&line);
        if line.contains('✓') {
            break;
        }
    }
    let interrupt = || {
        let sent = Command::new("kill")
            .args(["-INT", &up.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    };
    interrupt();
    std::thread::sleep(std::time::Duration::from_millis(20));
    interrupt();
    std::io::Read::read_to_string(&mut stderr, &mut seen).unwrap();
    let status = up.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{seen}");
    assert!(seen.contains("stopped at once (second Ctrl-C)"), "{seen}");
}
