//! The simulated lab's objects against the ones recorded from real components:
//! `../shared/fixtures/recorded/` holds what a real kube-apiserver v1.36 with the real OCM registration
//! hub controller and agents wrote (see its README). After `up` on the simulated default lab (same names
//! as the recording: cluster1, cluster-inventory, sandbox-fleet), each object is compared with its
//! recorded counterpart field by field by *shape*: which fields exist and their JSON types, the
//! conditions' types, statuses and reasons, and the labels (keys and values). Every difference must be
//! in [`DELIBERATE`] with the reason it is there, and every entry there must still be a difference, so
//! the list cannot go stale. Skipped with a notice without `../shared` (unless
//! `OCM_LAB_REQUIRE_FIXTURES=1`).
//!
//! ClusterClaim: the recording holds no ClusterClaim object (the rig's agents ran with the
//! `ClusterProperty` gate, and properties reach the hub through ClusterProperty objects, which is what
//! ocm-lab writes too), so the spoke-side object compared is the ClusterProperty; the claims themselves
//! are compared inside ManagedCluster `status.clusterClaims`.

use std::collections::BTreeSet;
use std::path::Path;

use ocm_lab::backend::{ClusterApi, ObjectRef};
use serde_json::Value;

use crate::common;
use crate::engine::{Harness, failure};

/// The differences the simulation keeps on purpose: (object, `+` only in the simulation / `-` only in
/// the recording, shape entry, why).
const DELIBERATE: &[(&str, char, &str, &str)] = &[
    // ocm-lab approves the CSR itself through `/approval` (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/register/csr/hub_driver.go`, `pkg/registration/hub/manager.go`: with ocm-lab's gates
    // hub auto-approval is inert); the recording rig ran with `ManagedClusterAutoApproval`.
    (
        "CertificateSigningRequest",
        '+',
        "condition Approved=True (ocm-lab Approve)",
        LAB_ACCEPTS,
    ),
    (
        "CertificateSigningRequest",
        '-',
        "condition Approved=True (AutoApprovedByHubCSRApprovingController)",
        LAB_ACCEPTS,
    ),
    // The same gate's auto-accept annotates the ManagedCluster; ocm-lab sets `hubAcceptsClient` itself.
    (
        "ManagedCluster",
        '-',
        "metadata.annotations.open-cluster-management.io/automatically-accepted-on: string",
        LAB_ACCEPTS,
    ),
    (
        "ManagedCluster",
        '-',
        "metadata.annotations: object",
        LAB_ACCEPTS,
    ),
    // ocm-lab labels what it writes with its lab, and the topology gives cluster1 `env: dev`.
    (
        "ClusterProperty",
        '+',
        "label ocm-lab.open-cluster-management.io/lab=sandbox",
        LAB_LABEL,
    ),
    (
        "ClusterProperty",
        '+',
        "metadata.labels.ocm-lab.open-cluster-management.io/lab: string",
        LAB_LABEL,
    ),
    ("ClusterProperty", '+', "metadata.labels: object", LAB_LABEL),
    (
        "ManagedCluster",
        '+',
        "label ocm-lab.open-cluster-management.io/lab=sandbox",
        LAB_LABEL,
    ),
    (
        "ManagedCluster",
        '+',
        "metadata.labels.ocm-lab.open-cluster-management.io/lab: string",
        LAB_LABEL,
    ),
    (
        "ManagedCluster",
        '+',
        "label env=dev",
        "the default topology labels cluster1 `env: dev`; the rig set no labels",
    ),
    (
        "ManagedCluster",
        '+',
        "metadata.labels.env: string",
        "the default topology labels cluster1 `env: dev`; the rig set no labels",
    ),
    (
        "ManagedClusterSetBinding",
        '+',
        "label ocm-lab.open-cluster-management.io/lab=sandbox",
        LAB_LABEL,
    ),
    (
        "ManagedClusterSetBinding",
        '+',
        "metadata.labels.ocm-lab.open-cluster-management.io/lab: string",
        LAB_LABEL,
    ),
    (
        "ManagedClusterSetBinding",
        '+',
        "metadata.labels: object",
        LAB_LABEL,
    ),
    // The recording applied with `kubectl apply` (client-side); ocm-lab uses server-side apply.
    (
        "ClusterProperty",
        '-',
        "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration: string",
        KUBECTL,
    ),
    (
        "ClusterProperty",
        '-',
        "metadata.annotations: object",
        KUBECTL,
    ),
    (
        "ManagedClusterSetBinding",
        '-',
        "metadata.annotations.kubectl.kubernetes.io/last-applied-configuration: string",
        KUBECTL,
    ),
    (
        "ManagedClusterSetBinding",
        '-',
        "metadata.annotations: object",
        KUBECTL,
    ),
    // ocm-lab's klusterlet values set `externalServerURLs` (the spoke's internal endpoint), which the agent
    // reports with the spoke's CA; the rig's agents ran without.
    (
        "ManagedCluster",
        '+',
        "spec.managedClusterClientConfigs: array",
        CLIENT_CONFIGS,
    ),
    (
        "ManagedCluster",
        '+',
        "spec.managedClusterClientConfigs[]: object",
        CLIENT_CONFIGS,
    ),
    (
        "ManagedCluster",
        '+',
        "spec.managedClusterClientConfigs[].url: string",
        CLIENT_CONFIGS,
    ),
    (
        "ManagedCluster",
        '+',
        "spec.managedClusterClientConfigs[].caBundle: string",
        CLIENT_CONFIGS,
    ),
];
const LAB_ACCEPTS: &str = "ocm-lab accepts and approves explicitly; the rig auto-approved";
const LAB_LABEL: &str = "ocm-lab labels every object it writes with its lab";
const KUBECTL: &str = "recorded with kubectl client-side apply; ocm-lab applies server-side";
const CLIENT_CONFIGS: &str =
    "ocm-lab's klusterlet sets externalServerURLs; the rig's agents did not";

/// Shape entries of an object: `path: type` for every field (array items merged under `[]`), plus
/// `condition <type>=<status> (<reason>)` for each condition and `label <key>=<value>` for each label.
/// Server-written bookkeeping whose values never match (uid, resourceVersion, timestamps) is kept as
/// shape only, like everything else.
fn shape(obj: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(obj, "", &mut out);
    if let Some(cs) = obj.pointer("/status/conditions").and_then(Value::as_array) {
        for c in cs {
            out.insert(format!(
                "condition {}={} ({})",
                c["type"].as_str().unwrap_or("?"),
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?")
            ));
        }
    }
    if let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            out.insert(format!("label {k}={}", v.as_str().unwrap_or("?")));
        }
    }
    out
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(v: &Value, path: &str, out: &mut BTreeSet<String>) {
    // The recordings compared here were read with `kubectl get`, which leaves `managedFields` out; the
    // simulated server-side apply's managedFields are checked by the converge tests and the simulated API
    // server's own tests instead.
    if path == "metadata.managedFields" {
        return;
    }
    if !path.is_empty() {
        out.insert(format!("{path}: {}", kind_of(v)));
    }
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                // Label and annotation keys are data, not schema: labels are compared as entries above,
                // annotations by key here.
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                walk(x, &p, out);
            }
        }
        Value::Array(items) => {
            for x in items {
                walk(x, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

fn load(fixtures: &Path, file: &str) -> Value {
    let path = fixtures.join("recorded").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The item of a recorded `kind: List` whose `metadata.name` (or cluster-name label) is `name`.
fn item(list: &Value, pick: impl Fn(&Value) -> bool) -> Value {
    list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|o| pick(o)))
        .cloned()
        .expect("the recorded list holds the object")
}

/// The differences between a simulated and a recorded object, as `(+|-, entry)`.
fn differences(sim: &Value, recorded: &Value) -> BTreeSet<(char, String)> {
    let (s, r) = (shape(sim), shape(recorded));
    s.difference(&r)
        .map(|e| ('+', e.clone()))
        .chain(r.difference(&s).map(|e| ('-', e.clone())))
        .collect()
}

#[tokio::test(start_paused = true)]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
async fn simulated_objects_have_the_shape_of_the_recorded_real_ones() {
    let fixtures = common::fixtures();
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let hub = h.sim.api(&h.lab.hub.cluster.name);
    let spoke = h.sim.api("cluster1");
    let get = |api: &std::sync::Arc<dyn ClusterApi>, r: ObjectRef| {
        let api = api.clone();
        async move {
            api.get(&r)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("the simulated lab has no {r}"))
        }
    };

    let mut pairs: Vec<(&str, Value, Value)> = Vec::new();
    pairs.push((
        "ManagedCluster",
        get(
            &hub,
            ObjectRef::new(
                "cluster.open-cluster-management.io/v1",
                "ManagedCluster",
                None,
                "cluster1",
            ),
        )
        .await,
        load(
            &fixtures,
            "1-managedclusters/managedcluster-cluster1.with-properties.yaml",
        ),
    ));
    pairs.push((
        "ClusterProfile",
        get(
            &hub,
            ObjectRef::new(
                "multicluster.x-k8s.io/v1alpha1",
                "ClusterProfile",
                Some("cluster-inventory"),
                "cluster1",
            ),
        )
        .await,
        load(
            &fixtures,
            "8-access-providers-and-agent-loss/clusterprofile-cluster1.with-access-providers.yaml",
        ),
    ));
    pairs.push((
        "ManagedClusterSetBinding",
        get(
            &hub,
            ObjectRef::new(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSetBinding",
                Some("cluster-inventory"),
                "sandbox-fleet",
            ),
        )
        .await,
        load(
            &fixtures,
            "2-clusterprofiles/managedclustersetbinding-sandbox-fleet.yaml",
        ),
    ));
    let csrs = hub
        .list(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            None,
            Some("open-cluster-management.io/cluster-name=cluster1"),
        )
        .await
        .unwrap();
    assert_eq!(csrs.len(), 1, "{csrs:?}");
    let cluster1 = |o: &Value| {
        o.pointer("/metadata/labels/open-cluster-management.io~1cluster-name")
            == Some(&Value::from("cluster1"))
    };
    pairs.push((
        "CertificateSigningRequest",
        csrs[0].clone(),
        item(
            &load(&fixtures, "5-csr/csr.list.after-approval.yaml"),
            cluster1,
        ),
    ));
    pairs.push((
        "ClusterProperty",
        get(
            &spoke,
            ObjectRef::new("about.k8s.io/v1alpha1", "ClusterProperty", None, "region"),
        )
        .await,
        item(
            &load(
                &fixtures,
                "1-managedclusters/spoke-cluster1.clusterproperties.list.yaml",
            ),
            |o| o["metadata"]["name"] == "region",
        ),
    ));

    let expected: BTreeSet<(String, char, String)> = DELIBERATE
        .iter()
        .map(|(o, d, e, _)| ((*o).to_owned(), *d, (*e).to_owned()))
        .collect();
    let mut actual: BTreeSet<(String, char, String)> = BTreeSet::new();
    for (object, sim, recorded) in &pairs {
        for (d, e) in differences(sim, recorded) {
            actual.insert(((*object).to_owned(), d, e));
        }
    }
    let unexplained: Vec<String> = actual
        .difference(&expected)
        .map(|(o, d, e)| format!("    (\"{o}\", '{d}', \"{e}\", \"?\"),"))
        .collect();
    let stale: Vec<String> = expected
        .difference(&actual)
        .map(|(o, d, e)| format!("{o} {d} {e}"))
        .collect();
    assert!(
        unexplained.is_empty() && stale.is_empty(),
        "differences from the recorded objects that DELIBERATE does not explain ('+' only simulated, \
         '-' only recorded):\n{}\nDELIBERATE entries that are no longer differences:\n{}",
        unexplained.join("\n"),
        stale.join("\n")
    );
}

#[test]
fn the_shape_names_fields_types_conditions_and_labels() {
    let o: Value = serde_json::json!({
        "metadata": {"name": "x", "labels": {"a": "b"}},
        "status": {"conditions": [{"type": "Bound", "status": "True", "reason": "ClusterSetBound"}],
                   "list": [{"n": 1}, {"m": "s"}]},
    });
    let s = shape(&o);
    for e in [
        "metadata.name: string",
        "label a=b",
        "condition Bound=True (ClusterSetBound)",
        "status.list[].n: number",
        "status.list[].m: string",
        "status.conditions: array",
    ] {
        assert!(s.contains(e), "{e} in {s:?}");
    }
    let mut other = o.clone();
    other["status"]["conditions"][0]["reason"] = Value::from("Other");
    other["metadata"]["labels"]["a"] = Value::from("c");
    let d = differences(&o, &other);
    assert!(d.contains(&('+', "condition Bound=True (ClusterSetBound)".into())));
    assert!(d.contains(&('-', "condition Bound=True (Other)".into())));
    assert!(d.contains(&('+', "label a=b".into())));
}
