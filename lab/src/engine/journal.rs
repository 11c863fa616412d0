//! The journal: one JSON line per step outcome, appended as the run goes, so a run killed midway can be
//! resumed and a finished lab can be re-checked.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Entry {
    /// A run of a workflow started.
    RunStarted {
        run: String,
        workflow: String,
        at: String,
    },
    /// A step instance finished well; its outputs are kept for later steps and runs.
    StepDone {
        run: String,
        step: String,
        outputs: BTreeMap<String, Value>,
    },
    StepFailed {
        run: String,
        step: String,
        error: String,
    },
    /// The run ended: `ok` when every step finished.
    RunFinished { run: String, ok: bool },
}

/// Appends to and reads a journal file.
///
/// Each entry is one `write` on a file opened for appending, so a killed process (Ctrl-C twice, SIGKILL,
/// an OOM kill) loses at most the line it was writing: the kernel keeps what was written. [`Journal::sync`]
/// makes the file durable against a power loss; the engine calls it when a run ends, not after every line
/// (an fsync per step was a tenth of a 500-spoke simulated run, and a host crash loses the kind clusters'
/// state as well, so per-step durability would buy nothing a resume could use).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

/// What the journal says about the last run of a workflow.
#[derive(Debug, Default, Clone)]
pub struct LastRun {
    /// Whether a run of this workflow was recorded at all.
    pub exists: bool,
    /// It ended with every step done.
    pub completed: bool,
    /// Steps done in that run (and the runs it resumed), with their outputs.
    pub done: BTreeMap<String, BTreeMap<String, Value>>,
}

impl Journal {
    pub fn new(path: &Path) -> Self {
        Journal {
            path: path.to_owned(),
            file: std::sync::Mutex::new(None),
        }
    }

    /// Appends one entry as a single write, so a killed process loses nothing that was reported.
    pub fn append(&self, e: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_string(e).expect("entries serialize");
        line.push('\n');
        let mut file = self.file.lock().expect("not poisoned");
        if file.is_none() {
            if let Some(p) = self.path.parent() {
                std::fs::create_dir_all(p)?;
            }
            *file = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
        }
        file.as_mut()
            .expect("opened above")
            .write_all(line.as_bytes())
    }

    /// Makes everything appended so far durable (fsync).
    pub fn sync(&self) -> std::io::Result<()> {
        match self.file.lock().expect("not poisoned").as_ref() {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Reads every entry; a torn last line (a crash mid-write) is ignored.
    pub fn entries(&self) -> std::io::Result<Vec<Entry>> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect())
    }

    /// The last run of `workflow`. Steps done by earlier incomplete runs that it resumed count as done.
    pub fn last_run(&self, workflow: &str) -> std::io::Result<LastRun> {
        let mut runs: Vec<(String, LastRun)> = Vec::new();
        let mut workflows: BTreeMap<String, String> = BTreeMap::new();
        for e in self.entries()? {
            match e {
                Entry::RunStarted {
                    run, workflow: w, ..
                } => {
                    workflows.insert(run.clone(), w.clone());
                    if w == workflow {
                        // A run resumes what the previous incomplete run had done.
                        let carried = match runs.last() {
                            Some((_, prev)) if !prev.completed => prev.done.clone(),
                            _ => BTreeMap::new(),
                        };
                        runs.push((
                            run,
                            LastRun {
                                exists: true,
                                completed: false,
                                done: carried,
                            },
                        ));
                    }
                }
                Entry::StepDone { run, step, outputs } => {
                    if let Some((_, r)) = runs.iter_mut().rev().find(|(id, _)| *id == run) {
                        r.done.insert(step, outputs);
                    }
                }
                Entry::StepFailed { run, step, .. } => {
                    if let Some((_, r)) = runs.iter_mut().rev().find(|(id, _)| *id == run) {
                        r.done.remove(&step);
                    }
                }
                Entry::RunFinished { run, ok } => {
                    if let Some((_, r)) = runs.iter_mut().rev().find(|(id, _)| *id == run) {
                        r.completed = ok;
                    }
                }
            }
        }
        Ok(runs.pop().map(|(_, r)| r).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(run: &str) -> Entry {
        Entry::RunStarted {
            run: run.into(),
            workflow: "up".into(),
            at: "t".into(),
        }
    }
    fn done(run: &str, step: &str) -> Entry {
        Entry::StepDone {
            run: run.into(),
            step: step.into(),
            outputs: BTreeMap::new(),
        }
    }

    #[test]
    fn an_interrupted_run_is_resumed_with_what_it_had_done() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("journal.jsonl"));
        for e in [
            started("1"),
            done("1", "a"),
            done("1", "b"),
            started("2"),
            done("2", "c"),
        ] {
            j.append(&e).unwrap();
        }
        let last = j.last_run("up").unwrap();
        assert!(last.exists && !last.completed);
        assert_eq!(last.done.keys().collect::<Vec<_>>(), ["a", "b", "c"]);

        j.append(&Entry::RunFinished {
            run: "2".into(),
            ok: true,
        })
        .unwrap();
        j.append(&started("3")).unwrap();
        // A new run after a completed one starts from nothing: it re-checks every step.
        assert!(j.last_run("up").unwrap().done.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let j = Journal::new(&path);
        j.append(&started("1")).unwrap();
        j.append(&done("1", "a")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"type\":\"step-do")
            .unwrap();
        assert_eq!(j.last_run("up").unwrap().done.len(), 1);
    }
}
