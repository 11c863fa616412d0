//! The repository's GitHub CI runs the project's own CI script, so the lints it adds (actionlint, the
//! action and pipefail checks) run on every push, not only where `.ci/run` is run by hand.

use serde_json::Value;

use crate::common::root;

#[test]
fn github_ci_runs_the_projects_ci_script() {
    let text = std::fs::read_to_string(root().join(".github/workflows/ci.yml")).unwrap();
    let ci: Value = serde_saphyr::from_str(&text).unwrap();
    let runs: Vec<&str> = ci["jobs"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|job| job["steps"].as_array().unwrap())
        .filter_map(|step| step["run"].as_str())
        .collect();
    assert!(
        runs.iter().any(|r| r.trim() == "bash .ci/run"),
        "ci.yml does not run `bash .ci/run`: {runs:?}"
    );
    // Nothing beside it runs the checks `.ci/run` owns with other settings.
    for r in &runs {
        assert!(
            !r.contains("cargo test") && !r.contains("cargo clippy"),
            "ci.yml runs {r:?} outside .ci/run"
        );
    }
    let script = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    for check in [
        "actionlint",
        "check-action.py",
        "check-pipefail.py",
        "cargo test",
    ] {
        assert!(script.contains(check), ".ci/run lost {check}");
    }
}
