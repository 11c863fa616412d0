//! Fields a CRD does not declare: the check that refuses them before anything reaches the API server.
//!
//! A server-side apply of an object with a field its CRD's structural schema does not declare fails
//! with HTTP 500 "field not declared in schema"; a client-side create (Helm 3) prunes it with a warning
//! only (open-cluster-management-io/cluster-proxy PR #272; kubernetes/kubernetes#122480). Either way the chart
//! does not get what it rendered, so the install action walks every patched object against its CRD's
//! `openAPIV3Schema` first and refuses the chart, naming the fields.
//!
//! Only what a structural schema says for sure is flagged: a key of an object whose schema lists
//! `properties` and neither declares that key nor allows more (`additionalProperties`,
//! `x-kubernetes-preserve-unknown-fields: true`). An object schema without `properties` is not judged.

use serde::Deserialize;
use serde_json::Value;

/// The paths (`.spec.proxyAgent.additionalValues`) of the fields of `obj` that `schema` (a CRD
/// version's `openAPIV3Schema`) does not declare, in document order. `apiVersion`, `kind` and
/// `metadata` at the top are the API server's own and never flagged.
pub fn undeclared_fields(obj: &Value, schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk(obj, schema, "", true, &mut out);
    out
}

fn walk(v: &Value, schema: &Value, path: &str, top: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let preserve = schema["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true);
            for (k, child) in map {
                if top && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let here = format!("{path}.{k}");
                if let Some(s) = props.and_then(|p| p.get(k)) {
                    walk(child, s, &here, false, out);
                } else if let Some(s) = additional.filter(|a| a.is_object()) {
                    walk(child, s, &here, false, out);
                } else if props.is_some() && !preserve && additional != Some(&Value::Bool(true)) {
                    out.push(here);
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item, s, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

/// The parts of a CRD this module reads: k8s-openapi's `CustomResourceDefinitionSpec` `group`,
/// `names.kind` and each version's `name` and `schema.openAPIV3Schema`, without requiring the rest.
#[derive(Deserialize)]
struct Crd<S> {
    spec: S,
}

/// What a CRD defines.
#[derive(Deserialize)]
struct CrdKind<'a> {
    group: &'a str,
    #[serde(borrow)]
    names: CrdNames<'a>,
}

/// What a CRD's versions hold.
#[derive(Deserialize)]
struct CrdVersions<'a> {
    #[serde(default, borrow)]
    versions: Vec<CrdVersion<'a>>,
}

#[derive(Deserialize)]
struct CrdNames<'a> {
    kind: &'a str,
}

#[derive(Deserialize)]
struct CrdVersion<'a> {
    name: &'a str,
    #[serde(default)]
    schema: Option<CrdValidation>,
}

/// A version's schema stays JSON: [`undeclared_fields`] walks it as the data it is.
#[derive(Deserialize)]
struct CrdValidation {
    #[serde(rename = "openAPIV3Schema", default)]
    open_api_v3_schema: Option<Value>,
}

/// The `openAPIV3Schema` of `crd` for `version`, if it has one.
pub fn schema_of(crd: &Value, version: &str) -> Option<Value> {
    let crd = Crd::<CrdVersions<'_>>::deserialize(crd).ok()?;
    let v = crd.spec.versions.into_iter().find(|v| v.name == version)?;
    v.schema?.open_api_v3_schema
}

/// Whether `crd` defines `kind` in `group`.
pub fn defines(crd: &Value, group: &str, kind: &str) -> bool {
    Crd::<CrdKind<'_>>::deserialize(crd)
        .is_ok_and(|c| c.spec.group == group && c.spec.names.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flags_only_keys_a_listing_schema_leaves_out() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "proxyAgent": {"type": "object", "properties": {"image": {"type": "string"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "opaque": {"type": "object"},
            }},
        }});
        let obj = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n", "whatever": 1},
            "spec": {"proxyAgent": {"image": "i", "additionalValues": {"a": "b"}},
                "free": {"anything": 1}, "labels": {"a": "b"}, "opaque": {"x": 1},
                "list": [{"name": "a"}, {"name": "b", "extra": true}]}});
        let mut found = undeclared_fields(&obj, &schema);
        found.sort();
        assert_eq!(
            found,
            vec![".spec.list[1].extra", ".spec.proxyAgent.additionalValues"]
        );
        assert!(
            undeclared_fields(&json!({"spec": {"proxyAgent": {"image": "i"}}}), &schema).is_empty()
        );
    }
}
