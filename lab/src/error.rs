//! The top-level error: every way a command can fail, each with what to do next and an exit code.

use miette::Diagnostic;

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
    #[error("step `{step}` failed: {message}")]
    #[diagnostic(code(ocm_lab::step_failed))]
    StepFailed {
        step: String,
        message: String,
        #[help]
        help: Option<String>,
    },
    #[error("preflight failed: {0}")]
    #[diagnostic(
        code(ocm_lab::preflight),
        help("fix the findings above (`ocm-lab doctor` re-checks them); nothing was created")
    )]
    Preflight(String),
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
    PostRender(#[from] crate::commands::postrender::PostRenderError),
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
    #[error(transparent)]
    #[diagnostic(
        code(ocm_lab::images),
        help(
            "the image list renders the chart versions the catalog pins; check the versions in the topology (`ocm-lab plan`)"
        )
    )]
    Images(#[from] crate::images::ImagesError),
    /// `bundle save` / `up --bundle`: the Docker side failed or the bundle was refused.
    #[error("{error}")]
    #[diagnostic(code(ocm_lab::bundle))]
    Bundle {
        error: Box<crate::backend::docker::DockerError>,
        #[help]
        help: Option<String>,
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
            "make a bundle for this topology (`ocm-lab bundle save -t <topology> -o <file>`), or run `up` with the topology the bundle was made for"
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
            | Error::Preflight(_)
            | Error::Tools(_)
            | Error::PostRender(_)
            | Error::CurrentExe(_)
            | Error::Runtime(_)
            | Error::Images(_)
            | Error::Bundle { .. }
            | Error::ChartCache { .. } => exit::FAILURE,
            Error::BundleVersions { .. } => exit::INVALID_INPUT,
        }
    }
}
