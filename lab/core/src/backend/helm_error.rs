//! The Helm backend's error: what went wrong rendering or installing a chart, with the facts (the chart, the command,
//! its exit status and stderr) and whether a retry may help.

use std::sync::Arc;

use super::tools::{ToolError, ToolFailure, Verdict};
use super::{Failure, Transience};

/// What went wrong rendering or installing a chart, or reading a release. The chart is named as the user knows it:
/// `cluster-manager 1.3.1 (release `cluster-manager` in namespace `open-cluster-management`)`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HelmError {
    /// helm could not be found, downloaded, started or waited for.
    #[error(transparent)]
    Tool(Arc<ToolError>),
    /// The chart could not be taken from the chart cache or fetched and verified into it.
    #[error("failed to {what}: {error}")]
    ChartCache {
        what: String,
        error: Arc<super::chart_cache::ChartCacheError>,
    },
    /// `what` is the operation with its chart or release: `render cluster-manager 1.3.1 (release …)`.
    #[error("failed to {what}: failed to create a private temporary folder: {detail}")]
    Scratch { what: String, detail: String },
    #[error("failed to {what}: failed to write the values file: {detail}")]
    ValuesFile { what: String, detail: String },
    /// The Helm 4 post-renderer plugin could not be written into ocm-lab's cache.
    #[error("failed to {what}: failed to write the Helm 4 post-renderer plugin in {dir}: {detail}")]
    Plugin {
        what: String,
        dir: String,
        detail: String,
    },
    /// `helm template` or `helm upgrade --install` failed; `verdict` is what its stderr says about
    /// retrying and what to do.
    #[error("failed to {what}: {failure}")]
    Template {
        what: String,
        failure: ToolFailure,
        verdict: Verdict,
    },
    /// A read of Helm's release records (`helm list`, `helm get values`) or `helm uninstall` failed:
    /// the cluster may be briefly unreachable, so a retry may help.
    #[error("failed to {what}: {failure}")]
    Release { what: String, failure: ToolFailure },
    #[error("failed to {what}: `{command}` printed output that is not UTF-8")]
    NotUtf8 { what: String, command: String },
    #[error("failed to {what}: `{command}`: {detail}")]
    BadOutput {
        what: String,
        command: String,
        detail: String,
    },
    /// Helm said the install succeeded, but does not list the release.
    #[error("helm reported success for {what}, but `helm list` does not show the release")]
    ReleaseMissing { what: String },
}

impl From<ToolError> for HelmError {
    fn from(e: ToolError) -> Self {
        HelmError::Tool(Arc::new(e))
    }
}

impl Failure for HelmError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::Helm
    }
    fn transience(&self) -> Transience {
        match self {
            HelmError::Tool(e) => e.transience(),
            HelmError::Template { verdict, .. } => verdict.transience,
            HelmError::Release { .. } => Transience::Transient,
            HelmError::ChartCache { error, .. } => error.transience(),
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        match self {
            HelmError::Tool(e) => e.help(),
            HelmError::Template { verdict, .. } => verdict.help.clone(),
            HelmError::ChartCache { error, .. } => error.help(),
            HelmError::Plugin { .. } => {
                Some("check that ocm-lab's cache folder (OCM_LAB_CACHE_DIR) is writable".to_owned())
            }
            _ => None,
        }
    }
}
