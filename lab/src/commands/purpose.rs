//! What a command opens the backends for, and the workflows a command runs.

/// A workflow a command runs: one file of `workflows/` (embedded, or from `--workflows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workflow {
    Up,
    Verify,
    Down,
    Reset,
}

impl Workflow {
    /// The workflow's name: its file in `workflows/`, and the command that runs it alone.
    pub fn name(self) -> &'static str {
        match self {
            Workflow::Up => "up",
            Workflow::Verify => "verify",
            Workflow::Down => "down",
            Workflow::Reset => "reset",
        }
    }

    /// Whether it may download kind and helm: `up`, and `reset` (which ends with an `up`, so its preflight
    /// judges the same tools).
    pub(crate) fn may_download(self) -> bool {
        matches!(self, Workflow::Up | Workflow::Reset)
    }

    /// Whether it needs a lab that is up (and says so, with what to run, when there is none).
    pub(crate) fn needs_lab(self) -> bool {
        matches!(self, Workflow::Verify | Workflow::Reset)
    }

    /// Whether the doctor's checks run first on a real lab: a lab never starts half-way on a machine that
    /// cannot finish it, and a reset that could not finish its `up` does not start deleting either.
    pub(crate) fn preflight(self) -> bool {
        matches!(self, Workflow::Up | Workflow::Reset)
    }
}

/// What backends are opened for: which tools may be downloaded, and how a damaged simulated world is met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// To run a workflow.
    Run(Workflow),
    /// For `doctor`: a missing tool is judged as `up` would (downloaded, unless `--no-download`).
    Doctor,
    /// To look at the lab (`status`, `diagnose`): nothing is downloaded.
    Look,
}
