//! Events: everything a run reports, as data. The terminal reporter and `--output json` both consume them.
//!
//! `--output json` prints one [`Stamped`] event per line on stdout: `{"schema_version":2,"t_ms":…,
//! "event":"run-started",…}`. Every event carries `schema_version` ([`SCHEMA_VERSION`]); it changes only
//! when a field is removed or changes meaning (new events and new fields keep it). Every run, a failed
//! preflight included, prints `run-started` first and `run-finished` last; a preflight that stops the run
//! is one `step-failed` of the step `preflight` in between.

use serde::Serialize;

/// How a step instance ended well.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It changed the lab.
    Changed,
    /// It found everything in place and changed nothing.
    Unchanged,
}

/// The verdict of one reported result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResultStatus {
    Pass,
    Fail,
    /// Not checked, and why is in the detail: never counted as a pass.
    Skip,
}

/// One thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    RunStarted {
        lab: String,
        workflow: String,
        steps: usize,
        simulated: bool,
    },
    StepStarted {
        step: String,
        uses: String,
        attempt: u32,
    },
    StepProgress {
        step: String,
        message: String,
    },
    /// What a step did that its name does not say (what it removed, what it left and why): shown on the
    /// step's line when it finishes.
    StepNote {
        step: String,
        message: String,
    },
    StepRetrying {
        step: String,
        attempt: u32,
        error: String,
        backoff_ms: u64,
    },
    StepFinished {
        step: String,
        outcome: Outcome,
        elapsed_ms: u64,
    },
    StepFailed {
        step: String,
        error: String,
        help: Option<String>,
        elapsed_ms: u64,
        /// The backend whose failure ended the step, when it was one.
        #[serde(skip_serializing_if = "Option::is_none")]
        backend: Option<crate::backend::Backend>,
    },
    StepCancelled {
        step: String,
    },
    /// A line of a result the command reports (for example a verification result).
    Result {
        check: String,
        subject: String,
        status: ResultStatus,
        detail: String,
        /// Where the chain broke, for a failed verification check (`verify::Hop`, kebab-case).
        #[serde(skip_serializing_if = "Option::is_none")]
        hop: Option<String>,
        /// The failure cannot change by waiting, so the check ended at once.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        permanent: bool,
    },
    /// Where the time went: every step's times and the critical path. Emitted just before `run-finished`.
    Timing {
        #[serde(flatten)]
        timing: super::timing::Timing,
        total_ms: u64,
    },
    RunFinished {
        ok: bool,
        elapsed_ms: u64,
        changed: usize,
        unchanged: usize,
        failed: Option<String>,
        cancelled: bool,
    },
}

/// The version of the JSON event stream, carried by every event as `schema_version`.
/// Version 2 dropped `resumed` from `run-started` and `run-finished`: every run runs every step.
pub const SCHEMA_VERSION: u32 = 2;

/// An event with the time since the run started, as emitted.
#[derive(Debug, Clone, Serialize)]
pub struct Stamped {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Milliseconds since the run started (tokio's clock, so virtual time in tests with paused time).
    pub t_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// Where events go: cheap to clone, never blocks a step.
#[derive(Debug, Clone)]
pub struct Events {
    tx: tokio::sync::mpsc::UnboundedSender<Stamped>,
    start: tokio::time::Instant,
}

impl Events {
    pub fn channel() -> (Events, tokio::sync::mpsc::UnboundedReceiver<Stamped>) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        (
            Events {
                tx,
                start: tokio::time::Instant::now(),
            },
            rx,
        )
    }

    pub fn emit(&self, event: Event) {
        let t_ms = self.start.elapsed().as_millis() as u64;
        // The reporter may have gone (output closed): a run never fails for that.
        let _ = self.tx.send(Stamped {
            schema_version: SCHEMA_VERSION,
            t_ms,
            event,
        });
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}
