//! The error of an action, and so of a step: what failed, whether a retry may help, and what the user can
//! do. Backends fail with their own typed errors ([`crate::backend::Failure`]); they become an
//! [`ActionError`] here, at the action boundary, where the engine's retry and the report take over.

use crate::backend::{Failure, Transience};

/// Why a step failed: the message the user sees, whether the engine may retry, and what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ActionError {
    pub message: String,
    pub transience: Transience,
    /// What to do next, when we know.
    pub help: Option<String>,
}

impl ActionError {
    pub fn permanent(message: impl Into<String>) -> Self {
        ActionError {
            message: message.into(),
            transience: Transience::Permanent,
            help: None,
        }
    }
    pub fn transient(message: impl Into<String>) -> Self {
        ActionError {
            message: message.into(),
            transience: Transience::Transient,
            help: None,
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
}

/// Every backend error becomes an action error with its message, transience and help.
impl<E: Failure> From<E> for ActionError {
    fn from(e: E) -> Self {
        ActionError {
            message: e.to_string(),
            transience: e.transience(),
            help: e.help(),
        }
    }
}
