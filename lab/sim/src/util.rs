//! Small helpers of the simulation: base64, JSON paths, conditions, timestamps, the PRNG.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use serde_json::{Map, Value, json};

/// Standard base64 with padding (what Kubernetes uses for `data` and `*-data` fields).
pub fn b64_encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Decodes standard base64 (padding optional, whitespace ignored); `None` when malformed.
pub fn b64_decode(text: &str) -> Option<Vec<u8>> {
    let text: String = text.split_ascii_whitespace().collect();
    STANDARD_NO_PAD.decode(text.trim_end_matches('=')).ok()
}

/// Decodes standard base64 holding UTF-8 text; `None` when either is malformed.
pub fn b64_text(text: &str) -> Option<String> {
    String::from_utf8(b64_decode(text)?).ok()
}

/// RFC 3339 wall-clock time, seconds precision, as Kubernetes writes timestamps.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// splitmix64: a tiny deterministic generator for names and uids (the world stores its state, so a
/// saved and reloaded lab keeps producing fresh names).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A stable 64-bit hash of a string (FNV-1a), for names derived from content.
pub fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The suffix alphabet of Kubernetes `generateName` (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// A 5-character `generateName` suffix from a number.
pub fn name_suffix(n: u64) -> String {
    let base = NAME_ALPHABET.len() as u64;
    let digit = |i| NAME_ALPHABET[(n / base.pow(i) % base) as usize] as char;
    (0..5).map(digit).collect()
}

/// `metadata.labels[key]`.
pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["labels"][key].as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

/// `metadata.<key>` as a string ("" when absent).
fn meta_str<'a>(obj: &'a Value, key: &str) -> &'a str {
    obj["metadata"][key].as_str().unwrap_or("")
}

/// A string at a JSON pointer.
pub fn str_at<'a>(obj: &'a Value, pointer: &str) -> Option<&'a str> {
    obj.pointer(pointer)?.as_str()
}

/// A mutable object at a JSON pointer made of map keys, created (as `{}`) where missing.
pub fn obj_at<'a>(mut v: &'a mut Value, path: &[&str]) -> &'a mut Map<String, Value> {
    for p in path {
        v = as_obj(v).entry(*p).or_insert_with(|| json!({}));
    }
    as_obj(v)
}

/// `v` as a map, made `{}` first when it is not one.
fn as_obj(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

/// Sets `metadata.labels[key] = value`.
pub fn set_label(obj: &mut Value, key: &str, value: &str) {
    obj_at(obj, &["metadata", "labels"]).insert(key.to_owned(), json!(value));
}

/// A `status.conditions[]` entry by type.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    let list = obj["status"]["conditions"].as_array()?;
    list.iter().find(|c| c["type"] == kind)
}

pub fn condition_is(obj: &Value, kind: &str, status: &str) -> bool {
    condition(obj, kind).is_some_and(|c| c["status"] == status)
}

/// Sets a metav1.Condition the way `meta.SetStatusCondition` does: `lastTransitionTime` moves only when the
/// status changes, so re-setting the same condition leaves the object unchanged.
pub fn set_condition(obj: &mut Value, kind: &str, status: &str, reason: &str, message: &str) {
    let list = obj_at(obj, &["status"])
        .entry("conditions")
        .or_insert(json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("just made an array");
    let i = list
        .iter()
        .position(|c| c["type"] == kind)
        .unwrap_or_else(|| {
            list.push(json!({"type": kind}));
            list.len() - 1
        });
    let c = &mut list[i];
    if c["status"] != status {
        c["status"] = json!(status);
        c["lastTransitionTime"] = json!(now_rfc3339());
    }
    c["reason"] = json!(reason);
    c["message"] = json!(message);
}

pub fn remove_condition(obj: &mut Value, kind: &str) {
    if let Some(list) = obj
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        list.retain(|c| c["type"] != kind);
    }
}

/// JSON merge patch (RFC 7386): maps merge key by key, everything else (lists included) is replaced;
/// `null` removes the key. Also how the simulation approximates server-side apply with a single field
/// manager.
pub use json_patch::merge;

/// Helm's truthiness for `{{ if .Values.x }}`.
pub fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Number(n)) => n.as_f64() != Some(0.0),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// What a Helm template prints for a scalar value (`{{ .Values.x | default false }}`).
pub fn helm_text(v: Option<&Value>, default: &str) -> String {
    match v {
        None | Some(Value::Null | Value::Bool(false)) => default.to_owned(),
        Some(Value::String(s)) if s.is_empty() => default.to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "abcd", "hello world\n"] {
            let e = b64_encode(s.as_bytes());
            assert_eq!(b64_decode(&e).unwrap(), s.as_bytes(), "{s:?} -> {e}");
        }
        assert_eq!(b64_encode(b"abc"), "YWJj");
        assert_eq!(b64_encode(b"ab"), "YWI=");
        assert!(b64_decode("*").is_none());
    }

    #[test]
    fn set_condition_is_stable() {
        let mut o = json!({});
        set_condition(&mut o, "Bound", "True", "ClusterSetBound", "");
        let before = o.clone();
        set_condition(&mut o, "Bound", "True", "ClusterSetBound", "");
        assert_eq!(o, before);
        assert!(condition_is(&o, "Bound", "True"));
    }
}
