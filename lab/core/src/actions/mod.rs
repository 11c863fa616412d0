//! Actions: what a workflow step's `uses:` names. Each is idempotent: it observes, acts only when the lab
//! differs from what the step wants, and waits for the outcome with a watch, never a sleep loop.

mod adopt;
mod cluster;
mod departed;
mod images;
mod kube;
mod ocm;
pub mod prune;
mod registry;
mod reset;
pub mod verify;

pub use cluster::{clash_error, foreign_containers, foreign_look_alikes};
pub use kube::contains;
pub use ocm::is_loopback_url;
pub use registry::{ACTIONS, ActionFn, ActionSpec, Registry, find};
use serde::Deserialize;
use serde_json::Value;

use crate::step::ActionError;
use crate::step::{Outputs, StepCtx};

/// `Ok((changed, outputs))`.
pub type ActionResult = Result<(bool, Outputs), ActionError>;

/// Runs the action a step names, through its entry in the registry.
pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    match find(&ctx.step.uses) {
        Some(action) => (action.run)(ctx).await,
        None => Err(ActionError::permanent(format!(
            "no action named `{}`",
            ctx.step.uses
        ))),
    }
}

/// The inputs of an action that takes none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoInputs {}

/// The inputs of an action that acts on one lab cluster.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OnCluster {
    /// The lab cluster's name.
    pub cluster: String,
}

/// Outputs from `(key, value)` pairs.
pub fn outputs<const N: usize>(pairs: [(&str, Value); N]) -> Outputs {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
