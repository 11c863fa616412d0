//! Command-line interface: the commands and their options (clap).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    max_term_width = 110
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More logs on stderr (-v debug, -vv trace); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Output format for results and events.
    #[arg(long, global = true, value_enum, default_value_t = Output::Human)]
    pub output: Output,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Readable text.
    Human,
    /// JSON (one object per line for event streams).
    Json,
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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lab's clusters, install OCM and the addons, and verify the ClusterProfile flow.
    Up(RunArgs),
    /// Render everything `up` would do, touching nothing: steps, manifests, chart values, the step graph.
    Plan(PlanArgs),
    /// Prove the properties and accessProviders flow end to end, and say which hop broke.
    Verify(RunArgs),
    /// Show clusters, OCM registration, addons and ClusterProfiles of the lab.
    Status(RunArgs),
    /// Delete the lab's clusters and contexts, and nothing else.
    Down(RunArgs),
    /// Bring a used lab back to its just-up state without re-creating clusters.
    Reset(RunArgs),
    /// Check this machine for what a lab needs, and say what to fix.
    Doctor(RunArgs),
    /// Write a bundle for a bug report: journal, topology, the lab's OCM objects and events, secrets redacted.
    Diagnose(DiagnoseArgs),
    /// Check topology files, list the embedded ones, print the JSON Schema.
    #[command(subcommand)]
    Topology(TopologyCommand),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    /// Run against the simulated lab (a test double of OCM kept in the state folder), not real clusters.
    #[arg(long)]
    pub simulate: bool,
    /// Never download kind or helm: use what is installed (or cached), or fail saying what to install.
    #[arg(long)]
    pub no_download: bool,
    /// Most steps running at once.
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Write the verification results as JUnit XML (one test case per spoke, namespace and check).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Checks to run (verify only): properties, access-providers, reachable, credentials, conditions.
    #[arg(long, value_delimiter = ',', value_name = "CHECK,...")]
    pub checks: Vec<CheckArg>,
}

/// A verification check, as named on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CheckArg {
    Properties,
    AccessProviders,
    Reachable,
    Credentials,
    Conditions,
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
        }
    }
}

#[derive(Debug, Args)]
pub struct DiagnoseArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Where to write the bundle (default: ocm-lab-<lab>-diagnostics.tar.gz in the current folder).
    #[arg(long, value_name = "FILE.tar.gz")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub lab: LabArgs,
    /// Write every manifest, values file and the graph into this folder (created if missing).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// The workflow to plan.
    #[arg(long, default_value = "up", value_name = "NAME")]
    pub workflow: String,
}

#[derive(Debug, Subcommand)]
pub enum TopologyCommand {
    /// Validate a topology file (or an embedded topology) and report every problem with its location.
    Check {
        /// A file path, or the name of an embedded topology.
        #[arg(value_name = "FILE|NAME")]
        topology: String,
    },
    /// Print the JSON Schema of topology files, for editor completion.
    Schema,
    /// List the embedded topologies.
    List,
    /// Print an embedded topology, to start a new one from it.
    Show {
        #[arg(value_name = "NAME", default_value = "default")]
        name: String,
    },
}
