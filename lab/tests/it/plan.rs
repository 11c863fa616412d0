//! `ocm-lab plan`: what it writes, and that every object it would apply is valid for the real CRDs.

use std::collections::BTreeSet;

use ocm_lab_testkit::crdschema::{CrdSchemas, ValidationFailure};
use serde_json::{Value, json};

use crate::common::{self, fixtures, ocm_lab};

/// Kinds served by Kubernetes itself, for which there is no CRD to check against.
const CORE_KINDS: &[&str] = &["Namespace", "ClusterRoleBinding"];

fn schemas() -> CrdSchemas {
    let dir = fixtures().join("crds");
    CrdSchemas::load_dir(&dir).expect("upstream CRDs load")
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn every_planned_object_of_every_shipped_topology_passes_strict_crd_validation() {
    let crds = schemas();
    let mut checked_kinds = BTreeSet::new();
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let lab = common::lab(name);
        let plan = common::plan(&lab);
        for (cluster, obj) in plan.objects() {
            let obj = &obj;
            let kind = obj["kind"].as_str().expect("objects have a kind");
            if CORE_KINDS.contains(&kind) {
                continue;
            }
            match crds.validate(obj) {
                Ok(()) => {
                    checked_kinds.insert(kind.to_owned());
                }
                Err(e) => panic!("topology {name}, cluster {cluster}: {e}\n{obj:#}"),
            }
        }
    }
    let expected = [
        "ManagedClusterSet",
        "ManagedClusterSetBinding",
        "ManagedCluster",
        "Placement",
        "ManagedClusterAddOn",
        "ManagedServiceAccount",
        "ClusterProperty",
    ];
    for kind in expected {
        assert!(
            checked_kinds.contains(kind),
            "no {kind} was checked; checked: {checked_kinds:?}"
        );
    }
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn chart_values_that_become_custom_resource_fields_pass_the_crd_schemas() {
    let crds = schemas();
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let plan = common::plan(&common::lab(name));
        for chart in plan.charts() {
            let values = &chart.values;
            // The charts copy these value subtrees verbatim into the ClusterManager and Klusterlet specs
            // (ocm@v1.3.1 templates/cluster_manager.yaml and klusterlet.yaml).
            let fragments: Vec<(&str, &str, Vec<&str>, &Value)> = match chart.release.as_str() {
                "cluster-manager" => vec![(
                    "operator.open-cluster-management.io/v1",
                    "ClusterManager",
                    vec!["spec", "registrationConfiguration"],
                    &values["clusterManager"]["registrationConfiguration"],
                )],
                "klusterlet" => vec![
                    (
                        "operator.open-cluster-management.io/v1",
                        "Klusterlet",
                        vec!["spec", "registrationConfiguration"],
                        &values["klusterlet"]["registrationConfiguration"],
                    ),
                    (
                        "operator.open-cluster-management.io/v1",
                        "Klusterlet",
                        vec!["spec", "externalServerURLs"],
                        &values["klusterlet"]["externalServerURLs"],
                    ),
                ],
                _ => vec![],
            };
            for (api, kind, path, value) in fragments {
                if value.is_null() {
                    continue;
                }
                if let Err(e) = crds.validate_fragment(api, kind, &path, value) {
                    panic!("{name}: {} values at {path:?}: {e}", chart.release);
                }
            }
        }
    }
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn the_cluster_proxy_0_10_0_chart_object_fails_strict_validation_until_our_patch_applies() {
    let dir = fixtures();
    let crds = schemas();
    let text = std::fs::read_to_string(
        dir.join("charts/cluster-proxy-0.10.0/rendered-managedproxyconfiguration.example.yaml"),
    )
    .unwrap();
    let mut objects: Vec<Value> = vec![serde_saphyr::from_str(&text).unwrap()];

    match crds.validate(&objects[0]) {
        Err(ValidationFailure::Invalid(v)) => {
            assert!(
                v.iter()
                    .any(|v| v.pointer == "/spec/proxyAgent/additionalValues"),
                "{v:?}"
            )
        }
        other => panic!("the unpatched object must be rejected, got {other:?}"),
    }

    let lab = common::lab("default");
    let plan = common::plan(&lab);
    let proxy = plan
        .charts()
        .find(|c| c.release == "cluster-proxy")
        .expect("default installs cluster-proxy");
    assert_eq!(proxy.version, "0.10.0");
    assert_eq!(proxy.patches.len(), 1, "{:?}", proxy.patches);

    let patches = ocm_lab::patch::PatchSet::embedded().unwrap();
    let applicable = patches.for_chart(
        "cluster-proxy",
        &semver::Version::parse(&proxy.version).unwrap(),
    );
    let report = ocm_lab::patch::apply(&applicable, &mut objects).unwrap();
    assert!(report.missing_targets.is_empty());
    crds.validate(&objects[0])
        .expect("the patched object passes");
}

#[test]
fn plan_out_writes_the_manifests_values_and_graph_of_the_default_lab() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan");
    let r = ocm_lab(&["plan", "--no-charts", "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);

    let read = |p: &str| -> Value {
        let text = std::fs::read_to_string(out.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        serde_saphyr::from_str(&text).unwrap()
    };
    let cm = read("clusters/hub/values/cluster-manager.yaml");
    let gates = &cm["clusterManager"]["registrationConfiguration"]["featureGates"];
    assert!(
        gates
            .as_array()
            .unwrap()
            .contains(&json!({"feature": "ClusterProfile", "mode": "Enable"})),
        "{gates}"
    );
    assert!(
        gates
            .as_array()
            .unwrap()
            .contains(&json!({"feature": "DefaultClusterSet", "mode": "Enable"})),
        "{gates}"
    );
    assert_eq!(cm["createBootstrapSA"], json!(true));

    for spoke in ["cluster1", "cluster2"] {
        let k = read(&format!("clusters/{spoke}/values/klusterlet.yaml"));
        assert_eq!(k["klusterlet"]["clusterName"], json!(spoke));
        assert_eq!(k["klusterlet"]["mode"], json!("Default"));
        assert_eq!(
            k["klusterlet"]["registrationConfiguration"]["featureGates"],
            json!([{"feature": "ClusterProperty", "mode": "Enable"}])
        );
        assert_eq!(
            k["klusterlet"]["externalServerURLs"],
            json!([{"url": format!("https://{spoke}-control-plane:6443")}])
        );
        assert!(
            k.get("bootstrapHubKubeConfig").is_none(),
            "secrets are never in a plan"
        );
        let bootstrap = std::fs::read_to_string(out.join(format!(
            "clusters/{spoke}/bootstrap-kubeconfig.template.yaml"
        )))
        .unwrap();
        assert!(
            bootstrap.contains("server: https://hub-control-plane:6443"),
            "{bootstrap}"
        );
    }

    // open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`: the user server needs
    // enableServiceProxy and userServer.enabled; 0.10.0's gate key.
    let cp = read("clusters/hub/values/cluster-proxy.yaml");
    assert_eq!(cp["enableServiceProxy"], json!(true));
    assert_eq!(cp["userServer"]["enabled"], json!(true));
    assert_eq!(
        cp["featureGates"]["clusterProfileAccessProvider"],
        json!(true)
    );

    let msa = read("clusters/hub/values/managed-serviceaccount.yaml");
    assert_eq!(msa["agentInstallAll"], json!(false));
    assert_eq!(msa["featureGates"]["clusterProfileCredSyncer"], json!(true));

    let charts = read("charts.yaml");
    let proxy = charts["charts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["chart"] == "cluster-proxy")
        .unwrap();
    assert_eq!(proxy["version"], json!("0.10.0"));
    assert_eq!(
        proxy["repo"],
        json!("https://open-cluster-management.io/helm-charts")
    );
    assert_eq!(
        proxy["patches"][0]["file"],
        json!("cluster-proxy-0.10.yaml")
    );

    let graph = std::fs::read_to_string(out.join("graph.mmd")).unwrap();
    assert!(graph.starts_with("flowchart TD"));
    assert!(
        graph.contains("create_cluster1_ --> klusterlet_cluster1_")
            && graph.contains("klusterlet_cluster1_ --> join_cluster1_"),
        "{graph}"
    );

    let hub_manifests: Vec<String> = std::fs::read_dir(out.join("clusters/hub/manifests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for want in [
        "cluster-sets-sandbox-fleet",
        "bindings-cluster-inventory-sandbox-fleet",
        "proxy-placement",
        "msa-addon-cluster1",
        "service-accounts-cluster2-inventory-reader",
    ] {
        assert!(
            hub_manifests.iter().any(|f| f.contains(want)),
            "{want} missing from {hub_manifests:?}"
        );
    }
    let props = std::fs::read_to_string(
        out.join("clusters/cluster1/manifests")
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().contains("properties"))
            .unwrap(),
    )
    .unwrap();
    assert!(
        props.contains("kind: ClusterProperty") && props.contains("value: us-east-1"),
        "{props}"
    );

    // Running it again replaces the earlier plan.
    assert_eq!(
        ocm_lab(&["plan", "--no-charts", "--out", out.to_str().unwrap()]).code,
        0
    );
}

#[test]
fn plan_out_refuses_a_folder_that_is_not_an_earlier_plan_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "mine").unwrap();
    let r = ocm_lab(&["plan", "--out", dir.path().to_str().unwrap()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    let entries: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(entries.len(), 1);
}

#[test]
fn cluster_proxy_0_11_0_uses_its_renamed_gate_key_and_no_patch() {
    let text = common::default_with(
        "    cluster-proxy:\n      version: 0.10.0",
        "    cluster-proxy:\n      version: 0.11.0",
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap()
        .lab;
    let plan = common::plan(&lab);
    let cp = plan
        .charts()
        .find(|c| c.release == "cluster-proxy")
        .unwrap();
    assert_eq!(cp.values["featureGates"], json!({"clusterProfile": true}));
    assert!(cp.patches.is_empty(), "{:?}", cp.patches);
}

#[test]
fn plan_summary_of_the_default_lab() {
    let r = ocm_lab(&["plan"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    insta::assert_snapshot!("plan_summary_default", r.stdout);
}

#[test]
fn plan_as_json_is_one_valid_document() {
    let r = ocm_lab(&["plan", "--output", "json", "-t", "minimal"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["lab"], json!("minimal"));
    assert!(
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "join[mini-spoke]")
    );
}

#[test]
fn up_without_kind_and_helm_stops_in_preflight_before_creating_anything() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let env = [
        ("OCM_LAB_STATE_DIR", dir.path()),
        ("OCM_LAB_CACHE_DIR", dir.path()),
        ("PATH", empty.as_path()),
    ];
    let r = crate::common::ocm_lab_env(&["up", "--no-download", "-t", "minimal"], &env);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("preflight failed") && r.stderr.contains("nothing was created"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("kind not found") && r.stderr.contains("https://kind.sigs.k8s.io"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("helm not found") && r.stderr.contains("https://helm.sh"),
        "{}",
        r.stderr
    );
    let state = dir.path().join("minimal");
    assert!(
        !state.join("journal.jsonl").exists() && !state.join("owned.jsonl").exists(),
        "nothing may be recorded as created"
    );
}
