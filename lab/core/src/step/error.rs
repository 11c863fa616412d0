//! The error of an action, and so of a step: what failed, whether a retry may help, and what the user can
//! do. Backends fail with their own typed errors ([`crate::backend::Failure`]); they become an
//! [`ActionError`] here, at the action boundary, keeping the typed error as their source and which
//! backend it came from, so the engine, the events and the reports decide on types, never on text.

use std::sync::Arc;

use crate::backend::{Backend, Failure, Transience};

/// Why a step failed: the message the user sees, whether the engine may retry, what to do next, and,
/// for a backend's failure, which backend and its typed error.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ActionError {
    pub message: String,
    pub transience: Transience,
    /// What to do next, when we know.
    pub help: Option<String>,
    /// The backend whose failure this is, when it is one.
    pub backend: Option<Backend>,
    /// The backend's typed error (downcast it to `KubeError`, `DockerError`, … to read its variant).
    #[source]
    pub source: Option<Arc<dyn std::error::Error + Send + Sync + 'static>>,
}

/// Equal when they say the same (message, transience, help, backend); the sources are not compared.
impl PartialEq for ActionError {
    fn eq(&self, other: &Self) -> bool {
        self.message == other.message
            && self.transience == other.transience
            && self.help == other.help
            && self.backend == other.backend
    }
}

impl Eq for ActionError {}

impl ActionError {
    pub fn permanent(message: impl Into<String>) -> Self {
        Self::new(message.into(), Transience::Permanent)
    }
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(message.into(), Transience::Transient)
    }
    fn new(message: String, transience: Transience) -> Self {
        ActionError {
            message,
            transience,
            help: None,
            backend: None,
            source: None,
        }
    }
    #[must_use]
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
    /// The same error, its message prefixed with what was being done: `failed to apply X: <message>`.
    #[must_use]
    pub fn context(mut self, doing: impl std::fmt::Display) -> Self {
        self.message = format!("{doing}: {}", self.message);
        self
    }
    pub fn is_transient(&self) -> bool {
        self.transience == Transience::Transient
    }
    /// The backend's typed error, when this is a failure of `E`'s backend.
    pub fn source_as<E: std::error::Error + 'static>(&self) -> Option<&E> {
        self.source.as_deref()?.downcast_ref::<E>()
    }
}

/// Every backend error becomes an action error with its message, transience and help, keeping the
/// typed error and its backend.
impl<E: Failure + Send + Sync + 'static> From<E> for ActionError {
    fn from(e: E) -> Self {
        ActionError {
            message: e.to_string(),
            transience: e.transience(),
            help: e.help(),
            backend: Some(e.backend()),
            source: Some(Arc::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::KubeError;

    #[test]
    fn a_backend_error_keeps_its_type_and_backend() {
        let kube = KubeError::UnknownCluster {
            cluster: "east".into(),
            lab: "demo".into(),
        };
        let e = ActionError::from(kube).context("failed to connect");
        assert_eq!(e.backend, Some(Backend::Kube));
        assert!(matches!(
            e.source_as::<KubeError>(),
            Some(KubeError::UnknownCluster { cluster, .. }) if cluster == "east"
        ));
        assert!(std::error::Error::source(&e).is_some());
        assert!(
            ActionError::permanent("x")
                .source_as::<KubeError>()
                .is_none()
        );
    }
}
