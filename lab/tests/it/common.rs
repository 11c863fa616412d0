//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::process::Command;

/// `../shared/fixtures` from the project root, if present. Without it, a test is skipped with a notice,
/// unless `OCM_LAB_REQUIRE_FIXTURES=1` (set by `.ci/run`), which makes it fail instead.
pub fn fixtures() -> Option<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    if dir.is_dir() {
        return Some(dir);
    }
    if std::env::var("OCM_LAB_REQUIRE_FIXTURES").is_ok_and(|v| v == "1") {
        panic!(
            "OCM_LAB_REQUIRE_FIXTURES=1 but {} does not exist",
            dir.display()
        );
    }
    eprintln!(
        "skipped: {} not found (set OCM_LAB_REQUIRE_FIXTURES=1 to require it)",
        dir.display()
    );
    None
}

/// The project root (where `topologies/` lives).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs the real `ocm-lab` binary.
pub fn ocm_lab(args: &[&str]) -> Output {
    ocm_lab_env(args, &[])
}

/// Runs the real `ocm-lab` binary with extra environment variables.
pub fn ocm_lab_env(args: &[&str], env: &[(&str, &std::path::Path)]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .output()
        .expect("ocm-lab runs");
    Output {
        code: out.status.code().expect("not killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8(out.stderr).expect("utf-8 stderr"),
    }
}

#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Loads an embedded or file topology, panicking with the rendered diagnostics on failure.
pub fn lab(name: &str) -> ocm_lab::topology::Lab {
    match ocm_lab::topology::load_arg(Some(name)) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

/// The errors a topology text produces, as `field: message` lines.
pub fn topology_errors(text: &str) -> Vec<String> {
    match ocm_lab::topology::load_str("test.yaml", text) {
        Ok(_) => Vec::new(),
        Err(ocm_lab::topology::TopologyError::Invalid(d)) => d
            .errors()
            .map(|i| format!("{}: {}", i.field, i.message))
            .collect(),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The embedded default topology with `from` replaced by `to` (which must occur).
pub fn default_with(from: &str, to: &str) -> String {
    let text = ocm_lab::embedded::topology("default").expect("embedded default");
    assert!(text.contains(from), "default topology lacks {from:?}");
    text.replacen(from, to, 1)
}

pub fn plan(lab: &ocm_lab::topology::Lab) -> ocm_lab::workflow::Plan {
    let patches = ocm_lab::patch::PatchSet::embedded().expect("embedded patches load");
    ocm_lab::workflow::plan::plan(
        lab,
        &ocm_lab::workflow::Sources::embedded(),
        &ocm_lab::actions::Registry,
        &patches,
        "up",
    )
    .unwrap_or_else(|e| panic!("{}", ocm_lab::render(&e)))
}

pub fn plan_workflow(lab: &ocm_lab::topology::Lab, workflow: &str) -> ocm_lab::workflow::Plan {
    let patches = ocm_lab::patch::PatchSet::embedded().expect("embedded patches load");
    ocm_lab::workflow::plan::plan(
        lab,
        &ocm_lab::workflow::Sources::embedded(),
        &ocm_lab::actions::Registry,
        &patches,
        workflow,
    )
    .unwrap_or_else(|e| panic!("{}", ocm_lab::render(&e)))
}
