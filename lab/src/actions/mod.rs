//! Actions: what a workflow step's `uses:` names. Each is idempotent: it observes, acts only when the lab
//! differs from what the step wants, and waits for the outcome with a watch, never a sleep loop.

mod cluster;
mod kube;
mod ocm;
pub mod prune;
mod registry;
mod reset;
pub mod verify;

use std::sync::Arc;
use std::time::Duration;

pub use cluster::{clash_error, foreign_containers, foreign_look_alikes};
pub use kube::contains;
pub use registry::{ACTIONS, ActionFn, ActionSpec, Input, find};
use serde_json::Value;

use crate::backend::BackendError;
use crate::engine::{Outputs, RunCtx, events::Event};
use crate::workflow::PlannedStep;

/// What a step's action sees.
pub struct StepCtx<'a> {
    pub step: &'a PlannedStep,
    pub run: &'a Arc<RunCtx>,
    /// When the step's time is up. Waits inside the step end here, so they report what they waited for;
    /// the engine's own deadline is a little later and only catches actions that do not wait.
    pub deadline: tokio::time::Instant,
}

/// `Ok((changed, outputs))`.
pub type ActionResult = Result<(bool, Outputs), BackendError>;

impl StepCtx<'_> {
    /// A string input (rendered `with:` value).
    pub fn input(&self, name: &str) -> Result<&str, BackendError> {
        self.step
            .with
            .get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| {
                BackendError::permanent(format!(
                    "step {} has no string input `{name}`",
                    self.step.id
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

/// Runs the action a step names, through its entry in the registry.
pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    match find(&ctx.step.uses) {
        Some(action) => (action.run)(ctx).await,
        None => Err(BackendError::permanent(format!(
            "no action named `{}`",
            ctx.step.uses
        ))),
    }
}

/// Outputs from `(key, value)` pairs.
pub fn outputs<const N: usize>(pairs: [(&str, Value); N]) -> Outputs {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
