//! Saving the simulated world fast enough to do it at every step end.
//!
//! The saved text is exactly what `serde_json` makes of the [`World`] (a test holds the two equal), but
//! made from pieces, after the world's lock is released: text made for this save, and spans of the file
//! the last save wrote, copied from it. A cluster's objects are one span, valid as long as the cluster's
//! API server handed out no new resourceVersion, and within a large store (a hub's) each object is one
//! span, valid as long as its resourceVersion is the same. Every object write goes through `World::put`,
//! which gives the object the store's next resourceVersion, so a version that did not move means bytes
//! that did not change. A 500-spoke lab then costs the objects that changed since the last save, not
//! 20 MB of JSON under the world's lock; and what did not change is kept on disk (the last save's file,
//! held open), not in memory: the cache holds offsets, not text.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::Path;

use super::apiserver::{Objects, Stored};
use super::objects::Entry;
use super::world::{SimCluster, World};

/// A span of the last saved file: `len` bytes from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    start: u64,
    len: u64,
}

/// Where one object's entry (`"name":{…}`, with the `,` before it when `comma`) was in the last file,
/// and at which resourceVersion.
struct ObjectPiece {
    rv: u64,
    span: Span,
    comma: bool,
}

/// A cluster's objects as saved last time.
#[derive(Default)]
struct ClusterPiece {
    /// Which incarnation of the cluster (a deleted and re-created cluster gets a new host port).
    host_port: u16,
    /// The store's resourceVersion when `objects` was written.
    rv: u64,
    /// Where the `objects` map's JSON text is in the last file.
    objects: Option<Span>,
    /// Where each object was, by its key (`objects::key`; stores of at least [`PIECEWISE`] objects only).
    pieces: HashMap<Box<str>, ObjectPiece>,
}

/// Stores with at least this many objects are kept in per-object pieces (a hub's); smaller ones whole.
const PIECEWISE: usize = 1000;

/// What the last save wrote: where each piece is in its file, and that file (still open).
pub(crate) struct SaveCache {
    clusters: HashMap<String, ClusterPiece>,
    /// The file the last save wrote (renamed into place, maybe replaced since: the open file still holds
    /// the text) and its length. The spans in `clusters` point into it.
    last: Option<(File, u64)>,
    /// Stores with at least this many objects are kept in pieces ([`PIECEWISE`]; tests lower it).
    piecewise: usize,
}

impl Default for SaveCache {
    fn default() -> Self {
        SaveCache {
            clusters: HashMap::new(),
            last: None,
            piecewise: PIECEWISE,
        }
    }
}

/// One save in progress: the new world's text goes straight into a private temporary file; what changed
/// is written in place while the world is locked, and what did not change is left as holes that are
/// copied from the last file after the lock is released. So a save holds no copy of the world's text.
pub(crate) struct Save {
    /// Created 0600 by tempfile, and removed if the save does not finish.
    tmp: tempfile::NamedTempFile,
    /// Where in the new file (offset), which span of the last file, to copy when the lock is released.
    holes: Vec<(u64, Span)>,
    /// Text not yet written; it goes at `pos() - buf.len()`.
    buf: Vec<u8>,
    /// Length of the text laid out so far, excluding `buf`.
    laid: u64,
    /// The temporary file's position.
    cursor: u64,
}

/// Text is written to the file in chunks of about this size.
const CHUNK: usize = 1 << 16;

impl Save {
    /// The offset in the new file of the next byte.
    fn pos(&self) -> u64 {
        self.laid + self.buf.len() as u64
    }

    fn json(&mut self, v: &(impl serde::Serialize + ?Sized)) -> std::io::Result<()> {
        serde_json::to_writer(&mut self.buf, v).map_err(std::io::Error::other)?;
        self.spill(CHUNK)
    }

    fn text(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(b);
        self.spill(CHUNK)
    }

    /// Writes the buffered text once it holds at least `min` bytes.
    fn spill(&mut self, min: usize) -> std::io::Result<()> {
        if self.buf.is_empty() || self.buf.len() < min {
            return Ok(());
        }
        let f = self.tmp.as_file_mut();
        if self.cursor != self.laid {
            f.seek(std::io::SeekFrom::Start(self.laid))?;
        }
        f.write_all(&self.buf)?;
        self.laid += self.buf.len() as u64;
        self.cursor = self.laid;
        self.buf.clear();
        Ok(())
    }

    /// Leaves room for `span` of the last file, copied there later; returns where it lands.
    fn old(&mut self, span: Span) -> std::io::Result<Span> {
        self.spill(1)?;
        let at = self.laid;
        self.laid += span.len;
        match self.holes.last_mut() {
            Some((to, last)) if *to + last.len == at && last.start + last.len == span.start => {
                last.len += span.len;
            }
            _ => self.holes.push((at, span)),
        }
        Ok(Span {
            start: at,
            len: span.len,
        })
    }
}

impl SaveCache {
    /// Forgets the last save: the next one writes everything anew.
    fn forget(&mut self) {
        self.clusters.clear();
        self.last = None;
    }

    /// Saves the world to `path` atomically: a private (0600) temporary file in the same folder, fsync,
    /// rename, fsync of the folder. `world` is called once, to lock the world while what changed since the
    /// last save is written; what did not change is copied from the last saved file after the lock is
    /// released. On an error the cache is forgotten (the next save writes everything).
    pub(crate) fn save<G: std::ops::Deref<Target = World>>(
        &mut self,
        path: &Path,
        world: impl FnOnce() -> G,
    ) -> std::io::Result<()> {
        // The last file must still be what this cache wrote (the length is the check that is cheap).
        let intact = match &self.last {
            Some((f, len)) => f.metadata().is_ok_and(|m| m.len() == *len),
            None => false,
        };
        if !intact {
            self.forget();
        }
        let r = self.save_to(path, world);
        if r.is_err() {
            self.forget();
        }
        r
    }

    fn save_to<G: std::ops::Deref<Target = World>>(
        &mut self,
        path: &Path,
        world: impl FnOnce() -> G,
    ) -> std::io::Result<()> {
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let mut out = Save {
            tmp: tempfile::Builder::new()
                .prefix(".sim-world-")
                .suffix(".tmp")
                .tempfile_in(dir)?,
            holes: Vec::new(),
            buf: Vec::with_capacity(CHUNK + CHUNK / 4),
            laid: 0,
            cursor: 0,
        };
        {
            let w = world();
            self.lay_out(&w, &mut out)?;
        }
        out.spill(1)?;
        let len = out.laid;
        let Save { mut tmp, holes, .. } = out;
        if !holes.is_empty() {
            let (old, _) = self.last.as_ref().ok_or_else(|| {
                std::io::Error::other("no earlier save to copy the unchanged objects from")
            })?;
            let mut old: &File = old;
            let mut w = std::io::BufWriter::with_capacity(CHUNK, tmp.as_file_mut());
            for (at, span) in holes {
                w.seek(std::io::SeekFrom::Start(at))?;
                old.seek(std::io::SeekFrom::Start(span.start))?;
                let copied = std::io::copy(&mut old.take(span.len), &mut w)?;
                if copied != span.len {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the last saved simulated world is shorter than when it was written",
                    ));
                }
            }
            w.flush()?;
        }
        tmp.as_file().sync_all()?;
        let file = tmp.persist(path).map_err(|e| e.error)?;
        // The rename is durable only once the folder is: a crash must find the old world or the new.
        #[cfg(unix)]
        File::open(dir)?.sync_all()?;
        self.last = Some((file, len));
        Ok(())
    }

    fn lay_out(&mut self, w: &World, out: &mut Save) -> std::io::Result<()> {
        // Every field is named here, so that a field added to the world without being saved here is a
        // compile error, not a simulated lab that silently forgets it (the skipped ones are rebuilt on load).
        let World {
            networks,
            containers,
            clusters,
            tokens,
            agents,
            tunnels,
            releases,
            pulls,
            seq,
            rng,
            changes: _,
            touched: _,
            set_index: _,
            kubeconfigs: _,
            read_in: _,
            parsed_bytes: _,
        } = w;
        out.text(b"{\"networks\":")?;
        out.json(networks)?;
        out.text(b",\"containers\":")?;
        out.json(containers)?;
        out.text(b",\"tokens\":")?;
        out.json(tokens)?;
        out.text(b",\"agents\":")?;
        out.json(agents)?;
        out.text(b",\"tunnels\":")?;
        out.json(tunnels)?;
        out.text(b",\"releases\":")?;
        out.json(releases)?;
        out.text(b",\"pulls\":")?;
        out.json(pulls)?;
        out.text(b",\"seq\":")?;
        out.json(seq)?;
        out.text(b",\"rng\":")?;
        out.json(rng)?;
        out.text(b",\"clusters\":{")?;
        self.clusters.retain(|name, _| clusters.contains_key(name));
        for (i, (name, c)) in clusters.iter().enumerate() {
            let SimCluster {
                name: c_name,
                image,
                host_port,
                foreign,
                api,
                agent,
                ca,
                endpoint,
            } = c;
            if i > 0 {
                out.text(b",")?;
            }
            out.json(name)?;
            out.text(b":{\"name\":")?;
            out.json(c_name)?;
            out.text(b",\"image\":")?;
            out.json(image)?;
            out.text(b",\"host_port\":")?;
            out.json(host_port)?;
            out.text(b",\"foreign\":")?;
            out.json(foreign)?;
            out.text(b",\"agent\":")?;
            out.json(agent)?;
            out.text(b",\"ca\":")?;
            out.json(ca)?;
            out.text(b",\"endpoint\":")?;
            out.json(endpoint)?;
            out.text(b",\"api\":{\"rv\":")?;
            out.json(&api.rv)?;
            out.text(b",\"objects\":")?;
            let piece = self.clusters.entry(name.clone()).or_default();
            if piece.host_port != *host_port {
                *piece = ClusterPiece {
                    host_port: *host_port,
                    ..ClusterPiece::default()
                };
            }
            let start = out.pos();
            match piece.objects {
                Some(span) if piece.rv == api.rv => {
                    piece.objects = Some(out.old(span)?);
                }
                _ => {
                    if api.len() >= self.piecewise {
                        piece.objects_json(api.objects(), out)?;
                    } else {
                        // Small stores (a spoke's) are cheaper to write whole than to keep in pieces.
                        piece.pieces.clear();
                        write_objects(api.objects(), out)?;
                    }
                    piece.rv = api.rv;
                    piece.objects = Some(Span {
                        start,
                        len: out.pos() - start,
                    });
                }
            }
            out.text(b"}}")?;
        }
        out.text(b"}}")?;
        Ok(())
    }
}

/// A store's objects as JSON (the objects' text as stored).
fn write_objects(objects: &Objects, out: &mut Save) -> std::io::Result<()> {
    nested(objects, out, write_entry)
}

/// One object's `"name":{…}` from its stored text, with a `,` before it when `comma`.
fn write_entry(e: &Entry<'_, Stored>, comma: bool, out: &mut Save) -> std::io::Result<()> {
    out.text(if comma { b"," } else { b"" })?;
    out.json(e.name)?;
    out.text(b":")?;
    out.text(e.value.text().as_bytes())
}

/// Writes a store's objects as gk → namespace → name → object, as `serde_json` writes the store's
/// objects, with `entry` writing each object's `"name":{…}` (with a `,` before it when `comma`).
fn nested(
    objects: &Objects,
    out: &mut Save,
    mut entry: impl FnMut(&Entry<'_, Stored>, bool, &mut Save) -> std::io::Result<()>,
) -> std::io::Result<()> {
    out.text(b"{")?;
    let mut at: Option<(&str, &str)> = None;
    for e in objects.iter() {
        let same_gk = at.is_some_and(|(gk, _)| gk == e.gk);
        let same_ns = same_gk && at.is_some_and(|(_, ns)| ns == e.ns);
        if !same_ns {
            // Close the namespace (and the kind) before, open the kind (if new) and the namespace.
            if at.is_some() {
                out.text(if same_gk { b"}," } else { b"}}," })?;
            }
            if !same_gk {
                out.json(e.gk)?;
                out.text(b":{")?;
            }
            out.json(e.ns)?;
            out.text(b":{")?;
        }
        at = Some((e.gk, e.ns));
        entry(&e, same_ns, out)?;
    }
    if at.is_some() {
        out.text(b"}}")?;
    }
    out.text(b"}")
}

impl ClusterPiece {
    /// Lays out a cluster's objects from the spans of objects whose version did not move; the pieces of
    /// objects that are gone are dropped.
    fn objects_json(&mut self, objects: &Objects, out: &mut Save) -> std::io::Result<()> {
        let mut old = std::mem::take(&mut self.pieces);
        let new = &mut self.pieces;
        nested(objects, out, |e, comma, out| {
            let start = out.pos();
            let rv = e.value.rv();
            match (old.remove(e.key), rv) {
                (Some(p), Some(rv)) if p.rv == rv => {
                    // The entry as it was, with or without the `,` before it.
                    match (p.comma, comma) {
                        (true, false) => {
                            out.old(Span {
                                start: p.span.start + 1,
                                len: p.span.len - 1,
                            })?;
                        }
                        (false, true) => {
                            out.text(b",")?;
                            out.old(p.span)?;
                        }
                        _ => {
                            out.old(p.span)?;
                        }
                    }
                }
                _ => write_entry(e, comma, out)?,
            }
            if let Some(rv) = rv {
                let span = Span {
                    start,
                    len: out.pos() - start,
                };
                new.insert(e.key.into(), ObjectPiece { rv, span, comma });
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimLab;
    use serde_json::Value;

    /// A cache that keeps every store whole, and one that keeps every store in pieces.
    fn caches() -> [SaveCache; 2] {
        [
            SaveCache::default(),
            SaveCache {
                piecewise: 0,
                ..SaveCache::default()
            },
        ]
    }

    /// The text a save with `cache` writes (to a file of its own in `dir`).
    fn saved(cache: &mut SaveCache, w: &World, dir: &Path, which: usize) -> Vec<u8> {
        let path = dir.join(format!("saved-{which}.json"));
        cache.save(&path, || w).unwrap();
        std::fs::read(&path).unwrap()
    }

    fn same_as_serde(caches: &mut [SaveCache; 2], w: &World, dir: &Path) {
        let slow = serde_json::to_value(w).unwrap();
        for (i, cache) in caches.iter_mut().enumerate() {
            let fast: Value = serde_json::from_slice(&saved(cache, w, dir, i)).unwrap();
            assert!(fast == slow, "the cached save differs from serde_json's");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_cached_text_is_the_worlds_json_after_every_kind_of_change() {
        let lab = ocm_lab_core::topology::load_arg(Some("default"))
            .unwrap()
            .lab;
        let patches = ocm_lab_core::patch::PatchSet::embedded().unwrap();
        let plan = ocm_lab_core::workflow::plan::plan(
            &lab,
            &ocm_lab_core::workflow::Sources::embedded(),
            &ocm_lab_core::actions::Registry,
            &patches,
            "up",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sim = SimLab::new();
        let mut cache = caches();
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        let (events, mut rx) = ocm_lab_core::step::events::Events::channel();
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let ctx = std::sync::Arc::new(ocm_lab_core::step::RunCtx::new(
            lab,
            sim.backends(),
            ocm_lab_core::state::StateDir {
                path: dir.path().to_owned(),
            },
            patches,
            events,
            tokio_util::sync::CancellationToken::new(),
        ));
        let r = ocm_lab_core::engine::run(&plan, ctx, &ocm_lab_core::engine::RunOptions::default())
            .await
            .unwrap();
        assert!(r.ok);
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        // An object changed, one deleted, a cluster deleted and re-created under the same name.
        sim.with_world(|w| {
            let r = ocm_lab_core::backend::ObjectRef {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: "cluster-inventory".into(),
            };
            let mut ns = w.get_object("hub", &r).unwrap();
            ns["metadata"]["labels"] = serde_json::json!({"changed": "yes"});
            w.put_object("hub", ns).unwrap();
        });
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        // An object before the first of its map, then gone again (the next one's `,` comes and goes).
        let first = ocm_lab_core::backend::ObjectRef {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: "a-first".into(),
        };
        sim.with_world(|w| {
            let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a-first"}});
            w.put_object("hub", ns).unwrap();
        });
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        sim.with_world(|w| assert!(w.delete_object("hub", &first)));
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        sim.with_world(|w| {
            w.clusters.remove("cluster2");
            w.add_foreign_cluster("cluster2");
        });
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        // A last file changed behind the cache's back (shortened in place) is not copied from.
        for i in 0..2 {
            std::fs::write(dir.path().join(format!("saved-{i}.json")), b"{}").unwrap();
        }
        sim.with_world(|w| {
            w.add_foreign_cluster("cluster3");
        });
        same_as_serde(&mut cache, &sim.shared.lock().world, dir.path());
        // And the saved file loads back into the same world.
        let path = dir.path().join("sim-world.json");
        sim.save(&path).unwrap();
        let again = SimLab::load(&path).unwrap();
        assert_eq!(
            serde_json::to_value(&again.shared.lock().world).unwrap(),
            serde_json::to_value(&sim.shared.lock().world).unwrap()
        );
    }
}
