//! The engine: runs a plan's step graph against backends.
//!
//! Steps whose needs are met run concurrently, at most `concurrency` at a time, in a `JoinSet`. Errors an
//! action marks transient are retried with the one retry policy (`step::retry::Backoff`: 2 s doubling
//! to 30 s) until the step's deadline; a step with explicit `retry.attempts` instead gets that many attempts, each with the whole
//! deadline. Permanent errors fail at once. The first hard failure stops new work and lets running steps finish;
//! cancellation (Ctrl-C) stops new work and cancels running steps. A step that panics fails with its id
//! in the journal and a failure event, like any other failure.
//!
//! The engine is level-triggered: every run runs every step, and every action reads the lab and does only
//! what differs, so `up` on a finished lab changes nothing and `up` after an interrupted run converges from
//! whatever the lab is. The journal ([`journal`]) records what each run did (for `status` and `diagnose`);
//! nothing in it decides what runs.

pub mod journal;
pub mod report;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::actions;
use crate::step::events::{Event, Outcome};
use crate::step::retry::Backoff;
use crate::step::{ActionError, Outputs, RunCtx, StepCtx, timing};
use crate::workflow::{Plan, PlannedStep};
use journal::{Entry, Journal};

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Most steps running at once.
    pub concurrency: usize,
}

/// Steps running at once unless `--concurrency` says otherwise.
pub const DEFAULT_CONCURRENCY: u16 = 8;

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            concurrency: DEFAULT_CONCURRENCY.into(),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub ok: bool,
    /// The step that failed first, and why.
    pub failed: Option<(String, ActionError)>,
    pub cancelled: bool,
    pub changed: usize,
    pub unchanged: usize,
    /// What this run's verification found, when it verified (also when a check failed).
    pub verification: Option<Vec<crate::verify::CheckResult>>,
}

/// Why a run could not start or record its progress: the journal could not be written (a journal that
/// cannot be *read* is moved aside, never an error).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("failed to use the journal {path}: {source}")]
#[diagnostic(
    code(ocm_lab::journal),
    help(
        "the state folder must be writable by you: `ls -ld {folder}` shows its owner (a folder made with `sudo` needs `sudo chown -R $USER {folder}`)"
    )
)]
pub struct JournalError {
    pub path: String,
    /// The state folder holding it.
    pub folder: String,
    #[source]
    pub source: std::io::Error,
}

#[derive(Debug)]
enum StepEnd {
    Done(Outcome, Outputs),
    Failed(ActionError),
    Cancelled,
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}

/// Runs `plan`: every step, each once its needs are done. Every outcome is appended to the journal.
///
/// Split as a test runner is: the dispatcher here decides what runs (a [`Schedule`] of ready steps,
/// bounded by `concurrency`, stopped by a failure or Ctrl-C), [`run_step`] executes one step with its
/// retries, and a [`Recorder`] consumes what happened (the journal, the run's counts and timing).
pub async fn run(
    plan: &Plan,
    ctx: Arc<RunCtx>,
    opts: &RunOptions,
) -> Result<RunResult, JournalError> {
    let mut recorder = Recorder::open(plan, &ctx).await?;
    let mut schedule = Schedule::new(plan);
    let mut running: JoinSet<StepEnd> = JoinSet::new();
    let mut tasks: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut stopping = false;
    loop {
        if !stopping && ctx.cancel.is_cancelled() {
            stopping = true;
            recorder.result.cancelled = true;
        }
        while !stopping && running.len() < opts.concurrency.max(1) {
            let Some(i) = schedule.next() else { break };
            recorder.started(i);
            let ctx = ctx.clone();
            // Shared, not copied: a step instance carries its rendered manifests.
            let step = Arc::clone(&plan.steps[i]);
            let task = running.spawn(async move { run_step(&step, &ctx).await });
            tasks.insert(task.id(), i);
        }
        if running.is_empty() {
            break;
        }
        let joined = tokio::select! {
            Some(j) = running.join_next_with_id() => j,
            () = ctx.cancel.cancelled(), if !stopping => continue,
        };
        let (i, end) = match joined {
            Ok((id, end)) => (tasks.remove(&id).expect("spawned here"), end),
            Err(e) => {
                let i = tasks.remove(&e.id()).expect("spawned here");
                (i, task_lost(&plan.steps[i], &ctx, e))
            }
        };
        if recorder.ended(i, end).await? {
            schedule.done(i);
        } else {
            stopping = true;
        }
    }
    recorder.finish(stopping).await
}

/// Which steps may start: each counts the needs not yet done, and finishing a step releases its
/// dependents. Ready steps start in plan order, so each decision costs O(log n), not a scan of the plan.
struct Schedule {
    waiting_on: Vec<usize>,
    dependents: Vec<Vec<usize>>,
    ready: BTreeSet<usize>,
}

impl Schedule {
    fn new(plan: &Plan) -> Self {
        let index: HashMap<&str, usize> = plan
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| (s.id.as_str(), i))
            .collect();
        let waiting_on: Vec<usize> = plan.steps.iter().map(|s| s.needs.len()).collect();
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); plan.steps.len()];
        for (i, s) in plan.steps.iter().enumerate() {
            for n in &s.needs {
                dependents[index[n.as_str()]].push(i);
            }
        }
        let ready = (0..plan.steps.len())
            .filter(|i| waiting_on[*i] == 0)
            .collect();
        Schedule {
            waiting_on,
            dependents,
            ready,
        }
    }

    /// The next ready step, in plan order.
    fn next(&mut self) -> Option<usize> {
        self.ready.pop_first()
    }

    /// Step `i` is done: the steps waiting only on it become ready.
    fn done(&mut self, i: usize) {
        for &d in &self.dependents[i] {
            self.waiting_on[d] -= 1;
            if self.waiting_on[d] == 0 {
                self.ready.insert(d);
            }
        }
    }
}

/// A step whose task ended without an answer (it panicked, or was aborted): failed, and said so.
fn task_lost(step: &PlannedStep, ctx: &RunCtx, e: tokio::task::JoinError) -> StepEnd {
    let message = if e.is_panic() {
        format!("the step panicked: {}", panic_message(&*e.into_panic()))
    } else {
        format!("the step's task ended early: {e}")
    };
    let err = ActionError::permanent(message).with_help(
        "this is a bug in ocm-lab; please report it with the output of `ocm-lab diagnose`",
    );
    ctx.events.emit(Event::StepFailed {
        step: step.id.clone(),
        error: err.message.clone(),
        help: err.help.clone(),
        elapsed_ms: 0,
        backend: None,
    });
    StepEnd::Failed(err)
}

/// What consumes the run's outcomes: the journal, the run's result, and when each step ran.
struct Recorder<'a> {
    plan: &'a Plan,
    ctx: &'a Arc<RunCtx>,
    journal: Arc<Journal>,
    result: RunResult,
    done: usize,
    /// When each step started and ended in this run, for the timing summary.
    started: Vec<Option<u64>>,
    times: Vec<Option<(u64, u64)>>,
}

impl<'a> Recorder<'a> {
    /// Opens the journal (once per run, before any step starts, deliberately on this thread: a torn last
    /// line is cut off and a journal that cannot be read is moved aside, so this run's lines stand
    /// alone) and records that the run started.
    async fn open(plan: &'a Plan, ctx: &'a Arc<RunCtx>) -> Result<Recorder<'a>, JournalError> {
        let (journal, _, repair) = Journal::open(&ctx.state.journal()).map_err(|e| jerr(ctx, e))?;
        if let Some(repair) = repair {
            tracing::warn!("{repair}");
        }
        let recorder = Recorder {
            plan,
            ctx,
            journal: Arc::new(journal),
            result: RunResult {
                ok: false,
                failed: None,
                cancelled: false,
                changed: 0,
                unchanged: 0,
                verification: None,
            },
            done: 0,
            started: vec![None; plan.steps.len()],
            times: vec![None; plan.steps.len()],
        };
        recorder
            .append(Entry::RunStarted {
                run: ctx.run_id.clone(),
                workflow: plan.workflow.clone(),
                at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            })
            .await?;
        ctx.events.emit(Event::RunStarted {
            lab: plan.lab.clone(),
            workflow: plan.workflow.clone(),
            steps: plan.steps.len(),
            simulated: ctx.backends.simulated,
        });
        Ok(recorder)
    }

    fn started(&mut self, i: usize) {
        self.started[i] = Some(self.ctx.events.elapsed_ms());
    }

    /// Records how step `i` ended; `Ok(true)` when it is done and the run goes on.
    async fn ended(&mut self, i: usize, end: StepEnd) -> Result<bool, JournalError> {
        let id = self.plan.steps[i].id.clone();
        let run = self.ctx.run_id.clone();
        match end {
            StepEnd::Done(outcome, outputs) => {
                self.ctx.record_output(&id, &outputs);
                self.times[i] = self.started[i].map(|t| (t, self.ctx.events.elapsed_ms()));
                let changed = outcome == Outcome::Changed;
                self.append(Entry::StepDone {
                    run,
                    step: id,
                    changed,
                })
                .await?;
                match outcome {
                    Outcome::Changed => self.result.changed += 1,
                    Outcome::Unchanged => self.result.unchanged += 1,
                }
                self.done += 1;
                Ok(true)
            }
            StepEnd::Failed(e) => {
                let error = e.message.clone();
                self.append(Entry::StepFailed {
                    run,
                    step: id.clone(),
                    error,
                })
                .await?;
                self.result.failed.get_or_insert((id, e));
                Ok(false)
            }
            StepEnd::Cancelled => {
                self.result.cancelled = true;
                Ok(false)
            }
        }
    }

    /// Records the run's end (synced to disk), reports its timing and outcome, and returns its result.
    async fn finish(mut self, stopped: bool) -> Result<RunResult, JournalError> {
        let (plan, ctx) = (self.plan, self.ctx);
        self.result.ok = !stopped && self.done == plan.steps.len();
        self.append(Entry::RunFinished {
            run: ctx.run_id.clone(),
            ok: self.result.ok,
        })
        .await?;
        let synced = self.journal.clone();
        tokio::task::spawn_blocking(move || synced.sync())
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r)
            .map_err(|e| jerr(ctx, e))?;
        ctx.events.emit(Event::Timing {
            timing: timing::summarize(plan, &self.times),
            total_ms: ctx.events.elapsed_ms(),
        });
        let r = &self.result;
        ctx.events.emit(Event::RunFinished {
            ok: r.ok,
            elapsed_ms: ctx.events.elapsed_ms(),
            changed: r.changed,
            unchanged: r.unchanged,
            failed: r.failed.as_ref().map(|(s, _)| s.clone()),
            cancelled: r.cancelled,
        });
        self.result.verification = ctx.take_verification();
        Ok(self.result)
    }

    /// Appends `entry` to the journal on a blocking thread: steps end by the hundred in a large lab, and
    /// a write to the state folder (a slow or network disk) must not stall the threads running the steps.
    async fn append(&self, entry: Entry) -> Result<(), JournalError> {
        let journal = self.journal.clone();
        tokio::task::spawn_blocking(move || journal.append(&entry))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r)
            .map_err(|e| jerr(self.ctx, e))
    }
}

/// The journal of this run could not be written.
fn jerr(ctx: &RunCtx, source: std::io::Error) -> JournalError {
    JournalError {
        path: ctx.state.journal().display().to_string(),
        folder: ctx.state.path.display().to_string(),
        source,
    }
}

/// How long after a step's deadline the engine stops it: the action's own waits end at the deadline and
/// say what they waited for, which beats a bare "timed out".
const DEADLINE_GRACE: Duration = Duration::from_secs(2);

/// One step instance: attempts with deadline and backoff, cancellable.
///
/// Transient errors are retried per the step's [`crate::workflow::Retry`], through the one retry policy
/// ([`Backoff`]): by default until the step's deadline (every attempt shares it), with `attempts: N` up
/// to N attempts of a whole timeout each. Permanent errors end the step at once.
async fn run_step(step: &PlannedStep, ctx: &Arc<RunCtx>) -> StepEnd {
    let start = tokio::time::Instant::now();
    let step_deadline = start + step.timeout;
    let policy = Backoff::new(step.retry.backoff, crate::workflow::Retry::MAX_BACKOFF);
    let mut policy = match step.retry.attempts {
        Some(n) => policy.attempts(n),
        None => policy.until(step_deadline),
    };
    loop {
        let attempt = policy.tried() + 1;
        let deadline = match step.retry.attempts {
            Some(_) => tokio::time::Instant::now() + step.timeout,
            None => step_deadline,
        };
        let err = match attempt_step(step, ctx, attempt, deadline).await {
            Attempt::Ended(end) => {
                if let StepEnd::Done(outcome, _) = &end {
                    ctx.events.emit(Event::StepFinished {
                        step: step.id.clone(),
                        outcome: *outcome,
                        elapsed_ms: start.elapsed().as_millis() as u64,
                    });
                }
                return end;
            }
            Attempt::Failed(err) => err,
        };
        let pause = if err.is_transient() {
            policy.pause()
        } else {
            None
        };
        let Some(pause) = pause else {
            return failed(step, ctx, err, attempt, start);
        };
        ctx.events.emit(Event::StepRetrying {
            step: step.id.clone(),
            attempt,
            error: err.message.clone(),
            backoff_ms: pause.as_millis() as u64,
        });
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = ctx.cancel.cancelled() => {
                ctx.events.emit(Event::StepCancelled { step: step.id.clone() });
                return StepEnd::Cancelled;
            }
        }
    }
}

/// How one attempt of a step ended: for good (done, or cancelled), or with an error to retry or report.
enum Attempt {
    Ended(StepEnd),
    Failed(ActionError),
}

/// Runs the step's action once, with its deadline (and a grace after it) and Ctrl-C.
async fn attempt_step(
    step: &PlannedStep,
    ctx: &Arc<RunCtx>,
    attempt: u32,
    deadline: tokio::time::Instant,
) -> Attempt {
    ctx.events.emit(Event::StepStarted {
        step: step.id.clone(),
        uses: step.uses.clone(),
        attempt,
    });
    let sctx = StepCtx {
        step,
        run: ctx,
        deadline,
    };
    let outcome = tokio::select! {
        r = tokio::time::timeout_at(deadline + DEADLINE_GRACE, actions::run(&sctx)) => r,
        () = ctx.cancel.cancelled() => {
            ctx.events.emit(Event::StepCancelled { step: step.id.clone() });
            return Attempt::Ended(StepEnd::Cancelled);
        }
    };
    match outcome {
        Ok(Ok((changed, outputs))) => {
            let outcome = if changed { Outcome::Changed } else { Outcome::Unchanged };
            Attempt::Ended(StepEnd::Done(outcome, outputs))
        }
        Ok(Err(e)) => Attempt::Failed(e),
        Err(_) => Attempt::Failed(
            ActionError::permanent(format!(
                "timed out after {}",
                humantime::format_duration(step.timeout)
            ))
            .with_help(
                "raise the matching `spec.timeouts` value in the topology if the machine is just slow",
            ),
        ),
    }
}

/// The step failed for good: says how many attempts it took when it was retried, and reports it.
fn failed(
    step: &PlannedStep,
    ctx: &RunCtx,
    err: ActionError,
    attempt: u32,
    start: tokio::time::Instant,
) -> StepEnd {
    let err = if err.is_transient() && attempt > 1 {
        ActionError {
            message: format!("{} (after {attempt} attempts)", err.message),
            ..err
        }
    } else {
        err
    };
    ctx.events.emit(Event::StepFailed {
        step: step.id.clone(),
        error: err.message.clone(),
        help: err.help.clone(),
        elapsed_ms: start.elapsed().as_millis() as u64,
        backend: err.backend,
    });
    StepEnd::Failed(err)
}
