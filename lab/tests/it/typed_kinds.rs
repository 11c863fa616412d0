//! The product reads and writes Kubernetes objects as types (`ocm_lab::backend::kinds`), never as JSON
//! walked by hand:
//! - every object of those kinds recorded from a real API server with real OCM (`../shared/fixtures/
//!   recorded`, see its README) reads into its type, and what the type writes back is exactly what the
//!   object held (no field renamed, mistyped or invented);
//! - no product file walks `status`, `spec` or `metadata` of a `serde_json::Value` by index or pointer,
//!   or names an object with `ObjectRef::new` and a literal (or constant) API version, except the places
//!   listed in [`ALLOWED`], each saying why a type does not fit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ocm_lab::actions::contains;
use ocm_lab::backend::kinds::{self, Kind};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::common;

/// Reads `obj` as a `K` and writes it back: `Err` when it does not read, or when what it writes is not
/// part of `obj`.
fn round_trip<K: Kind + DeserializeOwned + Serialize>(obj: &Value) -> Result<(), String> {
    let typed: K =
        serde_json::from_value(obj.clone()).map_err(|e| format!("does not read: {e}"))?;
    let back = serde_json::to_value(&typed).map_err(|e| format!("does not write: {e}"))?;
    if contains(obj, &back) {
        Ok(())
    } else {
        Err(format!("writes what it did not read: {back:#}"))
    }
}

type Check = fn(&Value) -> Result<(), String>;

/// The typed kinds, by (`apiVersion`, `kind`), with their round trip.
fn typed_kinds() -> BTreeMap<(String, String), Check> {
    fn entry<K: Kind + DeserializeOwned + Serialize>() -> ((String, String), Check) {
        let gvk = kinds::gvk::<K>();
        ((gvk.api_version(), gvk.kind), round_trip::<K>)
    }
    BTreeMap::from([
        entry::<kinds::ManagedCluster>(),
        entry::<kinds::ManagedClusterSet>(),
        entry::<kinds::ManagedClusterSetBinding>(),
        entry::<kinds::ManagedClusterAddOn>(),
        entry::<kinds::Placement>(),
        entry::<kinds::ManagedProxyConfiguration>(),
        entry::<kinds::ClusterProfile>(),
        entry::<kinds::ClusterProperty>(),
        entry::<kinds::CertificateSigningRequest>(),
        entry::<kinds::ConfigMap>(),
        entry::<kinds::Secret>(),
        entry::<kinds::Namespace>(),
    ])
}

/// Every object (a map with `apiVersion`, `kind` and `metadata`) in `v`, lists and watch events included
/// (an event's `involvedObject`, a reference without metadata, is not one).
fn objects<'a>(v: &'a Value, out: &mut Vec<&'a Value>) {
    match v {
        Value::Object(m) => {
            if m.get("apiVersion").is_some_and(Value::is_string)
                && m.get("kind").is_some_and(Value::is_string)
                && m.get("metadata").is_some_and(Value::is_object)
            {
                out.push(v);
            }
            m.values().for_each(|c| objects(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| objects(c, out)),
        _ => {}
    }
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "json") {
            out.push(path);
        }
    }
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn recorded_real_objects_read_into_their_types_and_write_back_what_they_held() {
    let fixtures = common::fixtures();
    let mut paths = Vec::new();
    files(&fixtures.join("recorded"), &mut paths);
    paths.sort();
    let typed = typed_kinds();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        // The recorder's inputs may hold several documents; what the servers answered is one each.
        let Ok(doc) = serde_saphyr::from_str::<Value>(&text) else {
            continue;
        };
        let mut found = Vec::new();
        objects(&doc, &mut found);
        for obj in found {
            let mut key = (
                obj["apiVersion"].as_str().unwrap_or_default().to_owned(),
                obj["kind"].as_str().unwrap_or_default().to_owned(),
            );
            // kubectl read the addons at v1beta1, its preferred version; the lab reads v1alpha1, whose
            // `status.conditions` are the same (open-cluster-management-io/api v1.3.0
            // `addon/v1alpha1/types_managedclusteraddon.go`, `addon/v1beta1/types_managedclusteraddon.go`).
            let mut obj = obj.clone();
            if key.0 == "addon.open-cluster-management.io/v1beta1" {
                key.0 = "addon.open-cluster-management.io/v1alpha1".to_owned();
                obj["apiVersion"] = Value::String(key.0.clone());
            }
            let Some(check) = typed.get(&key) else {
                continue;
            };
            *seen.entry(key.1.clone()).or_default() += 1;
            if let Err(e) = check(&obj) {
                failures.push(format!("{}: {} {}", path.display(), key.1, e));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The recording holds each of these kinds, so each type was really tried.
    for kind in [
        "ManagedCluster",
        "ManagedClusterSet",
        "ManagedClusterSetBinding",
        "ManagedClusterAddOn",
        "Placement",
        "ManagedProxyConfiguration",
        "ClusterProfile",
        "ClusterProperty",
        "CertificateSigningRequest",
        "Secret",
    ] {
        assert!(
            seen.get(kind).is_some_and(|n| *n > 0),
            "no recorded {kind} was read: {seen:?}"
        );
    }
}

#[test]
fn a_type_that_misnames_a_field_is_caught_by_the_round_trip() {
    /// A ClusterProperty whose `value` is written as `val`: the real object has no such field.
    #[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug)]
    #[kube(
        group = "about.k8s.io",
        version = "v1alpha1",
        kind = "Misnamed",
        schema = "disabled"
    )]
    struct MisnamedSpec {
        #[serde(rename = "val", default)]
        value: String,
    }
    let real = serde_json::json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "Misnamed",
        "metadata": {"name": "region"}, "spec": {"value": "eu"}});
    assert!(round_trip::<Misnamed>(&real).is_err());
    let property = serde_json::json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
        "metadata": {"name": "region"}, "spec": {"value": "eu"}});
    assert_eq!(round_trip::<kinds::ClusterProperty>(&property), Ok(()));
}

/// Places in product code where an object is still walked as JSON or named by a literal API version,
/// as (file relative to `lab/`, why a type does not fit). At most five; each file says the same at the
/// place itself.
const ALLOWED: &[(&str, &str)] = &[];

/// The forbidden patterns found in `text` (a product file, its `#[cfg(test)]` module cut off), as
/// (line, pattern).
fn forbidden(text: &str) -> Vec<(usize, String)> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let l = line.trim_start();
        if l.starts_with("//") {
            continue;
        }
        for field in ["status", "spec", "metadata"] {
            for pat in [format!("[\"{field}\"]"), format!("pointer(\"/{field}")] {
                if l.contains(&pat) {
                    found.push((n + 1, pat));
                }
            }
        }
    }
    // `ObjectRef::new(` followed (across line breaks, as rustfmt splits it) by a string literal or a
    // constant (an upper-case name) as the API version.
    for (i, _) in code.match_indices("ObjectRef::new(") {
        let rest = code[i + "ObjectRef::new(".len()..].trim_start();
        let first = rest.chars().next().unwrap_or(' ');
        if first == '"' || first.is_ascii_uppercase() {
            let line = code[..i].lines().count().max(1);
            found.push((line, "ObjectRef::new(<literal API version>".to_owned()));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn product_code_reads_objects_through_types_not_json_walks() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    rust_files(&lab.join("core/src"), &mut paths);
    rust_files(&lab.join("src"), &mut paths);
    paths.sort();
    let mut offending = Vec::new();
    let mut allowed_seen = Vec::new();
    for path in &paths {
        let rel = path.strip_prefix(lab).unwrap().display().to_string();
        let hits = forbidden(&std::fs::read_to_string(path).unwrap());
        if hits.is_empty() {
            continue;
        }
        if ALLOWED.iter().any(|(f, _)| *f == rel) {
            allowed_seen.push(rel);
            continue;
        }
        for (line, pat) in hits {
            offending.push(format!("{rel}:{line}: {pat}"));
        }
    }
    assert!(
        offending.is_empty(),
        "objects walked as JSON or named by a literal API version (use the types in \
         backend::kinds through backend::Api, or add the place to ALLOWED saying why a type does not fit):\n{}",
        offending.join("\n")
    );
    assert!(
        ALLOWED.len() <= 5,
        "at most five places may walk objects as JSON"
    );
    for (file, _) in ALLOWED {
        assert!(
            allowed_seen.iter().any(|f| f == file),
            "{file} no longer walks JSON: remove it from ALLOWED"
        );
    }
}

#[test]
fn the_detector_finds_index_chains_pointers_and_literal_api_versions() {
    let planted = r#"
fn joined(mc: &Value) -> bool {
    mc["spec"]["hubAcceptsClient"] == true
}
fn name(o: &Value) -> &str {
    o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}
fn r() -> ObjectRef {
    ObjectRef::new(
        "v1",
        "Secret",
        None,
        "x",
    )
}
fn c() -> ObjectRef {
    ObjectRef::new(OPERATOR_API, "Klusterlet", None, "klusterlet")
}
fn dynamic(api_version: &str) -> ObjectRef {
    ObjectRef::new(api_version, "Klusterlet", None, "klusterlet")
}
// mc["status"] in a comment is fine
#[cfg(test)]
mod tests { fn t() { let _ = v["status"]; } }
"#;
    let lines: Vec<usize> = forbidden(planted).into_iter().map(|(l, _)| l).collect();
    assert_eq!(lines, [3, 6, 9, 17]);
}
