//! The lab's state folder: journal, per-cluster kubeconfigs, the simulated world, and the run lock.
//!
//! One folder per lab name under the XDG state directory (`$XDG_STATE_HOME/ocm-lab/<lab>`, by default
//! `~/.local/state/ocm-lab/<lab>`); `OCM_LAB_STATE_DIR` overrides the parent folder (tests use it).

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Where a lab keeps its state.
#[derive(Debug, Clone)]
pub struct StateDir {
    pub path: PathBuf,
}

/// Why the state folder cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum StateError {
    #[error("failed to use the state folder {path}: {source}")]
    #[diagnostic(
        code(ocm_lab::state::io),
        help("check permissions, or set OCM_LAB_STATE_DIR to another folder")
    )]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("lab `{lab}` is busy: {holder}")]
    #[diagnostic(
        code(ocm_lab::state::locked),
        help(
            "one lab runs one command at a time; wait for it to finish, or stop it (Ctrl-C) and run again"
        )
    )]
    Locked { lab: String, holder: String },
    #[error("the ownership record {path} is damaged at line {line}: {reason}")]
    #[diagnostic(
        code(ocm_lab::state::damaged),
        help(
            "fix or delete that line: the file lists what this lab created, so `down` knows what to delete (`kind get clusters` shows the clusters that exist)"
        )
    )]
    Damaged {
        path: String,
        line: usize,
        reason: String,
    },
    #[error("cannot find a state folder: neither XDG_STATE_HOME nor HOME is set")]
    #[diagnostic(
        code(ocm_lab::state::home),
        help("set OCM_LAB_STATE_DIR to a writable folder")
    )]
    NoHome,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl StateDir {
    /// The parent of all labs' state folders.
    pub fn root() -> Result<PathBuf, StateError> {
        if let Some(dir) = std::env::var_os("OCM_LAB_STATE_DIR") {
            return Ok(PathBuf::from(dir));
        }
        if let Some(xdg) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            return Ok(PathBuf::from(xdg).join("ocm-lab"));
        }
        let home = std::env::var_os("HOME").ok_or(StateError::NoHome)?;
        Ok(PathBuf::from(home).join(".local/state/ocm-lab"))
    }

    /// The state folder of `lab` (created, mode 0700: it holds kubeconfigs).
    pub fn for_lab(lab: &str) -> Result<Self, StateError> {
        let path = Self::root()?.join(lab);
        std::fs::create_dir_all(&path).map_err(io(&path))?;
        restrict(&path, 0o700).map_err(io(&path))?;
        Ok(StateDir { path })
    }

    /// The state folder of a command: the lab's own, or for `--simulate` its `simulated/` subfolder, so a
    /// simulated run's journal, kubeconfigs and ownership records never mix with the real lab's (a real
    /// `up` must not resume steps a simulation did).
    pub fn for_run(lab: &str, simulated: bool) -> Result<Self, StateError> {
        let real = Self::for_lab(lab)?;
        if simulated {
            real.simulated()
        } else {
            Ok(real)
        }
    }

    /// The simulated lab's state folder beside this real one (not created: for looking).
    pub fn simulated_dir(&self) -> StateDir {
        StateDir {
            path: self.path.join("simulated"),
        }
    }

    /// The simulated lab's state folder beside this real one (created, mode 0700).
    pub fn simulated(&self) -> Result<Self, StateError> {
        let dir = self.simulated_dir();
        std::fs::create_dir_all(&dir.path).map_err(io(&dir.path))?;
        restrict(&dir.path, 0o700).map_err(io(&dir.path))?;
        Ok(dir)
    }

    pub fn journal(&self) -> PathBuf {
        self.path.join("journal.jsonl")
    }

    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.path
            .join("kubeconfigs")
            .join(format!("{cluster}.yaml"))
    }

    /// The ownership record: an append-only log of what the lab created (and later deleted).
    pub fn owned_log(&self) -> PathBuf {
        self.path.join("owned.jsonl")
    }

    /// What the lab created and so may delete: kind clusters and kubeconfig contexts.
    pub fn owned(&self) -> Result<Owned, StateError> {
        let path = self.owned_log();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Owned::default()),
            Err(e) => return Err(io(&path)(e)),
        };
        let (mut clusters, mut contexts) = (BTreeSet::new(), BTreeSet::new());
        let mut lines = text.lines().enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            match serde_json::from_str::<OwnedChange>(line) {
                Ok(change) => change.apply(&mut clusters, &mut contexts),
                // A crash mid-append tears at most the last line; anything else is damage to report.
                Err(_) if lines.peek().is_none() && !text.ends_with('\n') => {}
                Err(e) => {
                    return Err(StateError::Damaged {
                        path: path.display().to_string(),
                        line: i + 1,
                        reason: format!("{e} in `{line}`"),
                    });
                }
            }
        }
        Ok(Owned {
            clusters: clusters.into_iter().collect(),
            contexts: contexts.into_iter().collect(),
        })
    }

    /// Records one more owned cluster (idempotent). Appends without reading the log: replaying an
    /// `add-cluster` for a cluster already on record changes nothing, and the 500th cluster of a lab
    /// costs the same as the first.
    pub fn own_cluster(&self, cluster: &str) -> Result<(), StateError> {
        let _guard = owned_guard();
        self.append_owned(&[OwnedChange::AddCluster {
            name: cluster.to_owned(),
        }])
    }

    /// Read-modify-write of the ownership record. Steps run concurrently in one process (the lab lock
    /// keeps other processes out), so updates are serialized here. The difference is appended to the log
    /// and synced before this returns, so a cluster is on record before it is created: nothing the lab made
    /// is ever forgotten by a crash.
    pub fn update_owned(&self, f: impl FnOnce(&mut Owned)) -> Result<(), StateError> {
        let _guard = owned_guard();
        let mut owned = self.owned()?;
        let before = owned.clone();
        f(&mut owned);
        self.append_owned(&OwnedChange::between(&before, &owned))
    }

    /// Appends changes to the ownership log and syncs them (nothing to do for none).
    fn append_owned(&self, changes: &[OwnedChange]) -> Result<(), StateError> {
        if changes.is_empty() {
            return Ok(());
        }
        let mut text = String::new();
        for c in changes {
            text.push_str(&serde_json::to_string(c).expect("serializes"));
            text.push('\n');
        }
        let path = self.owned_log();
        let append = || -> std::io::Result<()> {
            let mut opts = std::fs::OpenOptions::new();
            opts.create(true).append(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&path)?;
            f.write_all(text.as_bytes())?;
            f.sync_data()
        };
        append().map_err(io(&path))
    }

    pub fn sim_world(&self) -> PathBuf {
        self.path.join("sim-world.json")
    }

    /// Takes the lab's run lock, or says who holds it. Released when the guard drops (and by the OS if the
    /// process dies, so a crashed run never leaves a stale lock).
    pub fn lock(&self, lab: &str, command: &str) -> Result<LockGuard, StateError> {
        let path = self.path.join("lock");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = if holder.trim().is_empty() {
                    "another ocm-lab process holds its lock".to_owned()
                } else {
                    holder.trim().to_owned()
                };
                return Err(StateError::Locked {
                    lab: lab.to_owned(),
                    holder,
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
        file.set_len(0).map_err(io(&path))?;
        let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        writeln!(
            file,
            "`ocm-lab {command}` (pid {}) has been running since {since}",
            std::process::id()
        )
        .map_err(io(&path))?;
        Ok(LockGuard { _file: file })
    }
}

/// What a lab owns, recorded as it creates it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owned {
    /// kind clusters this lab created.
    #[serde(default)]
    pub clusters: Vec<String>,
    /// Contexts this lab wrote into the user's kubeconfig.
    #[serde(default)]
    pub contexts: Vec<String>,
}

/// Serializes changes to the ownership log within this process.
fn owned_guard() -> std::sync::MutexGuard<'static, ()> {
    static OWNED: std::sync::Mutex<()> = std::sync::Mutex::new(());
    OWNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One line of the ownership log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
enum OwnedChange {
    AddCluster { name: String },
    RemoveCluster { name: String },
    AddContext { name: String },
    RemoveContext { name: String },
}

impl OwnedChange {
    fn apply(self, clusters: &mut BTreeSet<String>, contexts: &mut BTreeSet<String>) {
        match self {
            OwnedChange::AddCluster { name } => clusters.insert(name),
            OwnedChange::RemoveCluster { name } => clusters.remove(&name),
            OwnedChange::AddContext { name } => contexts.insert(name),
            OwnedChange::RemoveContext { name } => contexts.remove(&name),
        };
    }

    /// The changes that turn `before` into `after`.
    fn between(before: &Owned, after: &Owned) -> Vec<OwnedChange> {
        let diff =
            |b: &[String], a: &[String], add: fn(String) -> Self, remove: fn(String) -> Self| {
                let (bs, as_): (HashSet<&String>, HashSet<&String>) =
                    (b.iter().collect(), a.iter().collect());
                let removed = b.iter().filter(|n| !as_.contains(n)).cloned().map(remove);
                let added = a.iter().filter(|n| !bs.contains(n)).cloned().map(add);
                removed.chain(added).collect::<Vec<_>>()
            };
        let mut out = diff(
            &before.clusters,
            &after.clusters,
            |name| OwnedChange::AddCluster { name },
            |name| OwnedChange::RemoveCluster { name },
        );
        out.extend(diff(
            &before.contexts,
            &after.contexts,
            |name| OwnedChange::AddContext { name },
            |name| OwnedChange::RemoveContext { name },
        ));
        out
    }
}

/// Holds a lab's lock while alive.
#[derive(Debug)]
pub struct LockGuard {
    _file: File,
}

/// Sets Unix permissions (no-op elsewhere).
pub fn restrict(path: &Path, mode: u32) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

/// Writes a file holding secrets: mode 0600 from the start, atomically replaced.
pub fn write_secret(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_extension(format!("tmp-{}-{n}", std::process::id()));
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    restrict(&tmp, 0o600)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ownership_survives_reopening_and_forgets_what_was_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        for c in ["spoke-2", "hub", "spoke-1", "hub"] {
            state.own_cluster(c).unwrap();
        }
        state
            .update_owned(|o| o.contexts.push("kind-hub".into()))
            .unwrap();
        state
            .update_owned(|o| o.clusters.retain(|c| c != "spoke-1"))
            .unwrap();
        let again = StateDir {
            path: dir.path().to_owned(),
        };
        assert_eq!(
            again.owned().unwrap(),
            Owned {
                clusters: vec!["hub".into(), "spoke-2".into()],
                contexts: vec!["kind-hub".into()],
            }
        );
        // Owning a cluster again keeps one record of it.
        state.own_cluster("hub").unwrap();
        assert_eq!(
            again.owned().unwrap().clusters,
            vec!["hub".to_owned(), "spoke-2".to_owned()]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(state.owned_log())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn a_torn_last_ownership_line_is_ignored_but_damage_elsewhere_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        state.own_cluster("hub").unwrap();
        let log = state.owned_log();
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("{\"op\":\"add-clus");
        std::fs::write(&log, &text).unwrap();
        assert_eq!(state.owned().unwrap().clusters, vec!["hub".to_owned()]);
        text.push_str("\n{\"op\":\"add-cluster\",\"name\":\"spoke\"}\n");
        std::fs::write(&log, &text).unwrap();
        let err = state.owned().unwrap_err().to_string();
        assert!(
            err.contains("owned.jsonl") && err.contains("damaged at line 2"),
            "{err}"
        );
    }

    #[test]
    fn a_second_lock_is_refused_naming_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        let guard = state.lock("lab", "up").unwrap();
        match state.lock("lab", "down") {
            Err(StateError::Locked { holder, .. }) => assert!(
                holder.contains("`ocm-lab up`") && holder.contains("pid"),
                "{holder}"
            ),
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(guard);
        state
            .lock("lab", "down")
            .expect("free again after the guard drops");
    }

    #[cfg(unix)]
    #[test]
    fn secret_files_are_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a/kubeconfig");
        write_secret(&p, b"token: x").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
