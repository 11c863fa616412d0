//! Command-line interface: the commands and their options (clap).
//!
//! Each command takes only the options it uses, so a misplaced option (`down --junit j.xml`) is refused by
//! the parser instead of being silently ignored. Only `-v`, `--kubeconfig` and `--context` are global.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Shown under `ocm-lab --help`: every environment variable ocm-lab reads, and the exit codes.
/// (A test keeps this list complete against the environment variables read in `lab/src`.)
pub const AFTER_LONG_HELP: &str = "\
Environment variables:
  OCM_LAB_STATE_DIR       Where labs keep their state (journal, kubeconfigs, simulated lab).
                          Default: $XDG_STATE_HOME/ocm-lab, else ~/.local/state/ocm-lab.
  OCM_LAB_CACHE_DIR       Where downloaded kind, helm and charts are kept.
                          Default: $XDG_CACHE_HOME/ocm-lab, else ~/.cache/ocm-lab.
  OCM_LAB_KIND            The kind binary to use, instead of PATH or a download.
  OCM_LAB_HELM            The helm binary to use, instead of PATH or a download.
  OCM_LAB_TOOLS_BASE_URL  Download kind and helm from this mirror, not their release hosts.
  OCM_LAB_CHARTS_BASE_URL Fetch the charts from this chart repository (its index.yaml and
                          the charts it names), not the charts' own repository.
  KUBECONFIG              The kubeconfig `up` adds the lab's contexts to (its first file), and
                          the default of an `existing:` cluster's kubeconfig (all its files,
                          merged as kubectl merges them). Default: ~/.kube/config.
                          `--kubeconfig` overrides it.
  DOCKER_HOST             The Docker Engine to use. Default: unix:///var/run/docker.sock.
  DOCKER_TLS_VERIFY       When set with DOCKER_HOST: refused (no TLS connections to Docker).
  DOCKER_CONTEXT          Read, with $DOCKER_CONFIG/config.json, only to suggest a
  DOCKER_CONFIG           DOCKER_HOST when Docker cannot be reached.
  XDG_RUNTIME_DIR         Searched for a rootless Docker socket when Docker is unreachable.
  KIND_EXPERIMENTAL_DOCKER_NETWORK
                          The Docker network of the kind nodes, as kind reads it.
                          Default: kind.
  RUST_LOG                Log filter for stderr (tracing syntax); overrides -v.
  HOME, PATH              Default folders; where kind and helm are looked for.
  XDG_STATE_HOME          See OCM_LAB_STATE_DIR.
  XDG_CACHE_HOME          See OCM_LAB_CACHE_DIR.
  OCM_LAB_POST_RENDERER   Not read: set by ocm-lab for the helm it runs, the path of ocm-lab
                          that Helm 4 runs as the chart post-renderer.

Exit codes:
  0    Done (`status`: the lab is healthy; `doctor`: `up` gets past its preflight,
       a missing kind or helm included when its download host answers).
  1    The lab or the machine failed: a step, a check, a tool, Docker; the lab is not
       up or not healthy; another ocm-lab holds the lab's lock; `doctor` found
       something that stops `up` (such as kind or helm missing, and its download
       host not answering, or `--no-download`).
  2    The input is wrong: arguments, topology, workflow or chart-patch files.
       Nothing was touched.
  130  Interrupted (Ctrl-C); running the same command again finishes the work.";

/// A declarative local Open Cluster Management lab for the Cluster Inventory API (ClusterProfile).
///
/// ocm-lab reads a topology (an embedded default reproduces the ClusterProfile walkthrough: a hub and two
/// spokes on kind), brings the lab up as a graph of idempotent steps, and proves that spoke ClusterProperty
/// values reach ClusterProfile.status.properties and that status.accessProviders carries a usable
/// cluster-proxy endpoint.
#[derive(Debug, Parser)]
#[command(
    name = "ocm-lab",
    version,
    propagate_version = true,
    max_term_width = 110,
    after_help = "Environment variables and exit codes: see `ocm-lab --help`.",
    after_long_help = AFTER_LONG_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More logs on stderr (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// As kubectl's: the kubeconfig file of every `existing:` cluster whose topology names none, and the
    /// file `up` adds the kind clusters' contexts to (and `down` removes them from: pass it to both),
    /// instead of $KUBECONFIG or ~/.kube/config.
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context of the one `existing:` cluster whose topology leaves `context:` out (for
    /// example `existing: {}` on the hub, to point one topology at any cluster). An error when no cluster
    /// of the topology leaves it out; the kubeconfig's current-context is never used.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
}

impl Cli {
    /// The output format the command was given (`-o`), `human` for commands without one.
    pub fn output(&self) -> Output {
        match &self.command {
            Command::Up(a) | Command::Reset(a) => a.output.into(),
            Command::Verify(a) => a.output.into(),
            Command::Down(a) => a.output.into(),
            Command::Status(a) => a.output.output,
            Command::Dashboard(_) => Output::Human,
            Command::Consumer(a) => a.output.output,
            Command::Doctor(a) => a.output.output,
            Command::Plan(a) => a.output.output,
            Command::Images(ImagesCommand::List(a)) => a.output.output,
            Command::Exercise(ExerciseCommand::List(a)) => a.output.output,
            Command::Exercise(ExerciseCommand::Start(a)) => a.output.output,
            Command::Exercise(ExerciseCommand::Stop(a)) => a.output.output,
            Command::Exercise(ExerciseCommand::Check(a)) => a.output.into(),
            Command::Bundle(_) => Output::Human,
            Command::Topology(TopologyCommand::Check { output, .. })
            | Command::Topology(TopologyCommand::List { output }) => output.output,
            Command::Ci(CiCommand::Matrix(a)) => a.output,
            Command::Ci(CiCommand::Contexts(a)) => a.output,
            Command::Diagnose(_)
            | Command::Topology(TopologyCommand::Schema | TopologyCommand::Show { .. })
            | Command::Completions { .. }
            | Command::PostRender(_) => Output::Human,
        }
    }
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Readable text.
    Human,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// How a run (`up`, `verify`, `down`, `reset`) prints its events: a stream has no YAML form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamOutput {
    /// Live progress and a summary.
    Human,
    /// One JSON object per event per line.
    Json,
}

impl From<StreamOutput> for Output {
    fn from(o: StreamOutput) -> Self {
        match o {
            StreamOutput::Human => Output::Human,
            StreamOutput::Json => Output::Json,
        }
    }
}

impl From<StreamOutput> for crate::engine::report::Style {
    fn from(o: StreamOutput) -> Self {
        match o {
            StreamOutput::Human => crate::engine::report::Style::Human,
            StreamOutput::Json => crate::engine::report::Style::Json,
        }
    }
}

/// `-o` of the commands that print one result (a document, not a stream).
#[derive(Debug, Clone, Copy, Args)]
pub struct DocumentOutput {
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

/// Which topology and workflows to use.
#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// Topology: a file path, or the name of an embedded topology (default, minimal, workshop).
    #[arg(short = 't', long = "topology", value_name = "FILE|NAME")]
    pub topology: Option<String>,
    /// Read workflow files (and `manifests/` templates) from this folder instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,
    /// Read chart patches from this folder instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub chart_patches: Option<PathBuf>,
    /// Use this kindest/node image instead of the topology's (the e2e matrix sets it).
    #[arg(long, value_name = "IMAGE")]
    pub node_image: Option<String>,
}

/// `-t` alone: the commands that read a lab but plan no workflow (`status`, `consumer`, `diagnose`).
#[derive(Debug, Clone, Args)]
pub struct TopologyArg {
    /// Topology: a file path, or the name of an embedded topology (default, minimal, workshop).
    #[arg(short = 't', long = "topology", value_name = "FILE|NAME")]
    pub topology: Option<String>,
}

impl From<&TopologyArg> for LabArgs {
    fn from(a: &TopologyArg) -> Self {
        LabArgs {
            topology: a.topology.clone(),
            workflows: None,
            chart_patches: None,
            node_image: None,
        }
    }
}

/// `-t`, `--workflows` and `--chart-patches`: the commands that plan a workflow on a lab that exists
/// (`verify`, `down`), whose node image is the one the clusters already run.
#[derive(Debug, Clone, Args)]
pub struct PlanArgsOnLab {
    #[command(flatten)]
    pub topology: TopologyArg,
    /// Read workflow files (and `manifests/` templates) from this folder instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub workflows: Option<PathBuf>,
    /// Read chart patches from this folder instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub chart_patches: Option<PathBuf>,
}

impl From<&PlanArgsOnLab> for LabArgs {
    fn from(a: &PlanArgsOnLab) -> Self {
        LabArgs {
            workflows: a.workflows.clone(),
            chart_patches: a.chart_patches.clone(),
            ..LabArgs::from(&a.topology)
        }
    }
}

/// `--simulate`.
#[derive(Debug, Clone, Copy, Args)]
pub struct SimArgs {
    /// Run against the simulated lab (a test double of OCM kept in the state folder), not real clusters.
    /// kubectl cannot reach it (nothing listens at its API server addresses, and it adds no context to
    /// your kubeconfig): `ocm-lab status --simulate` shows what kubectl would.
    #[arg(long)]
    pub simulate: bool,
}

/// `--concurrency` and `--timing`: how the steps run, and what is said about their time.
#[derive(Debug, Clone, Copy, Args)]
pub struct EngineArgs {
    /// Most steps running at once.
    #[arg(long, default_value_t = crate::engine::DEFAULT_CONCURRENCY, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Say where the time went after the run (the critical path and the slowest steps). Without it,
    /// said only after an `up` or `reset` that changed something and took 5 minutes or more; `-o json`
    /// always carries it (the `timing` event).
    #[arg(long)]
    pub timing: bool,
}

/// After this long, an `up` or `reset` that changed something says where the time went unasked.
pub const LONG_RUN_MS: u64 = 5 * 60 * 1000;

/// `--junit` and `--checks`: the options of the commands that verify.
#[derive(Debug, Clone, Args)]
pub struct VerifyOptions {
    /// Write the verification results as JUnit XML (one test case per spoke, namespace and check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Checks to run instead of the topology's (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "CHECK,...")]
    pub checks: Vec<CheckArg>,
    /// The image the `consumer` check runs on the hub (examples/consumer, already in the hub's nodes), instead
    /// of the topology's `spec.verify.consumerImage`.
    #[arg(long, value_name = "IMAGE")]
    pub consumer_image: Option<String>,
}

/// `--no-download`.
#[derive(Debug, Clone, Copy, Args)]
pub struct DownloadArgs {
    /// Never download kind or helm: use what is installed (or cached), or fail saying what to install.
    #[arg(long)]
    pub no_download: bool,
}

/// `up` and `reset`: they may download tools, run steps and verify.
#[derive(Debug, Clone, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub download: DownloadArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub verify: VerifyOptions,
    /// Bring the lab up from this bundle (`ocm-lab bundle save`; replaces the topology's `spec.bundle`):
    /// checks its digests and that it was made for this topology's versions, loads the node image into
    /// Docker, and loads each cluster's images into its kind nodes before the charts, so no node pulls.
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Output format: progress for people, or one JSON object per event per line.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StreamOutput::Human)]
    pub output: StreamOutput,
}

/// `verify`: runs steps and verifies; never downloads.
#[derive(Debug, Clone, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub lab: PlanArgsOnLab,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    #[command(flatten)]
    pub verify: VerifyOptions,
    /// Output format: progress for people, or one JSON object per event per line.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StreamOutput::Human)]
    pub output: StreamOutput,
}

/// `down`: runs steps; verifies nothing, downloads nothing.
#[derive(Debug, Clone, Args)]
pub struct DownArgs {
    #[command(flatten)]
    pub lab: PlanArgsOnLab,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Output format: progress for people, or one JSON object per event per line.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StreamOutput::Human)]
    pub output: StreamOutput,
}

/// `status`: reads the lab and prints one document.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub lab: TopologyArg,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
    /// Keep the picture on screen and redraw it when the lab changes (the dashboard's view, for a
    /// terminal), until Ctrl-C.
    #[arg(long, conflicts_with = "output")]
    pub watch: bool,
}

/// `dashboard`: serves the live picture of the lab.
#[derive(Debug, Clone, Args)]
pub struct DashboardArgs {
    #[command(flatten)]
    pub lab: TopologyArg,
    #[command(flatten)]
    pub sim: SimArgs,
    /// The port to serve on. Default: a free one, printed.
    #[arg(long, value_name = "PORT", default_value_t = 0)]
    pub port: u16,
    /// The address to serve on. Another than a loopback address (for example 0.0.0.0, for other machines
    /// in the room) requires a random token, printed in the URL.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1")]
    pub listen: std::net::IpAddr,
}

/// `consumer`: what a ClusterProfile consumer application needs to use the lab, from one namespace.
#[derive(Debug, Clone, Args)]
pub struct ConsumerArgs {
    /// The namespace the consumer runs in: one a ManagedClusterSet of the lab is bound to.
    pub namespace: String,
    /// The consumer's ServiceAccount (and the prefix of its Roles, RoleBindings and ConfigMap).
    #[arg(long, value_name = "NAME", default_value = "clusterprofile-consumer")]
    pub service_account: String,
    /// The ManagedServiceAccount whose synced token `cp-creds` returns. Default: the one the topology syncs to
    /// the namespace's ClusterProfiles.
    #[arg(long, value_name = "NAME")]
    pub msa: Option<String>,
    #[command(flatten)]
    pub lab: TopologyArg,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
}

/// `doctor`: checks the machine; `--no-download` asks whether `up --no-download` would work.
#[derive(Debug, Clone, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub download: DownloadArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
}

/// What the code that runs a command needs to know, whichever command it is: built from the command's
/// own options, with what the command does not take at its neutral value.
#[derive(Debug, Clone)]
pub struct RunArgs {
    pub lab: LabArgs,
    pub simulate: bool,
    pub no_download: bool,
    pub concurrency: u16,
    /// `--timing`.
    pub timing: bool,
    pub junit: Option<PathBuf>,
    pub checks: Vec<CheckArg>,
    /// `--consumer-image`: replaces the topology's `spec.verify.consumerImage`.
    pub consumer_image: Option<String>,
    /// The kind and helm binaries `up --bundle` unpacked from the bundle: the run uses these.
    pub bundled_tools: Vec<(crate::backend::tools::ToolName, PathBuf)>,
    /// Images `up --bundle` loaded that Docker knows by their tag only, not by the digest the lab pins:
    /// pinned reference → the tag to run them by (see `commands::bundle::local_names`).
    pub image_aliases: std::collections::BTreeMap<String, String>,
    /// `--bundle`: replaces the topology's `spec.bundle`.
    pub bundle: Option<PathBuf>,
    /// Replaces the topology's `spec.verify.timeout` (`exercise check --timeout`).
    pub verify_timeout: Option<std::time::Duration>,
}

impl RunArgs {
    /// `ocm-lab <command>` for the same lab: with this run's `-t` and `--simulate`, for advice in messages.
    pub fn command_line(&self, command: &str) -> String {
        let mut line = format!("ocm-lab {command}");
        if let Some(t) = &self.lab.topology {
            let plain = t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./~:@+=".contains(c));
            if plain {
                line.push_str(&format!(" -t {t}"));
            } else {
                line.push_str(&format!(" -t '{}'", t.replace('\'', r"'\''")));
            }
        }
        if self.simulate {
            line.push_str(" --simulate");
        }
        line
    }

    fn new(lab: &LabArgs, sim: SimArgs) -> Self {
        RunArgs {
            lab: lab.clone(),
            simulate: sim.simulate,
            no_download: false,
            concurrency: crate::engine::DEFAULT_CONCURRENCY,
            timing: false,
            junit: None,
            checks: Vec::new(),
            consumer_image: None,
            bundled_tools: Vec::new(),
            image_aliases: Default::default(),
            bundle: None,
            verify_timeout: None,
        }
    }
}

impl From<&UpArgs> for RunArgs {
    fn from(a: &UpArgs) -> Self {
        RunArgs {
            no_download: a.download.no_download,
            concurrency: a.engine.concurrency,
            timing: a.engine.timing,
            junit: a.verify.junit.clone(),
            checks: a.verify.checks.clone(),
            consumer_image: a.verify.consumer_image.clone(),
            bundle: a.bundle.clone(),
            ..RunArgs::new(&a.lab, a.sim)
        }
    }
}

impl From<&VerifyArgs> for RunArgs {
    fn from(a: &VerifyArgs) -> Self {
        RunArgs {
            concurrency: a.engine.concurrency,
            timing: a.engine.timing,
            junit: a.verify.junit.clone(),
            checks: a.verify.checks.clone(),
            consumer_image: a.verify.consumer_image.clone(),
            ..RunArgs::new(&(&a.lab).into(), a.sim)
        }
    }
}

impl From<&DownArgs> for RunArgs {
    fn from(a: &DownArgs) -> Self {
        RunArgs {
            concurrency: a.engine.concurrency,
            timing: a.engine.timing,
            ..RunArgs::new(&(&a.lab).into(), a.sim)
        }
    }
}

impl From<&StatusArgs> for RunArgs {
    fn from(a: &StatusArgs) -> Self {
        RunArgs::new(&(&a.lab).into(), a.sim)
    }
}

impl From<&DashboardArgs> for RunArgs {
    fn from(a: &DashboardArgs) -> Self {
        RunArgs::new(&(&a.lab).into(), a.sim)
    }
}

impl From<&ConsumerArgs> for RunArgs {
    fn from(a: &ConsumerArgs) -> Self {
        RunArgs::new(&(&a.lab).into(), a.sim)
    }
}

impl From<&DoctorArgs> for RunArgs {
    fn from(a: &DoctorArgs) -> Self {
        RunArgs {
            no_download: a.download.no_download,
            ..RunArgs::new(&a.lab, a.sim)
        }
    }
}

impl From<&DiagnoseArgs> for RunArgs {
    fn from(a: &DiagnoseArgs) -> Self {
        RunArgs::new(&(&a.lab).into(), a.sim)
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lab's clusters, install OCM and the addons, and verify the ClusterProfile flow.
    Up(UpArgs),
    /// Render everything `up` would do, touching nothing: steps, manifests, chart values, the step graph.
    ///
    /// With `--out DIR`, the charts' rendered objects too, rendered by an installed helm from the chart
    /// cache (fetching a chart not cached yet is the only network access of `plan`; `--no-charts` skips
    /// it, `--simulate` uses the simulated chart models instead).
    Plan(PlanArgs),
    /// Prove the properties and accessProviders flow end to end, and say which hop broke.
    Verify(VerifyArgs),
    /// Show clusters, OCM registration, addons and ClusterProfiles of the lab.
    Status(StatusArgs),
    /// Serve a live picture of the lab for a browser (a projector): clusters, sets, bindings,
    /// ClusterProfiles, addons, the running exercise and the last verification.
    ///
    /// Serves on 127.0.0.1 at a free port (printed) until Ctrl-C. Every asset is in the binary: the page
    /// works with the network off. `--listen` on another address requires the token printed with the URL.
    Dashboard(DashboardArgs),
    /// Print what a ClusterProfile consumer in NAMESPACE needs: the namespace's ClusterProfiles, the provider
    /// file, its ServiceAccount's Roles, and the initContainer that copies cp-creds (`-o yaml` to apply).
    ///
    /// Read-only. The YAML (the default form, and `-o yaml`) is ready for `kubectl apply -f -`: a
    /// ServiceAccount, a Role to read ClusterProfiles, a Role with `get` on Secrets for managed-serviceaccount's
    /// `cp-creds` (it reads the token synced next to each ClusterProfile), their RoleBindings, and a ConfigMap
    /// with the provider file; the consumer Pod's spec (the initContainer copying `/cp-creds` out of the
    /// managed-serviceaccount image the lab runs, and the mounts) follows as a comment. `-o json` gives all of
    /// it as one object.
    Consumer(ConsumerArgs),
    /// Delete the lab's kind clusters, contexts and the Docker network it created; on existing clusters remove only what the lab installed and applied.
    Down(DownArgs),
    /// Bring a used lab back to its just-up state without re-creating clusters.
    Reset(UpArgs),
    /// Check this machine for what a lab needs, and say what to fix.
    ///
    /// The verdict is `up`'s preflight: exit 0 when `up` would get past it, 1 when it would stop there.
    /// For a kind or helm that is missing, doctor asks its download host (or OCM_LAB_TOOLS_BASE_URL's
    /// mirror) whether `up`'s download could start, waiting 5 seconds at most, and downloads nothing;
    /// with `--no-download` it asks nothing and judges as `up --no-download` would.
    Doctor(DoctorArgs),
    /// Write a bundle for a bug report: journal, topology, the lab's OCM objects and events, secrets redacted.
    Diagnose(DiagnoseArgs),
    /// Check topology files, list the embedded ones, print the JSON Schema.
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// For CI workflows: a GitHub Actions job matrix, and the contexts of a lab (the Action's outputs).
    #[command(subcommand)]
    Ci(CiCommand),
    /// The container images the lab runs (for preloading, mirrors and offline labs).
    #[command(subcommand)]
    Images(ImagesCommand),
    /// Offline labs: one archive of what `up` would fetch (the images, the charts, kind and helm), for
    /// `up --bundle`.
    #[command(subcommand)]
    Bundle(BundleCommand),
    /// Workshop exercises: break the lab at one hop on purpose, let participants find and fix it.
    ///
    /// `start` breaks the lab (recording what it changed in the lab's state folder, `exercise.json` names
    /// the running exercise), `check` runs `verify` and says whether it is solved or which hop is still
    /// broken (`--hint` shows the next hint), `stop` heals exactly what the exercise broke (so does `reset`).
    #[command(subcommand)]
    Exercise(ExerciseCommand),
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish).
    ///
    /// For example: `ocm-lab completions bash > ~/.local/share/bash-completion/completions/ocm-lab`,
    /// `ocm-lab completions zsh > ~/.zfunc/_ocm-lab` (with `~/.zfunc` in fpath),
    /// `ocm-lab completions fish > ~/.config/fish/completions/ocm-lab.fish`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Helm's post-renderer: applies the chart patches to manifests on stdin (Helm runs this).
    #[command(name = "__post-render", hide = true)]
    PostRender(PostRenderArgs),
}

#[derive(Debug, Subcommand)]
pub enum ExerciseCommand {
    /// List the exercises: name, the hop `verify` names once it runs, title.
    List(ExerciseListArgs),
    /// Break the lab for exercise NAME and print the participant's task.
    Start(ExerciseStartArgs),
    /// Run `verify`: say whether the running exercise is solved, or which hop is still broken.
    Check(ExerciseCheckArgs),
    /// Heal exactly what the running exercise broke, and end it.
    Stop(ExerciseStopArgs),
}

/// `--exercises`.
#[derive(Debug, Clone, Args)]
pub struct ExercisesDir {
    /// Read the exercises from this folder (`*.yaml`) instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub exercises: Option<PathBuf>,
}

/// `exercise list`.
#[derive(Debug, Clone, Args)]
pub struct ExerciseListArgs {
    #[command(flatten)]
    pub dir: ExercisesDir,
    #[command(flatten)]
    pub output: DocumentOutput,
}

/// `exercise start`.
#[derive(Debug, Clone, Args)]
pub struct ExerciseStartArgs {
    /// The exercise (`ocm-lab exercise list`).
    pub name: String,
    #[command(flatten)]
    pub dir: ExercisesDir,
    #[command(flatten)]
    pub lab: PlanArgsOnLab,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
}

/// `exercise check`.
#[derive(Debug, Clone, Args)]
pub struct ExerciseCheckArgs {
    /// Also show the next hint (each `--hint` shows one more, in order).
    #[arg(long)]
    pub hint: bool,
    /// How long `verify` waits for a hop that may still heal (replaces the topology's `verify.timeout`;
    /// a change a participant just made reaches the hub within seconds).
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    #[command(flatten)]
    pub dir: ExercisesDir,
    #[command(flatten)]
    pub lab: PlanArgsOnLab,
    #[command(flatten)]
    pub sim: SimArgs,
    /// Output format: `verify`'s progress for people, or one JSON object per event per line (the last one
    /// the verdict, `"event": "exercise-checked"`).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = StreamOutput::Human)]
    pub output: StreamOutput,
}

/// `exercise stop`.
#[derive(Debug, Clone, Args)]
pub struct ExerciseStopArgs {
    #[command(flatten)]
    pub lab: PlanArgsOnLab,
    #[command(flatten)]
    pub sim: SimArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
}

impl From<(&LabArgs, SimArgs)> for RunArgs {
    fn from((lab, sim): (&LabArgs, SimArgs)) -> Self {
        RunArgs::new(lab, sim)
    }
}

/// `__post-render`: which chart's manifests arrive on stdin, and where the patches are.
#[derive(Debug, Clone, Args)]
pub struct PostRenderArgs {
    /// The chart name (`cluster-proxy`).
    #[arg(long)]
    pub chart: String,
    /// The chart version (semver).
    #[arg(long)]
    pub chart_version: String,
    /// Read chart patches from this folder instead of the embedded ones.
    #[arg(long, value_name = "DIR")]
    pub chart_patches: Option<PathBuf>,
}

/// A verification check, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckArg {
    Properties,
    AccessProviders,
    Reachable,
    Credentials,
    Conditions,
    Consumer,
}

impl From<CheckArg> for crate::topology::Check {
    fn from(c: CheckArg) -> Self {
        use crate::topology::Check;
        match c {
            CheckArg::Properties => Check::Properties,
            CheckArg::AccessProviders => Check::AccessProviders,
            CheckArg::Reachable => Check::Reachable,
            CheckArg::Credentials => Check::Credentials,
            CheckArg::Conditions => Check::Conditions,
            CheckArg::Consumer => Check::Consumer,
        }
    }
}

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub lab: TopologyArg,
    #[command(flatten)]
    pub sim: SimArgs,
    /// Where to write the bundle (default: ocm-lab-<lab>-diagnostics.tar.gz in the current folder;
    /// ocm-lab-<lab>-SIMULATED-diagnostics.tar.gz with `--simulate`).
    #[arg(long, value_name = "FILE.tar.gz")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    /// Write every manifest, values file and the graph into this folder (created if missing), and each
    /// chart's rendered and patched objects (`charts/<cluster>/<release>.yaml`, what `up` installs).
    ///
    /// Each chart is rendered as `up` renders it: fetched once into the chart cache (checked against its
    /// repository's index; `OCM_LAB_CHARTS_BASE_URL` for a mirror), then `helm template` of that local
    /// file through ocm-lab's post-renderer, with an installed helm (`OCM_LAB_HELM`, `PATH`, or the
    /// tools cache; plan downloads no tools). Fetching a chart that is not cached yet is the one network
    /// access of `plan` (`--no-charts` skips rendering). A chart that is not rendered is listed under
    /// `notIncluded` in `charts.yaml`, with why.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// With `--out`: do not render the charts (no helm, no network); `charts.yaml` lists them as not included.
    #[arg(long, requires = "out")]
    pub no_charts: bool,
    /// With `--out`: render the charts with the simulated lab's chart models instead of helm (no network);
    /// the files say they are simulated.
    #[arg(long, requires = "out")]
    pub simulate: bool,
    /// The workflow to plan.
    #[arg(long, default_value = "up", value_name = "NAME")]
    pub workflow: String,
    #[command(flatten)]
    pub output: DocumentOutput,
}

#[derive(Debug, Subcommand)]
pub enum ImagesCommand {
    /// List every image the lab runs: the kind node image and every image the pinned charts' objects
    /// name, with the value of the lab's topology; with its digest where the reference pins one.
    List(ImagesListArgs),
}

/// `images list`.
#[derive(Debug, Clone, Args)]
pub struct ImagesListArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    #[command(flatten)]
    pub output: DocumentOutput,
}

#[derive(Debug, Subcommand)]
pub enum BundleCommand {
    /// Write one bundle for `up --bundle`: every image of `images list` (the kind node image included)
    /// from the local Docker engine, the charts the lab installs, and kind and helm.
    ///
    /// The bundle is a tar with a manifest of names, digests, sizes and the lab's versions, streamed.
    /// Every image is checked first: when the engine lacks any, all of them are named, each with its
    /// `docker pull` line, and nothing is written. The charts come from the chart cache (fetched when
    /// missing) and kind and helm as `up` finds them (downloaded when missing), for this machine's
    /// operating system and architecture.
    ///
    /// For example: `ocm-lab bundle save -t workshop --out lab-bundle.tar`.
    Save(BundleSaveArgs),
}

/// `bundle save`.
#[derive(Debug, Clone, Args)]
pub struct BundleSaveArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    /// The bundle to write (replaced only once it is complete).
    #[arg(long, value_name = "FILE", required_unless_present = "old_output")]
    pub out: Option<PathBuf>,
    /// Refused with what to write instead: `-o` is the output format in every command, and the bundle's
    /// file is `--out FILE` (`-o FILE` was, in earlier releases).
    #[arg(short = 'o', long = "output", value_name = "FILE", hide = true)]
    pub old_output: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Validate a topology file (or an embedded topology) and report every problem with its location.
    Check {
        /// A file path, or the name of an embedded topology (or give it with `-t`, as to every command).
        #[arg(value_name = "FILE|NAME", required_unless_present = "topology_flag")]
        topology: Option<String>,
        /// The same, as every command that reads a topology takes it.
        #[arg(
            short = 't',
            long = "topology",
            value_name = "FILE|NAME",
            conflicts_with = "topology"
        )]
        topology_flag: Option<String>,
        #[command(flatten)]
        output: DocumentOutput,
    },
    /// Print the JSON Schema of topology files, for editor completion.
    Schema,
    /// List the embedded topologies.
    List {
        #[command(flatten)]
        output: DocumentOutput,
    },
    /// Print an embedded topology, to start a new one from it.
    Show {
        /// The embedded topology (default: `default`).
        #[arg(value_name = "NAME")]
        name: Option<String>,
        /// The same, as every command that reads a topology takes it.
        #[arg(
            short = 't',
            long = "topology",
            value_name = "NAME",
            conflicts_with = "name"
        )]
        topology_flag: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum CiCommand {
    /// Print a GitHub Actions `strategy.matrix` (JSON) of topologies × node images.
    ///
    /// Without -t and --node-image: every embedded topology × every node image the version catalog knows.
    /// With --runner-memory, a combination whose kind clusters need more memory than the runner has
    /// (1536 MiB per cluster, as preflight reckons) is left out, and said so on stderr. Use it as
    /// `matrix: ${{ fromJSON(needs.<job>.outputs.matrix) }}`; each job gets `matrix.topology`,
    /// `matrix.node` (the image), `matrix.k8s` (its Kubernetes version) and `matrix.clusters`.
    Matrix(CiMatrixArgs),
    /// Print the kube contexts of a lab's hub and spokes, and the kubeconfig `up` writes them to (JSON).
    Contexts(CiContextsArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CiMatrixArgs {
    /// A topology of the matrix (repeatable): a file path or an embedded name. Default: every embedded one.
    #[arg(short = 't', long = "topology", value_name = "FILE|NAME")]
    pub topology: Vec<String>,
    /// A kindest/node image of the matrix (repeatable). Default: the node images the catalog knows.
    #[arg(long, value_name = "IMAGE")]
    pub node_image: Vec<String>,
    /// The runner's memory: MiB (`7168`) or with a unit (`16GB`, `16GiB`, `7G`). GitHub's standard Linux
    /// runner has 16 GB in public repositories. Default: leave nothing out.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub runner_memory: Option<u64>,
    /// The runner's CPUs (GitHub's standard Linux runner has 4 in public repositories). Default: not
    /// checked.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub runner_cpus: Option<u64>,
    /// The runner's free disk, as `--runner-memory` takes sizes (GitHub's standard Linux runner has
    /// 14 GB of SSD). Default: not checked.
    #[arg(long, value_name = "SIZE", value_parser = parse_memory)]
    pub runner_disk: Option<u64>,
    /// Output format (JSON, on one line, is what `$GITHUB_OUTPUT` takes).
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Json)]
    pub output: Output,
}

#[derive(Debug, Clone, Args)]
pub struct CiContextsArgs {
    /// Topology: a file path, or the name of an embedded topology (default, minimal, workshop).
    #[arg(short = 't', long = "topology", value_name = "FILE|NAME")]
    pub topology: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Output::Json)]
    pub output: Output,
}

/// Parses a memory size into MiB: a number of MiB (`7168`), or with a unit: `M`/`MiB`, `G`/`GiB`
/// (binary, as Docker's `--memory 16g`), `MB`/`GB` (decimal, as GitHub states its runners' memory).
/// Case does not matter; a space before the unit is allowed; `7.5GiB` works.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    const EXAMPLES: &str =
        "give MiB (`7168`) or a size with a unit: `16GB`, `16GiB`, `7G`, `7168MiB`";
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = (&t[..split], t[split..].trim());
    let value: f64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a memory size: {EXAMPLES}"))?;
    let bytes_per_unit: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "m" | "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => {
            return Err(format!("`{text}` has an unknown unit `{unit}`: {EXAMPLES}"));
        }
    };
    let mib = (value * bytes_per_unit / (1024.0 * 1024.0)).floor();
    if !mib.is_finite() || mib < 1.0 {
        return Err(format!(
            "`{text}` is less than 1 MiB: give the runner's memory, e.g. `16GB` for GitHub's standard Linux runner"
        ));
    }
    Ok(mib as u64)
}
