//! The timing summary that ends `up`, on the simulated lab.

use serde_json::Value;

use crate::common::ocm_lab_env;

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_output_json_carries_the_timing_summary_and_critical_path_before_run_finished() {
    let dir = tempfile::tempdir().unwrap();
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", "minimal", "--output", "json"],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let events: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = events.len();
    assert_eq!(events[n - 1]["event"], "run-finished");
    let timing = &events[n - 2];
    assert_eq!(timing["event"], "timing", "{timing}");
    let finished: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "step-finished")
        .map(|e| e["step"].as_str().unwrap())
        .collect();
    let steps = timing["steps"].as_array().unwrap();
    assert_eq!(steps.len(), finished.len(), "one timing per step that ran");
    let path: Vec<&str> = timing["critical_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert!(!path.is_empty());
    // The path starts at a step with no needs and ends at the step that ended last, each step a need of the next.
    let plan = crate::common::plan_workflow(&crate::common::lab("minimal"), "up");
    let needs = |id: &str| {
        plan.steps
            .iter()
            .find(|s| s.id == id)
            .unwrap_or_else(|| panic!("{id} not in the plan"))
            .needs
            .clone()
    };
    assert!(needs(path[0]).is_empty(), "{path:?}");
    for w in path.windows(2) {
        assert!(needs(w[1]).contains(&w[0].to_owned()), "{path:?}");
    }
    let last_end = steps.iter().map(|s| s["end_ms"].as_u64().unwrap()).max();
    assert_eq!(
        timing["critical_path"].as_array().unwrap().last().unwrap()["end_ms"].as_u64(),
        last_end
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn the_critical_path_is_printed_when_asked_and_not_after_a_quick_up() {
    let dir = tempfile::tempdir().unwrap();
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", "minimal"],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // A simulated `up` takes well under the 5 minutes after which the breakdown comes unasked.
    assert!(!r.stderr.contains("where the time went"), "{}", r.stderr);
    assert!(!r.stderr.contains("critical path"), "{}", r.stderr);

    let dir = tempfile::tempdir().unwrap();
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", "minimal", "--timing"],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let at = r
        .stderr
        .find("where the time went")
        .unwrap_or_else(|| panic!("no timing summary in\n{}", r.stderr));
    assert!(r.stderr[at..].contains("verify"), "{}", r.stderr);
    assert!(r.stderr[at..].contains("\ndone in "), "{}", r.stderr);

    // A one-step `verify` says it when asked, and only then.
    let quiet = ocm_lab_env(
        &["verify", "--simulate", "-t", "minimal"],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert!(
        !quiet.stderr.contains("where the time went"),
        "{}",
        quiet.stderr
    );
    let asked = ocm_lab_env(
        &["verify", "--simulate", "-t", "minimal", "--timing"],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert!(
        asked.stderr.contains("where the time went"),
        "{}",
        asked.stderr
    );
}
