//! Workflow files: load errors name the file and step, and the graph is what OCM's order requires.

use ocm_lab::workflow::Sources;

use crate::common;

const HEADER: &str = "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Workflow\nmetadata: {name: up}\nsteps:\n";

fn plan_err(steps: &str) -> String {
    let mut sources = Sources::embedded();
    sources.workflows = vec![("up".into(), format!("{HEADER}{steps}"))];
    let patches = ocm_lab::patch::PatchSet::embedded().unwrap();
    match ocm_lab::workflow::plan::plan(
        &common::lab("default"),
        &sources,
        &ocm_lab::actions::Registry,
        &patches,
        "up",
    ) {
        Ok(_) => panic!("expected an error"),
        Err(e) => ocm_lab::render(&e),
    }
}

#[test]
fn unknown_actions_are_load_errors_with_a_suggestion() {
    let e = plan_err("  - {id: a, uses: ocm.joinn, with: {managedCluster: x, cluster: y}}\n");
    assert!(
        e.contains("unknown action `ocm.joinn`") && e.contains("did you mean `ocm.join`?"),
        "{e}"
    );
    assert!(e.contains("embedded:workflows/up.yaml:5"), "{e}");
}

#[test]
fn unknown_fields_and_inputs_are_load_errors() {
    let e = plan_err("  - {id: a, uses: lab.preflight, neeeds: [b]}\n");
    assert!(
        e.contains("neeeds") && e.contains("did you mean `needs`?"),
        "{e}"
    );
    let e = plan_err("  - {id: a, uses: manifest.apply, with: {cluster: hub, templat: x.yaml}}\n");
    assert!(
        e.contains("has no input `templat`") && e.contains("needs input `template`"),
        "{e}"
    );
}

#[test]
fn needs_that_name_nothing_are_load_errors() {
    let e = plan_err(
        "  - {id: a, uses: lab.preflight, needs: [preflght]}\n  - {id: preflight, uses: lab.preflight}\n",
    );
    assert!(
        e.contains("`preflght` names no step") && e.contains("did you mean `preflight`?"),
        "{e}"
    );
    let e = plan_err(
        "  - {id: create, uses: cluster.create, foreach: clusters, with: {cluster: '{{ item.name }}'}}\n  - {id: b, uses: lab.preflight, needs: ['create[cluster9]']}\n",
    );
    assert!(e.contains("step `create` has no item `cluster9`"), "{e}");
}

#[test]
fn cycles_are_load_errors_naming_the_steps() {
    let e = plan_err(
        "  - {id: a, uses: lab.preflight, needs: [b]}\n  - {id: b, uses: lab.preflight, needs: [a]}\n",
    );
    assert!(
        e.contains("cycle") && e.contains("a → b → a") || e.contains("b → a → b"),
        "{e}"
    );
}

#[test]
fn undefined_template_variables_are_errors_not_empty_strings() {
    let e = plan_err("  - {id: a, uses: cluster.create, with: {cluster: '{{ lab.hubb.name }}'}}\n");
    assert!(
        e.contains("steps.a.with.cluster") && e.contains("undefined"),
        "{e}"
    );
}

#[test]
fn up_follows_the_order_ocm_needs() {
    let plan = common::plan(&common::lab("default"));
    let pos = |id: &str| {
        plan.steps
            .iter()
            .position(|s| s.id == id)
            .unwrap_or_else(|| panic!("no step {id}"))
    };
    let needs = |id: &str| plan.step(id).unwrap().needs.clone();
    // A spoke joins as soon as its klusterlet and the hub are ready: it does not wait for the other spoke.
    assert_eq!(
        needs("join[cluster1]"),
        vec!["hub-ready", "klusterlet[cluster1]"]
    );
    // The klusterlet chart goes in as soon as its cluster exists and has its images, while the hub
    // rolls out; the images go into the nodes before any chart.
    assert_eq!(
        needs("klusterlet[cluster1]"),
        vec!["create[cluster1]", "node-images[cluster1]"]
    );
    assert_eq!(needs("node-images[cluster1]"), vec!["create[cluster1]"]);
    assert!(needs("hub-manager").contains(&"node-images[hub]".to_owned()));
    assert!(pos("hub-manager") < pos("hub-ready") && pos("hub-ready") < pos("join[cluster1]"));
    assert!(pos("join[cluster1]") < pos("accept[cluster1]"));
    assert!(needs("properties[cluster1]").contains(&"join[cluster1]".to_owned()));
    // The addon charts go in as soon as the cluster-manager chart is in, while the hub rolls out;
    // the addon is ready only once the lab's Placement exists.
    assert_eq!(needs("cluster-proxy"), vec!["hub-manager"]);
    assert_eq!(needs("msa"), vec!["hub-manager"]);
    assert!(needs("cluster-proxy-ready").contains(&"proxy-placement".to_owned()));
    assert!(
        needs("proxy-placement")
            .iter()
            .any(|n| n.starts_with("bound["))
    );
    assert!(
        needs("bindings[cluster-inventory/sandbox-fleet]")
            .contains(&"cluster-sets[sandbox-fleet]".to_owned())
    );
    assert_eq!(plan.steps.last().unwrap().id, "verify");
    // Every step's timeout comes from the topology or the default.
    assert_eq!(
        plan.step("create[hub]").unwrap().timeout,
        std::time::Duration::from_secs(600)
    );
    assert_eq!(plan.step("create[hub]").unwrap().retry.attempts, Some(3));
}

#[test]
fn steps_for_disabled_addons_are_skipped_and_needs_on_them_dropped() {
    let text = common::default_with("    managed-serviceaccount:\n      version: 0.10.0", "    managed-serviceaccount:\n      enabled: false\n      version: 0.10.0")
        .replace("  serviceAccounts:\n    - name: inventory-reader\n      clusters: [cluster1, cluster2]\n      syncToClusterProfile: true\n      clusterRole: view\n", "")
        .replace("checks: [properties, access-providers, reachable, credentials, conditions]", "checks: [properties, access-providers, conditions]");
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap_or_else(|e| panic!("{}", ocm_lab::render(&e)))
        .lab;
    let plan = common::plan(&lab);
    assert!(
        plan.steps.iter().all(|s| !s.id.starts_with("msa")),
        "{:?}",
        plan.steps.iter().map(|s| &s.id).collect::<Vec<_>>()
    );
    assert!(
        !plan
            .step("verify")
            .unwrap()
            .needs
            .iter()
            .any(|n| n.starts_with("msa"))
    );
}

/// A `with:` input that is misspelt, or of the wrong type, fails `ocm-lab plan --workflows DIR` before
/// anything runs: exit 2, the file, line and column of the input, and what the action takes.
#[test]
fn misspelt_or_mistyped_inputs_fail_plan_with_their_location() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("verify.yaml");
    let file_name = file.display().to_string();
    for (with, line_col, says) in [
        (
            "{prob: \"false\"}",
            ":5:49",
            "action `verify.lab` has no input `prob`",
        ),
        (
            "{probe: maybe}",
            ":5:50",
            "input `probe` of action `verify.lab`: `maybe` is not true or false",
        ),
        (
            "{checks: \"properties,reachabel\"}",
            ":5:51",
            "unknown check `reachabel`",
        ),
    ] {
        std::fs::write(
            &file,
            format!("{HEADER}  - {{id: verify, uses: verify.lab, with: {with}}}\n")
                .replace("{name: up}", "{name: verify}"),
        )
        .unwrap();
        let dir = dir.path().to_str().unwrap();
        let out = common::ocm_lab(&["plan", "--workflows", dir, "--workflow", "verify"]);
        assert_eq!(out.code, 2, "{with}: {}", out.stderr);
        assert!(
            out.stderr.contains(&format!("{file_name}{line_col}")),
            "{with}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(says), "{with}: {}", out.stderr);
    }
}
