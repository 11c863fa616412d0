//! The simulated lab's objects, kept LZ4-compressed against a dictionary of their kind.
//!
//! A large simulated lab is mostly object text (1 hub + 1000 spokes: about 42 MB of JSON), and objects
//! of a kind are alike: the same field names, managedFields, images and labels, and on the hub the
//! same CA bundle in every ClusterProfile. Compressed on its own, a 2 KB object shrinks little; against
//! the text of the first objects of its kind (up to [`DICT_LEN`]), it shrinks about five times (the
//! 42 MB become 9). Each object keeps the dictionary it was compressed with, so a dictionary that grows
//! later never changes how an earlier object reads. Which dictionary an object got changes only its
//! size, never its text.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

/// A dictionary grows from the texts of the first objects of its kind until it is this long.
const DICT_LEN: usize = 8 * 1024;

/// Dictionaries by kind (`apiVersion/kind`), shared by every simulated lab of the process: which
/// dictionary an object gets changes its size only.
static DICTS: LazyLock<RwLock<HashMap<String, Arc<[u8]>>>> = LazyLock::new(Default::default);

/// An object's JSON text, compressed.
#[derive(Clone)]
pub(crate) struct PackedText {
    bytes: Box<[u8]>,
    /// Length of the text.
    len: u32,
    /// The dictionary it was compressed against.
    dict: Arc<[u8]>,
}

impl PackedText {
    /// Compresses `text`, the JSON of an object of `kind` (its `apiVersion/kind`).
    pub fn new(kind: &str, text: &str) -> PackedText {
        let dict = dictionary(kind, text);
        let len = u32::try_from(text.len()).expect("an object's text is under 4 GiB");
        PackedText {
            bytes: lz4_flex::block::compress_with_dict(text.as_bytes(), &dict).into_boxed_slice(),
            len,
            dict,
        }
    }

    /// The text's bytes (valid UTF-8: see [`PackedText::text`]).
    pub fn bytes(&self) -> Vec<u8> {
        lz4_flex::block::decompress_with_dict(&self.bytes, self.len as usize, &self.dict)
            .expect("the simulated lab's own compressed text decompresses")
    }

    /// The text.
    pub fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("compressed from a str")
    }

    /// Length of the text.
    pub fn len(&self) -> usize {
        self.len as usize
    }
}

/// The dictionary for an object of `kind` whose text is `text`: the kind's, grown by `text` while it
/// is shorter than [`DICT_LEN`].
fn dictionary(kind: &str, text: &str) -> Arc<[u8]> {
    if let Some(d) = DICTS.read().expect("dictionaries lock").get(kind)
        && d.len() >= DICT_LEN
    {
        return d.clone();
    }
    let mut dicts = DICTS.write().expect("dictionaries lock");
    let d = dicts
        .entry(kind.to_owned())
        .or_insert_with(|| Arc::from(&b""[..]));
    if d.len() < DICT_LEN {
        // The newest text last: LZ4 reaches back at most 64 KiB, and the dictionary stays under that.
        let mut grown = d.to_vec();
        grown.extend_from_slice(&text.as_bytes()[..text.len().min(DICT_LEN)]);
        *d = Arc::from(grown);
    }
    d.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_read_back_as_written_whatever_the_dictionary_became() {
        let kind = "v1/PackedTextTest";
        let texts: Vec<String> = (0..40)
            .map(|i| {
                format!(
                    r#"{{"kind":"PackedTextTest","metadata":{{"name":"n-{i}"}},"data":"{}"}}"#,
                    "x".repeat(i * 37)
                )
            })
            .collect();
        let packed: Vec<PackedText> = texts.iter().map(|t| PackedText::new(kind, t)).collect();
        for (t, p) in texts.iter().zip(&packed) {
            assert_eq!(&p.text(), t);
            assert_eq!(p.len(), t.len());
        }
        // Alike texts compress well against their kind's dictionary.
        let last = packed.last().unwrap();
        assert!(
            last.bytes.len() * 4 < last.len(),
            "{} of {}",
            last.bytes.len(),
            last.len()
        );
        assert_eq!(PackedText::new(kind, "").text(), "");
    }
}
