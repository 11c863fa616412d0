//! The top-level error: every way a command can fail, each with what to do next and an exit code.

use std::io::IsTerminal;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme};

use crate::patch::PatchError;
use crate::topology::TopologyError;
use crate::workflow::spec::WorkflowError;

/// Exit codes (also in docs/troubleshooting.md).
pub mod exit {
    /// The command did what it was asked.
    pub const OK: u8 = 0;
    /// The lab or the world failed: a step, a check, an unreachable tool.
    pub const FAILURE: u8 = 1;
    /// The input is wrong: arguments, topology, workflow or patch files. Nothing was touched.
    pub const INVALID_INPUT: u8 = 2;
    /// Interrupted (Ctrl-C); running again finishes the work.
    pub const CANCELLED: u8 = 130;
}

#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum Error {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Exercise(#[from] crate::exercise::ExerciseError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    ExerciseRun(#[from] crate::exercise::run::RunError),
    #[error("exercise `{exercise}` is not solved yet (see above)")]
    #[diagnostic(
        code(ocm_lab::exercise::unsolved),
        help("stuck? `{help}` shows the next hint")
    )]
    ExerciseUnsolved { exercise: String, help: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Topology(#[from] TopologyError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Workflow(#[from] WorkflowError),
    #[error("failed to load chart patches")]
    #[diagnostic(
        code(ocm_lab::chart_patches),
        help("fix the patch file or folder, or drop --chart-patches to use the embedded ones")
    )]
    Patches(#[from] PatchError),
    #[error("failed to read workflows from {path}")]
    #[diagnostic(
        code(ocm_lab::workflow::read),
        help(
            "give a folder that holds workflow files (`up.yaml`, …) or a `manifests/` folder of them, or drop --workflows to use the embedded ones"
        )
    )]
    ReadWorkflows {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to write {path}: {source}")]
    #[diagnostic(code(ocm_lab::plan::write), help("check that the folder is writable"))]
    WriteFile {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "refusing to write the plan into {0}: it is not empty and holds no earlier ocm-lab plan"
    )]
    #[diagnostic(
        code(ocm_lab::plan::not_empty),
        help("choose a new or empty folder; ocm-lab only replaces folders it wrote")
    )]
    PlanDirNotEmpty(String),
    #[error("failed to write to stdout: {0}")]
    Stdout(#[source] std::io::Error),
    #[error(transparent)]
    #[diagnostic(transparent)]
    State(#[from] crate::state::StateError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Journal(#[from] crate::engine::JournalError),
    #[error("failed to load the simulated lab from {path}: {source}")]
    #[diagnostic(code(ocm_lab::sim::load))]
    SimLoad {
        path: String,
        #[source]
        source: std::io::Error,
        /// The commands that recover, for this lab (`down --simulate` removes a damaged world).
        #[help]
        help: String,
    },
    #[error("failed to save the simulated lab to {path}: {source}")]
    #[diagnostic(
        code(ocm_lab::sim::save),
        help(
            "check the state folder's permissions and free space (`df -h`), then run the same command again"
        )
    )]
    SimSave {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("this ocm-lab was built without the simulated lab (cargo feature `simulate`)")]
    #[diagnostic(
        code(ocm_lab::no_simulation),
        help(
            "run without `--simulate`, or install a build with the default features (`cargo install --path lab`)"
        )
    )]
    NoSimulation,
    #[error("step `{step}` failed{}: {message}", failed_by(*.backend))]
    #[diagnostic(code(ocm_lab::step_failed))]
    StepFailed {
        step: String,
        /// The backend whose failure ended the step, when it was one.
        backend: Option<crate::backend::Backend>,
        message: String,
        #[help]
        help: Option<String>,
    },
    /// `up` or `reset` stopped before touching anything: the checks that failed, and what to do.
    #[error("preflight failed: {failed}; nothing was created")]
    #[diagnostic(code(ocm_lab::preflight), help("{help}"))]
    Preflight { failed: String, help: String },
    /// `doctor` found what would stop `up`.
    #[error("`ocm-lab up` would stop in preflight: {failed}")]
    #[diagnostic(code(ocm_lab::doctor), help("{help}"))]
    DoctorFailed { failed: String, help: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Tools(Box<crate::backend::tools::ToolError>),
    #[error("lab `{lab}` is not up: {why}")]
    #[diagnostic(code(ocm_lab::not_up), help("{help}"))]
    NotUp {
        lab: String,
        why: String,
        help: String,
    },
    #[error("lab `{lab}` is not healthy (see above)")]
    #[diagnostic(code(ocm_lab::unhealthy), help("{help}"))]
    Unhealthy { lab: String, help: String },
    #[error("`ocm-lab consumer {namespace}`: {why}")]
    #[diagnostic(code(ocm_lab::consumer::topology), help("{help}"))]
    ConsumerTopology {
        namespace: String,
        why: String,
        help: String,
    },
    #[error("failed to read the ClusterProfiles of namespace {namespace} on the hub: {why}")]
    #[diagnostic(code(ocm_lab::consumer::hub), help("{help}"))]
    ConsumerHub {
        namespace: String,
        why: String,
        help: String,
    },
    #[error("cancelled: running steps were stopped; run the same command again to finish")]
    #[diagnostic(code(ocm_lab::cancelled))]
    Cancelled,
    #[error(
        "no combination of the matrix fits in the runner: the smallest, `{smallest}`, lacks {short}"
    )]
    #[diagnostic(
        code(ocm_lab::ci::nothing_fits),
        help(
            "give the runner's real size (`--runner-memory 16GB --runner-cpus 4 --runner-disk 14GB` for GitHub's standard Linux runner), or a topology with fewer kind clusters (`-t minimal`)"
        )
    )]
    CiNothingFits { smallest: String, short: String },
    /// `__post-render` (run by Helm) could not patch the manifests; Helm stops the install.
    #[error("ocm-lab post-renderer: {0}")]
    #[diagnostic(code(ocm_lab::post_render))]
    PostRender(#[from] PostRenderError),
    #[error(
        "cannot find the path of this ocm-lab binary, which helm runs as its post-renderer: {0}"
    )]
    #[diagnostic(
        code(ocm_lab::current_exe),
        help(
            "run ocm-lab from a path that still exists (it may have been moved or deleted while running)"
        )
    )]
    CurrentExe(#[source] std::io::Error),
    #[error("failed to start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("the dashboard cannot serve on {addr}: {source}")]
    #[diagnostic(
        code(ocm_lab::dashboard::serve),
        help(
            "choose another --port (or leave it out for a free one), or another --listen address"
        )
    )]
    Serve {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    #[diagnostic(
        code(ocm_lab::images),
        help(
            "the image list renders the chart versions the catalog pins; check the versions in the topology (`ocm-lab plan`)"
        )
    )]
    Images(#[from] ImagesError),
    /// `bundle save` / `up --bundle`: the Docker side failed or the bundle was refused.
    #[error("{error}")]
    #[diagnostic(code(ocm_lab::bundle))]
    Bundle {
        error: Box<crate::backend::docker::DockerError>,
        #[help]
        help: Option<String>,
    },
    /// `bundle save`: images the local Docker engine lacks (all of them, checked before anything is written).
    #[error(
        "{count} of the {of} images of the bundle are not in the Docker engine at {host} (below); nothing was written"
    )]
    #[diagnostic(code(ocm_lab::bundle::images_missing), help("{help}"))]
    BundleImagesMissing {
        count: usize,
        of: usize,
        host: String,
        images: Vec<String>,
        help: String,
    },
    /// `bundle save` / `up --bundle`: a chart could not be fetched into, or put into, the chart cache.
    #[error("{error}")]
    #[diagnostic(code(ocm_lab::chart_cache))]
    ChartCache {
        error: Box<crate::backend::chart_cache::ChartCacheError>,
        #[help]
        help: Option<String>,
    },
    /// `up --bundle` with a bundle made for other versions than the topology's.
    #[error("the bundle {bundle} was made for other versions than this lab's: {why}")]
    #[diagnostic(
        code(ocm_lab::bundle_versions),
        help(
            "make a bundle for this topology (`ocm-lab bundle save -t <topology> --out <file>`), or run `up` with the topology the bundle was made for"
        )
    )]
    BundleVersions { bundle: String, why: String },
}

impl From<crate::backend::tools::ToolError> for Error {
    fn from(e: crate::backend::tools::ToolError) -> Self {
        Error::Tools(Box::new(e))
    }
}

impl From<crate::backend::docker::DockerError> for Error {
    fn from(e: crate::backend::docker::DockerError) -> Self {
        let help = e.help();
        Error::Bundle {
            error: Box::new(e),
            help,
        }
    }
}

impl From<crate::backend::chart_cache::ChartCacheError> for Error {
    fn from(e: crate::backend::chart_cache::ChartCacheError) -> Self {
        let help = crate::backend::Failure::help(&e);
        Error::ChartCache {
            error: Box::new(e),
            help,
        }
    }
}

impl Error {
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Exercise(crate::exercise::ExerciseError::NotForThisLab { .. }) => exit::FAILURE,
            Error::Exercise(_) => exit::INVALID_INPUT,
            Error::ExerciseRun(crate::exercise::run::RunError::Exercise(_))
            | Error::ExerciseRun(_)
            | Error::ExerciseUnsolved { .. } => exit::FAILURE,
            Error::Topology(_)
            | Error::Workflow(_)
            | Error::Patches(_)
            | Error::PlanDirNotEmpty(_)
            | Error::CiNothingFits { .. }
            | Error::ConsumerTopology { .. } => exit::INVALID_INPUT,
            Error::ReadWorkflows { .. } => exit::INVALID_INPUT,
            Error::State(crate::state::StateError::Locked { .. }) => exit::FAILURE,
            Error::Cancelled => exit::CANCELLED,
            Error::WriteFile { .. }
            | Error::Stdout(_)
            | Error::State(_)
            | Error::Journal(_)
            | Error::SimLoad { .. }
            | Error::SimSave { .. }
            | Error::NoSimulation
            | Error::StepFailed { .. }
            | Error::Unhealthy { .. }
            | Error::ConsumerHub { .. }
            | Error::NotUp { .. }
            | Error::Preflight { .. }
            | Error::DoctorFailed { .. }
            | Error::Tools(_)
            | Error::PostRender(_)
            | Error::CurrentExe(_)
            | Error::Runtime(_)
            | Error::Serve { .. }
            | Error::Images(_)
            | Error::Bundle { .. }
            | Error::BundleImagesMissing { .. }
            | Error::ChartCache { .. } => exit::FAILURE,
            Error::BundleVersions { .. } => exit::INVALID_INPUT,
        }
    }
}

/// Why the post-renderer could not patch the manifests (Helm then stops the install). Messages never
/// quote the manifests: they can hold Secrets.
#[derive(Debug, thiserror::Error)]
pub enum PostRenderError {
    #[error("failed to read the manifests on stdin: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("chart version `{version}` is not semver: {detail}")]
    Version { version: String, detail: String },
    #[error("the manifests Helm passed on stdin are not valid YAML{at}: {detail}", at = .location.map(|(l, c)| format!(" (line {l}, column {c})")).unwrap_or_default())]
    Yaml {
        location: Option<(u64, u64)>,
        detail: String,
    },
    #[error("document {index} of the manifests Helm passed on stdin is not an object")]
    NotAnObject { index: usize },
    /// A patch no longer fits what the chart renders.
    #[error(
        "{detail}: chart {chart} {version} no longer renders what the patch was written for; fix or remove the patch (`--chart-patches`), or pick another chart version"
    )]
    Patch {
        chart: String,
        version: String,
        detail: String,
    },
}

/// Why the image list could not be made.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the version catalog does not know which images chart {chart} {version} runs")]
pub struct ImagesError {
    pub chart: String,
    pub version: String,
}

/// Renders a diagnostic for the terminal (colour only on a terminal).
pub fn render(diag: &dyn miette::Diagnostic) -> String {
    let theme = if std::io::stderr().is_terminal() {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    let mut out = String::new();
    let _ = GraphicalReportHandler::new_themed(theme)
        .with_width(110)
        // A path, URL or image reference longer than a line stays whole, and so does a `command`: a
        // line is only ever broken between words, never inside one or at its hyphens.
        .with_break_words(false)
        .with_word_splitter(textwrap::WordSplitter::NoHyphenation)
        .with_word_separator(textwrap::WordSeparator::Custom(words_outside_backticks))
        .render_report(&mut out, diag);
    out
}

/// The words a line wraps between: split after each run of spaces, except inside `backticks`, so that a
/// quoted command (`docker pull IMAGE`) is one word and stays on one line, ready to copy.
fn words_outside_backticks(line: &str) -> Box<dyn Iterator<Item = textwrap::core::Word<'_>> + '_> {
    let mut words = Vec::new();
    let mut start = 0;
    let mut in_code = false;
    let mut after_space = false;
    for (i, c) in line.char_indices() {
        if after_space && c != ' ' {
            words.push(textwrap::core::Word::from(&line[start..i]));
            start = i;
        }
        after_space = c == ' ' && !in_code;
        if c == '`' {
            in_code = !in_code;
        }
    }
    if start < line.len() {
        words.push(textwrap::core::Word::from(&line[start..]));
    }
    Box::new(words.into_iter())
}

/// ` (helm)`, ` (Kubernetes API)`: which backend a failed step's error came from, when it came from one.
fn failed_by(backend: Option<crate::backend::Backend>) -> String {
    backend
        .map(|b| format!(" ({})", b.human()))
        .unwrap_or_default()
}
