//! The journal: one JSON line per step outcome, appended as the run goes, so a run killed midway can be
//! resumed and a finished lab can be re-checked.
//!
//! The journal is a hint that saves time, never the truth about the lab: a step is carried over from an
//! interrupted run only when its recorded input digest matches the step about to run (see
//! [`super::digest`]), and a journal that cannot be read is moved aside and the run starts afresh
//! (every action observes before it acts, so running a step again is safe).

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
        /// sha256 (hex) of the step's resolved inputs. Lines written before digests existed have none
        /// and are never carried over.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        digest: Option<String>,
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
/// an OOM kill) loses at most the line it was writing: the kernel keeps what was written, and
/// [`Journal::open`] drops such a torn last line before anything is appended after it. [`Journal::sync`]
/// makes the file durable against a power loss; the engine calls it when a run ends, not after every line
/// (an fsync per step was a tenth of a 500-spoke simulated run, and a host crash loses the kind clusters'
/// state as well, so per-step durability would buy nothing a resume could use).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

/// A step the journal records as done.
#[derive(Debug, Clone, PartialEq)]
pub struct DoneStep {
    /// The digest of its inputs when it ran (`None` for lines written before digests existed).
    pub digest: Option<String>,
    pub outputs: BTreeMap<String, Value>,
}

/// What the journal says about the last run of a workflow.
#[derive(Debug, Default, Clone)]
pub struct LastRun {
    /// Whether a run of this workflow was recorded at all.
    pub exists: bool,
    /// It ended with every step done.
    pub completed: bool,
    /// No run of another workflow started after it (a `down` or `reset` since voids what it did).
    pub latest: bool,
    /// Steps done in that run (and the runs it resumed), with their digests and outputs.
    pub done: BTreeMap<String, DoneStep>,
}

impl LastRun {
    /// Whether a new run of the workflow may carry over steps from it: it was interrupted, and nothing
    /// else ran on the lab since.
    pub fn resumable(&self) -> bool {
        self.exists && !self.completed && self.latest
    }
}

/// What [`Journal::open`] found wrong and already repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The last line was cut short (a crash mid-write) and was dropped.
    TornLine { path: PathBuf, bytes: usize },
    /// The journal could not be read and was moved aside; the run starts afresh.
    MovedAside {
        path: PathBuf,
        to: PathBuf,
        why: String,
    },
}

impl std::fmt::Display for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Repair::TornLine { path, bytes } => write!(
                f,
                "the journal {} ended in a torn line ({bytes} bytes, from a run that was killed): dropped it",
                path.display()
            ),
            Repair::MovedAside { path, to, why } => write!(
                f,
                "the journal {} is damaged ({why}): moved it to {} and starting afresh (every step runs and checks the lab)",
                path.display(),
                to.display()
            ),
        }
    }
}

impl Journal {
    pub fn new(path: &Path) -> Self {
        Journal {
            path: path.to_owned(),
            file: std::sync::Mutex::new(None),
        }
    }

    /// Opens the journal for a run and reads it, repairing what a crash or damage left behind: a torn
    /// last line is cut off (so the next entry starts on a line of its own), and a journal that cannot
    /// be read at all is moved to `<name>.damaged` so the run starts from an empty one. Only I/O errors
    /// (a folder that cannot be written) are errors.
    pub fn open(path: &Path) -> std::io::Result<(Self, Vec<Entry>, Option<Repair>)> {
        let journal = Self::new(path);
        let mut bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((journal, Vec::new(), None));
            }
            Err(e) => return Err(e),
        };
        let mut repair = None;
        if bytes.last().is_some_and(|b| *b != b'\n') {
            let keep = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            f.set_len(keep as u64)?;
            f.sync_data()?;
            repair = Some(Repair::TornLine {
                path: path.to_owned(),
                bytes: bytes.len() - keep,
            });
            bytes.truncate(keep);
        }
        match parse(&bytes) {
            Ok(entries) => Ok((journal, entries, repair)),
            Err(why) => {
                let mut to = path.as_os_str().to_owned();
                to.push(".damaged");
                let to = PathBuf::from(to);
                std::fs::rename(path, &to)?;
                let repair = Repair::MovedAside {
                    path: path.to_owned(),
                    to,
                    why,
                };
                Ok((journal, Vec::new(), Some(repair)))
            }
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
}

/// Every entry of a journal's text, or why it cannot be read.
fn parse(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice(line) {
            Ok(e) => entries.push(e),
            Err(e) => return Err(format!("line {}: {e}", i + 1)),
        }
    }
    Ok(entries)
}

/// The last run of `workflow`. Steps done by the earlier interrupted runs it resumed count as done, as
/// long as no run of another workflow came between them.
pub fn last_run(entries: &[Entry], workflow: &str) -> LastRun {
    // Entries of one run sit between its `run-started` and the next one (the lab lock allows one run at a
    // time), so only the latest run of `workflow` needs following.
    let mut current: Option<(&str, LastRun)> = None;
    let mut latest = false;
    for e in entries {
        match e {
            Entry::RunStarted {
                run, workflow: w, ..
            } => {
                if w == workflow {
                    // A run resumes what the previous run had done if that was interrupted and nothing
                    // else ran since.
                    let done = match current.take() {
                        Some((_, prev)) if latest && !prev.completed => prev.done,
                        _ => BTreeMap::new(),
                    };
                    current = Some((
                        run,
                        LastRun {
                            exists: true,
                            completed: false,
                            latest: true,
                            done,
                        },
                    ));
                    latest = true;
                } else {
                    latest = false;
                }
            }
            Entry::StepDone {
                run,
                step,
                digest,
                outputs,
            } => {
                if let Some((_, r)) = current.as_mut().filter(|(id, _)| id == run) {
                    r.done.insert(
                        step.clone(),
                        DoneStep {
                            digest: digest.clone(),
                            outputs: outputs.clone(),
                        },
                    );
                }
            }
            Entry::StepFailed { run, step, .. } => {
                if let Some((_, r)) = current.as_mut().filter(|(id, _)| id == run) {
                    r.done.remove(step);
                }
            }
            Entry::RunFinished { run, ok } => {
                if let Some((_, r)) = current.as_mut().filter(|(id, _)| id == run) {
                    r.completed = *ok;
                }
            }
        }
    }
    let mut last = current.map(|(_, r)| r).unwrap_or_default();
    last.latest = latest;
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(run: &str, workflow: &str) -> Entry {
        Entry::RunStarted {
            run: run.into(),
            workflow: workflow.into(),
            at: "t".into(),
        }
    }
    fn done(run: &str, step: &str) -> Entry {
        Entry::StepDone {
            run: run.into(),
            step: step.into(),
            digest: Some(format!("d-{step}")),
            outputs: BTreeMap::new(),
        }
    }

    #[test]
    fn an_interrupted_run_is_resumed_with_what_it_had_done() {
        let dir = tempfile::tempdir().unwrap();
        let j = Journal::new(&dir.path().join("journal.jsonl"));
        for e in [
            started("1", "up"),
            done("1", "a"),
            done("1", "b"),
            started("2", "up"),
            done("2", "c"),
        ] {
            j.append(&e).unwrap();
        }
        let last = last_run(&Journal::open(&j.path).unwrap().1, "up");
        assert!(last.resumable());
        assert_eq!(last.done.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(last.done["a"].digest.as_deref(), Some("d-a"));

        j.append(&Entry::RunFinished {
            run: "2".into(),
            ok: true,
        })
        .unwrap();
        j.append(&started("3", "up")).unwrap();
        // A new run after a completed one starts from nothing: it re-checks every step.
        assert!(
            last_run(&Journal::open(&j.path).unwrap().1, "up")
                .done
                .is_empty()
        );
    }

    #[test]
    fn a_run_of_another_workflow_voids_what_an_interrupted_run_had_done() {
        let entries = [
            started("1", "up"),
            done("1", "create[hub]"),
            started("2", "down"),
            done("2", "delete[hub]"),
        ];
        let last = last_run(&entries, "up");
        assert!(last.exists && !last.completed && !last.latest);
        assert!(!last.resumable());
        // And an `up` started after the `down` does not inherit the first `up`'s steps either.
        let mut entries = entries.to_vec();
        entries.push(started("3", "up"));
        entries.push(done("3", "preflight"));
        let last = last_run(&entries, "up");
        assert!(last.resumable());
        assert_eq!(last.done.keys().collect::<Vec<_>>(), ["preflight"]);
    }

    #[test]
    fn lines_without_a_digest_still_read() {
        let line = r#"{"type":"step-done","run":"1","step":"a","outputs":{}}"#;
        let e: Entry = serde_json::from_str(line).unwrap();
        assert!(matches!(e, Entry::StepDone { digest: None, .. }));
    }

    #[test]
    fn open_drops_a_torn_last_line_and_the_next_entry_starts_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let j = Journal::new(&path);
        j.append(&started("1", "up")).unwrap();
        j.append(&done("1", "a")).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"type\":\"step-do")
            .unwrap();
        let (j, entries, repair) = Journal::open(&path).unwrap();
        assert_eq!(entries.len(), 2);
        assert!(
            matches!(repair, Some(Repair::TornLine { bytes: 16, .. })),
            "{repair:?}"
        );
        j.append(&done("1", "b")).unwrap();
        let (_, entries, repair) = Journal::open(&path).unwrap();
        assert_eq!(repair, None);
        assert_eq!(last_run(&entries, "up").done.len(), 2);
    }

    #[test]
    fn open_moves_a_journal_it_cannot_read_aside_and_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        std::fs::write(&path, b"{\"type\":\"run-started\"\xff\xfe}\n{}\n").unwrap();
        let (j, entries, repair) = Journal::open(&path).unwrap();
        assert!(entries.is_empty());
        let Some(Repair::MovedAside { to, .. }) = &repair else {
            panic!("{repair:?}")
        };
        assert!(to.ends_with("journal.jsonl.damaged") && to.exists());
        assert!(!path.exists());
        assert!(repair.unwrap().to_string().contains("starting afresh"));
        j.append(&started("1", "up")).unwrap();
        assert_eq!(Journal::open(&path).unwrap().1.len(), 1);
    }
}
