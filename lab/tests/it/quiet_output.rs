//! Output a workshop can read: a command that changes nothing says so in a line, not a list of every step;
//! check results appear once (the table); `reset` says what it removed.

use std::path::Path;

use ocm_lab::step::events::Event;
use serde_json::json;

use crate::common::ocm_lab_env;
use crate::engine::{Harness, failure};

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn reset_on_an_unchanged_lab_is_a_few_lines_and_verify_prints_one_table() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", dir.path())]);
    let up = run(&["up", "-t", "minimal", "--simulate"]);
    assert_eq!(up.code, 0, "{up:?}");

    let reset = run(&["reset", "-t", "minimal", "--simulate"]);
    assert_eq!(reset.code, 0, "{reset:?}");
    // Two workflows (the prune, then `up`): a header and a one-line summary each, nothing in between.
    let lines: Vec<&str> = reset.stderr.lines().collect();
    assert_eq!(lines.len(), 4, "{}", reset.stderr);
    assert!(
        lines[1].starts_with("done in ")
            && lines[1].ends_with(": 0 changed, 2 unchanged (SIMULATED lab)"),
        "{}",
        reset.stderr
    );
    assert!(
        lines[3].starts_with("done in ") && lines[3].contains(": 0 changed, "),
        "{}",
        reset.stderr
    );
    assert!(!reset.stderr.contains("(unchanged)"), "{}", reset.stderr);
    assert!(
        !reset.stderr.contains("where the time went"),
        "{}",
        reset.stderr
    );

    // Each spoke and namespace is one row of one table, not a check line per check first.
    let verify = run(&["verify", "-t", "minimal", "--simulate"]);
    assert_eq!(verify.code, 0, "{verify:?}");
    let all = format!("{}{}", verify.stderr, verify.stdout);
    for ns in ["cluster-inventory", "open-cluster-management-addon"] {
        assert_eq!(
            all.matches(&format!("mini-spoke in {ns}")).count(),
            0,
            "a check line for {ns}:\n{all}"
        );
        assert_eq!(
            verify
                .stdout
                .lines()
                .filter(|l| l.starts_with(&format!("mini-spoke ({ns}) ")))
                .count(),
            1,
            "{}",
            verify.stdout
        );
    }
    // The columns line up although one row label is longer than the old fixed width.
    let header = verify
        .stdout
        .lines()
        .find(|l| l.starts_with("spoke (namespace)"))
        .unwrap();
    let at = header.find("properties").unwrap();
    for row in verify
        .stdout
        .lines()
        .filter(|l| l.starts_with("mini-spoke ("))
    {
        assert_eq!(
            row.chars().nth(header[..at].chars().count()),
            Some('✓'),
            "{}",
            verify.stdout
        );
    }
}

#[tokio::test(start_paused = true)]
async fn reset_says_what_it_removed() {
    let h = Harness::new(crate::common::lab("minimal"));
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let spoke = h.lab.cluster("mini-spoke").unwrap();
    let api = h
        .sim
        .backends()
        .kube
        .connect(spoke, Path::new("unused"))
        .await
        .unwrap();
    api.apply(&json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": "gpu.lab.example.com"}, "spec": {"value": "a100"}}))
        .await
        .unwrap();

    let (res, events) = h.run("reset").await;
    assert!(res.ok, "{}", failure(&res));
    let notes: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::StepNote { message, .. } => Some(message.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        notes,
        ["removed 1 object: mini-spoke: ClusterProperty gpu.lab.example.com"],
    );
}

/// `plan --out` does not render charts: its `charts.yaml` says which objects are missing and why, so the
/// folder is not taken for everything `up` applies.
#[test]
fn plan_out_says_that_chart_rendered_objects_are_not_included_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan");
    let r = crate::common::ocm_lab(&[
        "plan",
        "-t",
        "minimal",
        "--no-charts",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("not included: the objects of 4 charts"),
        "{r:?}"
    );
    let charts: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(out.join("charts.yaml")).unwrap()).unwrap();
    let missing = &charts["notIncluded"];
    assert!(
        missing["what"]
            .as_str()
            .unwrap()
            .starts_with("the objects these charts render"),
        "{missing}"
    );
    let listed: Vec<String> = missing["charts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {} on {}: {}",
                c["chart"].as_str().unwrap(),
                c["version"].as_str().unwrap(),
                c["cluster"].as_str().unwrap(),
                c["why"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(listed.len(), 4, "{listed:?}");
    for chart in [
        "cluster-manager 1.3.1 on mini-hub: skipped by `--no-charts`",
        "klusterlet 1.3.1 on mini-spoke: skipped by `--no-charts`",
    ] {
        assert!(listed.iter().any(|l| l == chart), "{chart}: {listed:?}");
    }
}
