//! The simulation's engine: one lock around the world, the controllers run to a fixed point after every
//! change, faults decide whether a behaviour acts now, later, or fails, and waiters are woken per
//! cluster.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::Call;
use super::controllers::{self, Op, Work};
use super::faults::{Behaviour, FAIL_ONCE_REQUEUE, Fault};
use super::world::World;
use ocm_lab_core::backend::{KubeError, Transience};

use crate::fail::Injected;

/// Rounds of controller work one reconcile may take before it gives up (controllers that fight).
const MAX_ROUNDS: usize = 100_000;

#[derive(Default)]
pub(crate) struct State {
    pub world: World,
    pub faults: HashMap<Behaviour, Fault>,
    /// When a delayed controller first wanted to act on a work item.
    pub wanted: HashMap<(Behaviour, Work), Instant>,
    /// Rollout work ([`Behaviour::is_rollout`]) whose delay was served: its later acts go at once.
    pub rolled_out: HashSet<(Behaviour, Work)>,
    /// Work that failed once in the current reconcile (it retries on the next one).
    pub backoff: HashSet<(Behaviour, Work)>,
    /// Keep the call log and the applied objects below (off by default: only tests read them, and a
    /// large simulated lab would keep every call and applied object of a run; see `SimLab::recording`).
    pub record: bool,
    pub calls: Vec<Call>,
    /// Objects applied per cluster (only when `record`).
    pub applied: HashMap<String, Vec<Value>>,
    pub mutations: u64,
    /// The stops of registration agents whose hub lease timer runs in this process (a saved world's
    /// timers end with the process that armed them: the next one arms them again).
    pub armed: HashSet<(String, u64)>,
    /// The lease timers of the stops a loaded world holds were armed in this process.
    pub rearmed: bool,
}

impl State {
    /// Removes `cluster` from the world (its nodes, objects and releases), and forgets what was rolled
    /// out on it or for it on its hub (work keyed by the cluster's namespace there, as an addon's): a
    /// cluster created again under the name rolls out again. The count of nodes removed.
    pub fn remove_cluster(&mut self, cluster: &str) -> usize {
        self.rolled_out
            .retain(|(_, w)| w.cluster() != cluster && w.key()[0] != cluster);
        self.world.remove_cluster(cluster)
    }

    /// The fault of a backend call: `Ok(None)` go, `Ok(Some(d))` take `d`, `Err` fail.
    pub(crate) fn call_fault(&mut self, b: Behaviour) -> Result<Option<Duration>, Injected> {
        let transience = match self.faults.get(&b) {
            None => return Ok(None),
            Some(Fault::Delay(d)) => return Ok(Some(*d)),
            Some(Fault::FailOnce(_)) => Transience::Transient,
            Some(Fault::FailAlways(_)) => Transience::Permanent,
        };
        let message = self.take_failure(b).expect("a failing fault");
        Err(Injected {
            message,
            transience,
        })
    }

    /// The message of a failing fault on `b`, if one is set; a `FailOnce` is used up by the call.
    pub fn take_failure(&mut self, b: Behaviour) -> Option<String> {
        match self.faults.get(&b)? {
            Fault::FailAlways(msg) => Some(msg.clone()),
            Fault::FailOnce(_) => match self.faults.remove(&b) {
                Some(Fault::FailOnce(msg)) => Some(msg),
                _ => None,
            },
            Fault::Delay(_) => None,
        }
    }

    /// The fault of the hub webhooks a write of `key` at `api_version` to `cluster` goes through
    /// ([`Behaviour::HubWebhooks`]): `Err` with the API server's 500 naming the webhook.
    pub fn webhook_fault(
        &mut self,
        cluster: &str,
        key: &str,
        api_version: &str,
        kind: &str,
    ) -> Result<(), KubeError> {
        if !matches!(
            self.faults.get(&Behaviour::HubWebhooks),
            Some(Fault::FailOnce(_) | Fault::FailAlways(_))
        ) {
            return Ok(());
        }
        let hooks = super::apiserver::hub_webhooks_for(&self.world, cluster, key, api_version);
        let Some(hook) = hooks.first() else {
            return Ok(()); // a write no webhook sees does not use up a FailOnce
        };
        let why = self.take_failure(Behaviour::HubWebhooks);
        why.map_or(Ok(()), |why| Err(hook.failure(api_version, kind, &why)))
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    notifiers: Mutex<HashMap<String, Arc<Notify>>>,
    pub start: Instant,
}

impl Shared {
    pub fn new(world: World) -> Arc<Self> {
        Arc::new(Shared {
            state: Mutex::new(State {
                world,
                ..State::default()
            }),
            notifiers: Mutex::new(HashMap::new()),
            start: Instant::now(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Notify waiters on `cluster` wait on.
    pub fn notifier(&self, cluster: &str) -> Arc<Notify> {
        self.notifiers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(cluster.to_owned())
            .or_default()
            .clone()
    }

    fn notify(&self, clusters: BTreeSet<String>) {
        if clusters.is_empty() {
            return;
        }
        let n = self
            .notifiers
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for c in clusters {
            if let Some(x) = n.get(&c) {
                x.notify_waiters();
            }
        }
    }

    /// Runs `f` on the state, then the controllers until nothing changes, then wakes the waiters of
    /// every cluster that changed. The lock is never held across an `.await`.
    pub fn mutate<R>(self: &Arc<Self>, f: impl FnOnce(&mut State) -> R) -> R {
        self.mutate_with(BTreeSet::new(), f)
    }

    /// [`Shared::mutate`] with `initial` work queued.
    pub fn mutate_with<R>(
        self: &Arc<Self>,
        initial: BTreeSet<Work>,
        f: impl FnOnce(&mut State) -> R,
    ) -> R {
        let (r, touched) = {
            let mut st = self.lock();
            let r = f(&mut st);
            self.reconcile(&mut st, initial);
            (r, std::mem::take(&mut st.world.touched))
        };
        self.notify(touched);
        r
    }

    /// Every controller looks at everything again (after a test changed the world directly, after a
    /// load, after faults were cleared).
    pub fn resync(self: &Arc<Self>) {
        let all = controllers::resync_all(&self.lock().world);
        self.mutate_with(all, |_| ());
    }

    fn reconcile(self: &Arc<Self>, st: &mut State, mut queue: BTreeSet<Work>) {
        st.backoff.clear();
        for _ in 0..MAX_ROUNDS {
            let changes = std::mem::take(&mut st.world.changes);
            for ch in &changes {
                controllers::dispatch(&st.world, ch, &mut queue);
            }
            if queue.is_empty() {
                st.backoff.clear();
                return;
            }
            for work in std::mem::take(&mut queue) {
                let key = (work.behaviour(), work);
                if !st.backoff.is_empty() && st.backoff.contains(&key) {
                    continue;
                }
                let ops = controllers::run(&st.world, &key.1);
                // Writes that change nothing are no-ops (work they queue is queued).
                for op in self.gate(st, key, ops) {
                    op.commit(&mut st.world, &mut queue);
                }
            }
        }
        tracing::warn!(
            "simulated lab: controllers did not settle after {MAX_ROUNDS} rounds; stopping this reconcile"
        );
        st.world.changes.clear();
        st.backoff.clear();
    }

    /// The writes of a controller's work that happen now: its fault decides whether they go, wait (none
    /// yet) or fail (then what the failing controller leaves instead). Writes that would change nothing
    /// go at once.
    fn gate(self: &Arc<Self>, st: &mut State, key: (Behaviour, Work), ops: Vec<Op>) -> Vec<Op> {
        let Some(fault) = st.faults.get(&key.0).cloned() else {
            return ops;
        };
        if !ops.iter().any(|op| op.effective(&st.world)) {
            st.wanted.remove(&key);
            return ops;
        }
        let (b, work) = &key;
        match fault {
            Fault::Delay(d) => {
                let now = Instant::now();
                if st.rolled_out.contains(&key) {
                    return ops;
                }
                match st.wanted.get(&key) {
                    Some(&since) if now >= since + d => {
                        st.wanted.remove(&key);
                        // A rollout's later acts go at once.
                        if b.is_rollout() {
                            st.rolled_out.insert(key);
                        }
                        ops
                    }
                    Some(_) => Vec::new(),
                    None if d.is_zero() => ops,
                    None => {
                        self.wake_at(now + d, work.clone());
                        st.wanted.insert(key, now);
                        Vec::new()
                    }
                }
            }
            Fault::FailOnce(msg) => {
                st.faults.remove(b);
                self.wake_at(Instant::now() + FAIL_ONCE_REQUEUE, work.clone());
                let marks = controllers::fail(&st.world, work, &msg);
                st.backoff.insert(key);
                marks
            }
            Fault::FailAlways(msg) => controllers::fail(&st.world, work, &msg),
        }
    }

    /// Queues `work` again at `at` (a controller's requeue). Needs a Tokio runtime; without one the
    /// work waits for the next change.
    fn wake_at(self: &Arc<Self>, at: Instant, work: Work) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let me = Arc::downgrade(self);
        rt.spawn(async move {
            tokio::time::sleep_until(at).await;
            if let Some(me) = me.upgrade() {
                me.mutate_with(BTreeSet::from([work]), |_| ());
            }
        });
    }

    pub fn log(&self, cluster: &str, verb: &str, object: String, outcome: Result<(), String>) {
        self.log_locked(&mut self.lock(), cluster, verb, object, outcome);
    }

    /// [`Shared::log`] with the lock already held.
    pub fn log_locked(
        &self,
        st: &mut State,
        cluster: &str,
        verb: &str,
        object: String,
        outcome: Result<(), String>,
    ) {
        if !st.record {
            return;
        }
        let at = Instant::now().saturating_duration_since(self.start);
        st.calls.push(Call {
            at,
            cluster: cluster.to_owned(),
            verb: verb.to_owned(),
            object,
            outcome,
        });
    }
}
