//! Server-side apply field sets, in the API server's `FieldsV1` form (`metadata.managedFields[].fieldsV1`):
//! which fields a field manager set, so that an apply which no longer sets a field removes it, and so that
//! the lab can tell when the live object holds fields it applied earlier and the topology dropped.
//!
//! A set is a tree of JSON maps: `f:<field>` for a map key, `k:{"name":"<n>"}` for an item of a list keyed
//! by `name` (with `.` for the item itself), and `{}` for a leaf. Lists whose items are not all objects
//! with a `name` are atomic: one leaf, replaced as a whole, as for CRD lists without
//! `x-kubernetes-list-type: map`. The simulated API server uses this module to model server-side apply;
//! the apply action uses it to read what a real API server recorded.

use serde_json::{Map, Value, json};

/// The field set an applied configuration sets: every field but `apiVersion`, `kind`, `status`,
/// `metadata.name` and `metadata.namespace`, which a real API server leaves out too. A Secret's
/// `stringData` counts as `data`, which is where the API server puts it.
pub fn of_config(config: &Value) -> Value {
    let Some(top) = config.as_object() else {
        return json!({});
    };
    let mut out = Map::new();
    for (k, v) in top {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                let mut meta = Map::new();
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if !matches!(
                        mk.as_str(),
                        "name"
                            | "namespace"
                            | "uid"
                            | "resourceVersion"
                            | "creationTimestamp"
                            | "generation"
                            | "managedFields"
                            | "deletionTimestamp"
                    ) {
                        meta.insert(format!("f:{mk}"), walk(mv));
                    }
                }
                if !meta.is_empty() {
                    out.insert("f:metadata".to_owned(), Value::Object(meta));
                }
            }
            "stringData" if config["kind"] == "Secret" => {
                let data = out
                    .entry("f:data")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                    .expect("a map");
                for dk in v.as_object().into_iter().flatten().map(|(k, _)| k) {
                    data.insert(format!("f:{dk}"), json!({}));
                }
            }
            _ => {
                let w = walk(v);
                match (out.get_mut(&format!("f:{k}")), w) {
                    (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
                    (_, w) => {
                        out.insert(format!("f:{k}"), w);
                    }
                }
            }
        }
    }
    Value::Object(out)
}

fn walk(v: &Value) -> Value {
    match v {
        Value::Object(m) if !m.is_empty() => {
            Value::Object(m.iter().map(|(k, v)| (format!("f:{k}"), walk(v))).collect())
        }
        Value::Array(items) if keyed(items) => {
            let mut out = Map::new();
            for item in items {
                let mut node = match walk(item) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                node.insert(".".to_owned(), json!({}));
                out.insert(item_key(item), Value::Object(node));
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

/// Whether a list is associative by `name` (containers, env, ports by name, …): every item is an object
/// with a string `name`, and there is at least one.
fn keyed(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i["name"].is_string())
}

fn item_key(item: &Value) -> String {
    format!("k:{}", json!({"name": item["name"]}))
}

fn is_leaf(set: &Value) -> bool {
    set.as_object().is_none_or(Map::is_empty)
}

/// Whether `config` (an applied configuration, not a field set) sets every field of `owned`. Read
/// against the configuration itself, so an API server's list keys (`k:{"containerPort":8443,...}`,
/// `k:{"mountPath":...}`, set items `v:...`) count as well as ours. A leaf of `owned` is covered when
/// the configuration has the field at all (an atomic list, a whole map); an item's `.` is covered when
/// the item is. Index keys (`i:`) are not judged.
pub fn covered_by(config: &Value, owned: &Value) -> bool {
    let Some(o) = owned.as_object() else {
        return true;
    };
    o.iter().all(|(k, sub)| {
        let child = if k == "." {
            return true;
        } else if let Some(f) = k.strip_prefix("f:") {
            config.get(f)
        } else if let Some(key) = k.strip_prefix("k:") {
            let Ok(fields) = serde_json::from_str::<Map<String, Value>>(key) else {
                return true;
            };
            // A key field the configuration leaves out (a defaulted `protocol`) does not count.
            config.as_array().and_then(|items| {
                items.iter().find(|i| {
                    let present: Vec<_> =
                        fields.iter().filter(|(f, _)| i.get(f).is_some()).collect();
                    !present.is_empty() && present.iter().all(|(f, v)| i.get(f) == Some(v))
                })
            })
        } else if let Some(v) = k.strip_prefix("v:") {
            let Ok(v) = serde_json::from_str::<Value>(v) else {
                return true;
            };
            config
                .as_array()
                .and_then(|items| items.iter().find(|i| **i == v))
        } else {
            return true;
        };
        child.is_some_and(|c| is_leaf(sub) || covered_by(c, sub))
    })
}

/// The fields of `owned` that `taken` does not take: what another manager keeps after a forced apply.
pub fn subtract(owned: &Value, taken: &Value) -> Value {
    let (Some(o), Some(t)) = (owned.as_object(), taken.as_object()) else {
        return owned.clone();
    };
    let mut out = Map::new();
    for (k, sub) in o {
        match t.get(k) {
            None => {
                out.insert(k.clone(), sub.clone());
            }
            Some(ts) if is_leaf(ts) || is_leaf(sub) => {}
            Some(ts) => {
                let rest = subtract(sub, ts);
                if !is_leaf(&rest)
                    && !(rest
                        .as_object()
                        .is_some_and(|m| m.len() == 1 && m.contains_key(".")))
                {
                    out.insert(k.clone(), rest);
                }
            }
        }
    }
    Value::Object(out)
}

/// The set a manager's `Apply` entry in `metadata.managedFields` records, if it has one.
pub fn applied_by(obj: &Value, manager: &str) -> Option<Value> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde::Deserialize as _;
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: ObjectMeta,
    }
    let entries = Object::deserialize(obj).ok()?.metadata.managed_fields?;
    let entry = entries.into_iter().find(|e| {
        e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply")
    })?;
    Some(entry.fields_v1.map_or(Value::Null, |f| f.0))
}

/// Whether `live` holds fields that `manager` applied earlier and `config` no longer sets: applying
/// `config` again would remove them, although `live` may already contain all of `config`.
pub fn owns_more(live: &Value, config: &Value, manager: &str) -> bool {
    let Some(owned) = applied_by(live, manager) else {
        return false;
    };
    let owned = &owned;
    match config.get("stringData").and_then(Value::as_object) {
        // The API server keeps a Secret's `stringData` as `data`: read the configuration that way too.
        Some(sd) if config["kind"] == "Secret" => {
            let mut c = config.clone();
            let data = c
                .as_object_mut()
                .expect("has stringData")
                .entry("data")
                .or_insert_with(|| json!({}));
            if let Some(d) = data.as_object_mut() {
                for (k, v) in sd {
                    d.entry(k.clone()).or_insert_with(|| v.clone());
                }
            }
            !covered_by(&c, owned)
        }
        _ => !covered_by(config, owned),
    }
}

/// Removes from `obj` the fields `prev` (the manager's earlier set) has and `new` (its set now) does not,
/// unless one of `others` (other managers' sets) holds them too. A map emptied by the removal goes too,
/// unless `new` still names it; a list item goes with its `.`.
pub fn remove_dropped(obj: &mut Value, prev: &Value, new: &Value, others: &[&Value]) {
    let Some(p) = prev.as_object() else { return };
    for (k, psub) in p {
        if k == "." {
            continue;
        }
        let nsub = new.get(k);
        let osubs: Vec<&Value> = others.iter().filter_map(|o| o.get(k)).collect();
        if osubs.iter().any(|o| is_leaf(o)) {
            continue;
        }
        let whole = is_leaf(psub) || psub.get(".").is_some();
        if nsub.is_none() && osubs.is_empty() && whole {
            remove_child(obj, k);
            continue;
        }
        let Some(child) = child_mut(obj, k) else {
            continue;
        };
        remove_dropped(child, psub, nsub.unwrap_or(&Value::Null), &osubs);
        let emptied = match child {
            Value::Object(m) => m.is_empty(),
            Value::Array(a) => a.is_empty(),
            _ => false,
        };
        if emptied && nsub.is_none() {
            remove_child(obj, k);
        }
    }
}

fn matches_key(item: &Value, key: &str) -> bool {
    let Some(k) = key.strip_prefix("k:") else {
        return false;
    };
    serde_json::from_str::<Map<String, Value>>(k)
        .is_ok_and(|fields| fields.iter().all(|(f, v)| item.get(f) == Some(v)))
}

fn child_mut<'a>(obj: &'a mut Value, key: &str) -> Option<&'a mut Value> {
    if let Some(f) = key.strip_prefix("f:") {
        return obj.as_object_mut()?.get_mut(f);
    }
    obj.as_array_mut()?.iter_mut().find(|i| matches_key(i, key))
}

fn remove_child(obj: &mut Value, key: &str) {
    if let Some(f) = key.strip_prefix("f:") {
        if let Some(m) = obj.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(a) = obj.as_array_mut() {
        a.retain(|i| !matches_key(i, key));
    }
}

/// Merges an applied configuration into the stored object: maps recursively, lists keyed by `name` item
/// by item (items the configuration does not name stay, after its own), other lists as a whole.
pub fn merge(target: &mut Value, config: &Value) {
    match (target, config) {
        (Value::Object(t), Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (Value::Array(t), Value::Array(c)) if keyed(c) && keyed(t) => {
            let mut rest = std::mem::take(t);
            for item in c {
                match rest.iter().position(|r| r["name"] == item["name"]) {
                    Some(i) => {
                        let mut have = rest.remove(i);
                        merge(&mut have, item);
                        t.push(have);
                    }
                    None => t.push(item.clone()),
                }
            }
            t.extend(rest);
        }
        (t, c) => *t = c.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_configuration_sets_its_leaves_and_keyed_items() {
        let set = of_config(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "b", "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}], "args": ["a", "b"], "empty": {}},
        }));
        assert_eq!(
            set,
            json!({
                "f:metadata": {"f:labels": {"f:x": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}}},
                    "f:args": {},
                    "f:empty": {},
                },
            })
        );
    }

    #[test]
    fn coverage_reads_an_api_servers_list_keys_against_the_configuration() {
        let config = json!({
            "metadata": {"labels": {"x": "1"}},
            "subjects": [{"name": "a"}],
            "spec": {"ports": [{"containerPort": 8443, "name": "https"}], "finalizers": ["f"]},
        });
        // Recorded by a real API server: atomic `subjects`, ports keyed by port and protocol, a set.
        let owned = json!({
            "f:subjects": {},
            "f:metadata": {"f:labels": {"f:x": {}}},
            "f:spec": {
                "f:ports": {"k:{\"containerPort\":8443,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}, "f:name": {}}},
                "f:finalizers": {"v:\"f\"": {}},
            },
        });
        assert!(covered_by(&config, &owned));
        assert!(covered_by(&config, &of_config(&config)));
        let smaller =
            json!({"subjects": [{"name": "a"}], "spec": {"ports": [{"containerPort": 8443}]}});
        assert!(!covered_by(&smaller, &owned));
        let other_port = json!({"metadata": {"labels": {"x": "1"}}, "subjects": [], "spec": {"ports": [{"containerPort": 9443, "name": "https"}], "finalizers": ["f"]}});
        assert!(!covered_by(&other_port, &owned));
    }

    #[test]
    fn a_secret_s_string_data_counts_as_data() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "ocm-lab", "operation": "Apply", "fieldsV1": {"f:data": {"f:kubeconfig": {}}, "f:type": {}}},
        ]}});
        let config =
            json!({"kind": "Secret", "type": "Opaque", "stringData": {"kubeconfig": "..."}});
        assert!(!owns_more(&live, &config, "ocm-lab"));
    }

    #[test]
    fn owns_more_sees_a_dropped_label() {
        let live = json!({
            "metadata": {"name": "a", "labels": {"x": "1", "y": "2"}, "managedFields": [
                {"manager": "ocm-lab", "operation": "Apply", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}}}},
            ]},
        });
        let config = json!({"metadata": {"name": "a", "labels": {"x": "1"}}});
        assert!(owns_more(&live, &config, "ocm-lab"));
        assert!(!owns_more(&live, &config, "someone-else"));
        let same = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}});
        assert!(!owns_more(&live, &same, "ocm-lab"));
    }

    #[test]
    fn dropped_fields_go_unless_another_manager_holds_them() {
        let mut obj = json!({
            "metadata": {"labels": {"x": "1", "y": "2", "z": "3"}},
            "spec": {"a": {"b": 1}, "items": [{"name": "i1", "v": 1}, {"name": "i2", "v": 2}]},
        });
        let prev = of_config(&obj);
        let new = of_config(
            &json!({"metadata": {"labels": {"x": "1"}}, "spec": {"items": [{"name": "i1", "v": 1}]}}),
        );
        let other = json!({"f:metadata": {"f:labels": {"f:z": {}}}});
        remove_dropped(&mut obj, &prev, &new, &[&other]);
        assert_eq!(
            obj,
            json!({"metadata": {"labels": {"x": "1", "z": "3"}}, "spec": {"items": [{"name": "i1", "v": 1}]}})
        );
    }

    #[test]
    fn keyed_lists_merge_item_by_item() {
        let mut t =
            json!({"l": [{"name": "a", "v": 1, "w": 0}, {"name": "b", "v": 2}], "atomic": [1, 2]});
        merge(
            &mut t,
            &json!({"l": [{"name": "a", "v": 9}], "atomic": [3]}),
        );
        assert_eq!(
            t,
            json!({"l": [{"name": "a", "v": 9, "w": 0}, {"name": "b", "v": 2}], "atomic": [3]})
        );
    }

    #[test]
    fn another_manager_loses_what_a_forced_apply_takes() {
        let owned = json!({"f:metadata": {"f:labels": {"f:x": {}, "f:y": {}}}, "f:spec": {}});
        let taken = json!({"f:metadata": {"f:labels": {"f:x": {}}}, "f:spec": {"f:a": {}}});
        assert_eq!(
            subtract(&owned, &taken),
            json!({"f:metadata": {"f:labels": {"f:y": {}}}})
        );
    }
}
