//! The journal: one JSON line per run start, step outcome and run end, appended as the run goes: the record
//! of what each run did, for `status`, `diagnose` and a human reading it. Never what decides what runs: every
//! run runs every step (see the engine). A journal that cannot be read is moved aside and the run starts a
//! new one.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

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
    /// A step instance finished well. (Lines of older versions also carry `digest` and `outputs`,
    /// ignored when read.)
    StepDone {
        run: String,
        step: String,
        /// Whether it changed the lab (lines of older versions have no such field).
        #[serde(default)]
        changed: bool,
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
/// (the journal is a record, and a host crash loses the kind clusters' state as well).
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: std::sync::Mutex<Option<std::fs::File>>,
}

/// What [`Journal::open`] found wrong and already repaired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// The last line was cut short (a crash mid-write) and was dropped.
    TornLine { path: PathBuf, bytes: usize },
    /// The journal could not be read and was moved aside; the run starts a new one.
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
                "the journal {} is damaged ({why}): moved it to {} and starting a new one",
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
            changed: true,
        }
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
        assert_eq!(
            entries,
            [started("1", "up"), done("1", "a"), done("1", "b")],
            "the entry after the torn line starts a line of its own"
        );
    }

    #[test]
    fn lines_of_older_versions_still_read() {
        let line = r#"{"type":"step-done","run":"1","step":"a","digest":"d","outputs":{"x":1}}"#;
        let e: Entry = serde_json::from_str(line).unwrap();
        assert_eq!(
            e,
            Entry::StepDone {
                run: "1".into(),
                step: "a".into(),
                changed: false
            }
        );
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
        assert!(repair.unwrap().to_string().contains("starting a new one"));
        j.append(&started("1", "up")).unwrap();
        assert_eq!(Journal::open(&path).unwrap().1.len(), 1);
    }
}
