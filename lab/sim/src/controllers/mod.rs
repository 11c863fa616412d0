//! The simulated components' behaviours, as controllers over the world: each work item reads the world
//! and returns the writes it wants ([`Op`]); the engine (`super::engine`) decides, with the faults a test
//! set, whether they happen now, later, or fail. Work is queued from object changes, like informers.

mod addons;
mod consumer;
pub(super) mod ocm;
mod sets;

use std::collections::BTreeSet;
use std::sync::LazyLock;

use serde_json::{Value, json};

use super::apiserver::{self, gk};
use super::faults::{Behaviour, SIMULATED_FAILURE};
use super::util;
use super::world::{Agent, Change, TokenInfo, World};

/// A simulated controller: what it watches, what one work item of it does, and how it fails. Each one
/// lives in the file that models it (`ocm.rs`, `sets.rs`, `addons.rs`) and is listed in that file's
/// `CONTROLLERS`, so adding one touches that file only.
pub(crate) struct Controller {
    /// What it is, for debugging.
    pub name: &'static str,
    /// The behaviour a test's fault on it names.
    pub behaviour: Behaviour,
    /// The object kinds (`gk` keys) whose changes may queue its work, like informers, each with the work
    /// the change queues. A status-only change is mostly a controller's own status write: a controller
    /// whose work never reads that status does not queue itself for it.
    pub watches: &'static [(&'static str, WatchFn)],
    /// The work it looks at on a cluster when it (re)starts.
    pub resync: Resync,
    /// Does one work item: the writes it wants (empty when it has nothing to do).
    pub run: fn(&World, &Work) -> Vec<Op>,
    /// What it leaves behind when a fault makes it fail: the failure on the object it would have touched,
    /// as a condition with reason `SimulatedFailure` (see [`mark`]), so a wait that times out shows it.
    pub fail: fn(&World, &Work, &str) -> Vec<Op>,
}

/// Queues the work one change of a watched kind makes necessary.
pub(crate) type WatchFn = fn(&World, &Change, &mut Queue<'_>);

/// A watch: any change queues the controller's work on the whole cluster.
pub(crate) fn any_change(_: &World, ch: &Change, q: &mut Queue<'_>) {
    q.add(&ch.cluster, "", "");
}

/// A watch: a change to more than the status queues the work about the changed object, keyed
/// `[namespace, name]`, or `[name, ""]` for a cluster-scoped kind (as [`mark_work`] reads it).
pub(crate) fn spec_of(_: &World, ch: &Change, q: &mut Queue<'_>) {
    if !ch.kind.status_only() {
        q.object(&ch.cluster, &ch.ns, &ch.name);
    }
}

/// A resync: the controller's work on the whole cluster.
pub(super) fn whole_cluster(_: &World, c: &str, q: &mut Queue<'_>) {
    q.add(c, "", "");
}

/// A watch's body: when `yes`, queues the controller's work on the changed cluster.
pub(super) fn queue_if(yes: bool, ch: &Change, q: &mut Queue<'_>) {
    if yes {
        q.add(&ch.cluster, "", "");
    }
}

/// A watch's body: queues the controller's work on the changed cluster when the changed object is `name`.
pub(super) fn named(ch: &Change, q: &mut Queue<'_>, name: &str) {
    queue_if(ch.name == name, ch, q);
}

/// When a controller looks at everything on a cluster again.
pub(crate) enum Resync {
    /// Never: only changes queue its work.
    Never,
    /// When every controller restarts (after a load, or a test changed the world behind the API's back).
    Restart(fn(&World, &str, &mut Queue<'_>)),
    /// Also when the hub's controllers restart: the ClusterManager or its registration controller
    /// changes, or the ClusterProfile CRD does.
    Hub(fn(&World, &str, &mut Queue<'_>)),
}

/// Every controller, in the order a reconcile runs their queued work: `ocm.rs`, `sets.rs`, then
/// `addons.rs`, each file's in its `CONTROLLERS` order.
static ALL: LazyLock<Vec<&'static Controller>> = LazyLock::new(|| {
    [
        ocm::CONTROLLERS,
        sets::CONTROLLERS,
        addons::CONTROLLERS,
        consumer::CONTROLLERS,
    ]
    .concat()
});

fn rank(i: usize) -> u8 {
    u8::try_from(i).expect("fewer than 256 simulated controllers")
}

/// One unit of controller work (a queue key): a controller, the cluster it runs for, and the object it
/// is about in its own terms (for example namespace and name; unused parts empty). Work orders by
/// controller first, in [`ALL`]'s order.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Work {
    ctl: u8,
    cluster: String,
    key: [String; 2],
}

impl Work {
    /// `controller`'s work on `cluster` about `key`.
    pub fn new(controller: &'static Controller, cluster: &str, key: [&str; 2]) -> Work {
        let i = ALL
            .iter()
            .position(|c| std::ptr::eq(*c, controller))
            .expect("every controller is in its file's CONTROLLERS");
        Work {
            ctl: rank(i),
            cluster: cluster.to_owned(),
            key: key.map(str::to_owned),
        }
    }

    fn controller(&self) -> &'static Controller {
        ALL[usize::from(self.ctl)]
    }

    pub fn behaviour(&self) -> Behaviour {
        self.controller().behaviour
    }

    /// The cluster whose controller does the work.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The object the work is about, in the controller's terms.
    pub fn key(&self) -> &[String; 2] {
        &self.key
    }
}

impl std::fmt::Debug for Work {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Work")
            .field("controller", &self.controller().name)
            .field("cluster", &self.cluster)
            .field("key", &self.key)
            .finish()
    }
}

/// Where a controller's watch or resync queues its own work.
pub(crate) struct Queue<'a> {
    ctl: u8,
    out: &'a mut BTreeSet<Work>,
}

impl Queue<'_> {
    /// Queues this controller's work on `cluster` about `(a, b)` (unused parts empty).
    pub fn add(&mut self, cluster: &str, a: &str, b: &str) {
        self.out.insert(Work {
            ctl: self.ctl,
            cluster: cluster.to_owned(),
            key: [a.to_owned(), b.to_owned()],
        });
    }

    /// Queues this controller's work about one object: `[namespace, name]`, or `[name, ""]` for a
    /// cluster-scoped one (as [`mark_work`] reads it).
    pub fn object(&mut self, cluster: &str, ns: &str, name: &str) {
        if ns.is_empty() {
            self.add(cluster, name, "");
        } else {
            self.add(cluster, ns, name);
        }
    }

    /// Queues this controller's work about every object of kind `gk` on `cluster`.
    pub fn every(&mut self, w: &World, cluster: &str, gk: &str) {
        for o in w.list(cluster, gk, None) {
            self.object(cluster, util::namespace(o), util::name(o));
        }
    }
}

/// A write a controller wants.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Create the object unless it exists.
    Create(String, Value),
    /// Create or replace the object (nothing when equal).
    Put(String, Value),
    /// Delete the object `[gk, namespace, name]` (nothing when absent).
    Delete(String, [String; 3]),
    /// Set a cluster's agent state.
    Agent(String, Option<Agent>),
    /// Remember which lab cluster registered `<hub>/<managed cluster>`.
    AgentIndex(String, String),
    /// Remember a minted token.
    Token(String, TokenInfo),
    /// A cluster-proxy tunnel (`<hub>/<managed cluster>`) connected or not.
    Tunnel(String, bool),
    /// The kubelet of node container `node` pulls `image` (recorded in the world's pulls).
    Pull { node: String, image: String },
    /// Queue more work (not a change by itself).
    Enqueue(Work),
}

impl Op {
    /// Deletes `[gk, namespace, name]` on `cluster`.
    fn delete(cluster: &str, [gk, ns, name]: [&str; 3]) -> Op {
        Op::Delete(s(cluster), [s(gk), s(ns), s(name)])
    }

    /// Whether applying the op would change the world.
    pub fn effective(&self, w: &World) -> bool {
        match self {
            Op::Create(c, v) | Op::Put(c, v) => {
                let old = w.get(c, &gk::of_obj(v), util::namespace(v), util::name(v));
                let put = matches!(self, Op::Put(..));
                old.is_none_or(|old| put && !super::world::same_ignoring_server_fields(old, v))
            }
            Op::Delete(c, [gk, ns, name]) => w.get(c, gk, ns, name).is_some(),
            Op::Agent(c, a) => w.clusters.get(c).is_some_and(|c| &c.agent != a),
            Op::AgentIndex(k, v) => w.agents.get(k) != Some(v),
            Op::Token(t, _) => !w.tokens.contains_key(t),
            Op::Tunnel(k, up) => w.tunnels.contains(k) != *up,
            Op::Pull { node, image } => w.containers.get(node).is_some_and(|n| {
                !n.images
                    .contains(&ocm_lab_core::backend::full_reference(image))
            }),
            Op::Enqueue(_) => false,
        }
    }

    /// Applies the op; work it queues goes to `queue`.
    pub fn commit(self, w: &mut World, queue: &mut BTreeSet<Work>) {
        match self {
            Op::Create(..) if !self.effective(w) => {}
            Op::Create(c, v) | Op::Put(c, v) => _ = w.put(&c, v),
            Op::Delete(c, [gk, ns, name]) => _ = w.remove(&c, &gk, &ns, &name),
            Op::Agent(c, a) => {
                if let Some(cl) = w.clusters.get_mut(&c) {
                    cl.agent = a;
                }
            }
            Op::AgentIndex(k, v) => _ = w.agents.insert(k, v),
            Op::Token(t, info) => _ = w.tokens.insert(t, info),
            Op::Tunnel(k, up) => {
                // Nothing in the API changes (no status reports a tunnel): the hub's waiters are woken
                // so a request that retries sees it.
                let hub = k.split_once('/').map_or(k.as_str(), |(h, _)| h).to_owned();
                let changed = if up {
                    w.tunnels.insert(k)
                } else {
                    w.tunnels.remove(&k)
                };
                if changed {
                    w.touched.insert(hub);
                }
            }
            Op::Pull { node, image } => w.pull_image(&node, &image, "kubelet"),
            Op::Enqueue(work) => _ = queue.insert(work),
        }
    }
}

/// Runs one work item: the writes it wants (empty when it has nothing to do).
pub(crate) fn run(w: &World, work: &Work) -> Vec<Op> {
    if !w.reachable(work.cluster()) {
        return Vec::new();
    }
    (work.controller().run)(w, work)
}

/// What a failing controller leaves behind (its [`Controller::fail`]).
pub(crate) fn fail(w: &World, work: &Work, msg: &str) -> Vec<Op> {
    let msg = format!("simulated failure: {msg}");
    (work.controller().fail)(w, work, &msg)
}

/// Sets condition `kind` to `status` with `msg` on the object, as a failing controller leaves it: the
/// simulated failure shows where a wait looks.
pub(super) fn mark(
    w: &World,
    cluster: &str,
    [key, ns, name]: [&str; 3],
    [kind, status]: [&str; 2],
    msg: &str,
) -> Vec<Op> {
    let Some(mut o) = w.get(cluster, key, ns, name).cloned() else {
        return Vec::new();
    };
    util::set_condition(&mut o, kind, status, SIMULATED_FAILURE, msg);
    vec![Op::Put(s(cluster), o)]
}

/// [`mark`]s the object the work is about: its key is `[namespace, name]`, or `[name, ""]` for a
/// cluster-scoped kind.
pub(super) fn mark_work(w: &World, k: &Work, key: &str, cond: [&str; 2], msg: &str) -> Vec<Op> {
    let (ns, name) = match k.key() {
        [name, b] if b.is_empty() => ("", name.as_str()),
        [ns, name] => (ns.as_str(), name.as_str()),
    };
    mark(w, k.cluster(), [key, ns, name], cond, msg)
}

// ---- what the controllers share ------------------------------------------------------------------

const OCM: &str = "open-cluster-management";
const CLUSTER_MANAGER_LABEL: &str = "x-k8s.io/cluster-manager";
const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";

fn s(x: &str) -> String {
    x.to_owned()
}

/// The cluster runs an OCM hub: a ClusterManager and the registration controller the operator deployed.
pub(crate) fn is_hub(w: &World, c: &str) -> bool {
    let name = "cluster-manager-registration-controller";
    let cm = w.get(c, gk::CLUSTER_MANAGER, "", "cluster-manager");
    let registration = w.get(c, gk::DEPLOYMENT, ocm::HUB_NAMESPACE, name);
    cm.is_some() && registration.is_some()
}

pub(crate) fn available(d: &Value) -> bool {
    util::condition_is(d, "Available", "True")
}

/// The Deployment named `name` in any namespace, when it is Available.
pub(crate) fn available_deployment<'a>(w: &'a World, c: &str, name: &str) -> Option<&'a Value> {
    w.find_named(c, gk::DEPLOYMENT, name)
        .filter(|d| available(d))
}

pub(crate) fn namespace_obj(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "status": {"phase": "Active"}})
}

pub(crate) fn namespace_exists(w: &World, c: &str, ns: &str) -> bool {
    w.get(c, gk::NAMESPACE, "", ns)
        .is_some_and(|n| n["status"]["phase"] != "Terminating")
}

pub(super) fn owner_ref(owner: &Value, controller: bool) -> Value {
    let mut r = json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": util::name(owner),
        "uid": util::uid(owner),
    });
    if controller {
        r["controller"] = json!(true);
        r["blockOwnerDeletion"] = json!(true);
    }
    r
}

// ---- informers: which changes queue which work ----------------------------------------------------

/// Queues the work a change makes necessary: each controller's watch on the changed kind, and everything
/// the hub's controllers look at when the change restarts them.
pub(crate) fn dispatch(w: &World, ch: &Change, out: &mut BTreeSet<Work>) {
    let c = ch.cluster.as_str();
    if !w.clusters.contains_key(c) {
        return;
    }
    for (i, ctl) in ALL.iter().enumerate() {
        for (_, watch) in ctl.watches.iter().filter(|(gk, _)| *gk == ch.gk) {
            watch(w, ch, &mut Queue { ctl: rank(i), out });
        }
    }
    if restarts_hub(ch) {
        resync(w, c, true, out);
    }
}

/// The hub's controllers restart: the ClusterManager changed, its registration controller's Deployment
/// changed, or the ClusterProfile CRD changed (the profile controllers start with it:
/// open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/manager.go`).
fn restarts_hub(ch: &Change) -> bool {
    match ch.gk.as_str() {
        gk::CLUSTER_MANAGER => true,
        gk::CRD => ch.name == super::charts::CLUSTER_PROFILE_CRD,
        gk::DEPLOYMENT => ch.name == "cluster-manager-registration-controller",
        _ => false,
    }
}

/// Queues what the controllers of cluster `c` look at when they (re)start: the hub's only, or all.
fn resync(w: &World, c: &str, hub_only: bool, out: &mut BTreeSet<Work>) {
    for (i, ctl) in ALL.iter().enumerate() {
        let f = match ctl.resync {
            Resync::Never => continue,
            Resync::Restart(_) if hub_only => continue,
            Resync::Restart(f) | Resync::Hub(f) => f,
        };
        f(w, c, &mut Queue { ctl: rank(i), out });
    }
}

/// Every work item for every cluster: what controllers do after a restart (and after a test changed
/// the world behind the API's back).
pub(crate) fn resync_all(w: &World) -> BTreeSet<Work> {
    let mut out = BTreeSet::new();
    for c in w.clusters.keys() {
        resync(w, c, false, &mut out);
    }
    out
}

/// The hub gate check shared by the profile controllers (started only with the gate:
/// open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/manager.go`).
pub(crate) fn profiles_enabled(w: &World, hub: &str) -> bool {
    is_hub(w, hub)
        && apiserver::hub_gate(w, hub, "ClusterProfile")
        && w.served(hub, gk::CLUSTER_PROFILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_controller_is_listed_once_under_its_own_name() {
        let mut names: Vec<&str> = ALL.iter().map(|c| c.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a controller is listed twice");
        let w = Work::new(&ocm::HUB_ACCEPT, "hub", ["cluster1", ""]);
        assert_eq!(w.behaviour(), Behaviour::HubAccept);
        assert!(format!("{w:?}").contains("hub-accept"));
    }
}
