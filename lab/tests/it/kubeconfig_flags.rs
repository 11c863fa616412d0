//! The global `--kubeconfig` and `--context` flags, through the binary: `--kubeconfig` wins over
//! `$KUBECONFIG` for existing clusters that name no kubeconfig and for the file the lab writes its
//! contexts to; `--context` is the context of the one existing cluster that leaves `context:` out.

use std::path::Path;

use serde_json::Value;

use crate::common::{Output, ocm_lab_env};

/// A hub that names no context (`existing: {}`) and a spoke that names one.
const TOPOLOGY: &str = "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: Topology
metadata: {name: flags}
spec:
  hub:
    name: hub
    featureGates: [ClusterProfile]
    existing: {}
  spokes:
    - name: east
      existing: {context: ocm-east}
  clusterSets:
    - name: fleet
      clusters: [east]
      bindTo: [cluster-inventory]
";

fn run(dir: &Path, args: &[&str]) -> Output {
    let topology = dir.join("t.yaml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["-t", topology.to_str().unwrap()]);
    ocm_lab_env(
        &all,
        &[
            ("OCM_LAB_STATE_DIR", &dir.join("state")),
            ("HOME", &dir.join("home")),
            ("KUBECONFIG", &dir.join("from-env.yaml")),
        ],
    )
}

#[test]
fn context_names_the_context_of_the_existing_cluster_that_leaves_it_out() {
    let dir = tempfile::tempdir().unwrap();
    let without = run(dir.path(), &["ci", "contexts"]);
    assert_eq!(without.code, 2, "{without:?}");
    assert!(
        without
            .stderr
            .contains("cluster `hub` names no kubeconfig context")
            && without
                .stderr
                .contains("pass the global `--context <name>` flag"),
        "{}",
        without.stderr
    );
    // Global: before or after the command.
    for args in [
        &["--context", "their-hub", "ci", "contexts"][..],
        &["ci", "contexts", "--context", "their-hub"][..],
    ] {
        let r = run(dir.path(), args);
        assert_eq!(r.code, 0, "{r:?}");
        let v: Value = serde_json::from_str(&r.stdout).unwrap();
        assert_eq!(v["hub"], "their-hub");
        assert_eq!(
            v["spokes"],
            serde_json::json!(["ocm-east"]),
            "a named context stays"
        );
    }
}

#[test]
fn context_that_applies_to_no_cluster_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = ocm_lab_env(
        &["topology", "check", "default", "--context", "kind-hub"],
        &[("OCM_LAB_STATE_DIR", &dir.path().join("state"))],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("`--context kind-hub` applies to no cluster of topology embedded:default"),
        "{}",
        r.stderr
    );
    // A problem of the command line, not of the topology file: no "problem found" in the file, and
    // `status` says the same, with its JSON error document naming the flag.
    assert!(!r.stderr.contains("problem found"), "{}", r.stderr);
    let r = ocm_lab_env(
        &["status", "--context", "foo", "-o", "json"],
        &[("OCM_LAB_STATE_DIR", &dir.path().join("state"))],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!r.stderr.contains("problem found"), "{}", r.stderr);
    let doc: serde_json::Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(doc["error"]["code"], "ocm_lab::context_unused", "{doc}");
    assert!(
        doc["error"]["help"]
            .as_str()
            .unwrap()
            .contains("leave `--context` out"),
        "{doc}"
    );
}

#[test]
fn kubeconfig_wins_over_the_environment_for_existing_clusters_and_the_labs_contexts() {
    let dir = tempfile::tempdir().unwrap();
    let mine = dir.path().join("mine.yaml");
    // Where `up` writes the kind clusters' contexts (the Action's output).
    let r = run(
        dir.path(),
        &[
            "ci",
            "contexts",
            "--context",
            "their-hub",
            "--kubeconfig",
            mine.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["kubeconfig"], mine.display().to_string());
    let r = run(dir.path(), &["ci", "contexts", "--context", "their-hub"]);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["kubeconfig"],
        dir.path().join("from-env.yaml").display().to_string(),
        "without the flag, $KUBECONFIG"
    );
    // The kubeconfig the existing clusters are reached through: the flag's file (absent here), not
    // $KUBECONFIG's.
    let r = run(
        dir.path(),
        &[
            "verify",
            "--context",
            "their-hub",
            "--kubeconfig",
            mine.to_str().unwrap(),
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("kubeconfig {} does not exist", mine.display())),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("from-env.yaml"), "{}", r.stderr);
}

#[test]
fn help_describes_both_flags() {
    let r = crate::common::ocm_lab(&["up", "--help"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("--kubeconfig <FILE>"), "{}", r.stdout);
    assert!(r.stdout.contains("--context <NAME>"), "{}", r.stdout);
}
