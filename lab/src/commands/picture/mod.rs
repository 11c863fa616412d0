//! The lab picture: one model of what the lab shows now, read through the backend traits, drawn by the
//! dashboard's page (`dashboard`) and in the terminal (`status --watch`).
//!
//! [`collect`] reads one [`Picture`]. [`Lookout`] keeps looking: every [`LOOK_EVERY`] it reads the lab
//! again and publishes the picture when it differs from the last one. On the simulated lab each look
//! re-opens the world another `ocm-lab` process saved (when the file changed), so `up`, `verify` or an
//! exercise started elsewhere shows within one interval; on a real lab it re-lists the same objects through
//! the same clients.

pub mod text;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use tokio::sync::watch;

use super::runner::{Purpose, open_backends, runtime};
use super::status::{self, ClusterStatus, ManagedClusterStatus};
use crate::backend::ClusterApi;
use crate::backend::api::Api;
use crate::backend::kinds::{
    ClusterProfile, ClusterProperty, HasConditions, Kind, ManagedCluster, ManagedClusterSet,
    ManagedClusterSetBinding, label, name_of,
};
use crate::cli::RunArgs;
use crate::error::Error;
use crate::patch::PatchSet;
use crate::state::StateDir;
use crate::step::RunCtx;
use crate::topology::{Check, Lab};

/// How often the lab is read again. Two seconds is the promise (a change made elsewhere shows on the
/// page within it): one interval, one read and one push fit well inside.
pub const LOOK_EVERY: Duration = Duration::from_millis(500);

/// The label of an `ExclusiveClusterSetLabel` set's members (open-cluster-management-io/api,
/// cluster/v1beta2/types_managedclusterset.go, `ClusterSetLabel`).
const CLUSTER_SET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";

/// How a thing on the picture is doing. Every state has a colour and a shape on the page, and a word
/// in the terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    Ok,
    /// Up, but something of it is not (an addon down, a binding not bound yet, an agent stopped).
    Degraded,
    Down,
    /// Not there to be judged (not registered, not read).
    Unknown,
}

impl Health {
    pub fn word(self) -> &'static str {
        match self {
            Health::Ok => "ok",
            Health::Degraded => "degraded",
            Health::Down => "down",
            Health::Unknown => "unknown",
        }
    }

    fn of(ok: bool) -> Health {
        if ok { Health::Ok } else { Health::Down }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Picture {
    pub lab: String,
    pub simulated: bool,
    pub hub: ClusterCard,
    pub spokes: Vec<SpokeCard>,
    pub sets: Vec<SetCard>,
    pub namespaces: Vec<NamespaceCard>,
    /// Kind clusters the lab created that the topology no longer declares.
    pub departed: Vec<String>,
    pub exercise: Option<Exercise>,
    pub verification: Option<Verification>,
    /// What could not be read (a damaged state file, the lab itself), each as one sentence.
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCard {
    pub name: String,
    pub provider: &'static str,
    pub health: Health,
    /// `Kubernetes v1.36.1`, or why it cannot be reached.
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpokeCard {
    pub cluster: ClusterCard,
    /// Its ManagedCluster on the hub, as one health and one phrase (`joined, available`).
    pub managed: Health,
    pub managed_detail: String,
    pub addons: Vec<AddonCard>,
    /// The ClusterProperty objects on the spoke, each marked with whether the hub's ManagedCluster lists it
    /// in `status.clusterClaims` (the first hop of its way to the ClusterProfiles).
    pub properties: Vec<SpokeProperty>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AddonCard {
    pub name: String,
    pub health: Health,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SpokeProperty {
    pub name: String,
    pub value: String,
    pub in_claims: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SetCard {
    pub name: String,
    /// `exclusive`, or the label selector (`env=dev`).
    pub selector: String,
    pub members: Vec<String>,
    pub bindings: Vec<BindingCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BindingCard {
    pub namespace: String,
    pub health: Health,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamespaceCard {
    pub name: String,
    /// Whether a Bound ManagedClusterSetBinding is in it.
    pub bound: bool,
    pub profiles: Vec<ProfileCard>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileCard {
    pub name: String,
    /// `ControlPlaneHealthy` and `Joined` both True.
    pub health: Health,
    pub properties: Vec<Property>,
    /// The names of `status.accessProviders` entries (`open-cluster-management`).
    pub access_providers: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Property {
    pub name: String,
    pub value: String,
}

/// The running exercise, as `exercise start` records it in the state folder.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Exercise {
    pub name: String,
    pub title: String,
}

/// The last verification, one row per spoke and namespace, one cell per check that ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub at: String,
    pub ok: bool,
    pub checks: Vec<Check>,
    pub rows: Vec<VerificationRow>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerificationRow {
    pub spoke: String,
    pub namespace: String,
    /// One per entry of [`Verification::checks`]: `None` when that check did not run for this row.
    pub cells: Vec<Option<VerificationCell>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VerificationCell {
    pub ok: bool,
    /// The hop that broke (`not-in-claims`), when the check failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hop: Option<String>,
}

/// Reads the picture once.
pub async fn collect(ctx: &RunCtx) -> Picture {
    let status = status::collect(ctx).await;
    let mut problems = Vec::new();
    problems.extend(status.last_verification_error.clone());
    let hub_card = status
        .clusters
        .first()
        .map(cluster_card)
        .expect("a lab has a hub");
    let hub = match hub_card.health {
        Health::Ok => ctx.api(&ctx.lab.hub.cluster.name).await.ok(),
        _ => None,
    };
    let hub_reads = match &hub {
        Some(hub) => HubReads::read(hub.as_ref()).await,
        None => HubReads::default(),
    };
    let mut spokes = Vec::new();
    for m in &status.managed_clusters {
        let cluster = status.clusters.iter().find(|c| c.name == m.name);
        spokes.push(spoke_card(ctx, cluster, m, &hub_reads).await);
    }
    let namespaces = match &hub {
        Some(hub) => namespaces(ctx, hub.as_ref(), &hub_reads).await,
        None => Vec::new(),
    };
    let exercise = read_exercise(&ctx.state).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    Picture {
        lab: status.lab.clone(),
        simulated: status.simulated,
        hub: hub_card,
        spokes,
        sets: sets(&hub_reads),
        namespaces,
        departed: status.departed.clone(),
        exercise,
        verification: status.last_verification.as_ref().map(verification),
        problems,
    }
}

fn cluster_card(c: &ClusterStatus) -> ClusterCard {
    let detail = match (c.reachable, &c.version, &c.error) {
        (true, v, _) => format!("Kubernetes {}", v.as_deref().unwrap_or("?")),
        (false, _, Some(e)) => format!("not reachable: {e}"),
        (false, _, None) => "not reachable".to_owned(),
    };
    ClusterCard {
        name: c.name.clone(),
        provider: c.provider,
        health: Health::of(c.reachable),
        detail,
    }
}

/// The hub's ManagedClusters, sets and bindings, listed once per look.
#[derive(Default)]
struct HubReads {
    managed_clusters: Vec<ManagedCluster>,
    sets: Vec<ManagedClusterSet>,
    bindings: Vec<ManagedClusterSetBinding>,
}

impl HubReads {
    async fn read(hub: &dyn ClusterApi) -> Self {
        HubReads {
            managed_clusters: list_all(hub).await,
            sets: list_all(hub).await,
            bindings: list_all(hub).await,
        }
    }

    fn managed_cluster(&self, name: &str) -> Option<&ManagedCluster> {
        self.managed_clusters.iter().find(|m| name_of(*m) == name)
    }
}

/// Every object of kind `K` (of every namespace), or none when the kind is not served or cannot be read:
/// the picture shows what it can see.
async fn list_all<K: Kind + serde::de::DeserializeOwned + 'static>(api: &dyn ClusterApi) -> Vec<K> {
    let all = Api::<K>::all(api);
    if !all.served().await.unwrap_or(false) {
        return Vec::new();
    }
    all.list(None).await.unwrap_or_default()
}

fn bound(b: &ManagedClusterSetBinding) -> bool {
    b.condition_true("Bound")
}

async fn spoke_card(
    ctx: &RunCtx,
    cluster: Option<&ClusterStatus>,
    m: &ManagedClusterStatus,
    hub: &HubReads,
) -> SpokeCard {
    let cluster = match cluster {
        Some(c) => cluster_card(c),
        // A ManagedCluster whose cluster the lab does not run: only the hub knows it.
        None => ClusterCard {
            name: m.name.clone(),
            provider: "existing",
            health: Health::Unknown,
            detail: "not one of the lab's clusters".to_owned(),
        },
    };
    let (managed, managed_detail) = match (m.exists, m.joined, m.available) {
        (false, _, _) => (Health::Down, "not registered"),
        (true, false, _) => (Health::Down, "registered, not joined"),
        (true, true, false) if m.agent_stopped => (Health::Degraded, "agent stopped"),
        (true, true, false) => (Health::Degraded, "joined, not available"),
        (true, true, true) => (Health::Ok, "joined, available"),
    };
    let claims: Vec<(String, String)> = hub
        .managed_cluster(&m.name)
        .and_then(|mc| mc.status.as_ref())
        .into_iter()
        .flat_map(|s| &s.cluster_claims)
        .map(|c| (c.name.clone(), c.value.clone()))
        .collect();
    let properties = match (cluster.health, ctx.api(&m.name).await) {
        (Health::Ok, Ok(api)) => spoke_properties(api.as_ref()).await,
        _ => Vec::new(),
    }
    .into_iter()
    .map(|p| SpokeProperty {
        in_claims: claims.iter().any(|(n, v)| *n == p.name && *v == p.value),
        name: p.name,
        value: p.value,
    })
    .collect();
    SpokeCard {
        cluster,
        managed,
        managed_detail: managed_detail.to_owned(),
        addons: m
            .addons
            .iter()
            .map(|a| AddonCard {
                name: a.name.clone(),
                health: Health::of(a.available),
            })
            .collect(),
        properties,
    }
}

async fn spoke_properties(spoke: &dyn ClusterApi) -> Vec<Property> {
    let mut props: Vec<Property> = list_all::<ClusterProperty>(spoke)
        .await
        .iter()
        .map(|p| Property {
            name: name_of(p).to_owned(),
            value: p.spec.value.clone(),
        })
        .collect();
    props.sort_by(|a, b| a.name.cmp(&b.name));
    props
}

/// Each set with its members (worked out from the ManagedClusters' labels, as the hub does) and the
/// namespaces it is bound to.
fn sets(hub: &HubReads) -> Vec<SetCard> {
    hub.sets
        .iter()
        .map(|s| {
            let name = name_of(s);
            let selector = s.spec.cluster_selector.as_ref();
            let exclusive =
                selector.and_then(|c| c.selector_type.as_deref()) != Some("LabelSelector");
            let wanted: BTreeMap<String, String> = if exclusive {
                BTreeMap::from([(CLUSTER_SET_LABEL.to_owned(), name.to_owned())])
            } else {
                selector
                    .and_then(|c| c.label_selector.as_ref())
                    .and_then(|l| l.match_labels.clone())
                    .unwrap_or_default()
            };
            let members = hub
                .managed_clusters
                .iter()
                .filter(|m| {
                    wanted
                        .iter()
                        .all(|(k, v)| label(&m.metadata, k) == Some(v.as_str()))
                })
                .map(|m| name_of(m).to_owned())
                .collect();
            let bindings = hub
                .bindings
                .iter()
                .filter(|b| b.spec.cluster_set == name)
                .filter_map(|b| {
                    Some(BindingCard {
                        namespace: b.metadata.namespace.clone()?,
                        health: if bound(b) {
                            Health::Ok
                        } else {
                            Health::Degraded
                        },
                    })
                })
                .collect();
            let selector = if exclusive {
                "exclusive".to_owned()
            } else if wanted.is_empty() {
                "every cluster".to_owned()
            } else {
                let labels: Vec<String> = wanted.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("labels {}", labels.join(","))
            };
            SetCard {
                name: name.to_owned(),
                selector,
                members,
                bindings,
            }
        })
        .collect()
}

/// The topology's bound namespaces, and any other namespace a binding on the hub names, each with its
/// ClusterProfiles.
async fn namespaces(ctx: &RunCtx, hub: &dyn ClusterApi, reads: &HubReads) -> Vec<NamespaceCard> {
    let mut names: Vec<String> = ctx.lab.namespaces.clone();
    for b in &reads.bindings {
        if let Some(ns) = b.metadata.namespace.as_deref()
            && !names.iter().any(|n| n == ns)
        {
            names.push(ns.to_owned());
        }
    }
    let served = Api::<ClusterProfile>::all(hub)
        .served()
        .await
        .unwrap_or(false);
    let mut out = Vec::new();
    for ns in names {
        let list = if served {
            Api::<ClusterProfile>::namespaced(hub, &ns)
                .list(None)
                .await
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        let bound = reads
            .bindings
            .iter()
            .any(|b| b.metadata.namespace.as_deref() == Some(ns.as_str()) && bound(b));
        out.push(NamespaceCard {
            profiles: list.iter().map(profile_card).collect(),
            name: ns,
            bound,
        });
    }
    out
}

fn profile_card(p: &ClusterProfile) -> ProfileCard {
    let healthy = p.condition_true("ControlPlaneHealthy") && p.condition_true("Joined");
    ProfileCard {
        name: name_of(p).to_owned(),
        health: if healthy {
            Health::Ok
        } else {
            Health::Degraded
        },
        properties: crate::verify::profile_properties(p)
            .into_iter()
            .map(|(name, value)| Property { name, value })
            .collect(),
        access_providers: p
            .status
            .iter()
            .flat_map(|s| &s.access_providers)
            .map(|a| a.name.clone())
            .collect(),
    }
}

fn verification(v: &crate::verify::report::LastVerification) -> Verification {
    let checks: Vec<Check> = Check::ALL
        .into_iter()
        .filter(|c| v.results.iter().any(|r| r.check == *c))
        .collect();
    let mut rows: BTreeMap<(String, String), Vec<Option<VerificationCell>>> = BTreeMap::new();
    for r in &v.results {
        let cells = rows
            .entry((r.spoke.clone(), r.namespace.clone()))
            .or_insert_with(|| vec![None; checks.len()]);
        let i = checks.iter().position(|c| *c == r.check).expect("listed");
        // A check with several results (one per property) fails when any of them does.
        let replace = cells[i].as_ref().is_none_or(|c| c.ok);
        if replace {
            cells[i] = Some(VerificationCell {
                ok: r.ok,
                hop: r.hop.map(crate::verify::Hop::name),
            });
        }
    }
    Verification {
        at: v.at.clone(),
        ok: v.ok,
        checks,
        rows: rows
            .into_iter()
            .map(|((spoke, namespace), cells)| VerificationRow {
                spoke,
                namespace,
                cells,
            })
            .collect(),
    }
}

/// The running exercise: `None` when none runs. Fields the picture does not show are ignored (the hop it
/// breaks stays off the projector: finding it is the exercise).
fn read_exercise(state: &crate::state::StateDir) -> Result<Option<Exercise>, String> {
    let path = state.exercise();
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            format!(
                "the running exercise ({}) cannot be read: {e}",
                path.display()
            )
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "the running exercise ({}) cannot be read: {e}",
            path.display()
        )),
    }
}

/// What reads the picture: the lab's backends, with a runtime of their own so that the looking can move to
/// a thread of its own ([`Looker::keep_looking`]).
pub struct Looker {
    rt: tokio::runtime::Runtime,
    args: RunArgs,
    lab: Lab,
    state: StateDir,
    patches: PatchSet,
    /// The context of the last look, and the saved simulated world it was opened from.
    ctx: Option<(RunCtx, Option<WorldStamp>)>,
}

/// When the simulated world's file was last saved, and its length: another process saved the world when
/// this changes.
type WorldStamp = (std::time::SystemTime, u64);

impl Looker {
    /// A looker at a lab that is up (`ensure_up` said so).
    pub fn new(args: RunArgs, lab: Lab, state: StateDir, patches: PatchSet) -> Result<Self, Error> {
        Ok(Looker {
            rt: runtime()?,
            args,
            lab,
            state,
            patches,
            ctx: None,
        })
    }

    /// Reads the lab once. On the simulated lab, the world is opened again when another process saved it.
    pub fn look(&mut self) -> Result<Picture, Error> {
        let stamp = self.args.simulate.then(|| {
            std::fs::metadata(self.state.sim_world())
                .and_then(|m| Ok((m.modified()?, m.len())))
                .ok()
        });
        let stale = match &self.ctx {
            None => true,
            Some((_, seen)) => stamp.is_some_and(|now| now != *seen),
        };
        if stale {
            let opened =
                open_backends(&self.rt, &self.args, &self.state, Purpose::Look, &self.lab)?;
            let (events, _) = crate::step::events::Events::channel();
            let ctx = RunCtx::new(
                self.lab.clone(),
                opened.backends.clone(),
                self.state.clone(),
                self.patches.clone(),
                events,
                tokio_util::sync::CancellationToken::new(),
            );
            self.ctx = Some((ctx, stamp.flatten()));
        }
        let (ctx, _) = self.ctx.as_ref().expect("opened above");
        Ok(self.rt.block_on(collect(ctx)))
    }

    /// Looks every [`LOOK_EVERY`] on a thread of its own, publishing each picture that differs from the
    /// last, until `stop` is cancelled or nobody holds a receiver. A look that fails keeps the last
    /// picture, with the reason among its problems.
    pub fn keep_looking(
        mut self,
        first: Picture,
        stop: tokio_util::sync::CancellationToken,
    ) -> (watch::Receiver<Arc<Picture>>, std::thread::JoinHandle<()>) {
        let (tx, rx) = watch::channel(Arc::new(first));
        let thread = std::thread::spawn(move || {
            loop {
                let stopped = self.rt.block_on(async {
                    tokio::select! {
                        () = stop.cancelled() => true,
                        () = tokio::time::sleep(LOOK_EVERY) => false,
                    }
                });
                if stopped || tx.is_closed() {
                    return;
                }
                let picture = match self.look() {
                    Ok(p) => p,
                    Err(e) => {
                        let mut last = (**tx.borrow()).clone();
                        last.problems = vec![format!("the lab cannot be read now: {e}")];
                        last
                    }
                };
                tx.send_if_modified(|shown| {
                    let changed = **shown != picture;
                    if changed {
                        *shown = Arc::new(picture);
                    }
                    changed
                });
            }
        });
        (rx, thread)
    }
}
