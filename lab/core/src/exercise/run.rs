//! Breaking the lab for an exercise, and healing exactly that. Every change goes through the lab's cluster
//! APIs (as a workflow step's), and is recorded in the lab's state folder, with the object as it was,
//! before it is made: `exercise stop`, `reset` and `down` find it there whatever happened since.
//!
//! The state folder holds two files while an exercise runs: `exercise.json` (name, title and hop: what
//! the dashboard shows) and `exercise-record.json` (mode 0600: the objects as they were, and how many hints
//! were shown).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Exercise, ExerciseError, Step};
use crate::backend::KubeError;
use crate::state::StateDir;
use crate::step::RunCtx;
use crate::verify::{CheckResult, Hop};

/// The running exercise, as `exercise.json` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Running {
    pub name: String,
    pub title: String,
    pub hop: Hop,
}

/// What a running exercise changed, and how far its participant got.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    pub hints_shown: usize,
    pub changes: Vec<Recorded>,
}

/// One change, with its object as it was before (`None`: absent).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recorded {
    pub step: Step,
    pub before: Option<Value>,
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RunError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exercise(#[from] ExerciseError),
    #[error("exercise `{name}` is running on this lab")]
    #[diagnostic(help(
        "finish it first: `ocm-lab exercise stop` heals what it broke (so does `ocm-lab reset`)"
    ))]
    AlreadyRunning { name: String },
    #[error("no exercise is running on this lab")]
    #[diagnostic(help("start one: `ocm-lab exercise list`, then `ocm-lab exercise start NAME`"))]
    NotRunning,
    #[error("{what} {object} on cluster `{cluster}`: {source}")]
    #[diagnostic(help(
        "check that the lab is up (`ocm-lab status`); what was recorded is healed by `ocm-lab exercise stop` or `ocm-lab reset`"
    ))]
    Kube {
        what: &'static str,
        object: String,
        cluster: String,
        #[source]
        source: Box<KubeError>,
    },
    #[error("cannot {what} {path}: {reason}")]
    #[diagnostic(help("check the lab's state folder and its permissions"))]
    State {
        what: &'static str,
        path: String,
        reason: String,
    },
}

/// `exercise.json`: the running exercise (read by the dashboard).
pub fn running_file(state: &StateDir) -> std::path::PathBuf {
    state.exercise()
}

fn record_file(state: &StateDir) -> std::path::PathBuf {
    state.exercise_record()
}

fn read<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<Option<T>, RunError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(state_err("read", path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| state_err("read", path, e))
}

fn state_err(what: &'static str, path: &std::path::Path, e: impl ToString) -> RunError {
    RunError::State {
        what,
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn write(path: &std::path::Path, value: &impl Serialize) -> Result<(), RunError> {
    let text = serde_json::to_vec_pretty(value).expect("exercise records serialize");
    crate::state::write_secret(path, &text).map_err(|e| state_err("write", path, e))
}

/// The running exercise and its record, if one runs.
pub fn running(state: &StateDir) -> Result<Option<(Running, Record)>, RunError> {
    let Some(running) = read::<Running>(&running_file(state))? else {
        return Ok(None);
    };
    let record = read::<Record>(&record_file(state))?.unwrap_or_default();
    Ok(Some((running, record)))
}

/// Saves how far the participant got (the hints shown).
pub fn save_record(state: &StateDir, record: &Record) -> Result<(), RunError> {
    write(&record_file(state), record)
}

/// Breaks the lab: reads each object the exercise changes, records them, then makes the changes.
pub async fn start(ctx: &RunCtx, ex: &Exercise) -> Result<Running, RunError> {
    if let Some((r, _)) = running(&ctx.state)? {
        return Err(RunError::AlreadyRunning { name: r.name });
    }
    let steps = ex.steps(&ctx.lab)?;
    let mut changes = Vec::new();
    for step in steps {
        let target = step.target().expect("rendered steps name their object");
        let api = api(ctx, step.cluster()).await?;
        let before = api.get(&target).await.map_err(kube("read", &step))?;
        changes.push(Recorded { step, before });
    }
    let running = Running {
        name: ex.name.clone(),
        title: ex.title.clone(),
        hop: ex.hop,
    };
    // Recorded before anything changes: a change that fails half-way is still healed.
    save_record(
        &ctx.state,
        &Record {
            hints_shown: 0,
            changes: changes.clone(),
        },
    )?;
    write(&running_file(&ctx.state), &running)?;
    for c in &changes {
        make(ctx, &c.step).await?;
    }
    Ok(running)
}

/// Heals what the running exercise broke and forgets it; `None` when none runs.
pub async fn stop(ctx: &RunCtx) -> Result<Option<Running>, RunError> {
    let Some((running, record)) = running(&ctx.state)? else {
        return Ok(None);
    };
    for c in record.changes.iter().rev() {
        undo(ctx, c).await?;
    }
    forget(&ctx.state)?;
    Ok(Some(running))
}

/// Forgets the running exercise without touching the lab (`down` forgets it with the rest of the lab's
/// state, `StateDir::forget`).
pub fn forget(state: &StateDir) -> Result<(), RunError> {
    for path in [running_file(state), record_file(state)] {
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(state_err("remove", &path, e));
            }
            _ => {}
        }
    }
    Ok(())
}

async fn api(
    ctx: &RunCtx,
    cluster: &str,
) -> Result<std::sync::Arc<dyn crate::backend::ClusterApi>, RunError> {
    ctx.api(cluster).await.map_err(|source| RunError::Kube {
        what: "connect to",
        object: "the API server".to_owned(),
        cluster: cluster.to_owned(),
        source: Box::new(source),
    })
}

fn kube(what: &'static str, step: &Step) -> impl FnOnce(KubeError) -> RunError {
    let object = step.target().map(|t| t.to_string()).unwrap_or_default();
    let cluster = step.cluster().to_owned();
    move |source| RunError::Kube {
        what,
        object,
        cluster,
        source: Box::new(source),
    }
}

async fn make(ctx: &RunCtx, step: &Step) -> Result<(), RunError> {
    let api = api(ctx, step.cluster()).await?;
    match step {
        Step::Apply { object, .. } => api.apply(object).await.map_err(kube("apply", step)),
        Step::Delete { target, .. } => api
            .delete(target)
            .await
            .map(drop)
            .map_err(kube("delete", step)),
        Step::Patch { target, patch, .. } => api
            .merge_patch(target, patch)
            .await
            .map_err(kube("patch", step)),
    }
}

/// Puts one changed object back as it was.
async fn undo(ctx: &RunCtx, c: &Recorded) -> Result<(), RunError> {
    let api = api(ctx, c.step.cluster()).await?;
    let target = c.step.target().expect("rendered steps name their object");
    match (&c.step, &c.before) {
        (Step::Apply { .. }, None) => api
            .delete(&target)
            .await
            .map(drop)
            .map_err(kube("delete", &c.step)),
        (Step::Apply { .. } | Step::Delete { .. }, Some(before)) => api
            .apply(&as_applied(before))
            .await
            .map_err(kube("restore", &c.step)),
        (Step::Patch { patch, .. }, Some(before)) => {
            if api
                .get(&target)
                .await
                .map_err(kube("read", &c.step))?
                .is_none()
            {
                // Deleted since (by the participant): it comes back as it was.
                return api
                    .apply(&as_applied(before))
                    .await
                    .map_err(kube("restore", &c.step));
            }
            api.merge_patch(&target, &inverse(patch, before))
                .await
                .map_err(kube("restore", &c.step))
        }
        (Step::Delete { .. } | Step::Patch { .. }, None) => Ok(()),
    }
}

/// The merge patch that undoes `patch` on an object that was `before`: every key the patch set gets its
/// old value back, or `null` (removed) where it had none (RFC 7386).
pub fn inverse(patch: &Value, before: &Value) -> Value {
    let (Value::Object(p), Value::Object(b)) = (patch, before) else {
        return before.clone();
    };
    let mut out = Map::new();
    for (k, pv) in p {
        let old = match b.get(k) {
            None => Value::Null,
            Some(bv) if pv.is_object() && bv.is_object() => inverse(pv, bv),
            Some(bv) => bv.clone(),
        };
        out.insert(k.clone(), old);
    }
    Value::Object(out)
}

/// An object as read, made fit to apply again: no status, none of the fields the API server sets.
fn as_applied(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
        ] {
            meta.remove(k);
        }
    }
    o
}

/// What `exercise check` says after a verification.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verdict")]
pub enum Verdict {
    /// Every check passed.
    Solved,
    /// A check still fails: at the exercise's hop when one does, else the first that fails.
    Broken {
        hop: Option<Hop>,
        check: String,
        spoke: String,
        namespace: String,
        detail: String,
    },
}

/// Judges a verification's results for exercise `hop`.
pub fn judge(hop: Hop, results: &[CheckResult]) -> Verdict {
    let failed: Vec<&CheckResult> = results.iter().filter(|r| !r.ok).collect();
    let Some(r) = failed
        .iter()
        .find(|r| r.hop == Some(hop))
        .or(failed.first())
    else {
        return Verdict::Solved;
    };
    Verdict::Broken {
        hop: r.hop,
        check: r.check.to_string(),
        spoke: r.spoke.clone(),
        namespace: r.namespace.clone(),
        detail: r.detail.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_inverse_patch_restores_changed_keys_and_removes_added_ones() {
        let before = json!({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"replicas": 1}});
        let patch = json!({"metadata": {"labels": {"a": null, "c": "3"}}, "spec": {"replicas": 0}});
        assert_eq!(
            inverse(&patch, &before),
            json!({"metadata": {"labels": {"a": "1", "c": null}}, "spec": {"replicas": 1}})
        );
    }
}
