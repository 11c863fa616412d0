//! The kinds a cluster serves: one aggregated discovery, then a per-group-version lookup whenever a kind
//! is missing, because CRDs (and the kinds OCM's operators install) appear after the first discovery ran.

use std::collections::HashMap;
use std::sync::RwLock;

use ::kube::Client;
use ::kube::api::GroupVersionKind;
use ::kube::core::discovery::{ApiResource, Scope};
use ::kube::discovery::{self, Discovery};

/// Where a kind lives: its resource (plural, group, version) and whether it is namespaced.
#[derive(Debug, Clone)]
pub(super) struct Resolved {
    pub ar: ApiResource,
    pub namespaced: bool,
}

/// A discovery cache keyed by (`apiVersion`, `kind`).
pub(super) struct Resources {
    known: RwLock<HashMap<(String, String), Resolved>>,
    /// Whether the full aggregated discovery has run (or was skipped because the cache was given).
    loaded: tokio::sync::Mutex<bool>,
}

impl Resources {
    pub fn empty() -> Self {
        Resources {
            known: RwLock::new(HashMap::new()),
            loaded: tokio::sync::Mutex::new(false),
        }
    }

    /// A cache that starts with `entries` and never runs the full discovery (tests, and callers that
    /// already know what they will touch). Misses still look the group version up.
    pub fn prefilled(entries: &[(GroupVersionKind, &str, bool)]) -> Self {
        let known = entries
            .iter()
            .map(|(gvk, plural, namespaced)| {
                (
                    (gvk.api_version(), gvk.kind.clone()),
                    Resolved {
                        ar: ApiResource::from_gvk_with_plural(gvk, plural),
                        namespaced: *namespaced,
                    },
                )
            })
            .collect();
        Resources {
            known: RwLock::new(known),
            loaded: tokio::sync::Mutex::new(true),
        }
    }

    fn lookup(&self, api_version: &str, kind: &str) -> Option<Resolved> {
        self.known
            .read()
            .expect("discovery cache lock poisoned")
            .get(&(api_version.to_owned(), kind.to_owned()))
            .cloned()
    }

    fn insert(&self, ar: ApiResource, scope: &Scope) {
        let key = (ar.api_version.clone(), ar.kind.clone());
        let namespaced = *scope == Scope::Namespaced;
        self.known
            .write()
            .expect("discovery cache lock poisoned")
            .insert(key, Resolved { ar, namespaced });
    }

    /// Forgets a kind, so the next use looks it up again (its CRD may have been deleted).
    pub fn forget(&self, api_version: &str, kind: &str) {
        self.known
            .write()
            .expect("discovery cache lock poisoned")
            .remove(&(api_version.to_owned(), kind.to_owned()));
    }

    /// Where `apiVersion`/`kind` is served, `None` when the server does not serve it now.
    pub async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Option<Resolved>, ::kube::Error> {
        let api_version = gvk.api_version();
        if let Some(r) = self.lookup(&api_version, &gvk.kind) {
            return Ok(Some(r));
        }
        self.load_all(client).await;
        if let Some(r) = self.lookup(&api_version, &gvk.kind) {
            return Ok(Some(r));
        }
        // A miss after the full discovery: look this group version up again (one request), since its
        // CRD may have been created since.
        match discovery::pinned_kind(client, gvk).await {
            Ok((ar, caps)) => {
                self.insert(ar, &caps.scope);
                Ok(self.lookup(&api_version, &gvk.kind))
            }
            // The group version is not served at all, or it is but without this kind.
            Err(::kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(::kube::Error::Discovery(::kube::error::DiscoveryError::MissingKind(_))) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Runs the aggregated discovery once (2 requests). A failure is not fatal: per-group-version
    /// lookups still work, and they report connection errors themselves.
    async fn load_all(&self, client: &Client) {
        let mut loaded = self.loaded.lock().await;
        if *loaded {
            return;
        }
        match Discovery::new(client.clone()).run_aggregated().await {
            Ok(d) => {
                let mut n = 0;
                for group in d.groups() {
                    for version in group.versions() {
                        for (ar, caps) in group.versioned_resources(version) {
                            self.insert(ar, &caps.scope);
                            n += 1;
                        }
                    }
                }
                tracing::debug!(resources = n, "aggregated discovery");
                *loaded = true;
            }
            Err(e) => {
                // Not marked as loaded when the server could not be reached: the next miss tries again.
                let reachable = matches!(e, ::kube::Error::Api(_));
                tracing::debug!(error = %e, "aggregated discovery failed; looking kinds up one by one");
                *loaded = reachable;
            }
        }
    }
}
