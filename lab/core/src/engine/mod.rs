//! The engine: runs a plan's step graph against backends.
//!
//! Steps whose needs are met run concurrently, at most `concurrency` at a time, in a `JoinSet`. Errors an
//! action marks transient are retried with exponential backoff (2 s doubling to 30 s) until the step's
//! deadline; a step with explicit `retry.attempts` instead gets that many attempts, each with the whole
//! deadline. Permanent errors fail at once. The first hard failure stops new work and lets running steps finish;
//! cancellation (Ctrl-C) stops new work and cancels running steps. A step that panics fails with its id
//! in the journal and a failure event, like any other failure.
//!
//! Every outcome goes to the journal ([`journal`]), which is a hint that saves time, not the truth about
//! the lab. When a step ends, a [`Durability`] hook (the simulated lab saves its world) makes its effects
//! durable *before* the journal records it as done; concurrent step ends share one save, saves are spaced
//! (at most a third of the time goes to saving), and the steps that need a finished step start without
//! waiting for its save. A later run of
//! the same workflow, when the last run was interrupted and no other workflow ran since, carries a
//! finished step over only if the digest of its resolved inputs ([`digest`]) is unchanged; observe-only
//! steps (preflight, verification) always run again. Everything else runs again, which is safe because
//! every action observes before it acts. `up` on a finished lab re-checks every step.

pub mod digest;
pub mod journal;
pub mod report;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinSet;

use crate::actions;
use crate::step::events::{Event, Outcome};
use crate::step::{ActionError, Durability, Outputs, RunCtx, StepCtx, timing};
use crate::workflow::{Plan, PlannedStep};
use journal::{Entry, Journal};

/// Group commit over a [`Durability`] hook: a step end that arrives while a save runs waits for the
/// next save, which covers every step that ended meanwhile, so N concurrent step ends cost one save.
struct GroupCommit {
    hook: Arc<dyn Durability>,
    /// Tickets handed out: one per step end that asked for durability.
    requested: AtomicU64,
    /// The highest ticket a finished save covers. Held while saving, so saves never overlap.
    saved: tokio::sync::Mutex<u64>,
    /// How long the last save took.
    last_cost: Mutex<Duration>,
}

impl GroupCommit {
    fn new(hook: Arc<dyn Durability>) -> Self {
        GroupCommit {
            hook,
            requested: AtomicU64::new(0),
            saved: tokio::sync::Mutex::new(0),
            last_cost: Mutex::new(Duration::ZERO),
        }
    }

    async fn commit(&self) -> Result<(), ActionError> {
        let ticket = self.requested.fetch_add(1, Ordering::SeqCst) + 1;
        let mut saved = self.saved.lock().await;
        if *saved >= ticket {
            return Ok(()); // a save that started after this step ended covered it
        }
        // Saves are spaced so that at most a third of the time goes to saving: the step ends that arrive
        // meanwhile share the next save (nothing waits on it but their journal lines).
        let spacing = *self.last_cost.lock().expect("not poisoned") * 2;
        tokio::time::sleep(spacing).await;
        // Every ticket up to here belongs to a step whose effects are already in the state being saved.
        let target = self.requested.load(Ordering::SeqCst);
        let hook = self.hook.clone();
        let started = tokio::time::Instant::now();
        let saved_now = tokio::task::spawn_blocking(move || hook.persist()).await;
        *self.last_cost.lock().expect("not poisoned") = started.elapsed();
        saved_now
            .map_err(|e| ActionError::permanent(format!("saving the lab's state failed: {e}")))?
            .map_err(|e| {
                ActionError::permanent(format!("failed to save the lab's state: {e}"))
                    .with_help("check the state folder's permissions and free space, then run the same command again")
            })?;
        *saved = target;
        Ok(())
    }
}

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
    pub resumed: usize,
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

/// The test-only crash point: `OCM_LAB_CRASH_POINT=n` makes the process SIGKILL itself right after the
/// n-th step it ran is journaled as done, so tests can prove a kill at any step boundary is survivable.
fn crash_point() -> Option<usize> {
    std::env::var("OCM_LAB_CRASH_POINT")
        .ok()
        .and_then(|v| v.trim().parse().ok())
}

/// Dies of a real SIGKILL, as an OOM kill or `kill -9` would do it (no unwinding, no destructors).
fn crash() -> ! {
    #[cfg(unix)]
    {
        // SAFETY: kill(2) on our own pid has no memory-safety preconditions.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
        // The signal is delivered before kill(2) returns to a single-threaded caller; other threads may
        // run a moment longer, this one never goes on.
        loop {
            std::thread::park();
        }
    }
    #[cfg(not(unix))]
    std::process::abort()
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic".to_owned())
}

/// Runs `plan`. A step the journal records as done by an interrupted earlier run of the same workflow,
/// with no other workflow run since, is not run again when its input digest is unchanged (observe-only
/// steps always run); after a completed run, every step runs again (and should find nothing to change).
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
    // Read once per run, before any step starts: deliberately kept on this thread (blocking).
    let (journal, entries, repair) = Journal::open(&ctx.state.journal()).map_err(jerr)?;
    let journal = Arc::new(journal);
    if let Some(repair) = repair {
        tracing::warn!("{repair}");
    }
    let last = journal::last_run(&entries, &plan.workflow);
    drop(entries);
    let digester = digest::Digester::new(&ctx.lab, &ctx.patches, &ctx.tool_versions);
    let digests: Vec<String> = plan.steps.iter().map(|s| digester.step(s)).collect();
    let mut carried: HashMap<&str, Outputs> = HashMap::new();
    if last.resumable() {
        let mut done = last.done;
        for (s, d) in plan.steps.iter().zip(&digests) {
            if digest::observe_only(s) {
                continue;
            }
            if let Some(prev) = done.remove(&s.id)
                && prev.digest.as_deref() == Some(d.as_str())
            {
                carried.insert(s.id.as_str(), prev.outputs);
            }
        }
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
    // The roots that were not resumed; the rest become ready as their needs finish (or are resumed).
    let mut ready: BTreeSet<usize> = (0..plan.steps.len())
        .filter(|i| waiting_on[*i] == 0 && !carried.contains_key(plan.steps[*i].id.as_str()))
        .collect();
    let mut done: HashSet<usize> = HashSet::new();
    let mut mark_done = |i: usize, done: &mut HashSet<usize>, ready: &mut BTreeSet<usize>| {
        done.insert(i);
        for &d in &dependents[i] {
            waiting_on[d] -= 1;
            if waiting_on[d] == 0 {
                ready.insert(d);
            }
        }
    };
    let mut result = RunResult {
        ok: false,
        failed: None,
        cancelled: false,
        changed: 0,
        unchanged: 0,
        resumed: 0,
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
    let resumable: Vec<usize> = plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| carried.contains_key(s.id.as_str()))
        .map(|(i, _)| i)
        .collect();
    ctx.events.emit(Event::RunStarted {
        lab: plan.lab.clone(),
        workflow: plan.workflow.clone(),
        steps: plan.steps.len(),
        simulated: ctx.backends.simulated,
        resumed: resumable.len(),
    });
    for i in resumable {
        let s = &plan.steps[i];
        let outputs = carried.remove(s.id.as_str()).expect("carried");
        ctx.record_output(&s.id, &outputs);
        // Carried forward into this run's journal, so a second interruption still remembers them.
        append(
            &journal,
            Entry::StepDone {
                run: ctx.run_id.clone(),
                step: s.id.clone(),
                digest: Some(digests[i].clone()),
                outputs,
            },
        )
        .await
        .map_err(jerr)?;
        ctx.events.emit(Event::StepFinished {
            step: s.id.clone(),
            outcome: Outcome::Resumed,
            elapsed_ms: 0,
        });
        mark_done(i, &mut done, &mut ready);
        result.resumed += 1;
    }

    // One group commit per run over the context's durability hook (a context serves one run).
    let group = ctx
        .durability()
        .cloned()
        .map(|hook| Arc::new(GroupCommit::new(hook)));
    let crash_at = crash_point();
    let mut boundaries = 0usize;
    // Steps whose action runs, and steps that finished and wait for their effects to be made durable.
    let mut running: JoinSet<StepEnd> = JoinSet::new();
    let mut tasks: HashMap<tokio::task::Id, usize> = HashMap::new();
    let mut committing: JoinSet<(usize, Outcome, Outputs, Result<(), ActionError>)> =
        JoinSet::new();
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
                if done.contains(&i) {
                    continue; // resumed from the journal before its needs were
                }
                started[i] = Some(ctx.events.elapsed_ms());
                let ctx = ctx.clone();
                // Shared, not copied: a step instance carries its rendered manifests.
                let step = Arc::clone(&plan.steps[i]);
                let task = running.spawn(async move { run_step(&step, &ctx).await });
                tasks.insert(task.id(), i);
            }
        }
        if running.is_empty() && committing.is_empty() {
            break;
        }
        enum Joined {
            Ran(Result<(tokio::task::Id, StepEnd), tokio::task::JoinError>),
            Committed((usize, Outcome, Outputs, Result<(), ActionError>)),
        }
        let joined = tokio::select! {
            Some(j) = running.join_next_with_id() => Joined::Ran(j),
            Some(c) = committing.join_next() => Joined::Committed(c.expect("a commit never panics")),
            () = ctx.cancel.cancelled(), if !stopping => continue,
        };
        let (i, end) = match joined {
            Joined::Ran(Ok((id, end))) => (tasks.remove(&id).expect("spawned here"), end),
            Joined::Ran(Err(e)) => {
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
            Joined::Committed((i, outcome, outputs, Ok(()))) => {
                let id = plan.steps[i].id.clone();
                append(
                    &journal,
                    Entry::StepDone {
                        run: ctx.run_id.clone(),
                        step: id.clone(),
                        digest: Some(digests[i].clone()),
                        outputs: outputs.clone(),
                    },
                )
                .await
                .map_err(jerr)?;
                boundaries += 1;
                if crash_at == Some(boundaries) {
                    crash();
                }
                match outcome {
                    Outcome::Changed => result.changed += 1,
                    _ => result.unchanged += 1,
                }
                continue;
            }
            Joined::Committed((i, _, _, Err(e))) => {
                ctx.events.emit(Event::StepFailed {
                    step: plan.steps[i].id.clone(),
                    error: e.message.clone(),
                    help: e.help.clone(),
                    elapsed_ms: 0,
                });
                (i, StepEnd::Failed(e))
            }
        };
        let id = plan.steps[i].id.clone();
        match end {
            StepEnd::Done(outcome, outputs) => {
                // The steps that need this one start now: only the journal line waits for the save. A
                // later step's save covers this step's effects too, so the journal never says a step is
                // done whose effects a crash can lose, and the saves stay off the critical path.
                ctx.record_output(&id, &outputs);
                times[i] = started[i].map(|t| (t, ctx.events.elapsed_ms()));
                mark_done(i, &mut done, &mut ready);
                let group = group.clone();
                committing.spawn(async move {
                    let durable = match &group {
                        Some(g) => g.commit().await,
                        None => Ok(()),
                    };
                    (i, outcome, outputs, durable)
                });
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
    result.ok = !stopping && done.len() == plan.steps.len();
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
        resumed: result.resumed,
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
