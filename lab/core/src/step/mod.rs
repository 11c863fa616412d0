//! What a step runs with: the run's shared context ([`RunCtx`]), one step's view of it ([`StepCtx`]),
//! its outputs, and the events steps and the engine report ([`events`]).
//!
//! It sits below both the actions and the engine: the engine builds a `StepCtx` for each attempt and calls
//! the action; the action reads the lab through the `RunCtx`'s backends and reports through its events. So
//! the engine depends on the actions, and the actions only on this module.

mod error;
pub mod events;
pub mod retry;
pub mod timing;

pub use error::ActionError;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use crate::backend::{Backends, ClusterApi, KubeError};
use crate::patch::PatchSet;
use crate::state::StateDir;
use crate::topology::{Lab, Provider};
use crate::workflow::PlannedStep;
use events::{Event, Events};

/// Outputs of a step (never secrets).
pub type Outputs = BTreeMap<String, Value>;

/// What the `node-images` step puts into each kind cluster's nodes: the chart images each
/// lab cluster runs (`ocm-lab images list`, which the front derives from the plan's chart renders), and,
/// with a bundle (`up --bundle`, `spec.bundle`), where the bundle holds each of them. Empty (the default):
/// the step has nothing to do and the nodes pull at rollout.
#[derive(Debug, Clone, Default)]
pub struct NodeImages {
    /// Lab cluster → the chart images its Pods run.
    pub per_cluster: BTreeMap<String, Vec<String>>,
    /// With a bundle: image → its archive in the bundle.
    pub bundle: Option<BTreeMap<String, crate::backend::ImageArchive>>,
}

/// A cluster's API client, connected at most once (by the first step that needs it).
type ClientCell = OnceCell<Arc<dyn ClusterApi>>;

/// Everything steps share during a run.
pub struct RunCtx {
    pub lab: Lab,
    pub backends: Backends,
    pub state: StateDir,
    pub patches: PatchSet,
    pub events: Events,
    pub cancel: CancellationToken,
    /// A unique id for this run (journal, verification probe values).
    pub run_id: String,
    /// What `node-images` loads or pre-pulls into each cluster's nodes.
    pub node_images: NodeImages,
    /// Pinned image references Docker knows by their tag only (loaded from a bundle on an engine that
    /// keeps no digest on `docker load`): reference → the tag to run them by. See [`RunCtx::local_image`].
    pub image_aliases: BTreeMap<String, String>,
    /// One connection cell per cluster: connecting to a slow cluster never blocks another's.
    clients: Mutex<HashMap<String, Arc<ClientCell>>>,
    /// Each finished step's outputs, for the steps after it.
    outputs: Mutex<BTreeMap<String, Outputs>>,
    /// What this run's verification found ([`RunCtx::record_verification`]), for the run's result.
    verification: Mutex<Option<Vec<crate::verify::CheckResult>>>,
}

impl RunCtx {
    pub fn new(
        lab: Lab,
        backends: Backends,
        state: StateDir,
        patches: PatchSet,
        events: Events,
        cancel: CancellationToken,
    ) -> Self {
        let run_id = format!(
            "{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
            std::process::id()
        );
        RunCtx {
            lab,
            backends,
            state,
            patches,
            events,
            cancel,
            run_id,
            node_images: NodeImages::default(),
            image_aliases: BTreeMap::new(),
            clients: Mutex::new(HashMap::new()),
            outputs: Mutex::new(BTreeMap::new()),
            verification: Mutex::new(None),
        }
    }

    /// The API of a lab cluster, connected once and shared. Each cluster has its own cell, so a cluster
    /// whose connection probe is slow delays only the steps that need that cluster.
    pub async fn api(&self, cluster: &str) -> Result<Arc<dyn ClusterApi>, KubeError> {
        let c = self
            .lab
            .cluster(cluster)
            .ok_or_else(|| KubeError::UnknownCluster {
                cluster: cluster.to_owned(),
                lab: self.lab.name.clone(),
            })?;
        let cell = self
            .clients
            .lock()
            .expect("not poisoned")
            .entry(cluster.to_owned())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            let kubeconfig = match &c.provider {
                Provider::Kind => self.state.kubeconfig(cluster),
                Provider::Existing { kubeconfig, .. } => self
                    .state
                    .existing_kubeconfig(cluster, kubeconfig)
                    .map_err(|e| crate::backend::KubeError::KubeconfigUnreadable {
                        path: kubeconfig.clone(),
                        detail: e.to_string(),
                    })?,
            };
            match self.backends.kube.connect(c, &kubeconfig).await {
                Err(e) if e.is_transient() && matches!(c.provider, Provider::Kind) => {
                    Err(self.observe_nodes(cluster, e).await)
                }
                other => other,
            }
        })
        .await
        .cloned()
    }

    /// A kind cluster that does not answer: ask Docker about its nodes before calling that transient. A
    /// control-plane container that is stopped or gone will not come back by waiting, so the error becomes
    /// permanent and says what to do; anything else (nodes running, Docker unsure) stays as it was.
    async fn observe_nodes(&self, cluster: &str, e: KubeError) -> KubeError {
        let Ok(nodes) = self.backends.docker.node_containers(cluster).await else {
            return e;
        };
        let control_plane = nodes
            .iter()
            .find(|n| n.role == crate::backend::NodeRole::ControlPlane);
        let stopped_node = match control_plane {
            Some(n) if n.running => return e,
            Some(n) => Some(n.name.clone()),
            None => None,
        };
        KubeError::ClusterDown {
            source: Box::new(e),
            stopped_node,
        }
    }

    /// Forgets a cached client (after a cluster is re-created or deleted).
    pub async fn forget(&self, cluster: &str) {
        self.clients.lock().expect("not poisoned").remove(cluster);
    }

    /// Records what a verification step found: the run's result carries it to the command.
    pub fn record_verification(&self, results: &[crate::verify::CheckResult]) {
        self.verification
            .lock()
            .expect("not poisoned")
            .get_or_insert_with(Vec::new)
            .extend_from_slice(results);
    }

    /// Takes what this run's verification found (the engine puts it in the run's result).
    pub fn take_verification(&self) -> Option<Vec<crate::verify::CheckResult>> {
        self.verification.lock().expect("not poisoned").take()
    }

    /// Outputs of an earlier step instance of this run.
    pub fn output(&self, step: &str) -> Option<Outputs> {
        self.outputs
            .lock()
            .expect("not poisoned")
            .get(step)
            .cloned()
    }

    /// The reference to run `image` by on the host's Docker engine: `image` itself, or the tag it was
    /// loaded under when the engine does not know it by its pinned digest ([`RunCtx::image_aliases`]).
    pub fn local_image<'a>(&'a self, image: &'a str) -> &'a str {
        self.image_aliases.get(image).map_or(image, String::as_str)
    }

    /// Records the outputs of a finished step instance, for the steps after it. The engine
    /// calls it; actions read with [`RunCtx::output`].
    pub fn record_output(&self, step: &str, outputs: &Outputs) {
        self.outputs
            .lock()
            .expect("not poisoned")
            .insert(step.to_owned(), outputs.clone());
    }
}

/// What a step's action sees.
pub struct StepCtx<'a> {
    pub step: &'a PlannedStep,
    pub run: &'a Arc<RunCtx>,
    /// When the step's time is up. Waits inside the step end here, so they report what they waited for;
    /// the engine's own deadline is a little later and only catches actions that do not wait.
    pub deadline: tokio::time::Instant,
}

impl StepCtx<'_> {
    /// The step's rendered `with:` as the action's input type. The planner checked it against the same
    /// type, so this fails only for a plan that did not come from the planner.
    pub fn inputs<T: serde::de::DeserializeOwned>(&self) -> Result<T, ActionError> {
        let with = Value::Object(self.step.with.clone().into_iter().collect());
        serde_json::from_value(with).map_err(|e| {
            ActionError::permanent(format!(
                "step {} has inputs its action `{}` does not take: {e}",
                self.step.id, self.step.uses
            ))
        })
    }

    /// Reports progress on this step.
    pub fn progress(&self, message: impl Into<String>) {
        self.run.events.emit(Event::StepProgress {
            step: self.step.id.clone(),
            message: message.into(),
        });
    }

    /// Says what this step did (what it removed, what it kept and why): the step's line in the output
    /// says it when the step finishes. Several notes are joined with `; `.
    pub fn note(&self, message: impl Into<String>) {
        self.run.events.emit(Event::StepNote {
            step: self.step.id.clone(),
            message: message.into(),
        });
    }

    /// Time left before the step's deadline, for waits inside it.
    pub fn timeout(&self) -> Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }
}
