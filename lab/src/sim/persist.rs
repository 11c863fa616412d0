//! Saving the simulated world fast enough to do it at every step end.
//!
//! The saved text is exactly what `serde_json` makes of the [`World`] (a test holds the two equal), but
//! written from pieces kept between saves, after the world's lock is released: each cluster's objects as one piece, valid as long as the
//! cluster's API server handed out no new resourceVersion, and within a cluster each object as one piece,
//! valid as long as its resourceVersion is the same. Every object write goes through `World::put`, which
//! gives the object the store's next resourceVersion, so a version that did not move means bytes that did
//! not change. A 500-spoke lab then costs the objects that changed since the last save, not 20 MB of JSON
//! under the world's lock.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use super::world::{SimCluster, World};

type Bytes = Arc<Vec<u8>>;

/// One object's JSON text at one resourceVersion.
struct ObjectPiece {
    rv: String,
    json: Bytes,
}

/// A cluster's objects as saved last time.
#[derive(Default)]
struct ClusterPiece {
    /// Which incarnation of the cluster (a deleted and re-created cluster gets a new host port).
    host_port: u16,
    /// The store's resourceVersion when `objects` was made.
    rv: u64,
    /// The `objects` map's JSON text.
    objects: Option<Bytes>,
    /// gk → namespace → name → piece.
    pieces: HashMap<String, HashMap<String, HashMap<String, ObjectPiece>>>,
}

/// Stores with at least this many objects are kept in per-object pieces (a hub's); smaller ones whole.
const PIECEWISE: usize = 1000;

/// Pieces kept between saves of one world.
pub(crate) struct SaveCache {
    clusters: HashMap<String, ClusterPiece>,
    /// Stores with at least this many objects are kept in pieces ([`PIECEWISE`]; tests lower it).
    piecewise: usize,
}

impl Default for SaveCache {
    fn default() -> Self {
        SaveCache {
            clusters: HashMap::new(),
            piecewise: PIECEWISE,
        }
    }
}

fn json(out: &mut Vec<u8>, v: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(out, v).map_err(std::io::Error::other)
}

/// A part of the saved text: made for this save, or shared with the cache.
pub(crate) enum Piece {
    Owned(Vec<u8>),
    Shared(Bytes),
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        match self {
            Piece::Owned(b) => b,
            Piece::Shared(b) => b,
        }
    }
}

impl SaveCache {
    /// The world's JSON text in one buffer (for tests; saving writes the pieces).
    #[cfg(test)]
    pub(crate) fn serialize(&mut self, w: &World) -> std::io::Result<Vec<u8>> {
        Ok(self
            .pieces(w)?
            .iter()
            .flat_map(|p| p.as_ref())
            .copied()
            .collect())
    }

    /// The world's JSON text as pieces, reusing what did not change since the last call. Cheap enough to
    /// run under the world's lock: what did not change is shared, not copied, and the caller writes the
    /// pieces out after releasing the lock.
    pub(crate) fn pieces(&mut self, w: &World) -> std::io::Result<Vec<Piece>> {
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
        } = w;
        let mut pieces = Vec::with_capacity(2 * clusters.len() + 2);
        let mut out = Vec::new();
        out.extend_from_slice(b"{\"networks\":");
        json(&mut out, networks)?;
        out.extend_from_slice(b",\"containers\":");
        json(&mut out, containers)?;
        out.extend_from_slice(b",\"tokens\":");
        json(&mut out, tokens)?;
        out.extend_from_slice(b",\"agents\":");
        json(&mut out, agents)?;
        out.extend_from_slice(b",\"tunnels\":");
        json(&mut out, tunnels)?;
        out.extend_from_slice(b",\"releases\":");
        json(&mut out, releases)?;
        out.extend_from_slice(b",\"pulls\":");
        json(&mut out, pulls)?;
        out.extend_from_slice(b",\"seq\":");
        json(&mut out, seq)?;
        out.extend_from_slice(b",\"rng\":");
        json(&mut out, rng)?;
        out.extend_from_slice(b",\"clusters\":{");
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
                out.push(b',');
            }
            json(&mut out, name)?;
            out.extend_from_slice(b":{\"name\":");
            json(&mut out, c_name)?;
            out.extend_from_slice(b",\"image\":");
            json(&mut out, image)?;
            out.extend_from_slice(b",\"host_port\":");
            json(&mut out, host_port)?;
            out.extend_from_slice(b",\"foreign\":");
            json(&mut out, foreign)?;
            out.extend_from_slice(b",\"agent\":");
            json(&mut out, agent)?;
            out.extend_from_slice(b",\"ca\":");
            json(&mut out, ca)?;
            out.extend_from_slice(b",\"endpoint\":");
            json(&mut out, endpoint)?;
            out.extend_from_slice(b",\"api\":{\"rv\":");
            json(&mut out, &api.rv)?;
            out.extend_from_slice(b",\"objects\":");
            let piece = self.clusters.entry(name.clone()).or_default();
            if piece.host_port != *host_port {
                *piece = ClusterPiece {
                    host_port: *host_port,
                    ..ClusterPiece::default()
                };
            }
            let objects = match &piece.objects {
                Some(b) if piece.rv == api.rv => b.clone(),
                _ => {
                    // The old text is let go before the new one is made, so that a hub's objects are not
                    // held twice (plus their pieces) at the peak of a save.
                    let old_len = piece.objects.take().map_or(0, |o| o.len());
                    let b = Arc::new(if api.len() >= self.piecewise {
                        piece.objects_json(api.objects(), old_len)?
                    } else {
                        // Small stores (a spoke's) are cheaper to write whole than to keep in pieces.
                        piece.pieces.clear();
                        let mut b = Vec::with_capacity(old_len);
                        json(&mut b, api.objects())?;
                        b
                    });
                    piece.rv = api.rv;
                    piece.objects = Some(b.clone());
                    b
                }
            };
            pieces.push(Piece::Owned(std::mem::take(&mut out)));
            pieces.push(Piece::Shared(objects));
            out.extend_from_slice(b"}}");
        }
        out.extend_from_slice(b"}}");
        pieces.push(Piece::Owned(out));
        Ok(pieces)
    }
}

impl ClusterPiece {
    /// The JSON text of a cluster's objects, from the pieces of objects whose version did not move; the
    /// pieces of objects that are gone are dropped.
    fn objects_json(
        &mut self,
        objects: &BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>>,
        old_len: usize,
    ) -> std::io::Result<Vec<u8>> {
        let mut old = std::mem::take(&mut self.pieces);
        let mut out = Vec::with_capacity(old_len + old_len / 8);
        out.push(b'{');
        for (gi, (gk, by_ns)) in objects.iter().enumerate() {
            if gi > 0 {
                out.push(b',');
            }
            json(&mut out, gk)?;
            out.extend_from_slice(b":{");
            let mut old_gk = old.remove(gk).unwrap_or_default();
            let new_gk = self.pieces.entry(gk.clone()).or_default();
            for (ni, (ns, by_name)) in by_ns.iter().enumerate() {
                if ni > 0 {
                    out.push(b',');
                }
                json(&mut out, ns)?;
                out.extend_from_slice(b":{");
                let mut old_ns = old_gk.remove(ns).unwrap_or_default();
                let new_ns = new_gk.entry(ns.clone()).or_default();
                for (oi, (name, obj)) in by_name.iter().enumerate() {
                    if oi > 0 {
                        out.push(b',');
                    }
                    json(&mut out, name)?;
                    out.push(b':');
                    let rv = obj["metadata"]["resourceVersion"].as_str();
                    let piece = match (old_ns.remove(name), rv) {
                        (Some(p), Some(rv)) if p.rv == rv => p,
                        _ => {
                            let mut b = Vec::new();
                            json(&mut b, obj)?;
                            ObjectPiece {
                                rv: rv.unwrap_or_default().to_owned(),
                                json: Arc::new(b),
                            }
                        }
                    };
                    out.extend_from_slice(&piece.json);
                    if rv.is_some() {
                        new_ns.insert(name.clone(), piece);
                    }
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.push(b'}');
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::SimLab;

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

    fn same_as_serde(caches: &mut [SaveCache; 2], w: &World) {
        let slow = serde_json::to_value(w).unwrap();
        for cache in caches {
            let fast: Value = serde_json::from_slice(&cache.serialize(w).unwrap()).unwrap();
            assert!(fast == slow, "the cached save differs from serde_json's");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_cached_text_is_the_worlds_json_after_every_kind_of_change() {
        let lab = crate::topology::load_arg(Some("default")).unwrap().lab;
        let patches = crate::patch::PatchSet::embedded().unwrap();
        let plan = crate::workflow::plan::plan(
            &lab,
            &crate::workflow::Sources::embedded(),
            &crate::actions::Registry,
            &patches,
            "up",
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let sim = SimLab::new();
        let mut cache = caches();
        same_as_serde(&mut cache, &sim.shared.lock().world);
        let (events, mut rx) = crate::step::events::Events::channel();
        tokio::spawn(async move { while rx.recv().await.is_some() {} });
        let ctx = std::sync::Arc::new(crate::step::RunCtx::new(
            lab,
            sim.backends(),
            crate::state::StateDir {
                path: dir.path().to_owned(),
            },
            patches,
            events,
            tokio_util::sync::CancellationToken::new(),
        ));
        let r = crate::engine::run(&plan, ctx, &crate::engine::RunOptions::default())
            .await
            .unwrap();
        assert!(r.ok);
        same_as_serde(&mut cache, &sim.shared.lock().world);
        // An object changed, one deleted, a cluster deleted and re-created under the same name.
        sim.with_world(|w| {
            let r = crate::backend::ObjectRef {
                api_version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: "cluster-inventory".into(),
            };
            let mut ns = w.get_object("hub", &r).unwrap();
            ns["metadata"]["labels"] = serde_json::json!({"changed": "yes"});
            w.put_object("hub", ns).unwrap();
        });
        same_as_serde(&mut cache, &sim.shared.lock().world);
        sim.with_world(|w| {
            w.clusters.remove("cluster2");
            w.add_foreign_cluster("cluster2");
        });
        same_as_serde(&mut cache, &sim.shared.lock().world);
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
