//! Validation of objects against the upstream CRDs in `shared/fixtures/crds`.

use std::path::Path;

use crate::common::fixtures;
use std::sync::OnceLock;

use ocm_lab_testkit::crdschema::{CrdSchemas, ValidationFailure, Violation};
use serde_json::{Value, json};

/// The fixture CRDs, loaded once for all tests (compiling them is the slow part).
fn load_crds(fixtures: &Path) -> &'static CrdSchemas {
    static CRDS: OnceLock<CrdSchemas> = OnceLock::new();
    CRDS.get_or_init(|| {
        CrdSchemas::load_dir(&fixtures.join("crds")).expect("every fixture CRD loads")
    })
}

fn yaml(text: &str) -> Value {
    serde_saphyr::from_str::<Value>(text).expect("test YAML parses")
}

fn violations(result: Result<(), ValidationFailure>) -> Vec<Violation> {
    match result {
        Ok(()) => Vec::new(),
        Err(ValidationFailure::Invalid(violations)) => violations,
        Err(other) => panic!("expected schema violations, got: {other}"),
    }
}

fn pointers(result: Result<(), ValidationFailure>) -> Vec<String> {
    violations(result).into_iter().map(|v| v.pointer).collect()
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn load_dir_knows_every_served_version_of_the_fixture_crds() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    for (api_version, kind) in [
        (
            "proxy.open-cluster-management.io/v1alpha1",
            "ManagedProxyConfiguration",
        ),
        ("multicluster.x-k8s.io/v1alpha1", "ClusterProfile"),
        (
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSet",
        ),
        ("cluster.open-cluster-management.io/v1beta1", "Placement"),
        ("cluster.open-cluster-management.io/v1", "ManagedCluster"),
        ("operator.open-cluster-management.io/v1", "ClusterManager"),
        ("operator.open-cluster-management.io/v1", "Klusterlet"),
        ("work.open-cluster-management.io/v1", "ManifestWork"),
        ("about.k8s.io/v1alpha1", "ClusterProperty"),
        // Both served versions of a multi-version CRD.
        (
            "addon.open-cluster-management.io/v1alpha1",
            "ClusterManagementAddOn",
        ),
        (
            "addon.open-cluster-management.io/v1beta1",
            "ClusterManagementAddOn",
        ),
    ] {
        assert!(crds.knows(api_version, kind), "{api_version} {kind}");
    }
    // 18 CRD files; three of them serve two versions. `variants/` is not read, or about.k8s.io
    // v1beta1 would be here.
    assert_eq!(crds.kinds().len(), 21, "{:#?}", crds.kinds());
    assert!(!crds.knows("about.k8s.io/v1beta1", "ClusterProperty"));
    assert_eq!(
        crds.is_namespaced("multicluster.x-k8s.io/v1alpha1", "ClusterProfile"),
        Some(true)
    );
    assert_eq!(
        crds.is_namespaced(
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSet"
        ),
        Some(false)
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn rendered_cluster_proxy_0_10_config_fails_only_on_additional_values() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let path = fixtures
        .join("charts/cluster-proxy-0.10.0/rendered-managedproxyconfiguration.example.yaml");
    let text = std::fs::read_to_string(&path).expect("rendered example is readable");
    let mut obj = yaml(&text);

    let failure = crds
        .validate(&obj)
        .expect_err("additionalValues is not in the 0.10.0 CRD");
    assert_eq!(
        failure.violations(),
        [Violation {
            pointer: "/spec/proxyAgent/additionalValues".to_owned(),
            message: "unknown field `additionalValues` (did you mean `additionalArgs`?)".to_owned(),
        }]
    );
    assert_eq!(
        failure.display_for(&obj),
        "ManagedProxyConfiguration cluster-proxy: /spec/proxyAgent/additionalValues: \
         unknown field `additionalValues` (did you mean `additionalArgs`?)"
    );

    obj["spec"]["proxyAgent"]
        .as_object_mut()
        .expect("proxyAgent is a mapping")
        .remove("additionalValues");
    crds.validate(&obj)
        .expect("without additionalValues the rendered object is valid");
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn managed_cluster_set_metadata_typos_and_enum_values_are_rejected() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let valid = yaml(
        "
apiVersion: cluster.open-cluster-management.io/v1beta2
kind: ManagedClusterSet
metadata:
  name: lab
  labels: {lab.ocm-lab.io/name: demo}
spec:
  clusterSelector:
    selectorType: LabelSelector
    labelSelector:
      matchLabels: {env: dev}
",
    );
    crds.validate(&valid)
        .expect("a correct ManagedClusterSet passes");

    let mut typo = valid.clone();
    let meta = typo["metadata"]
        .as_object_mut()
        .expect("metadata is a mapping");
    let labels = meta.remove("labels").expect("labels are set");
    meta.insert("lables".to_owned(), labels);
    assert_eq!(
        violations(crds.validate(&typo)),
        [Violation {
            pointer: "/metadata/lables".to_owned(),
            message: "unknown field `lables` (did you mean `labels`?)".to_owned(),
        }]
    );

    let mut bogus = valid.clone();
    bogus["spec"]["clusterSelector"]["selectorType"] = json!("Bogus");
    let failure = crds
        .validate(&bogus)
        .expect_err("Bogus is not a selector type");
    assert_eq!(
        failure.to_string(),
        "/spec/clusterSelector/selectorType: unsupported value \"Bogus\": supported values: \
         \"ExclusiveClusterSetLabel\", \"LabelSelector\""
    );

    let mut nameless = valid.clone();
    nameless["metadata"]
        .as_object_mut()
        .expect("metadata is a mapping")
        .remove("name");
    assert_eq!(pointers(crds.validate(&nameless)), ["/metadata"]);

    let mut bad_label = valid;
    bad_label["metadata"]["labels"]["env"] = json!("not a valid value!");
    assert_eq!(
        pointers(crds.validate(&bad_label)),
        ["/metadata/labels/env"]
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn cluster_manager_registration_configuration_fragment() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let check = |value: Value| {
        crds.validate_fragment(
            "operator.open-cluster-management.io/v1",
            "ClusterManager",
            &["spec", "registrationConfiguration"],
            &value,
        )
    };
    check(json!({"featureGates": [{"feature": "ClusterProfile", "mode": "Enable"}]}))
        .expect("a valid feature gate list passes");

    let failure = check(json!({"featureGate": [{"feature": "ClusterProfile", "mode": "Enable"}]}))
        .expect_err("featureGate is a typo");
    assert_eq!(
        failure.violations(),
        [Violation {
            pointer: "/spec/registrationConfiguration/featureGate".to_owned(),
            message: "unknown field `featureGate` (did you mean `featureGates`?)".to_owned(),
        }]
    );

    assert_eq!(
        pointers(check(
            json!({"featureGates": [{"feature": "ClusterProfile", "mode": "On"}]})
        )),
        ["/spec/registrationConfiguration/featureGates/0/mode"]
    );

    let missing = crds.validate_fragment(
        "operator.open-cluster-management.io/v1",
        "ClusterManager",
        &["spec", "registrationConfigurations"],
        &json!({}),
    );
    assert!(
        matches!(&missing, Err(ValidationFailure::NoSuchPath { path }) if path == "spec.registrationConfigurations"),
        "{missing:?}"
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn unknown_kinds_are_reported_as_such() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let obj = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedClusterSet",
        "metadata": {"name": "wrong-version"},
    });
    let failure = crds
        .validate(&obj)
        .expect_err("v1 does not serve ManagedClusterSet");
    assert!(
        matches!(
            &failure,
            ValidationFailure::UnknownKind { api_version, kind }
                if api_version == "cluster.open-cluster-management.io/v1" && kind == "ManagedClusterSet"
        ),
        "{failure:?}"
    );
    assert!(
        failure
            .to_string()
            .starts_with("unknown kind `ManagedClusterSet`")
    );
    assert!(matches!(
        crds.validate_fragment("v1", "ConfigMap", &["data"], &json!({})),
        Err(ValidationFailure::UnknownKind { .. })
    ));
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn cluster_profile_extension_preserves_unknown_fields() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let mut profile = yaml(
        "
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  name: spoke1
  namespace: open-cluster-management
spec:
  clusterManager: {name: open-cluster-management}
  displayName: spoke1
status:
  accessProviders:
  - name: open-cluster-management
    cluster:
      server: https://spoke1-control-plane:6443
      extensions:
      - name: client.authentication.k8s.io/exec
        extension:
          clusterName: spoke1
          anything: {nested: [1, true, null]}
",
    );
    crds.validate(&profile)
        .expect("extension accepts arbitrary fields");

    // Next to the preserved subtree, the schema is strict again.
    profile["status"]["accessProviders"][0]["cluster"]["extensions"][0]["extenson"] = json!({});
    assert_eq!(
        violations(crds.validate(&profile)),
        [Violation {
            pointer: "/status/accessProviders/0/cluster/extensions/0/extenson".to_owned(),
            message: "unknown field `extenson` (did you mean `extension`?)".to_owned(),
        }]
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn manifest_work_manifests_are_embedded_resources() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let mut work = yaml(
        "
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: hello, namespace: spoke1}
spec:
  workload:
    manifests:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: hello, namespace: default}
      data: {greeting: hi}
",
    );
    crds.validate(&work)
        .expect("a manifest may carry any fields");
    work["spec"]["workload"]["manifests"][0]["metadata"]["nmespace"] = json!("default");
    assert_eq!(
        pointers(crds.validate(&work)),
        ["/spec/workload/manifests/0/metadata/nmespace"]
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn int_or_string_and_exclusive_minimum_from_real_crds() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let msa = |ttl: Value| {
        json!({
            "apiVersion": "authentication.open-cluster-management.io/v1beta1",
            "kind": "ManagedServiceAccount",
            "metadata": {"name": "m", "namespace": "spoke1"},
            "spec": {"rotation": {}, "ttlSecondsAfterCreation": ttl},
        })
    };
    crds.validate(&msa(json!(60))).expect("positive ttl passes");
    assert_eq!(
        pointers(crds.validate(&msa(json!(0)))),
        ["/spec/ttlSecondsAfterCreation"],
        "exclusiveMinimum: true with minimum: 0"
    );

    let limits = |cpu: Value| {
        crds.validate_fragment(
            "operator.open-cluster-management.io/v1",
            "ClusterManager",
            &[
                "spec",
                "resourceRequirement",
                "resourceRequirements",
                "limits",
            ],
            &json!({"cpu": cpu}),
        )
    };
    limits(json!("500m")).expect("quantity string passes");
    limits(json!(2)).expect("quantity integer passes");
    assert_eq!(
        pointers(limits(json!(true))),
        ["/spec/resourceRequirement/resourceRequirements/limits/cpu"]
    );
}

/// Every Kubernetes object in a recorded YAML or JSON file: documents, `items` of lists, and
/// the `object` of watch events.
fn recorded_objects(path: &Path) -> Vec<Value> {
    fn collect(value: &Value, out: &mut Vec<Value>) {
        match value {
            Value::Array(values) => values.iter().for_each(|v| collect(v, out)),
            Value::Object(map) => {
                if let Some(items) = map.get("items").and_then(Value::as_array) {
                    items.iter().for_each(|v| collect(v, out));
                } else if map.contains_key("kind") && map.contains_key("metadata") {
                    out.push(value.clone());
                } else if let Some(object) = map.get("object") {
                    collect(object, out);
                }
            }
            _ => {}
        }
    }
    let text = std::fs::read_to_string(path).expect("recorded file is readable");
    let docs: Vec<Value> = if path.extension().is_some_and(|e| e == "json") {
        vec![serde_json::from_str(&text).expect("recorded JSON parses")]
    } else {
        serde_saphyr::from_str_multiple(&text).expect("recorded YAML parses")
    };
    let mut out = Vec::new();
    docs.iter().for_each(|d| collect(d, &mut out));
    out
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn objects_stored_by_a_real_api_server_pass() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let mut checked = 0;
    let mut failures = Vec::new();
    for step in std::fs::read_dir(fixtures.join("recorded")).expect("recorded/ is readable") {
        let step = step.expect("directory entry").path();
        if !step.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&step).expect("step directory is readable") {
            let file = file.expect("directory entry").path();
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            // `input-*` files are what was sent, some of them on purpose invalid; the rest is
            // what the API server returned (kubectl get, watch events).
            let recorded_output = (name.ends_with(".yaml") || name.ends_with("watch-events.json"))
                && !name.starts_with("input-");
            if !recorded_output {
                continue;
            }
            for obj in recorded_objects(&file) {
                match crds.validate(&obj) {
                    Ok(()) => checked += 1,
                    Err(ValidationFailure::UnknownKind { .. }) => {}
                    Err(failure) => {
                        failures.push(format!("{}: {}", file.display(), failure.display_for(&obj)))
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // ManagedClusters, ClusterProfiles, ClusterProperties, sets, bindings, with managedFields.
    assert!(
        checked >= 80,
        "only {checked} recorded objects were checked"
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn rejections_match_what_the_api_server_rejected() {
    let fixtures = fixtures();
    let crds = load_crds(&fixtures);
    let recorded = fixtures.join("recorded");
    let only = |file: &str| {
        let mut objects = recorded_objects(&recorded.join(file));
        assert_eq!(objects.len(), 1, "{file}");
        objects.remove(0)
    };

    // SSA answered: `.spec.proxyAgent.additionalValues: field not declared in schema` and
    // `.spec.proxyServer.entrypoint.hostname.port: field not declared in schema`.
    let both = only(
        "6-ssa-field-validation/input-managedproxyconfiguration.hostname-port-and-additionalValues.yaml",
    );
    assert_eq!(
        pointers(crds.validate(&both)),
        [
            "/spec/proxyAgent/additionalValues",
            "/spec/proxyServer/entrypoint/hostname/port"
        ]
    );
    let without = only(
        "6-ssa-field-validation/input-managedproxyconfiguration.without-additionalValues.yaml",
    );
    crds.validate(&without)
        .expect("the server accepted this one");

    // `metadata.name: Invalid value: "lab.example.com/region": a lowercase RFC 1123 subdomain…`
    let slash = only("1-managedclusters/input-clusterproperty-slash-name.yaml");
    let failure = crds
        .validate(&slash)
        .expect_err("'/' is not allowed in names");
    assert_eq!(failure.violations().len(), 1, "{failure}");
    assert_eq!(failure.violations()[0].pointer, "/metadata/name");
    assert!(
        failure.violations()[0]
            .message
            .contains("lowercase RFC 1123 subdomain"),
        "{failure}"
    );

    // The spoke accepted a 1025-character ClusterProperty (the CRD has only minLength: 1) ...
    let long = only("4-edge-cases/input-1025-char-value-clusterproperty.yaml");
    crds.validate(&long).expect("the spoke accepted it");
    // ... and the hub refused it as a claim: `status.clusterClaims[0].value: Too long`.
    let exchange = recorded.join("4-edge-cases/1025-chars.http-status-patch-dryrun.json");
    let text = std::fs::read_to_string(exchange).expect("recorded exchange is readable");
    let exchange: Value = serde_json::from_str(&text).expect("JSON");
    let claims = &exchange["request"]["body"]["status"]["clusterClaims"];
    assert_eq!(
        pointers(crds.validate_fragment(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            &["status", "clusterClaims"],
            claims,
        )),
        ["/status/clusterClaims/0/value"]
    );
}
