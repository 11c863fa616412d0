//! Tests for the declarative chart patches (`ocm_lab::patch`) and the shipped patch files.

use ocm_lab::patch::{self, ChartPatch, PatchError, PatchSet};
use serde_json::{Value, json};

const CLUSTER_PROXY_PATCH: &str = "cluster-proxy-mpc-undeclared-fields";

fn version(text: &str) -> semver::Version {
    semver::Version::parse(text).expect("test version")
}

fn embedded() -> PatchSet {
    PatchSet::embedded().expect("embedded patches load")
}

fn cluster_proxy_patches(set: &PatchSet) -> Vec<&ChartPatch> {
    set.for_chart("cluster-proxy", &version("0.10.0"))
}

/// The ManagedProxyConfiguration as chart 0.10.0 renders it by default (PortForward entrypoint).
fn rendered_mpc() -> Value {
    json!({
        "apiVersion": "proxy.open-cluster-management.io/v1alpha1",
        "kind": "ManagedProxyConfiguration",
        "metadata": {"name": "cluster-proxy"},
        "spec": {
            "authentication": {"dump": {"secrets": {}}, "signer": {"type": "SelfSigned"}},
            "proxyServer": {
                "image": "quay.io/open-cluster-management/cluster-proxy:v0.10.0",
                "replicas": 1,
                "namespace": "open-cluster-management-addon",
                "entrypoint": {"type": "PortForward", "port": 8091}
            },
            "proxyAgent": {
                "image": "quay.io/open-cluster-management/cluster-proxy:v0.10.0",
                "replicas": 1,
                "additionalValues": {"enableImpersonation": "true"}
            }
        }
    })
}

/// Other objects of the same chart, which no patch targets.
fn other_objects() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "cluster-proxy-addon-manager", "namespace": "open-cluster-management-addon"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "manager"}]}}}
        }),
        json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ClusterManagementAddOn",
            "metadata": {"name": "cluster-proxy"},
            "spec": {"installStrategy": {"type": "Placements"}}
        }),
        // Same name, different kind: must not be patched.
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "cluster-proxy", "namespace": "default"},
            "data": {"additionalValues": "x"}
        }),
    ]
}

fn one_patch(file: &str, text: &str) -> Result<PatchSet, PatchError> {
    PatchSet::from_files(&[(file.to_owned(), text.to_owned())])
}

// ---- 1. the embedded set and version selection ------------------------------------------------

#[test]
fn embedded_set_selects_cluster_proxy_0_10_only() {
    let set = embedded();
    assert!(!set.all().is_empty());

    let selected = cluster_proxy_patches(&set);
    assert_eq!(selected.len(), 1, "one patch for cluster-proxy 0.10.0");
    let p = selected[0];
    assert_eq!(p.name, CLUSTER_PROXY_PATCH);
    assert_eq!(p.source, "cluster-proxy-0.10.yaml");
    assert_eq!(p.chart, "cluster-proxy");
    assert_eq!(p.target.kind, "ManagedProxyConfiguration");
    assert_eq!(
        p.target.api_version,
        "proxy.open-cluster-management.io/v1alpha1"
    );
    assert_eq!(p.target.name.as_deref(), Some("cluster-proxy"));
    assert_eq!(p.target.namespace, None);
    // The reason cites upstream, on one line.
    for citation in ["#250", "#272", "eac2c67e", "0.11.0"] {
        assert!(
            p.reason.contains(citation),
            "reason cites {citation}: {}",
            p.reason
        );
    }
    assert!(!p.reason.contains('\n'));
    let ops: Vec<(String, bool)> = p
        .operations
        .iter()
        .map(|op| (op.to_string(), op.if_present))
        .collect();
    assert_eq!(
        ops,
        [
            ("remove /spec/proxyAgent/additionalValues".to_owned(), false),
            (
                "remove /spec/proxyServer/entrypoint/hostname/port".to_owned(),
                true
            ),
        ]
    );

    assert_eq!(set.for_chart("cluster-proxy", &version("0.10.3")).len(), 1);
    assert!(
        set.for_chart("cluster-proxy", &version("0.11.0"))
            .is_empty(),
        "0.11.0 has the upstream fix"
    );
    assert!(set.for_chart("cluster-proxy", &version("0.9.0")).is_empty());
    assert!(
        set.for_chart("managed-serviceaccount", &version("0.10.0"))
            .is_empty()
    );
}

// ---- 2. the fixture MPC -----------------------------------------------------------------------

/// The hand-rendered MPC from the shared fixtures.
fn fixture_mpc() -> Value {
    let path = crate::common::fixtures()
        .join("charts/cluster-proxy-0.10.0/rendered-managedproxyconfiguration.example.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).expect("fixture is YAML")
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn fixture_mpc_loses_additional_values_only() {
    let mpc = fixture_mpc();
    assert!(
        mpc.pointer("/spec/proxyAgent/additionalValues").is_some(),
        "the fixture renders the undeclared field"
    );
    let mut objects = other_objects();
    objects.insert(1, mpc.clone());
    let others_before = other_objects();

    let set = embedded();
    let report = patch::apply(&cluster_proxy_patches(&set), &mut objects).expect("patch applies");

    let patched = &objects[1];
    assert_eq!(patched.pointer("/spec/proxyAgent/additionalValues"), None);
    assert_eq!(
        patched.pointer("/spec/proxyAgent/image"),
        Some(&json!(
            "quay.io/open-cluster-management/cluster-proxy:v0.10.0"
        ))
    );
    assert_eq!(
        patched.pointer("/spec/proxyAgent/replicas"),
        Some(&json!(1))
    );
    // Everything else in the MPC is as rendered.
    let mut expected = mpc;
    expected["spec"]["proxyAgent"]
        .as_object_mut()
        .expect("proxyAgent is a map")
        .remove("additionalValues");
    assert_eq!(patched, &expected);
    // The other objects are untouched.
    assert_eq!(objects[0], others_before[0]);
    assert_eq!(&objects[2..], &others_before[1..]);

    assert!(report.missing_targets.is_empty());
    assert_eq!(report.applied.len(), 1);
    let applied = &report.applied[0];
    assert_eq!(applied.patch, CLUSTER_PROXY_PATCH);
    assert_eq!(
        applied.target,
        "ManagedProxyConfiguration cluster-proxy (proxy.open-cluster-management.io/v1alpha1)"
    );
    assert_eq!(applied.operations_applied, 1);
    // PortForward entrypoint: no hostname.port, so the ifPresent operation is skipped.
    assert_eq!(
        applied.operations_skipped,
        ["remove /spec/proxyServer/entrypoint/hostname/port"]
    );
}

#[test]
fn inline_mpc_loses_additional_values() {
    // Same as the fixture test, without depending on the shared fixtures.
    let mut objects = vec![rendered_mpc()];
    let set = embedded();
    let report = patch::apply(&cluster_proxy_patches(&set), &mut objects).expect("patch applies");
    assert_eq!(
        objects[0].pointer("/spec/proxyAgent/additionalValues"),
        None
    );
    assert_eq!(
        objects[0].pointer("/spec/proxyAgent"),
        Some(
            &json!({"image": "quay.io/open-cluster-management/cluster-proxy:v0.10.0", "replicas": 1})
        )
    );
    assert_eq!(report.applied.len(), 1);
}

// ---- 3. hostname.port -------------------------------------------------------------------------

#[test]
fn hostname_port_is_removed_and_value_kept() {
    let mut mpc = rendered_mpc();
    mpc["spec"]["proxyServer"]["entrypoint"] = json!({
        "type": "Hostname",
        "hostname": {"value": "proxy.example.com", "port": 8091}
    });
    let mut objects = vec![mpc];
    let set = embedded();
    let report = patch::apply(&cluster_proxy_patches(&set), &mut objects).expect("patch applies");
    assert_eq!(
        objects[0].pointer("/spec/proxyServer/entrypoint"),
        Some(&json!({"type": "Hostname", "hostname": {"value": "proxy.example.com"}}))
    );
    assert_eq!(
        objects[0].pointer("/spec/proxyAgent/additionalValues"),
        None
    );
    assert_eq!(report.applied[0].operations_applied, 2);
    assert!(report.applied[0].operations_skipped.is_empty());
}

// ---- 4. missing target ------------------------------------------------------------------------

#[test]
fn chart_without_the_target_reports_it() {
    let mut objects = other_objects();
    let set = embedded();
    let report = patch::apply(&cluster_proxy_patches(&set), &mut objects)
        .expect("a missing target is not an error");
    assert_eq!(objects, other_objects(), "nothing changed");
    assert!(report.applied.is_empty());
    assert_eq!(report.missing_targets.len(), 1);
    let missing = &report.missing_targets[0];
    assert_eq!(missing.patch, CLUSTER_PROXY_PATCH);
    assert_eq!(missing.source, "cluster-proxy-0.10.yaml");
    assert_eq!(
        missing.target,
        "ManagedProxyConfiguration cluster-proxy (proxy.open-cluster-management.io/v1alpha1)"
    );
    assert!(missing.reason.contains("#272"));
    let warning = missing.to_string();
    assert!(warning.contains(CLUSTER_PROXY_PATCH), "{warning}");
    assert!(
        warning.contains("ManagedProxyConfiguration cluster-proxy"),
        "{warning}"
    );
}

#[test]
fn target_with_other_name_or_namespace_is_missing() {
    let text = r#"
apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata: {name: ns-scoped}
spec:
  chart: c
  versions: "*"
  reason: test
  target: {apiVersion: v1, kind: ConfigMap, name: cluster-proxy, namespace: other}
  operations: [{op: remove, path: /data}]
"#;
    let set = one_patch("ns.yaml", text).expect("valid patch");
    let mut objects = other_objects();
    let report = patch::apply(&set.for_chart("c", &version("1.0.0")), &mut objects).expect("ok");
    assert_eq!(objects, other_objects());
    assert_eq!(report.missing_targets.len(), 1);
    assert_eq!(
        report.missing_targets[0].target,
        "ConfigMap other/cluster-proxy (v1)"
    );
}

// ---- 5. load errors ---------------------------------------------------------------------------

const VALID: &str = r#"apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata:
  name: example
spec:
  chart: example
  versions: ">=1.0.0, <2.0.0"
  reason: test
  target: {apiVersion: v1, kind: ConfigMap, name: example}
  operations:
    - {op: remove, path: /data/a}
"#;

#[test]
fn typo_is_an_error_with_line_and_field() {
    let text = VALID.replace("  operations:", "  operatons:");
    let error = one_patch("typo.yaml", &text).expect_err("unknown field");
    let message = error.to_string();
    assert!(matches!(error, PatchError::Parse { .. }), "{error:?}");
    assert!(message.contains("typo.yaml"), "{message}");
    assert!(message.contains("operatons"), "{message}");
    assert!(message.contains("line 10"), "{message}");
    assert_eq!(error.line_column(), Some((10, 3)));
}

#[test]
fn typo_in_an_operation_is_an_error() {
    let text = VALID.replace("path: /data/a", "path: /data/a, ifPresnt: true");
    let error = one_patch("typo.yaml", &text).expect_err("unknown field");
    let message = error.to_string();
    assert!(message.contains("ifPresnt"), "{message}");
    assert!(message.contains("line 11"), "{message}");
}

#[test]
fn invalid_semver_range_names_the_file() {
    let text = VALID.replace(">=1.0.0, <2.0.0", ">=1.0.0, <<2");
    let error = one_patch("bad-range.yaml", &text).expect_err("invalid range");
    let message = error.to_string();
    assert!(matches!(error, PatchError::Invalid { .. }), "{error:?}");
    assert!(message.contains("bad-range.yaml"), "{message}");
    assert!(message.contains("`example`"), "names the patch: {message}");
    assert!(message.contains(">=1.0.0, <<2"), "{message}");
    assert!(message.contains("line 7"), "{message}");
    assert_eq!(error.line_column().map(|(line, _)| line), Some(7));
}

#[test]
fn other_invalid_values_are_errors() {
    let cases = [
        (
            VALID.replace("kind: ChartPatch", "kind: ChartPatches"),
            "kind is `ChartPatches`",
        ),
        (
            VALID.replace("ocm-lab.open-cluster-management.io/v1alpha1", "v1"),
            "apiVersion is `v1`",
        ),
        (
            VALID.replace("path: /data/a", "path: data/a"),
            "not a JSON pointer",
        ),
        (
            VALID.replace("op: remove", "op: add"),
            "`value` is required",
        ),
        (
            VALID.replace("path: /data/a", "path: /data/a, value: 1"),
            "`value` is only allowed",
        ),
        (
            VALID.replace(
                "{op: remove, path: /data/a}",
                "{op: add, path: /data/a, value: 1, ifPresent: true}",
            ),
            "`ifPresent` is not allowed on add",
        ),
        (
            VALID.replace("{op: remove, path: /data/a}", "{op: move, path: /data/a}"),
            "`from` is required",
        ),
        (
            VALID.replace("    - {op: remove, path: /data/a}\n", "    []\n"),
            "spec.operations is empty",
        ),
        (
            VALID.replace("reason: test", "reason: \"  \""),
            "spec.reason is empty",
        ),
    ];
    for (text, expected) in cases {
        let error = one_patch("bad.yaml", &text).expect_err(expected);
        let message = error.to_string();
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}"
        );
        assert!(message.contains("bad.yaml"), "{message}");
    }
    // An unknown op is a parse error naming the op.
    let error =
        one_patch("bad.yaml", &VALID.replace("op: remove", "op: delete")).expect_err("unknown op");
    assert!(error.to_string().contains("delete"), "{error}");
}

#[test]
fn empty_file_and_duplicate_names_are_errors() {
    let error = one_patch("empty.yaml", "# nothing\n").expect_err("no documents");
    assert!(matches!(error, PatchError::Empty { .. }), "{error:?}");
    assert!(error.to_string().contains("empty.yaml"));

    let error = PatchSet::from_files(&[
        ("a.yaml".to_owned(), VALID.to_owned()),
        ("b.yaml".to_owned(), VALID.to_owned()),
    ])
    .expect_err("duplicate name");
    let message = error.to_string();
    assert!(
        message.contains("`example`") && message.contains("a.yaml") && message.contains("b.yaml"),
        "{message}"
    );
}

#[test]
fn multi_document_file_and_load_dir() {
    let second = VALID.replace("name: example\n", "name: example-2\n");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("b.yaml"), format!("{VALID}---\n{second}")).expect("write");
    std::fs::write(
        dir.path().join("a.yml"),
        VALID.replace("name: example\n", "name: from-a\n"),
    )
    .expect("write");
    std::fs::write(dir.path().join("README.md"), "not a patch").expect("write");

    let set = PatchSet::load_dir(dir.path()).expect("directory loads");
    let names: Vec<&str> = set.all().iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        names,
        ["from-a", "example", "example-2"],
        "file-name order, then document order"
    );
    assert!(set.all()[1].source.ends_with("b.yaml"));

    let missing = dir.path().join("nope");
    let error = PatchSet::load_dir(&missing).expect_err("missing directory");
    assert!(error.to_string().contains("nope"), "{error}");
}

// ---- 6. failing operations --------------------------------------------------------------------

#[test]
fn absent_path_without_if_present_fails_and_changes_nothing() {
    let text = r#"
apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata: {name: strict-remove}
spec:
  chart: cluster-proxy
  versions: "0.10.*"
  reason: test
  target: {apiVersion: proxy.open-cluster-management.io/v1alpha1, kind: ManagedProxyConfiguration}
  operations:
    - {op: remove, path: /spec/proxyAgent/additionalValues}
    - {op: remove, path: /spec/proxyServer/entrypoint/hostname/port}
"#;
    let set = one_patch("strict.yaml", text).expect("valid patch");
    let mut objects = vec![rendered_mpc()];
    objects.extend(other_objects());
    let before = objects.clone();

    let error = patch::apply(
        &set.for_chart("cluster-proxy", &version("0.10.0")),
        &mut objects,
    )
    .expect_err("hostname.port is absent");
    assert_eq!(
        objects, before,
        "the first, successful remove was rolled back too"
    );
    let message = error.to_string();
    assert!(message.contains("strict-remove"), "{message}");
    assert!(message.contains("strict.yaml"), "{message}");
    assert!(
        message.contains("ManagedProxyConfiguration cluster-proxy"),
        "{message}"
    );
    assert!(
        message.contains("/spec/proxyServer/entrypoint/hostname/port"),
        "{message}"
    );
    let PatchError::Apply(failure) = error else {
        panic!("expected PatchError::Apply, got {error:?}")
    };
    assert_eq!(failure.index, 2);
    assert_eq!(failure.path, "/spec/proxyServer/entrypoint/hostname/port");
}

#[test]
fn a_failure_in_a_later_patch_leaves_every_object_unchanged() {
    let text = r#"
apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata: {name: first}
spec:
  chart: c
  versions: "*"
  reason: test
  target: {apiVersion: v1, kind: ConfigMap}
  operations: [{op: replace, path: /data/additionalValues, value: y}]
---
apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata: {name: second}
spec:
  chart: c
  versions: "*"
  reason: test
  target: {apiVersion: apps/v1, kind: Deployment}
  operations: [{op: test, path: /spec/replicas, value: 3}]
"#;
    let set = one_patch("two.yaml", text).expect("valid patches");
    let mut objects = other_objects();
    let error = patch::apply(&set.for_chart("c", &version("1.0.0")), &mut objects)
        .expect_err("test op fails");
    assert!(error.to_string().contains("`second`"), "{error}");
    assert_eq!(objects, other_objects());
}

#[test]
fn standard_operations_apply_in_order() {
    let text = r#"
apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: ChartPatch
metadata: {name: all-ops}
spec:
  chart: c
  versions: "*"
  reason: test
  target: {apiVersion: v1, kind: ConfigMap, name: cluster-proxy, namespace: default}
  operations:
    - {op: test, path: /data/additionalValues, value: x}
    - {op: add, path: /data/added, value: null}
    - {op: copy, from: /data/additionalValues, path: /data/copied}
    - {op: move, from: /data/additionalValues, path: /data/moved}
    - {op: replace, path: /data/copied, value: {nested: [1, "two"]}}
    - {op: remove, path: /data/absent, ifPresent: true}
    - {op: move, from: /data/absent, path: /data/b, ifPresent: true}
"#;
    let set = one_patch("ops.yaml", text).expect("valid patch");
    let mut objects = other_objects();
    let report = patch::apply(&set.for_chart("c", &version("1.0.0")), &mut objects).expect("ok");
    assert_eq!(
        objects[2]["data"],
        json!({"added": null, "copied": {"nested": [1, "two"]}, "moved": "x"})
    );
    assert_eq!(report.applied[0].operations_applied, 5);
    assert_eq!(
        report.applied[0].operations_skipped,
        ["remove /data/absent", "move /data/absent -> /data/b"]
    );
    assert_eq!(
        report.applied[0].target,
        "ConfigMap default/cluster-proxy (v1)"
    );
}
