//! The simulated lab: an in-memory **simulation** of Docker, kind, Helm and the Kubernetes/OCM
//! clusters the lab drives. It is a test double for the workflow engine and `--simulate`, **not OCM**:
//! nothing here talks to a real cluster, and every behaviour is a model of upstream OCM
//! (each controller cites the upstream source it models; where upstream and this model disagree, upstream
//! wins).
//!
//! - [`SimLab::backends`] gives the [`Backends`] the engine runs against (`simulated: true`).
//! - The world ([`World`]) holds kind clusters (a control-plane container on Docker network `kind`) and,
//!   per cluster, a small API server: objects by group/kind, namespace and name; built-in kinds always
//!   served, custom kinds once their CRD is Established.
//! - Charts are rendered from models of cluster-manager/klusterlet 1.3.1, cluster-proxy 0.10.0/0.11.0 and
//!   managed-serviceaccount 0.10.0.
//! - Controllers (operators, registration, accept, claims, sets and bindings, ClusterProfiles, placements,
//!   addons, cluster-proxy, managed-serviceaccount) run after every change until nothing changes, then
//!   waiters are woken; waits are event-driven with Tokio deadlines (so paused Tokio time works).
//! - Every behaviour can be delayed, made to fail once, or made to fail always ([`SimLab::set_fault`]).
//! - The world is saved as JSON (mode 0600: it holds simulated tokens) so several commands act on the
//!   same simulated lab. The command line saves it ([`SimLab::save`]) when a command ends, also a cancelled
//!   or failed one; a killed command loses the simulation's progress since the last save, and the next
//!   `up` converges from there.

mod apiserver;
mod backends;
mod certs;
mod charts;
mod controllers;
mod engine;
mod fail;
mod faults;
mod userserver;
mod util;
mod world;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use backends::render_chart_patched;
pub use faults::{Behaviour, FAIL_ONCE_REQUEUE, Fault, SIMULATED_FAILURE};
pub use world::{Agent, Container, Network, SimCluster, SimRelease, TokenInfo, World};

use engine::Shared;
use ocm_lab_core::backend::{Backends, ClusterApi, ObjectRef};

/// The hub's lease controller for one stop of `spoke`'s registration agent: `grace` after the stop, the
/// hub marks the cluster `Available=Unknown` (`ManagedClusterLeaseUpdateStopped`); it requeues exactly at
/// expiry (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/lease/controller.go`). Needs a Tokio
/// runtime; a timer already running for the stop is kept.
pub(crate) fn arm_lease_timer(shared: &Arc<Shared>, spoke: String, seq: u64, grace: Duration) {
    if !shared.lock().armed.insert((spoke.clone(), seq)) {
        return;
    }
    let me = Arc::downgrade(shared);
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        let Some(shared) = me.upgrade() else {
            return;
        };
        let expired = shared.lock().world.expire_lease(&spoke, seq);
        if let Some((hub, mc)) = expired {
            let work = controllers::Work::new(&controllers::ocm::HUB_ACCEPT, &hub, [&mc, ""]);
            shared.mutate_with(std::collections::BTreeSet::from([work]), |_| ());
        }
    });
}

/// After a backend call on `cluster`: its registration agent follows its Deployment (scaled to 0 it has no
/// Pod: the ReplicaSet controller deletes it), and every stopped agent's lease timer runs in this process.
/// A world loaded from a file restarts the grace of a stop that has not expired: the process that stopped
/// the agent took its timer with it.
pub(crate) fn follow_agents(shared: &Arc<Shared>, cluster: &str) {
    let (stop, waiting) = {
        let mut st = shared.lock();
        let stop = st.world.follow_agent_deployment(cluster);
        let first = !std::mem::replace(&mut st.rearmed, true);
        (stop, first.then(|| st.world.lease_running_out()))
    };
    if stop.is_some() {
        shared.resync();
    }
    if let Some(world::AgentChange::Stopped(seq, grace)) = stop {
        arm_lease_timer(shared, cluster.to_owned(), seq, grace);
    }
    for (spoke, seq, grace) in waiting.into_iter().flatten() {
        arm_lease_timer(shared, spoke, seq, grace);
    }
}

/// One backend call as the simulated lab saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// When it finished, in (Tokio) time since the SimLab was created.
    pub at: Duration,
    /// The lab cluster it was about ("" for Docker-wide calls).
    pub cluster: String,
    /// `docker.<call>`, `kind.<call>`, `helm.template`, `kube.<call>` (`kube.apply`, `kind.create`, …).
    pub verb: String,
    /// The object or thing it was about.
    pub object: String,
    /// `Err` holds the error message.
    pub outcome: Result<(), String>,
}

/// The simulated lab (see the module documentation).
pub struct SimLab {
    shared: Arc<Shared>,
}

impl SimLab {
    /// An empty world: no networks, no containers, no clusters.
    pub fn new() -> Arc<Self> {
        Self::from_world(World::default())
    }

    /// An empty world that keeps its call log ([`SimLab::calls`]) and applied objects
    /// ([`SimLab::applied`]), for tests that read them ([`SimLab::new`] keeps neither, to save memory).
    pub fn recording() -> Arc<Self> {
        let lab = Self::new();
        lab.shared.lock().record = true;
        lab
    }

    fn from_world(world: World) -> Arc<Self> {
        Arc::new(SimLab {
            shared: Shared::new(world),
        })
    }

    /// The backends over this world.
    pub fn backends(self: &Arc<Self>) -> Backends {
        self.backends_with_patches(ocm_lab_core::patch::PatchSet::embedded().unwrap_or_default())
    }

    /// The backends, with simulated Helm post-rendering `patches` (a run's `--chart-patches`).
    pub fn backends_with_patches(
        self: &Arc<Self>,
        patches: ocm_lab_core::patch::PatchSet,
    ) -> Backends {
        Backends {
            docker: Arc::new(backends::SimDocker(self.shared.clone())),
            kind: Arc::new(backends::SimKind(self.shared.clone())),
            helm: Arc::new(backends::SimHelm(self.shared.clone(), Arc::new(patches))),
            kube: Arc::new(backends::SimConnector(self.shared.clone())),
            simulated: true,
        }
    }

    /// A cluster's API without going through the Connector (for tests; no Connect fault, no log entry).
    pub fn api(self: &Arc<Self>, cluster: &str) -> Arc<dyn ClusterApi> {
        Arc::new(backends::SimApi {
            shared: self.shared.clone(),
            cluster: cluster.to_owned(),
        })
    }

    /// Loads a world saved by [`SimLab::save`]; a missing file gives an empty world.
    pub fn load(path: &Path) -> std::io::Result<Arc<Self>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::new()),
            Err(e) => return Err(e),
        };
        let mut world: World = serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("simulated lab state {} is not valid: {e}", path.display()),
            )
        })?;
        // A cluster saved before clusters had a CA gets its own.
        for c in world.clusters.values_mut() {
            c.ca.get_or_insert_with(|| certs::ClusterCa::new(&c.name));
        }
        let lab = Self::from_world(world);
        lab.shared.resync();
        Ok(lab)
    }

    /// Saves the world with `ocm_lab_core::state::write_secret` (atomic and durable, mode 0600: it holds the
    /// simulated tokens). Faults are not saved.
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let text = serde_json::to_vec(&self.shared.lock().world).map_err(std::io::Error::other)?;
        ocm_lab_core::state::write_secret(path, &text)
    }

    /// Puts a fault on a behaviour (replacing the one it had). Faults are not saved.
    pub fn set_fault(&self, b: Behaviour, f: Fault) {
        let mut st = self.shared.lock();
        st.faults.insert(b, f);
        st.rolled_out.retain(|(x, _)| *x != b);
    }

    /// Removes every fault; the controllers look at everything again (a controller that failed
    /// retries, as real ones do with backoff).
    pub fn clear_faults(&self) {
        {
            let mut st = self.shared.lock();
            st.faults.clear();
            st.wanted.clear();
            st.rolled_out.clear();
        }
        self.shared.resync();
    }

    /// Stops `spoke`'s registration agent; after the hub's grace period (5 × leaseDurationSeconds, 300 s
    /// by default, in Tokio time) the hub marks its ManagedCluster `Available=Unknown`
    /// (`ManagedClusterLeaseUpdateStopped`) and the ClusterProfiles copy it as `ControlPlaneHealthy`
    /// (open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/lease/controller.go`). Needs a Tokio
    /// runtime for the timer. `false` when no agent runs there.
    pub fn stop_agent(self: &Arc<Self>, spoke: &str) -> bool {
        let Some((seq, grace)) = self.with_world(|w| w.stop_agent(spoke)) else {
            return false;
        };
        arm_lease_timer(&self.shared, spoke.to_owned(), seq, grace);
        true
    }

    /// Starts a stopped registration agent again: it renews its lease at once, and the hub marks the
    /// cluster Available again (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/lease/controller.go`; a real agent reports Available again 0.5 s after a restart).
    pub fn start_agent(&self, spoke: &str) {
        self.with_world(|w| w.set_agent_stopped(spoke, None));
    }

    /// Mutating backend calls received so far, whether or not they changed anything.
    pub fn mutations(&self) -> u64 {
        self.shared.lock().mutations
    }

    /// Every backend call so far, in order.
    ///
    /// # Panics
    /// When the SimLab keeps no call log (made with [`SimLab::new`], not [`SimLab::recording`]), so that
    /// a test never reads an empty log as "no such call".
    pub fn calls(&self) -> Vec<Call> {
        self.recorded("call log").calls.clone()
    }

    /// Every object successfully applied to `cluster` through `ClusterApi::apply`, in order.
    ///
    /// # Panics
    /// When the SimLab does not record them (see [`SimLab::calls`]).
    pub fn applied(&self, cluster: &str) -> Vec<Value> {
        let st = self.recorded("record of applied objects");
        st.applied.get(cluster).cloned().unwrap_or_default()
    }

    /// The state, which must keep `what` (see [`SimLab::calls`]).
    fn recorded(&self, what: &str) -> std::sync::MutexGuard<'_, engine::State> {
        let st = self.shared.lock();
        assert!(
            st.record,
            "this simulated lab keeps no {what}: make it with SimLab::recording()"
        );
        st
    }

    /// An object as stored in a cluster (at the version it was written).
    pub fn object(&self, cluster: &str, r: &ObjectRef) -> Option<Value> {
        self.shared.lock().world.get_object(cluster, r)
    }

    /// Whether the world holds a cluster the lab did not create (an `existing:` cluster, or one a test
    /// added): such a world outlives `down`.
    pub fn has_foreign_clusters(&self) -> bool {
        self.shared
            .lock()
            .world
            .clusters
            .values()
            .any(|c| c.foreign)
    }

    /// Lets a test read or change the world directly; afterwards every controller looks at everything
    /// again and waiters are woken.
    pub fn with_world<R>(&self, f: impl FnOnce(&mut World) -> R) -> R {
        let r = {
            let mut st = self.shared.lock();
            f(&mut st.world)
        };
        self.shared.resync();
        r
    }
}
