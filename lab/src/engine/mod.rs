//! The engine: runs a plan's step graph against backends.
//!
//! Steps whose needs are met run concurrently, at most `concurrency` at a time, in a `JoinSet`. Each
//! attempt has the step's deadline; errors an action marks transient are retried with exponential backoff
//! up to the step's attempts. The first hard failure stops new work and lets running steps finish;
//! cancellation (Ctrl-C) stops new work and cancels running steps. Every outcome goes to the journal, so
//! `up` after a failure resumes, and `up` on a finished lab re-checks every step.

pub mod events;
pub mod journal;
pub mod report;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::actions::{self, StepCtx};
use crate::backend::{BackendError, Backends, ClusterApi};
use crate::patch::PatchSet;
use crate::state::StateDir;
use crate::topology::{Lab, Provider};
use crate::workflow::{Plan, PlannedStep};
use events::{Event, Events, Outcome};
use journal::{Entry, Journal};

/// Outputs of a step (never secrets).
pub type Outputs = BTreeMap<String, Value>;

/// Everything steps share during a run.
pub struct RunCtx {
    pub lab: Lab,
    pub backends: Backends,
    pub state: StateDir,
    pub patches: PatchSet,
    pub events: Events,
    pub cancel: CancellationToken,
    /// A unique id for this run (journal, verification probe values).
    pub run_id: String,
    clients: tokio::sync::Mutex<HashMap<String, Arc<dyn ClusterApi>>>,
    outputs: Mutex<BTreeMap<String, Outputs>>,
}

impl RunCtx {
    pub fn new(
        lab: Lab,
        backends: Backends,
        state: StateDir,
        patches: PatchSet,
        events: Events,
        cancel: CancellationToken,
    ) -> Self {
        let run_id = format!(
            "{}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis()),
            std::process::id()
        );
        RunCtx {
            lab,
            backends,
            state,
            patches,
            events,
            cancel,
            run_id,
            clients: tokio::sync::Mutex::new(HashMap::new()),
            outputs: Mutex::new(BTreeMap::new()),
        }
    }

    /// The API of a lab cluster, connected once and shared.
    pub async fn api(&self, cluster: &str) -> Result<Arc<dyn ClusterApi>, BackendError> {
        let mut clients = self.clients.lock().await;
        if let Some(c) = clients.get(cluster) {
            return Ok(c.clone());
        }
        let c = self.lab.cluster(cluster).ok_or_else(|| {
            BackendError::permanent(format!(
                "`{cluster}` is not a cluster of lab `{}`",
                self.lab.name
            ))
        })?;
        let kubeconfig = match &c.provider {
            Provider::Kind => self.state.kubeconfig(cluster),
            Provider::Existing { kubeconfig, .. } => kubeconfig.into(),
        };
        let api = self.backends.kube.connect(c, &kubeconfig).await?;
        clients.insert(cluster.to_owned(), api.clone());
        Ok(api)
    }

    /// Forgets a cached client (after a cluster is re-created or deleted).
    pub async fn forget(&self, cluster: &str) {
        self.clients.lock().await.remove(cluster);
    }

    /// Outputs of an earlier step instance, from this run or the run it resumed.
    pub fn output(&self, step: &str) -> Option<Outputs> {
        self.outputs
            .lock()
            .expect("not poisoned")
            .get(step)
            .cloned()
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Most steps running at once.
    pub concurrency: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { concurrency: 8 }
    }
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub ok: bool,
    /// The step that failed first, and why.
    pub failed: Option<(String, BackendError)>,
    pub cancelled: bool,
    pub changed: usize,
    pub unchanged: usize,
    pub resumed: usize,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
#[error("failed to use the journal {path}: {source}")]
pub struct JournalError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

#[derive(Debug)]
enum StepEnd {
    Done(Outcome, Outputs),
    Failed(BackendError),
    Cancelled,
}

/// Runs `plan`. Steps the journal records as done by an interrupted earlier run of the same workflow are
/// not run again; after a completed run, every step runs again (and should find nothing to change).
pub async fn run(
    plan: &Plan,
    ctx: Arc<RunCtx>,
    opts: &RunOptions,
) -> Result<RunResult, JournalError> {
    let journal = Journal::new(&ctx.state.journal());
    let jerr = |source| JournalError {
        path: ctx.state.journal().display().to_string(),
        source,
    };
    let last = journal.last_run(&plan.workflow).map_err(jerr)?;
    let carried = if last.exists && !last.completed {
        last.done
    } else {
        BTreeMap::new()
    };

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
        .filter(|i| waiting_on[*i] == 0 && !carried.contains_key(&plan.steps[*i].id))
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
    };

    journal
        .append(&Entry::RunStarted {
            run: ctx.run_id.clone(),
            workflow: plan.workflow.clone(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        })
        .map_err(jerr)?;
    let resumable: Vec<usize> = plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| carried.contains_key(&s.id))
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
        let outputs = carried[&s.id].clone();
        // Carried forward into this run's journal, so a second interruption still remembers them.
        journal
            .append(&Entry::StepDone {
                run: ctx.run_id.clone(),
                step: s.id.clone(),
                outputs: outputs.clone(),
            })
            .map_err(jerr)?;
        ctx.outputs
            .lock()
            .expect("not poisoned")
            .insert(s.id.clone(), outputs);
        ctx.events.emit(Event::StepFinished {
            step: s.id.clone(),
            outcome: Outcome::Resumed,
            elapsed_ms: 0,
        });
        mark_done(i, &mut done, &mut ready);
        result.resumed += 1;
    }

    let mut running: JoinSet<(usize, StepEnd)> = JoinSet::new();
    let mut stopping = false;
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
                let ctx = ctx.clone();
                let step = plan.steps[i].clone();
                running.spawn(async move { (i, run_step(&step, &ctx).await) });
            }
        }
        let Some(joined) = (tokio::select! {
            j = running.join_next() => j,
            () = ctx.cancel.cancelled(), if !stopping => continue,
        }) else {
            break;
        };
        let (i, end) = joined.unwrap_or_else(|e| {
            (
                usize::MAX,
                StepEnd::Failed(BackendError::permanent(format!("a step panicked: {e}"))),
            )
        });
        let id = plan.steps.get(i).map_or("?".to_owned(), |s| s.id.clone());
        match end {
            StepEnd::Done(outcome, outputs) => {
                journal
                    .append(&Entry::StepDone {
                        run: ctx.run_id.clone(),
                        step: id.clone(),
                        outputs: outputs.clone(),
                    })
                    .map_err(jerr)?;
                ctx.outputs
                    .lock()
                    .expect("not poisoned")
                    .insert(id, outputs);
                match outcome {
                    Outcome::Changed => result.changed += 1,
                    _ => result.unchanged += 1,
                }
                mark_done(i, &mut done, &mut ready);
            }
            StepEnd::Failed(e) => {
                journal
                    .append(&Entry::StepFailed {
                        run: ctx.run_id.clone(),
                        step: id.clone(),
                        error: e.message.clone(),
                    })
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
    journal
        .append(&Entry::RunFinished {
            run: ctx.run_id.clone(),
            ok: result.ok,
        })
        .map_err(jerr)?;
    journal.sync().map_err(jerr)?;
    ctx.events.emit(Event::RunFinished {
        ok: result.ok,
        elapsed_ms: ctx.events.elapsed_ms(),
        changed: result.changed,
        unchanged: result.unchanged,
        resumed: result.resumed,
        failed: result.failed.as_ref().map(|(s, _)| s.clone()),
        cancelled: result.cancelled,
    });
    Ok(result)
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
            Err(_) => BackendError::permanent(format!("timed out after {}", humantime::format_duration(step.timeout)))
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
            BackendError {
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
