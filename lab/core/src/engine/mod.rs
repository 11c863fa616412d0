//! The engine: runs a plan's step graph against backends.
//!
//! Steps whose needs are met run concurrently, at most `concurrency` at a time, in a `JoinSet`. Errors an
//! action marks transient are retried with exponential backoff (2 s doubling to 30 s) until the step's
//! deadline; a step with explicit `retry.attempts` instead gets that many attempts, each with the whole
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
pub async fn run(
    plan: &Plan,
    ctx: Arc<RunCtx>,
    opts: &RunOptions,
) -> Result<RunResult, JournalError> {
    let jerr = |source| JournalError {
        path: ctx.state.journal().display().to_string(),
        folder: ctx.state.path.display().to_string(),
        source,
    };
    // Opened once per run, before any step starts (deliberately on this thread, blocking): a torn last
    // line is cut off and a journal that cannot be read is moved aside, so this run's lines stand alone.
    let (journal, _, repair) = Journal::open(&ctx.state.journal()).map_err(jerr)?;
    let journal = Arc::new(journal);
    if let Some(repair) = repair {
        tracing::warn!("{repair}");
    }

    let index: HashMap<&str, usize> = plan
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    // Ready queue: each step counts the needs not yet done; finishing a step decrements its dependents.
    // Ready steps start in plan order, so each scheduling decision costs O(log n), not a scan of the plan.
    let mut waiting_on: Vec<usize> = plan.steps.iter().map(|s| s.needs.len()).collect();
    let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); plan.steps.len()];
    for (i, s) in plan.steps.iter().enumerate() {
        for n in &s.needs {
            dependents[index[n.as_str()]].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..plan.steps.len())
        .filter(|i| waiting_on[*i] == 0)
        .collect();
    let mut done = 0usize;
    let mut result = RunResult {
        ok: false,
        failed: None,
        cancelled: false,
        changed: 0,
        unchanged: 0,
        verification: None,
    };

    append(
        &journal,
        Entry::RunStarted {
            run: ctx.run_id.clone(),
            workflow: plan.workflow.clone(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        },
    )
    .await
    .map_err(jerr)?;
    ctx.events.emit(Event::RunStarted {
        lab: plan.lab.clone(),
        workflow: plan.workflow.clone(),
        steps: plan.steps.len(),
        simulated: ctx.backends.simulated,
    });

    let mut running: JoinSet<StepEnd> = JoinSet::new();
    let mut tasks: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut stopping = false;
    // When each step started and ended in this run, for the timing summary.
    let mut started: Vec<Option<u64>> = vec![None; plan.steps.len()];
    let mut times: Vec<Option<(u64, u64)>> = vec![None; plan.steps.len()];
    loop {
        if !stopping && ctx.cancel.is_cancelled() {
            stopping = true;
            result.cancelled = true;
        }
        if !stopping {
            while running.len() < opts.concurrency.max(1) {
                let Some(i) = ready.pop_first() else { break };
                started[i] = Some(ctx.events.elapsed_ms());
                let ctx = ctx.clone();
                // Shared, not copied: a step instance carries its rendered manifests.
                let step = Arc::clone(&plan.steps[i]);
                let task = running.spawn(async move { run_step(&step, &ctx).await });
                tasks.insert(task.id(), i);
            }
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
                let message = if e.is_panic() {
                    format!("the step panicked: {}", panic_message(&*e.into_panic()))
                } else {
                    format!("the step's task ended early: {e}")
                };
                let err = ActionError::permanent(message).with_help(
                    "this is a bug in ocm-lab; please report it with the output of `ocm-lab diagnose`",
                );
                ctx.events.emit(Event::StepFailed {
                    step: plan.steps[i].id.clone(),
                    error: err.message.clone(),
                    help: err.help.clone(),
                    elapsed_ms: 0,
                });
                (i, StepEnd::Failed(err))
            }
        };
        let id = plan.steps[i].id.clone();
        match end {
            StepEnd::Done(outcome, outputs) => {
                ctx.record_output(&id, &outputs);
                times[i] = started[i].map(|t| (t, ctx.events.elapsed_ms()));
                append(
                    &journal,
                    Entry::StepDone {
                        run: ctx.run_id.clone(),
                        step: id,
                        changed: outcome == Outcome::Changed,
                    },
                )
                .await
                .map_err(jerr)?;
                match outcome {
                    Outcome::Changed => result.changed += 1,
                    Outcome::Unchanged => result.unchanged += 1,
                }
                done += 1;
                for &d in &dependents[i] {
                    waiting_on[d] -= 1;
                    if waiting_on[d] == 0 {
                        ready.insert(d);
                    }
                }
            }
            StepEnd::Failed(e) => {
                append(
                    &journal,
                    Entry::StepFailed {
                        run: ctx.run_id.clone(),
                        step: id.clone(),
                        error: e.message.clone(),
                    },
                )
                .await
                .map_err(jerr)?;
                if result.failed.is_none() {
                    result.failed = Some((id, e));
                }
                stopping = true;
            }
            StepEnd::Cancelled => {
                result.cancelled = true;
                stopping = true;
            }
        }
    }
    result.ok = !stopping && done == plan.steps.len();
    append(
        &journal,
        Entry::RunFinished {
            run: ctx.run_id.clone(),
            ok: result.ok,
        },
    )
    .await
    .map_err(jerr)?;
    let synced = journal.clone();
    tokio::task::spawn_blocking(move || synced.sync())
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(jerr)?;
    ctx.events.emit(Event::Timing {
        timing: timing::summarize(plan, &times),
        total_ms: ctx.events.elapsed_ms(),
    });
    ctx.events.emit(Event::RunFinished {
        ok: result.ok,
        elapsed_ms: ctx.events.elapsed_ms(),
        changed: result.changed,
        unchanged: result.unchanged,
        failed: result.failed.as_ref().map(|(s, _)| s.clone()),
        cancelled: result.cancelled,
    });
    result.verification = ctx.take_verification();
    Ok(result)
}

/// Appends `entry` to the journal on a blocking thread: steps end by the hundred in a large lab, and a
/// write to the state folder (a slow or network disk) must not stall the threads running the steps.
async fn append(journal: &Arc<Journal>, entry: Entry) -> std::io::Result<()> {
    let journal = journal.clone();
    tokio::task::spawn_blocking(move || journal.append(&entry))
        .await
        .map_err(std::io::Error::other)?
}

/// How long after a step's deadline the engine stops it: the action's own waits end at the deadline and
/// say what they waited for, which beats a bare "timed out".
const DEADLINE_GRACE: Duration = Duration::from_secs(2);

/// One step instance: attempts with deadline and backoff, cancellable.
///
/// Transient errors are retried per the step's [`crate::workflow::Retry`]: by default until the step's
/// deadline (every attempt shares it), with `attempts: N` up to N attempts of a whole timeout each.
/// Permanent errors end the step at once.
async fn run_step(step: &PlannedStep, ctx: &Arc<RunCtx>) -> StepEnd {
    let start = tokio::time::Instant::now();
    let step_deadline = start + step.timeout;
    let elapsed = || start.elapsed().as_millis() as u64;
    let mut backoff = step.retry.backoff;
    let mut attempt = 0;
    loop {
        attempt += 1;
        ctx.events.emit(Event::StepStarted {
            step: step.id.clone(),
            uses: step.uses.clone(),
            attempt,
        });
        let deadline = match step.retry.attempts {
            Some(_) => tokio::time::Instant::now() + step.timeout,
            None => step_deadline,
        };
        let sctx = StepCtx {
            step,
            run: ctx,
            deadline,
        };
        let outcome = tokio::select! {
            r = tokio::time::timeout_at(deadline + DEADLINE_GRACE, actions::run(&sctx)) => r,
            () = ctx.cancel.cancelled() => {
                ctx.events.emit(Event::StepCancelled { step: step.id.clone() });
                return StepEnd::Cancelled;
            }
        };
        let err = match outcome {
            Ok(Ok((changed, outputs))) => {
                let outcome = if changed { Outcome::Changed } else { Outcome::Unchanged };
                ctx.events.emit(Event::StepFinished { step: step.id.clone(), outcome, elapsed_ms: elapsed() });
                return StepEnd::Done(outcome, outputs);
            }
            Ok(Err(e)) => e,
            Err(_) => ActionError::permanent(format!("timed out after {}", humantime::format_duration(step.timeout)))
                .with_help("raise the matching `spec.timeouts` value in the topology if the machine is just slow"),
        };
        let may_retry = err.is_transient()
            && match step.retry.attempts {
                Some(n) => attempt < n,
                None => tokio::time::Instant::now() + backoff < step_deadline,
            };
        if may_retry {
            ctx.events.emit(Event::StepRetrying {
                step: step.id.clone(),
                attempt,
                error: err.message.clone(),
                backoff_ms: backoff.as_millis() as u64,
            });
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = ctx.cancel.cancelled() => {
                    ctx.events.emit(Event::StepCancelled { step: step.id.clone() });
                    return StepEnd::Cancelled;
                }
            }
            backoff = (backoff * 2).min(crate::workflow::Retry::MAX_BACKOFF);
            continue;
        }
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
            elapsed_ms: elapsed(),
        });
        return StepEnd::Failed(err);
    }
}
