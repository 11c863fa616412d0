//! The lab's state folder: journal, per-cluster kubeconfigs, the ownership record, the last verification,
//! the simulated world, and the run lock. Each file has one accessor here; no other module spells its name.
//!
//! One folder per lab name under the XDG state directory (`$XDG_STATE_HOME/ocm-lab/<lab>`, by default
//! `~/.local/state/ocm-lab/<lab>`); `OCM_LAB_STATE_DIR` overrides the parent folder (tests use it).

use std::collections::{BTreeMap, BTreeSet};
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
    #[error("the lab's lock {path} is {what}, so no command can take it")]
    #[diagnostic(
        code(ocm_lab::state::lock_not_a_file),
        help(
            "the lock is a file ocm-lab makes itself: remove what is there (`rm -r {path}`; nothing of the lab is kept in it) and run again"
        )
    )]
    LockNotAFile { path: String, what: &'static str },
    #[error("the ownership record {path} is damaged at line {line}: {reason}")]
    #[diagnostic(code(ocm_lab::state::damaged), help("{recover}"))]
    Damaged {
        path: String,
        line: usize,
        reason: String,
        /// The command that recovers (see [`damaged_help`]).
        recover: String,
    },
    #[error("the state file {path} cannot be read: {reason}")]
    #[diagnostic(
        code(ocm_lab::state::unreadable),
        help("the command that writes it writes a new one; or delete it by hand")
    )]
    Unreadable { path: String, reason: String },
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
        // Read here, not passed in: the state folder is where every command (and the simulated lab, and
        // the tests' child processes) must find the same labs, as XDG tools find theirs.
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

    /// The state folder of a command as [`Self::for_run`] names it, without creating anything: for
    /// commands that only look (`plan`).
    pub fn to_look_at(lab: &str, simulated: bool) -> Result<Self, StateError> {
        let real = StateDir {
            path: Self::root()?.join(lab),
        };
        Ok(if simulated {
            real.simulated_dir()
        } else {
            real
        })
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

    // One accessor per file of the state folder: no other module spells a state file's name.

    /// The journal: the record of runs, what each step did (see `engine::journal`).
    pub fn journal(&self) -> PathBuf {
        self.path.join("journal.jsonl")
    }

    /// The folder of the per-cluster kubeconfigs ([`StateDir::kubeconfig`]).
    pub fn kubeconfigs(&self) -> PathBuf {
        self.path.join("kubeconfigs")
    }

    /// The kubeconfig of one of the lab's kind clusters (mode 0600).
    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.kubeconfigs().join(format!("{cluster}.yaml"))
    }

    /// The kubeconfig an existing cluster is reached through. `paths` is one file, or a list as in
    /// `KUBECONFIG` (the topology's default): a list is merged as kubectl merges it (the first file to set
    /// a name or `current-context` wins; missing files are skipped) into a private file (mode 0600) in
    /// [`StateDir::kubeconfigs`], whose path is returned. A list with no file that exists gives its first
    /// path, so the error names it.
    pub fn existing_kubeconfig(&self, cluster: &str, paths: &str) -> std::io::Result<PathBuf> {
        let list: Vec<PathBuf> = std::env::split_paths(paths)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        let present: Vec<&PathBuf> = list.iter().filter(|p| p.exists()).collect();
        if list.len() <= 1 || present.is_empty() {
            return Ok(list.into_iter().next().unwrap_or_else(|| paths.into()));
        }
        let bad = |p: &Path, e: &dyn std::fmt::Display| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("kubeconfig {}: {e}", p.display()),
            )
        };
        let mut merged: Option<kube::config::Kubeconfig> = None;
        for p in present {
            let next = kube::config::Kubeconfig::read_from(p).map_err(|e| bad(p, &e))?;
            merged = Some(match merged {
                None => next,
                Some(m) => m.merge(next).map_err(|e| bad(p, &e))?,
            });
        }
        let text = serde_saphyr::to_string(&merged.expect("one file at least"))
            .map_err(|e| bad(Path::new(paths), &e))?;
        let out = self.kubeconfigs().join(format!("{cluster}.existing.yaml"));
        write_secret(&out, text.as_bytes())?;
        Ok(out)
    }

    /// The run lock ([`StateDir::lock`]): says which command holds the lab.
    pub fn lock_file(&self) -> PathBuf {
        self.path.join("lock")
    }

    /// The running workshop exercise: its name, title and hop (`exercise start` writes it, `exercise stop`
    /// removes it; the dashboard and `status --watch` show it).
    pub fn exercise(&self) -> PathBuf {
        self.path.join("exercise.json")
    }

    /// What the running exercise changed, as it was before (mode 0600), and the hints shown.
    pub fn exercise_record(&self) -> PathBuf {
        self.path.join("exercise-record.json")
    }

    /// The last verification's report, kept for `status` and `diagnose`
    /// ([`StateDir::save_last_verification`], [`StateDir::last_verification_report`]).
    pub fn last_verification(&self) -> PathBuf {
        self.path.join("last-verification.json")
    }

    /// Writes the last verification's report (atomically: a crash leaves the old one or the new one).
    pub fn save_last_verification(&self, report: &impl serde::Serialize) -> Result<(), StateError> {
        let path = self.last_verification();
        let text = serde_json::to_string_pretty(report).expect("reports serialize");
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io(&path)(e)
            })
    }

    /// The last verification's report: `None` when none was recorded, an error naming the file when it
    /// cannot be read (never silently skipped: `verify` writes a new one).
    pub fn last_verification_report<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<Option<T>, StateError> {
        let path = self.last_verification();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| StateError::Unreadable {
                path: path.display().to_string(),
                reason: e.to_string(),
            })
    }

    /// Forgets a lab that is gone (after `down`): its journal, simulated world, ownership record, last
    /// verification and running exercise, and the kubeconfigs folder when nothing is left in it. Files already gone are fine.
    /// The ownership record goes only when nothing it proves is left ([`Owned::holds_anything`]): a
    /// network the lab created and had to keep (in use), or a cluster it could not delete, stays
    /// recorded, so that a later `down` can remove it.
    /// `keep_world` keeps the simulated world (it still holds clusters the lab did not create).
    pub fn forget(&self, keep_world: bool) -> Result<(), StateError> {
        // What `down` could not remove (a network still in use, a cluster whose delete failed) stays
        // recorded, so that a later `down` can remove it: the ownership record then stays.
        let keep_owned = self.owned_lenient().is_ok_and(|o| o.holds_anything());
        for f in [
            self.journal(),
            self.sim_world(),
            self.owned_log(),
            self.last_verification(),
            // A running workshop exercise went with the clusters it changed.
            self.exercise(),
            self.exercise_record(),
        ] {
            if (keep_owned && f == self.owned_log()) || (keep_world && f == self.sim_world()) {
                continue;
            }
            match std::fs::remove_file(&f) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&f)(e)),
                _ => {}
            }
        }
        let dir = self.kubeconfigs();
        // The merged copies of existing clusters' kubeconfigs hold the user's credentials: the lab made
        // them, so they go with the lab.
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for e in entries.flatten() {
                let path = e.path();
                if path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".existing.yaml"))
                {
                    match std::fs::remove_file(&path) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(io(&path)(e));
                        }
                        _ => {}
                    }
                }
            }
        }
        let empty = std::fs::read_dir(&dir).is_ok_and(|mut d| d.next().is_none());
        if empty {
            std::fs::remove_dir(&dir).map_err(io(&dir))?;
        }
        Ok(())
    }

    /// The registry mirror configs (`<registry host>/hosts.toml`) mounted into every kind node.
    pub fn registry_certs_dir(&self) -> PathBuf {
        self.path.join("registry").join("certs.d")
    }

    /// The ownership record: an append-only log of what the lab created (and later deleted).
    pub fn owned_log(&self) -> PathBuf {
        self.path.join("owned.jsonl")
    }

    /// What the lab created and so may delete: kind clusters (intended and confirmed) and kubeconfig
    /// contexts. A damaged line other than a torn last one is an error (see [`StateDir::owned_lenient`]
    /// for the reading `down` uses); a torn last line (a crash mid-append) is ignored with a warning.
    pub fn owned(&self) -> Result<Owned, StateError> {
        self.owned_or("ocm-lab down -t <topology>")
    }

    /// [`Self::owned`], whose damage error names `down_command` (the user's own `-t` and `--simulate`) as
    /// the command that recovers.
    pub fn owned_or(&self, down_command: &str) -> Result<Owned, StateError> {
        let (owned, damage) = self.read_owned()?;
        match damage.into_iter().next() {
            None => Ok(owned),
            Some((line, reason)) => Err(StateError::Damaged {
                path: self.owned_log().display().to_string(),
                line,
                reason,
                recover: damaged_help(down_command),
            }),
        }
    }

    /// The ownership record read by `down`: damaged lines are skipped with a warning each. This is safe
    /// because a cluster is deleted only when it was confirmed *and* its node containers still carry the
    /// recorded IDs: a skipped line can only make the lab leave a cluster alone, never delete one that
    /// is not its own.
    pub fn owned_lenient(&self) -> Result<Owned, StateError> {
        let (owned, damage) = self.read_owned()?;
        for (line, reason) in damage {
            tracing::warn!(
                "skipping damaged line {line} of the ownership record {}: {reason}",
                self.owned_log().display()
            );
        }
        Ok(owned)
    }

    /// Replays the log; returns what it says and the damaged lines (number, reason).
    fn read_owned(&self) -> Result<(Owned, Vec<(usize, String)>), StateError> {
        let path = self.owned_log();
        let bytes = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok((Owned::default(), Vec::new()));
            }
            Err(e) => return Err(io(&path)(e)),
        };
        let mut owned = Owned::default();
        let mut damage = Vec::new();
        let complete = bytes.ends_with(b"\n");
        let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        // `split` yields an empty tail after a final newline; without one, the tail is a torn line.
        let (body, tail) = lines.split_at(lines.len() - 1);
        for (i, line) in body.iter().enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<OwnedChange>(line) {
                Ok(change) => change.apply(&mut owned),
                Err(e) => {
                    damage.push((i + 1, format!("{e} in `{}`", String::from_utf8_lossy(line))))
                }
            }
        }
        if !complete && !tail[0].is_empty() {
            // A crash mid-append tears at most the last line: what it was about never happened. Commands
            // that write cut it off once, with a warning ([`StateDir::cut_torn_owned_line`]).
            tracing::debug!(
                "ignoring the torn last line of the ownership record {}",
                path.display()
            );
        }
        Ok((owned, damage))
    }

    /// Cuts a torn last line (a run killed while appending) off the ownership record, with a one-line
    /// warning; `true` when there was one. Commands that may write the record call this once, under the
    /// lab lock, before anything else reads it.
    pub fn cut_torn_owned_line(&self) -> Result<bool, StateError> {
        let _guard = owned_guard();
        let path = self.owned_log();
        let cut = || -> std::io::Result<bool> {
            let mut f = match std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
            {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
                Err(e) => return Err(e),
            };
            let len = f.metadata()?.len();
            let keep = complete_prefix_len(&mut f, len)?;
            if keep == len {
                return Ok(false);
            }
            f.set_len(keep)?;
            f.sync_data()?;
            Ok(true)
        };
        let cut = cut().map_err(io(&path))?;
        if cut {
            tracing::warn!(
                "cut off the torn last line of the ownership record {} (a run was stopped while writing it; what it recorded never happened)",
                path.display()
            );
        }
        Ok(cut)
    }

    /// Records the intent to create `cluster`, before `kind create`. An intent alone never makes a
    /// cluster the lab's: only [`StateDir::confirm_cluster`] does.
    pub fn intend_cluster(&self, cluster: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::IntendCluster {
            name: cluster.to_owned(),
        }])
    }

    /// Confirms that the lab created `cluster`, after it saw its own create succeed, with the IDs of the
    /// node containers it then found: `down` deletes the cluster only while these IDs still match.
    pub fn confirm_cluster(&self, cluster: &str, containers: &[String]) -> Result<(), StateError> {
        let mut containers = containers.to_vec();
        containers.sort();
        self.append_owned(&[OwnedChange::ConfirmCluster {
            name: cluster.to_owned(),
            containers,
        }])
    }

    /// Withdraws the intent to create `cluster`: its create failed.
    pub fn withdraw_cluster(&self, cluster: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::WithdrawCluster {
            name: cluster.to_owned(),
        }])
    }

    /// Records that the lab created Docker network `name`, which has ID `id`.
    pub fn own_network(&self, name: &str, id: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::CreateNetwork {
            name: name.to_owned(),
            id: id.to_owned(),
        }])
    }

    /// Forgets Docker network `name`: it was removed (or is gone).
    pub fn forget_network(&self, name: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::RemoveNetwork {
            name: name.to_owned(),
        }])
    }

    /// Forgets `cluster`: it was deleted (or is gone).
    pub fn remove_cluster(&self, cluster: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::RemoveCluster {
            name: cluster.to_owned(),
        }])
    }

    /// Records the lab's local registry container `name` with its ID: `down` removes that ID.
    pub fn confirm_registry(&self, name: &str, container: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::ConfirmRegistry {
            name: name.to_owned(),
            container: container.to_owned(),
        }])
    }

    /// Forgets the local registry container `name`: it was removed (or is gone).
    pub fn remove_registry(&self, name: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::RemoveRegistry {
            name: name.to_owned(),
        }])
    }

    /// Records that the lab created namespace `name` (uid `uid`) on existing cluster `cluster`.
    pub fn own_namespace(&self, cluster: &str, name: &str, uid: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::CreateNamespace {
            cluster: cluster.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        }])
    }

    /// Forgets namespace `name` on `cluster`: deleted, gone, or not the one the lab created.
    pub fn forget_namespace(&self, cluster: &str, name: &str) -> Result<(), StateError> {
        self.append_owned(&[OwnedChange::RemoveNamespace {
            cluster: cluster.to_owned(),
            name: name.to_owned(),
        }])
    }

    /// Read-modify-write of the contexts in the ownership record. Steps run concurrently in one process
    /// (the lab lock keeps other processes out), so updates are serialized here. The difference is
    /// appended to the log and synced before this returns.
    pub fn update_contexts(&self, f: impl FnOnce(&mut Vec<String>)) -> Result<(), StateError> {
        let _guard = owned_guard();
        // Lenient: `down` prunes contexts from a damaged record too (a lost context line only means a
        // context the lab wrote is left in the user's kubeconfig).
        let before = self.owned_lenient()?.contexts;
        let mut after = before.clone();
        f(&mut after);
        let removed = before
            .iter()
            .filter(|c| !after.contains(c))
            .map(|name| OwnedChange::RemoveContext { name: name.clone() });
        let added = after
            .iter()
            .filter(|c| !before.contains(c))
            .map(|name| OwnedChange::AddContext { name: name.clone() });
        let changes: Vec<OwnedChange> = removed.chain(added).collect();
        self.append_owned_locked(&changes)
    }

    /// Appends changes to the ownership log and syncs them (nothing to do for none).
    fn append_owned(&self, changes: &[OwnedChange]) -> Result<(), StateError> {
        let _guard = owned_guard();
        self.append_owned_locked(changes)
    }

    /// [`StateDir::append_owned`] with the in-process guard already held. A torn last line (a crash
    /// mid-append) is cut off first, with a one-line warning: appending after it would glue the new line
    /// onto the partial one and damage the record for good.
    fn append_owned_locked(&self, changes: &[OwnedChange]) -> Result<(), StateError> {
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
            opts.create(true).read(true).write(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&path)?;
            let len = f.metadata()?.len();
            let keep = complete_prefix_len(&mut f, len)?;
            if keep < len {
                tracing::warn!(
                    "cut off the torn last line of the ownership record {} (a run was cut off while writing it)",
                    path.display()
                );
                f.set_len(keep)?;
            }
            std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(keep))?;
            f.write_all(text.as_bytes())?;
            f.sync_data()
        };
        append().map_err(io(&path))
    }

    pub fn sim_world(&self) -> PathBuf {
        self.path.join("sim-world.json")
    }

    /// Takes the lab's run lock, or says who holds it. Released when the guard drops (and by the OS if the
    /// process dies, so a crashed run never leaves a stale lock). A command that stops before touching
    /// anything removes a lock file it created ([`LockGuard::discard`]).
    pub fn lock(&self, lab: &str, command: &str) -> Result<LockGuard, StateError> {
        let path = self.lock_file();
        // Something that is not a file where the lock belongs (a folder, made by hand or by a tool that
        // mistook the name): no permission or state folder fixes that, removing it does.
        if let Ok(meta) = std::fs::symlink_metadata(&path)
            && !meta.is_file()
        {
            return Err(StateError::LockNotAFile {
                path: path.display().to_string(),
                what: if meta.is_dir() {
                    "a folder"
                } else {
                    "not a regular file"
                },
            });
        }
        // A lock file can be removed by the command that holds it (`discard`): a lock taken on a file that
        // is no longer at `path` is no lock, so take it again on the one that is.
        let (mut file, created) = loop {
            let (file, created) = open_lock_file(&path).map_err(io(&path))?;
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
            if same_file(&file, &path) {
                break (file, created);
            }
        };
        file.set_len(0).map_err(io(&path))?;
        let since = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
        writeln!(
            file,
            "`ocm-lab {command}` (pid {}) has been running since {since}",
            std::process::id()
        )
        .map_err(io(&path))?;
        Ok(LockGuard {
            file,
            path,
            created,
        })
    }
}

/// Opens the lock file, creating it if missing; `true` when this call created it.
fn open_lock_file(path: &Path) -> std::io::Result<(File, bool)> {
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true).write(true);
    match opts.clone().create_new(true).open(path) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => opts
            .create(true)
            .truncate(false)
            .open(path)
            .map(|f| (f, false)),
        Err(e) => Err(e),
    }
}

/// Whether `file` is still the file at `path` (not removed or replaced since it was opened).
fn same_file(file: &File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

/// What a lab owns, as its ownership log says.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Owned {
    /// kind clusters this lab saw itself create, with the IDs of their node containers then.
    #[serde(default)]
    pub clusters: BTreeMap<String, Vec<String>>,
    /// kind clusters this lab meant to create but never confirmed (a create that was cut off, or a
    /// record from before confirmations existed): never the lab's to delete.
    #[serde(default)]
    pub intended: BTreeSet<String>,
    /// Contexts this lab wrote into the user's kubeconfig.
    #[serde(default)]
    pub contexts: Vec<String>,
    /// Docker networks this lab created (name → ID): `down` removes them once no container uses them. A
    /// network that existed before the lab looked is never recorded, so never removed.
    #[serde(default)]
    pub networks: BTreeMap<String, String>,
    /// Local registry containers this lab created (`spec.registry.local`): name → container ID.
    #[serde(default)]
    pub registries: BTreeMap<String, String>,
    /// Namespaces this lab created on `existing:` clusters: cluster → namespace → its uid then. `down`
    /// deletes one only while it still has that uid (a namespace that was there before is never recorded).
    #[serde(default)]
    pub namespaces: BTreeMap<String, BTreeMap<String, String>>,
}

impl Owned {
    /// The kind clusters this record holds (confirmed, or intended and never confirmed) that `declared`
    /// says the topology no longer declares, in name order: what `up` deletes as having left the
    /// topology, what `down` deletes whatever topology it is given, and what `status` and `plan` name.
    pub fn departed(&self, declared: impl Fn(&str) -> bool) -> Vec<String> {
        let names: BTreeSet<&String> = self.clusters.keys().chain(&self.intended).collect();
        names
            .into_iter()
            .filter(|n| !declared(n))
            .cloned()
            .collect()
    }

    /// Whether the record still proves anything the lab may have to remove: a cluster (confirmed or
    /// intended), a network, a registry container or a namespace. `down` removes the record only when
    /// this is false.
    pub fn holds_anything(&self) -> bool {
        !(self.clusters.is_empty()
            && self.intended.is_empty()
            && self.networks.is_empty()
            && self.registries.is_empty()
            && self.namespaces.is_empty())
    }

    /// Whether `cluster` is the lab's: confirmed, and `current` (the IDs of the containers that now look
    /// like its nodes) are all ones the lab recorded. `None` when there is nothing of it left.
    pub fn owns(&self, cluster: &str, current: &[String]) -> Option<bool> {
        if current.is_empty() {
            return None;
        }
        Some(
            self.clusters
                .get(cluster)
                .is_some_and(|ids| current.iter().all(|c| ids.contains(c))),
        )
    }
}

/// What to do about a damaged ownership record, naming `down_command` (the lab's own `ocm-lab down`,
/// with `--simulate` for the simulated lab).
pub fn damaged_help(down_command: &str) -> String {
    format!(
        "run `{down_command}`: it skips the damaged lines and deletes only the clusters whose node containers still carry the IDs the lab recorded when it created them (anything else is left alone), then starts a new record; or delete the damaged line by hand"
    )
}

/// Serializes changes to the ownership log within this process.
fn owned_guard() -> std::sync::MutexGuard<'static, ()> {
    static OWNED: std::sync::Mutex<()> = std::sync::Mutex::new(());
    OWNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The length of the part of a file that ends with its last newline (all of it when it ends with one).
fn complete_prefix_len(f: &mut File, len: u64) -> std::io::Result<u64> {
    use std::io::{Read as _, Seek as _, SeekFrom};
    if len == 0 {
        return Ok(0);
    }
    // Read backwards in blocks until a newline turns up.
    let mut end = len;
    let mut buf = [0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let n = (end - start) as usize;
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(&mut buf[..n])?;
        if let Some(i) = buf[..n].iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// One line of the ownership log.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
enum OwnedChange {
    /// Written before `kind create`.
    IntendCluster {
        name: String,
    },
    /// Written after the lab saw its create succeed, with the node containers' IDs.
    ConfirmCluster {
        name: String,
        containers: Vec<String>,
    },
    /// The create failed.
    WithdrawCluster {
        name: String,
    },
    /// The cluster was deleted.
    RemoveCluster {
        name: String,
    },
    /// Records written before confirmations existed: an intent only, never proof.
    AddCluster {
        name: String,
    },
    AddContext {
        name: String,
    },
    RemoveContext {
        name: String,
    },
    /// Written right after the lab created a Docker network, with the network's ID.
    CreateNetwork {
        name: String,
        id: String,
    },
    /// The network was removed (or is gone).
    RemoveNetwork {
        name: String,
    },
    /// The lab's local registry container, after the lab created it (or found it with the lab's labels).
    ConfirmRegistry {
        name: String,
        container: String,
    },
    /// The local registry container was removed.
    RemoveRegistry {
        name: String,
    },
    /// Written right after the lab created a namespace on an existing cluster, with its uid.
    CreateNamespace {
        cluster: String,
        name: String,
        uid: String,
    },
    /// That namespace was deleted (or is gone, or is no longer the one the lab created).
    RemoveNamespace {
        cluster: String,
        name: String,
    },
}

impl OwnedChange {
    fn apply(self, o: &mut Owned) {
        match self {
            OwnedChange::IntendCluster { name } | OwnedChange::AddCluster { name } => {
                if !o.clusters.contains_key(&name) {
                    o.intended.insert(name);
                }
            }
            OwnedChange::ConfirmCluster { name, containers } => {
                o.intended.remove(&name);
                o.clusters.insert(name, containers);
            }
            OwnedChange::WithdrawCluster { name } => {
                o.intended.remove(&name);
            }
            OwnedChange::RemoveCluster { name } => {
                o.intended.remove(&name);
                o.clusters.remove(&name);
            }
            OwnedChange::AddContext { name } => {
                if !o.contexts.contains(&name) {
                    o.contexts.push(name);
                }
            }
            OwnedChange::RemoveContext { name } => o.contexts.retain(|c| *c != name),
            OwnedChange::CreateNetwork { name, id } => {
                o.networks.insert(name, id);
            }
            OwnedChange::RemoveNetwork { name } => {
                o.networks.remove(&name);
            }
            OwnedChange::ConfirmRegistry { name, container } => {
                o.registries.insert(name, container);
            }
            OwnedChange::RemoveRegistry { name } => {
                o.registries.remove(&name);
            }
            OwnedChange::CreateNamespace { cluster, name, uid } => {
                o.namespaces.entry(cluster).or_default().insert(name, uid);
            }
            OwnedChange::RemoveNamespace { cluster, name } => {
                if let Some(n) = o.namespaces.get_mut(&cluster) {
                    n.remove(&name);
                    if n.is_empty() {
                        o.namespaces.remove(&cluster);
                    }
                }
            }
        }
    }
}

/// Holds a lab's lock while alive.
#[derive(Debug)]
pub struct LockGuard {
    file: File,
    path: PathBuf,
    /// This lock created the lock file (the lab had none).
    created: bool,
}

impl LockGuard {
    /// Releases the lock of a command that stopped before touching anything (a failed preflight, a lab
    /// that is not up): a lock file this command created goes too, so it leaves nothing behind. Removed
    /// while still locked; a command that opened the file meanwhile sees it gone and takes a new one.
    pub fn discard(self) {
        if self.created {
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.file);
    }

    /// Releases the lock of a lab that `down` forgot: when nothing of the lab is left in `state`, the
    /// lock file goes whoever created it, and so do the lab's emptied folders, so that `down` leaves
    /// nothing behind. Removed while still locked, as in [`LockGuard::discard`].
    pub fn release_forgotten(self, state: &StateDir) {
        let left = std::fs::read_dir(&state.path)
            .map(|entries| {
                entries
                    .flatten()
                    .any(|e| e.path() != self.path && e.path() != state.kubeconfigs())
            })
            .unwrap_or(true);
        if left {
            return;
        }
        let _ = std::fs::remove_file(&self.path);
        drop(self.file);
        // Best effort, and only folders that are empty: `remove_dir` refuses anything else.
        let _ = std::fs::remove_dir(state.kubeconfigs());
        let _ = std::fs::remove_dir(&state.path);
        if state.path.ends_with("simulated")
            && let Some(lab) = state.path.parent()
        {
            let _ = std::fs::remove_dir(lab);
        }
    }
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

/// Writes a file holding secrets: mode 0600 from the start, atomically and durably replaced. The
/// temporary file (`tempfile`, private from creation) sits next to `path` and is removed if anything
/// fails; after the rename the folder is synced too, so a crash cannot bring back the old file.
pub fn write_secret(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let parent = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".ocm-lab-")
        .suffix(".tmp")
        .tempfile_in(parent)?;
    tmp.write_all(contents)?;
    tmp.as_file().sync_all()?;
    restrict(tmp.path(), 0o600)?;
    tmp.persist(path).map_err(|e| e.error)?;
    #[cfg(unix)]
    std::fs::File::open(parent)?.sync_all()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forgetting_a_lab_removes_the_merged_kubeconfigs_of_existing_clusters_and_keeps_other_files()
    {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        let a = dir.path().join("a.yaml");
        let b = dir.path().join("b.yaml");
        for (p, ctx) in [(&a, "one"), (&b, "two")] {
            std::fs::write(
                p,
                format!(
                    "apiVersion: v1\nkind: Config\ncontexts: [{{name: {ctx}, context: {{cluster: {ctx}, user: {ctx}}}}}]\n\
                     clusters: [{{name: {ctx}, cluster: {{server: 'https://{ctx}:6443'}}}}]\n\
                     users: [{{name: {ctx}, user: {{token: secret}}}}]\n"
                ),
            )
            .unwrap();
        }
        let list = std::env::join_paths([&a, &b]).unwrap();
        let merged = state
            .existing_kubeconfig("hub", list.to_str().unwrap())
            .unwrap();
        assert!(merged.exists(), "the merged copy is written");
        // A file the user put there themselves is not the lab's to remove.
        let theirs = state.kubeconfigs().join("notes.txt");
        std::fs::write(&theirs, "mine").unwrap();
        state.forget(false).unwrap();
        assert!(!merged.exists(), "credentials copied by the lab go with it");
        assert!(theirs.exists());
    }

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn only_a_confirmed_create_makes_a_cluster_the_labs() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        // hub: created and confirmed; spoke-1: its create failed; spoke-2: cut off before confirming;
        // old: a record from before confirmations.
        state.intend_cluster("hub").unwrap();
        state.confirm_cluster("hub", &ids(&["b", "a"])).unwrap();
        state.intend_cluster("spoke-1").unwrap();
        state.withdraw_cluster("spoke-1").unwrap();
        state.intend_cluster("spoke-2").unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(state.owned_log())
            .unwrap()
            .write_all(b"{\"op\":\"add-cluster\",\"name\":\"old\"}\n")
            .unwrap();
        state
            .update_contexts(|c| c.push("kind-hub".into()))
            .unwrap();
        let again = StateDir {
            path: dir.path().to_owned(),
        };
        let owned = again.owned().unwrap();
        assert_eq!(
            owned.clusters,
            BTreeMap::from([("hub".to_owned(), ids(&["a", "b"]))])
        );
        assert_eq!(
            owned.intended,
            BTreeSet::from(["old".to_owned(), "spoke-2".to_owned()])
        );
        assert_eq!(owned.contexts, ids(&["kind-hub"]));
        // Ours only while every container that looks like a node is one the lab recorded.
        assert_eq!(owned.owns("hub", &ids(&["a", "b"])), Some(true));
        assert_eq!(owned.owns("hub", &ids(&["a"])), Some(true));
        assert_eq!(owned.owns("hub", &ids(&["a", "c"])), Some(false));
        assert_eq!(owned.owns("hub", &[]), None);
        assert_eq!(owned.owns("old", &ids(&["x"])), Some(false));
        assert_eq!(owned.owns("spoke-2", &ids(&["x"])), Some(false));
        state.remove_cluster("hub").unwrap();
        assert!(again.owned().unwrap().clusters.is_empty());
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
    fn a_torn_last_line_is_cut_off_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        state.intend_cluster("hub").unwrap();
        state.confirm_cluster("hub", &ids(&["a"])).unwrap();
        let log = state.owned_log();
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str("{\"op\":\"remove-clus");
        std::fs::write(&log, &text).unwrap();
        // Read: the torn line is ignored.
        assert_eq!(state.owned().unwrap().clusters.len(), 1);
        // Appended after: the torn line is gone, not glued to the new one.
        state.intend_cluster("spoke").unwrap();
        let after = std::fs::read_to_string(&log).unwrap();
        assert!(!after.contains("remove-clus"), "{after}");
        assert!(
            after.ends_with("{\"op\":\"intend-cluster\",\"name\":\"spoke\"}\n"),
            "{after}"
        );
        let owned = state.owned().unwrap();
        assert_eq!(owned.clusters.len(), 1);
        assert!(owned.intended.contains("spoke"));
    }

    #[test]
    fn a_damaged_middle_line_is_an_error_naming_down_which_reads_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        state.intend_cluster("hub").unwrap();
        let log = state.owned_log();
        let mut text = std::fs::read_to_string(&log).unwrap();
        text.push_str(
            "\u{1}garbage\n{\"op\":\"confirm-cluster\",\"name\":\"hub\",\"containers\":[\"a\"]}\n",
        );
        std::fs::write(&log, &text).unwrap();
        let err = state.owned().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("owned.jsonl") && msg.contains("damaged at line 2"),
            "{msg}"
        );
        let help = miette::Diagnostic::help(&err).unwrap().to_string();
        assert!(help.contains("ocm-lab down"), "{help}");
        assert_eq!(
            state.owned_lenient().unwrap().clusters,
            BTreeMap::from([("hub".to_owned(), ids(&["a"]))])
        );
    }

    #[test]
    fn a_lock_that_is_a_folder_is_refused_with_a_help_that_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        std::fs::create_dir(state.lock_file()).unwrap();
        let e = state.lock("lab", "up").unwrap_err();
        assert!(matches!(e, StateError::LockNotAFile { .. }), "{e:?}");
        let help = miette::Diagnostic::help(&e).unwrap().to_string();
        assert!(
            help.contains(&format!("rm -r {}", state.lock_file().display())),
            "{help}"
        );
        // The help works.
        std::fs::remove_dir(state.lock_file()).unwrap();
        assert!(state.lock("lab", "up").is_ok());
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

    #[test]
    fn a_discarded_lock_removes_only_a_lock_file_it_created_and_the_lab_locks_again() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir {
            path: dir.path().to_owned(),
        };
        state.lock("lab", "up").unwrap().discard();
        assert!(
            !state.lock_file().exists(),
            "the lock file it created is gone"
        );
        // A lock file that was there before stays.
        drop(state.lock("lab", "up").unwrap());
        state.lock("lab", "verify").unwrap().discard();
        assert!(state.lock_file().exists());
        // A lock file removed while another process still has it open: the lock is taken on a new file
        // at the path, and that one refuses a second holder.
        let stale = std::fs::File::open(state.lock_file()).unwrap();
        std::fs::remove_file(state.lock_file()).unwrap();
        let guard = state.lock("lab", "up").unwrap();
        assert!(state.lock_file().exists());
        assert!(matches!(
            state.lock("lab", "down"),
            Err(StateError::Locked { .. })
        ));
        drop((guard, stale));
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
