//! Topology files: what a user sees for each kind of mistake, and that the shipped ones are valid.

use serde_json::Value;

use crate::common::{default_with, ocm_lab, root, topology_errors};

fn assert_error(text: &str, field: &str, needle: &str) {
    let errors = topology_errors(text);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with(field) && e.contains(needle)),
        "expected an error at {field} containing {needle:?}, got {errors:#?}"
    );
}

#[test]
fn every_shipped_topology_is_valid_and_has_no_errors() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let r = ocm_lab(&["topology", "check", name]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        assert!(r.stdout.contains(": ok: lab"), "{}", r.stdout);
    }
}

#[test]
fn every_example_topology_is_valid() {
    let mut n = 0;
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let r = ocm_lab(&["topology", "check", path.to_str().unwrap()]);
            assert_eq!(r.code, 0, "{}: {}", path.display(), r.stderr);
            n += 1;
        }
    }
    assert!(n >= 2, "examples/ should hold topologies");
}

#[test]
fn every_file_in_the_data_folders_is_embedded() {
    let names = |dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let mut embedded: Vec<String> = ocm_lab::embedded::TOPOLOGIES
        .iter()
        .map(|(n, _)| format!("{n}.yaml"))
        .collect();
    embedded.sort();
    assert_eq!(names("topologies"), embedded);
    let mut workflows: Vec<String> = ocm_lab::embedded::WORKFLOWS
        .iter()
        .map(|(n, _)| format!("{n}.yaml"))
        .collect();
    workflows.sort();
    assert_eq!(names("workflows"), workflows);
    let mut manifests: Vec<String> = ocm_lab::embedded::MANIFESTS
        .iter()
        .map(|(n, _)| (*n).to_owned())
        .collect();
    manifests.sort();
    assert_eq!(names("workflows/manifests"), manifests);
}

#[test]
fn a_typo_is_rejected_with_exit_code_2_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.yaml");
    std::fs::write(
        &file,
        default_with("    cluster-proxy:", "    cluster-proxyy:"),
    )
    .unwrap();
    let r = ocm_lab(&["topology", "check", file.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let line = ocm_lab::embedded::topology("default")
        .unwrap()
        .lines()
        .position(|l| l == "    cluster-proxy:")
        .unwrap()
        + 1;
    assert!(
        r.stderr.contains(&format!("lab.yaml:{line}:5")),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("unknown addon `cluster-proxyy`"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("did you mean `cluster-proxy`?"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("spec.addons.cluster-proxyy"),
        "{}",
        r.stderr
    );

    // `up` and `plan` refuse the same file before doing anything.
    for cmd in ["plan", "up"] {
        assert_eq!(
            ocm_lab(&[cmd, "-t", file.to_str().unwrap()]).code,
            2,
            "{cmd}"
        );
    }
}

#[test]
fn a_typo_diagnostic_as_the_user_sees_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab.yaml");
    std::fs::write(&file, default_with("      bindTo:", "      bindto:")).unwrap();
    let r = ocm_lab(&["topology", "check", file.to_str().unwrap()]);
    assert_eq!(r.code, 2);
    let stderr = r.stderr.replace(dir.path().to_str().unwrap(), "[TMP]");
    insta::assert_snapshot!("typo_bindto", stderr);
}

#[test]
fn unknown_enum_values_get_a_suggestion() {
    let errors = topology_errors(&default_with("checks: [properties,", "checks: [propertes,"));
    assert_eq!(errors.len(), 1, "{errors:?}");
    let r = ocm_lab::topology::load_str(
        &crate::common::host(),
        "t.yaml",
        &default_with("checks: [properties,", "checks: [propertes,"),
    )
    .unwrap_err();
    assert!(ocm_lab::render(&r).contains("did you mean `properties`?"));
}

#[test]
fn duplicate_cluster_names_are_rejected() {
    assert_error(
        &default_with("- name: cluster2", "- name: cluster1"),
        "spec.spokes[1].name",
        "duplicate cluster name `cluster1`",
    );
    assert_error(
        &default_with("- name: cluster1", "- name: hub"),
        "spec.spokes[0].name",
        "already used by the hub",
    );
}

#[test]
fn a_set_member_that_is_not_a_spoke_is_rejected_with_a_suggestion() {
    let text = default_with(
        "clusters: [cluster1, cluster2]\n      # cluster-inventory",
        "clusters: [cluster1, clustr2]\n      # cluster-inventory",
    );
    assert_error(
        &text,
        "spec.clusterSets[0].clusters[1]",
        "`clustr2` is not a spoke of this lab",
    );
    let err = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text).unwrap_err();
    assert!(ocm_lab::render(&err).contains("did you mean `cluster2`?"));
}

#[test]
fn a_binding_named_differently_from_its_set_is_rejected() {
    let text = default_with(
        "  addons:",
        "  bindings:\n    - {name: fleet-binding, clusterSet: sandbox-fleet, namespace: team-a}\n  addons:",
    );
    assert_error(
        &text,
        "spec.bindings[0].name",
        "must be named after its set",
    );
    let ok = default_with(
        "  addons:",
        "  bindings:\n    - {name: global, clusterSet: global, namespace: team-a}\n  addons:",
    );
    assert!(
        topology_errors(&ok).is_empty(),
        "{:?}",
        topology_errors(&ok)
    );
}

#[test]
fn more_properties_than_ocm_syncs_are_rejected() {
    let many: String = (1..=21)
        .map(|i| format!("        p{i:02}.lab.example.com: v\n"))
        .collect();
    let text = default_with("        region: us-east-1\n", &many);
    assert_error(
        &text,
        "spec.spokes[0].properties",
        "23 properties on spoke `cluster1`",
    );
    // Verification adds a probe property, so 20 of one's own is one too many.
    let twenty: String = (1..=18)
        .map(|i| format!("        p{i:02}.lab.example.com: v\n"))
        .collect();
    assert_error(
        &default_with("        region: us-east-1\n", &twenty),
        "spec.spokes[0].properties",
        "20 properties",
    );
    let nineteen: String = (1..=17)
        .map(|i| format!("        p{i:02}.lab.example.com: v\n"))
        .collect();
    assert!(topology_errors(&default_with("        region: us-east-1\n", &nineteen)).is_empty());
}

#[test]
fn property_values_over_1024_characters_and_slashed_names_are_rejected() {
    let long = "x".repeat(1025);
    assert_error(
        &default_with("region: us-east-1", &format!("region: {long}")),
        "spec.spokes[0].properties.region",
        "1025 characters",
    );
    let ok = "x".repeat(1024);
    assert!(
        topology_errors(&default_with("region: us-east-1", &format!("region: {ok}"))).is_empty()
    );
    assert_error(
        &default_with("tier.lab.example.com: gold", "tier/lab: gold"),
        "spec.spokes[0].properties.tier/lab",
        "contains `/`",
    );
    assert_error(
        &default_with("region: us-east-1", "id.k8s.io: x"),
        "spec.spokes[0].properties.id.k8s.io",
        "reserves",
    );
}

#[test]
fn names_that_are_not_dns_labels_are_rejected() {
    assert_error(
        &default_with("- name: cluster1", "- name: Cluster_1"),
        "spec.spokes[0].name",
        "not a valid name",
    );
    assert_error(
        &default_with("name: sandbox-fleet", "name: Sandbox"),
        "spec.clusterSets[0].name",
        "not a valid name",
    );
    let long = "c".repeat(50);
    assert_error(
        &default_with("- name: cluster1", &format!("- name: {long}")),
        "spec.spokes[0].name",
        "at most 49",
    );
}

#[test]
fn a_cluster_in_two_exclusive_sets_is_rejected() {
    let text = default_with(
        "      bindTo: [cluster-inventory, open-cluster-management-addon]\n",
        "      bindTo: [cluster-inventory, open-cluster-management-addon]\n    - name: other\n      clusters: [cluster1]\n",
    );
    assert_error(
        &text,
        "spec.clusterSets[1].clusters[0]",
        "already in exclusive set `sandbox-fleet`",
    );
}

#[test]
fn unknown_chart_versions_are_errors_naming_the_known_ones() {
    let text = default_with(
        "    cluster-proxy:\n      version: 0.10.0",
        "    cluster-proxy:\n      version: 0.9.0",
    );
    assert_error(
        &text,
        "spec.addons.cluster-proxy.version",
        "not in the version catalog",
    );
    let err = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text).unwrap_err();
    assert!(ocm_lab::render(&err).contains("known versions: 0.10.0, 0.11.0"));
}

#[test]
fn the_addon_set_must_be_bound_where_its_placement_lives() {
    let text = default_with(
        "bindTo: [cluster-inventory, open-cluster-management-addon]",
        "bindTo: [cluster-inventory]",
    );
    assert_error(
        &text,
        "spec.addons.cluster-proxy.clusterSet",
        "not bound in `open-cluster-management-addon`",
    );
}

#[test]
fn verification_of_a_namespace_nothing_is_bound_to_is_rejected() {
    assert_error(
        &default_with(
            "namespaces: [cluster-inventory]",
            "namespaces: [cluster-inventry]",
        ),
        "spec.verify.namespaces[0]",
        "no set is bound in `cluster-inventry`",
    );
}

#[test]
fn checks_the_lab_cannot_run_are_rejected() {
    let text = default_with(
        "    cluster-proxy:\n      version: 0.10.0",
        "    cluster-proxy:\n      enabled: false\n      version: 0.10.0",
    );
    assert_error(&text, "spec.verify.checks[1]", "access-providers");
    assert_error(&text, "spec.verify.checks[2]", "reachable");
}

#[test]
fn a_missing_hub_gate_is_a_warning_not_an_error() {
    let text = default_with(
        "featureGates: [ClusterProfile, ResourceCleanup]",
        "featureGates: [ResourceCleanup]",
    );
    let loaded = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text).unwrap();
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.message.contains("`ClusterProfile` is off")),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn bad_durations_are_rejected() {
    assert_error(
        &default_with("timeout: 5m", "timeout: five minutes"),
        "spec.verify.timeout",
        "not a duration",
    );
}

#[test]
fn existing_clusters_use_their_kubeconfig_context() {
    let text = default_with(
        "    name: hub\n",
        "    name: hub\n    existing: {kubeconfig: /tmp/kc, context: prod-hub}\n",
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap()
        .lab;
    assert_eq!(lab.hub.cluster.context, "prod-hub");
    assert_eq!(lab.hub.cluster.internal_endpoint, None);
    assert_eq!(lab.spokes[0].cluster.context, "kind-cluster1");
}

#[test]
fn the_json_schema_accepts_every_shipped_topology_and_rejects_a_typo() {
    let r = ocm_lab(&["topology", "schema"]);
    assert_eq!(r.code, 0);
    let schema: Value = serde_json::from_str(&r.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    for (name, text) in ocm_lab::embedded::TOPOLOGIES {
        let doc: Value = serde_saphyr::from_str(text).unwrap();
        let errors: Vec<String> = validator.iter_errors(&doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    let typo: Value =
        serde_saphyr::from_str(&default_with("    cluster-proxy:", "    cluster-proxyy:")).unwrap();
    assert!(!validator.is_valid(&typo));
}
