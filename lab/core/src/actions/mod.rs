//! Actions: what a workflow step's `uses:` names. Each is idempotent: it observes, acts only when the lab
//! differs from what the step wants, and waits for the outcome with a watch, never a sleep loop.

mod adopt;
mod cluster;
pub mod consumer_check;
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

use crate::backend::HelmTarget;
use crate::step::ActionError;
use crate::step::{Outputs, StepCtx};
use crate::topology::Provider;

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

/// Where helm talks to lab cluster `cluster`: the lab's own kubeconfig file for a kind cluster, the
/// user's for an existing one, with the cluster's context.
pub(crate) fn helm_target(ctx: &StepCtx<'_>, cluster: &str) -> Result<HelmTarget, ActionError> {
    let c = ctx.run.lab.cluster(cluster).ok_or_else(|| {
        ActionError::permanent(format!(
            "`{cluster}` is not a cluster of lab `{}`",
            ctx.run.lab.name
        ))
    })?;
    Ok(match &c.provider {
        Provider::Kind => HelmTarget {
            cluster: cluster.to_owned(),
            kubeconfig: ctx.run.state.kubeconfig(cluster),
            context: c.context.clone(),
            lab: ctx.run.lab.name.clone(),
        },
        Provider::Existing {
            kubeconfig,
            context,
        } => HelmTarget {
            cluster: cluster.to_owned(),
            kubeconfig: ctx
                .run
                .state
                .existing_kubeconfig(cluster, kubeconfig)
                .map_err(|e| {
                    ActionError::permanent(format!(
                        "failed to read kubeconfig {kubeconfig} of cluster `{cluster}`: {e}"
                    ))
                })?,
            context: context.clone(),
            lab: ctx.run.lab.name.clone(),
        },
    })
}

/// A state-folder error as the error of the action that met it, with its help.
pub(crate) fn state_error(e: crate::state::StateError) -> ActionError {
    let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
    let err = ActionError::permanent(e.to_string());
    match help {
        Some(h) => err.with_help(h),
        None => err,
    }
}

/// Outputs from `(key, value)` pairs.
pub fn outputs<const N: usize>(pairs: [(&str, Value); N]) -> Outputs {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
