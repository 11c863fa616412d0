//! The Helm backend's error: what went wrong rendering a chart, with the facts (the chart, the command,
//! its exit status and stderr) and whether a retry may help.

use std::sync::Arc;

use super::tools::{ToolError, ToolFailure, Verdict};
use super::{Failure, SimulatedFault, Transience};

/// What went wrong rendering a chart. `chart` names it as the user knows it:
/// `cluster-manager 1.3.1 (release `cluster-manager` in namespace `open-cluster-management`)`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelmError {
    /// helm could not be found, downloaded, started or waited for.
    #[error(transparent)]
    Tool(Arc<ToolError>),
    #[error("failed to render {chart}: failed to create a private temporary folder: {detail}")]
    Scratch { chart: String, detail: String },
    #[error("failed to render {chart}: failed to write the values file: {detail}")]
    ValuesFile { chart: String, detail: String },
    /// `helm template` failed; `verdict` is what its stderr says about retrying.
    #[error("failed to render {chart}: {failure}")]
    Template {
        chart: String,
        failure: ToolFailure,
        verdict: Verdict,
    },
    #[error("failed to render {chart}: `{command}` printed output that is not UTF-8")]
    NotUtf8 { chart: String, command: String },
    #[error("failed to render {chart}: `{command}`: {detail}")]
    BadOutput {
        chart: String,
        command: String,
        detail: String,
    },
    /// The simulated lab has no model of this chart version.
    #[error(
        "chart {chart} version {version} is not modelled by the simulated lab (it knows cluster-manager 1.3.1, klusterlet 1.3.1, cluster-proxy 0.10.0 and 0.11.0, managed-serviceaccount 0.10.0)"
    )]
    NotModelled { chart: String, version: String },
    #[error(transparent)]
    Simulated(#[from] SimulatedFault),
}

impl From<ToolError> for HelmError {
    fn from(e: ToolError) -> Self {
        HelmError::Tool(Arc::new(e))
    }
}

impl Failure for HelmError {
    fn transience(&self) -> Transience {
        match self {
            HelmError::Tool(e) => e.transience(),
            HelmError::Template { verdict, .. } => verdict.transience,
            HelmError::Simulated(f) => f.transience,
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        match self {
            HelmError::Tool(e) => e.help(),
            HelmError::Template { verdict, .. } => verdict.help.clone(),
            HelmError::Simulated(f) => f.help.clone(),
            _ => None,
        }
    }
}
