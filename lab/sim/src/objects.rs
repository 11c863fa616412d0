//! The simulated API server's objects of one cluster, keyed by (gk, namespace, name) in one flat map.
//!
//! A map of maps of maps (gk → namespace → name) gives every namespace of every kind its own B-tree
//! node, about a kilobyte even for one object; a spoke has thirty objects in a dozen such maps. One map
//! keyed by `gk\0namespace\0name` sorts the same way (no part holds a NUL: names are validated, gks
//! come from CRDs) and reads a kind, or a kind in one namespace, as one range of keys.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::de::{Deserialize, Deserializer};
use serde::ser::{Serialize, Serializer};

/// Objects by (gk, namespace, name); namespace `""` for cluster-scoped ones.
#[derive(Debug, Clone)]
pub(crate) struct ObjectMap<V>(BTreeMap<Box<str>, V>);

/// One object of an [`ObjectMap`] and the parts of its key.
pub(crate) struct Entry<'a, V> {
    /// `gk\0namespace\0name`.
    pub key: &'a str,
    pub gk: &'a str,
    pub ns: &'a str,
    pub name: &'a str,
    pub value: &'a V,
}

impl<V> Default for ObjectMap<V> {
    fn default() -> Self {
        ObjectMap(BTreeMap::new())
    }
}

/// The key of (gk, ns, name).
pub(crate) fn key(gk: &str, ns: &str, name: &str) -> String {
    debug_assert!(
        !gk.contains('\0') && !ns.contains('\0') && !name.contains('\0'),
        "object keys hold no NUL"
    );
    let mut k = String::with_capacity(gk.len() + ns.len() + name.len() + 2);
    k.push_str(gk);
    k.push('\0');
    k.push_str(ns);
    k.push('\0');
    k.push_str(name);
    k
}

/// (gk, ns, name) of a key made by [`key`].
fn parts(key: &str) -> (&str, &str, &str) {
    let mut p = key.splitn(3, '\0');
    let gk = p.next().unwrap_or_default();
    let ns = p.next().unwrap_or_default();
    (gk, ns, p.next().unwrap_or_default())
}

/// The keys that start with `prefix` (which ends in NUL): from `prefix` up to, not including, the same
/// with its last NUL made `\u{1}`.
fn prefix_range(prefix: &str) -> (Bound<&str>, Bound<String>) {
    let mut end = prefix[..prefix.len() - 1].to_owned();
    end.push('\u{1}');
    (Bound::Included(prefix), Bound::Excluded(end))
}

impl<V> ObjectMap<V> {
    #[allow(clippy::borrowed_box)] // What the map's iterators yield.
    fn entry<'a>((key, value): (&'a Box<str>, &'a V)) -> Entry<'a, V> {
        let key: &'a str = key;
        let (gk, ns, name) = parts(key);
        Entry {
            key,
            gk,
            ns,
            name,
            value,
        }
    }

    pub fn get(&self, gk: &str, ns: &str, name: &str) -> Option<&V> {
        self.0.get(key(gk, ns, name).as_str())
    }

    /// The object with key `key` (made by [`key`]).
    pub fn get_mut_by_key(&mut self, key: &str) -> Option<&mut V> {
        self.0.get_mut(key)
    }

    pub fn insert(&mut self, gk: &str, ns: &str, name: &str, value: V) {
        let k = key(gk, ns, name);
        // The key is allocated only when new: most writes replace an object that exists.
        match self.0.get_mut(k.as_str()) {
            Some(slot) => *slot = value,
            None => {
                self.0.insert(k.into_boxed_str(), value);
            }
        }
    }

    pub fn remove(&mut self, gk: &str, ns: &str, name: &str) -> Option<V> {
        self.0.remove(key(gk, ns, name).as_str())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every object, by gk, then namespace, then name.
    pub fn iter(&self) -> impl Iterator<Item = Entry<'_, V>> {
        self.0.iter().map(Self::entry)
    }

    /// The objects of `gk`: in `ns`, or in every namespace.
    pub fn of<'a>(&'a self, gk: &str, ns: Option<&str>) -> impl Iterator<Item = Entry<'a, V>> + 'a {
        let prefix = match ns {
            Some(ns) => format!("{gk}\0{ns}\0"),
            None => format!("{gk}\0"),
        };
        let (lo, hi) = prefix_range(&prefix);
        // The range borrows its bounds only while it is made.
        self.0
            .range::<str, _>((lo, hi.as_ref().map(String::as_str)))
            .map(Self::entry)
    }

    /// The first key at or after `from`.
    fn first_from(&self, from: &str) -> Option<&str> {
        self.0
            .range::<str, _>((Bound::Included(from), Bound::Unbounded))
            .next()
            .map(|(k, _)| &**k)
    }

    /// The namespaces that hold objects of `gk`, each once: one lookup per namespace, not per object.
    pub fn namespaces_of(&self, gk: &str) -> Vec<&str> {
        let mut out = Vec::new();
        let mut from = format!("{gk}\0");
        while let Some(k) = self.first_from(&from) {
            let (g, ns, _) = parts(k);
            if g != gk {
                break;
            }
            out.push(ns);
            from = format!("{gk}\0{ns}\u{1}");
        }
        out
    }

    /// The gks that have objects, each once: one lookup per kind.
    pub fn kinds(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut from = String::new();
        while let Some(k) = self.first_from(&from) {
            let (gk, _, _) = parts(k);
            out.push(gk);
            from = format!("{gk}\u{1}");
        }
        out
    }
}

impl<V: Serialize> Serialize for ObjectMap<V> {
    /// As gk → namespace → name → object, the form the simulated world is saved in.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut nested: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, &V>>> = BTreeMap::new();
        for e in self.iter() {
            nested
                .entry(e.gk)
                .or_default()
                .entry(e.ns)
                .or_default()
                .insert(e.name, e.value);
        }
        nested.serialize(s)
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for ObjectMap<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let nested = BTreeMap::<String, BTreeMap<String, BTreeMap<String, V>>>::deserialize(d)?;
        let mut out = ObjectMap::default();
        for (gk, by_ns) in nested {
            for (ns, by_name) in by_ns {
                for (name, v) in by_name {
                    if [&gk, &ns, &name].iter().any(|p| p.contains('\0')) {
                        return Err(serde::de::Error::custom(format!(
                            "an object key holds a NUL: {gk:?} {ns:?} {name:?}"
                        )));
                    }
                    out.0.insert(key(&gk, &ns, &name).into_boxed_str(), v);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_order_are_those_of_the_nested_maps() {
        let mut m = ObjectMap::default();
        let objects = [
            ("Secret", "a", "x"),
            ("Secret", "a", "y"),
            ("Secret", "ab", "x"),
            ("Secret", "b", "x"),
            ("SecretX", "a", "x"),
            ("Namespace", "", "a"),
            ("Namespace", "", "a-b"),
            ("Sec", "a", "x"),
        ];
        let mut nested: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, usize>>> = BTreeMap::new();
        for (i, (gk, ns, name)) in objects.iter().enumerate() {
            m.insert(gk, ns, name, i);
            nested
                .entry(gk)
                .or_default()
                .entry(ns)
                .or_default()
                .insert(name, i);
        }
        let flat: Vec<(&str, &str, &str, usize)> =
            m.iter().map(|e| (e.gk, e.ns, e.name, *e.value)).collect();
        let want: Vec<(&str, &str, &str, usize)> = nested
            .iter()
            .flat_map(|(g, by_ns)| {
                by_ns.iter().flat_map(move |(n, by_name)| {
                    by_name.iter().map(move |(name, i)| (*g, *n, *name, *i))
                })
            })
            .collect();
        assert_eq!(flat, want);
        let names = |gk, ns| -> Vec<String> {
            m.of(gk, ns)
                .map(|e| format!("{}/{}", e.ns, e.name))
                .collect()
        };
        assert_eq!(names("Secret", None), ["a/x", "a/y", "ab/x", "b/x"]);
        assert_eq!(names("Secret", Some("a")), ["a/x", "a/y"]);
        assert_eq!(names("Sec", None), ["a/x"]);
        assert!(names("Secre", None).is_empty());
        assert_eq!(m.namespaces_of("Secret"), ["a", "ab", "b"]);
        assert_eq!(m.namespaces_of("Namespace"), [""]);
        assert_eq!(m.kinds(), ["Namespace", "Sec", "Secret", "SecretX"]);
        assert_eq!(m.get("Secret", "ab", "x"), Some(&2));
        assert_eq!(m.remove("Secret", "ab", "x"), Some(2));
        assert_eq!(m.namespaces_of("Secret"), ["a", "b"]);
        // Saved and loaded as gk → namespace → name.
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["Secret"]["a"]["y"], 1);
        let back: ObjectMap<usize> = serde_json::from_value(json).unwrap();
        assert_eq!(back.len(), m.len());
        assert!(
            serde_json::from_value::<ObjectMap<usize>>(
                serde_json::json!({"A": {"b\u{0}": {"c": 1}}})
            )
            .is_err()
        );
    }
}
