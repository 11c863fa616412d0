//! The commands: one file per command of `cli.rs`, each saying all that its command does.
//!
//! The commands that run workflows (`up`, `verify`, `down`, `reset`) share [`runner`]: backend setup, the
//! preflight, the lock, the reporter task, Ctrl-C and saving the simulated world. The read-only commands
//! (`status`, `consumer`, `doctor`, `diagnose`) use its backend setup without the lock. This module holds what every
//! command prints with: its inputs (topology, workflows, chart patches), warnings, and stdout.

pub mod bundle;
pub mod checks;
pub mod ci;
pub mod completions;
pub mod consumer;
pub mod dashboard;
pub mod diagnose;
pub mod doctor;
pub mod down;
pub mod exercise;
pub mod images;
pub mod picture;
pub mod plan;
pub mod postrender;
pub mod purpose;
pub mod reset;
pub mod runner;
pub mod status;
pub mod topology;
pub mod up;
pub mod verify;

use std::io::Write;

use crate::cli::{LabArgs, Output};
use crate::diag::FileDiagnostics;
use crate::error::Error;
use crate::patch::PatchSet;
use crate::topology::Loaded;
use crate::workflow::Sources;

/// Prints one result: `human` as text, or the value as JSON (one line) or YAML.
pub(crate) fn document(
    output: Output,
    value: &impl serde::Serialize,
    human: impl FnOnce() -> String,
) -> Result<(), Error> {
    stdout(&match output {
        Output::Human => human(),
        Output::Json => format!(
            "{}\n",
            serde_json::to_string(value).expect("results serialize")
        ),
        Output::Yaml => serde_saphyr::to_string(value).expect("results serialize to YAML"),
    })
}

pub(crate) fn stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

/// Prints a topology's warnings, if any.
pub(crate) fn warn(loaded: &Loaded) {
    if loaded.warnings.is_empty() {
        return;
    }
    let diags = FileDiagnostics::new(&loaded.origin, &loaded.text, loaded.warnings.clone());
    let _ = writeln!(
        std::io::stderr(),
        "{}",
        crate::error::render(&WarningsOnly(&diags))
    );
}

/// Shows only the related issues of a warnings-only report, without the "N problems" header.
#[derive(Debug)]
struct WarningsOnly<'a>(&'a FileDiagnostics);

impl std::fmt::Display for WarningsOnly<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.issues.len();
        write!(
            f,
            "{}: {n} {}",
            self.0.file,
            if n == 1 { "warning" } else { "warnings" }
        )
    }
}
impl std::error::Error for WarningsOnly<'_> {}
impl miette::Diagnostic for WarningsOnly<'_> {
    fn severity(&self) -> Option<miette::Severity> {
        Some(miette::Severity::Warning)
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.0.source_code()
    }
    fn related<'a>(&'a self) -> Option<Box<dyn Iterator<Item = &'a dyn miette::Diagnostic> + 'a>> {
        self.0.related()
    }
}

/// What the command line (`--kubeconfig`, `--context`) and the environment say about this machine: read
/// once, here in the command layer, and passed to whatever needs it.
pub fn host(
    kubeconfig: Option<&std::path::Path>,
    context: Option<String>,
) -> crate::topology::Host {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    crate::topology::Host {
        kubeconfig: kubeconfig.map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.to_path_buf())
                .display()
                .to_string()
        }),
        context,
        kubeconfig_env: var("KUBECONFIG"),
        home: var("HOME"),
        kind_network: crate::backend::docker::kind_network(),
    }
}

/// Loads the topology, workflow sources and chart patches a command names.
pub fn inputs(
    args: &LabArgs,
    host: &crate::topology::Host,
) -> Result<(Loaded, Sources, PatchSet), Error> {
    let mut loaded = crate::topology::load_arg(host, args.topology.as_deref())?;
    if let Some(image) = &args.node_image {
        loaded.lab.versions.kind_node_image = image.clone();
    }
    let sources = match &args.workflows {
        None => Sources::embedded(),
        Some(dir) => Sources::from_dir(dir).map_err(|source| Error::ReadWorkflows {
            path: dir.display().to_string(),
            source,
        })?,
    };
    let patches = match &args.chart_patches {
        None => PatchSet::embedded()?,
        Some(dir) => PatchSet::load_dir(dir)?,
    };
    Ok((loaded, sources, patches))
}

/// The runtime a command runs its async work on.
pub fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}
