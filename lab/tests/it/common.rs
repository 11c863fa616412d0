//! Helpers shared by the integration tests.

use std::path::PathBuf;
use std::process::Command;

/// `../shared/fixtures` from the project root. A test that reads it carries
/// `#[cfg_attr(ocm_lab_tests_no_fixtures, ignore = "...")]`: where the folder is missing (a clone from
/// GitHub), `lab/build.rs` sets that cfg and `cargo test` lists the test as ignored, with the reason;
/// with `OCM_LAB_REQUIRE_FIXTURES=1` (set by `.ci/run`) it runs, and fails here.
pub fn fixtures() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    assert!(
        dir.is_dir(),
        "{} does not exist: put the fixtures there, or rebuild the tests without OCM_LAB_REQUIRE_FIXTURES=1 \
         so that the tests reading them are ignored",
        dir.display()
    );
    dir
}

/// The project root (where `topologies/` lives).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `ocm-lab` as a user would, with a private state folder (`OCM_LAB_STATE_DIR`).
pub struct Cli {
    pub dir: tempfile::TempDir,
}

impl Cli {
    pub fn new() -> Self {
        Cli {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A simulated default lab, up.
    pub fn up() -> Self {
        let cli = Cli::new();
        let r = cli.run(&["up", "--simulate"]);
        assert_eq!(r.code, 0, "up --simulate: {}", r.stderr);
        cli
    }

    pub fn run(&self, args: &[&str]) -> Output {
        ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", self.dir.path())])
    }

    /// The saved simulated world of the default lab, as text.
    pub fn world(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sandbox/simulated/sim-world.json")).unwrap()
    }
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
/// What the command layer builds from the flags and this process's environment, with no flags given.
pub fn host() -> ocm_lab::topology::Host {
    ocm_lab::commands::host(None, None)
}

pub fn lab(name: &str) -> ocm_lab::topology::Lab {
    match ocm_lab::topology::load_arg(&crate::common::host(), Some(name)) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

/// The errors a topology text produces, as `field: message` lines.
pub fn topology_errors(text: &str) -> Vec<String> {
    match ocm_lab::topology::load_str(&crate::common::host(), "test.yaml", text) {
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

/// Writes an executable shell script.
pub fn script(path: &std::path::Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A lab `<tag>` (hub and one spoke) in a temporary folder, run by the real `ocm-lab` binary with fake
/// tools (`OCM_LAB_KIND`, `OCM_LAB_HELM`) and on its own Docker network (`<tag>-net`, through
/// `KIND_EXPERIMENTAL_DOCKER_NETWORK`, never the machine's `kind`). The fake kind is kind v0.32.0 by its
/// version line, lists no clusters, logs every call and fails every create the way kind does, as a name
/// clash or a broken node image would.
pub struct FakeKindLab {
    pub dir: tempfile::TempDir,
    pub topology: PathBuf,
    pub tag: String,
    pub network: String,
}

impl FakeKindLab {
    pub fn new(tag: &str, hub: &str, spoke: &str) -> FakeKindLab {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kind.log");
        script(
            &dir.path().join("kind"),
            &format!(
                "echo \"$*\" >> {log}\ncase \"$1\" in\n  version) echo 'kind v0.32.0 go1.24.3 linux/amd64' ;;\n  get) exit 0 ;;\n  create) echo 'ERROR: failed to create cluster: the fake kind of this test fails every create' >&2; exit 1 ;;\n  *) exit 0 ;;\nesac\n",
                log = log.display()
            ),
        );
        script(&dir.path().join("helm"), "echo v3.19.0\n");
        let topology = dir.path().join("lab.yaml");
        std::fs::write(
            &topology,
            format!(
                "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {{name: {tag}}}\nspec:\n  hub: {{name: {hub}, featureGates: [ClusterProfile]}}\n  spokes: [{{name: {spoke}}}]\n  clusterSets: [{{name: s, clusters: [{spoke}], bindTo: [inventory]}}]\n"
            ),
        )
        .unwrap();
        FakeKindLab {
            dir,
            topology,
            tag: tag.to_owned(),
            network: format!("{tag}-net"),
        }
    }

    /// `ocm-lab <verb> -t <topology>` (`up` and `reset` with `--no-download`).
    pub fn run(&self, verb: &str) -> Output {
        let d = self.dir.path();
        let out = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
            .args([verb, "-t"])
            .arg(&self.topology)
            .args(if matches!(verb, "up" | "reset") {
                &["--no-download"][..]
            } else {
                &[][..]
            })
            .env("OCM_LAB_KIND", d.join("kind"))
            .env("OCM_LAB_HELM", d.join("helm"))
            .env("OCM_LAB_STATE_DIR", d.join("state"))
            .env("OCM_LAB_CACHE_DIR", d.join("cache"))
            .env("HOME", d.join("home"))
            .env("KUBECONFIG", d.join("home/kubeconfig"))
            .env("KIND_EXPERIMENTAL_DOCKER_NETWORK", &self.network)
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            .output()
            .expect("ocm-lab runs");
        Output {
            code: out.status.code().expect("not killed by a signal"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The fake kind's calls, one a line.
    pub fn kind_calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("kind.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The lab's ownership record (`owned.jsonl`), or "" when there is none.
    pub fn owned_log(&self) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join("state")
                .join(&self.tag)
                .join("owned.jsonl"),
        )
        .unwrap_or_default()
    }
}

/// For a test that must change this process's environment (PATH, HOME, KUBECONFIG): `cargo test` runs
/// the tests as threads of one process, where such a change would reach every other test. In the parent,
/// reruns test `name` alone in a child process of this test binary with `env` set, asserts it passed and
/// returns `true` (the caller then returns); in that child, returns `false` and the test runs there.
pub fn rerun_alone_with_env(name: &str, env: &[(&str, &std::ffi::OsStr)]) -> bool {
    const CHILD: &str = "OCM_LAB_TEST_ALONE";
    if std::env::var_os(CHILD).is_some() {
        return false;
    }
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--test-threads=1"])
        .env(CHILD, "1")
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{name}, rerun alone: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    true
}
