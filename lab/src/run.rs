//! Entry point: parse arguments, set up logging, run the command, render errors, return an exit code.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use miette::{GraphicalReportHandler, GraphicalTheme};

use crate::cli::{Cli, Command, LabArgs, Output, RunArgs, TopologyCommand};
use crate::diag::FileDiagnostics;
use crate::engine::events::Events;
use crate::engine::{self, RunCtx, RunOptions, report};
use crate::error::{Error, exit};
use crate::patch::PatchSet;
use crate::sim::SimLab;
use crate::state::StateDir;
use crate::topology::{self, Loaded};
use crate::workflow::Sources;
use crate::{embedded, plan_out};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Runs `ocm-lab` with these arguments (the first is the program name).
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help and version to stdout and usage errors to stderr, with exit code 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::INVALID_INPUT
            } else {
                exit::OK
            });
        }
    };
    init_tracing(cli.verbose);
    match run(&cli) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            report(&e);
            ExitCode::from(e.exit_code())
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        // kube-client logs each failed request at ERROR; our own message already says it, with what to do.
        0 => "warn,kube_client=off",
        1 => "ocm_lab=debug,info",
        _ => "trace",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    // try_init: tests call `main` more than once in one process.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
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
        .render_report(&mut out, diag);
    out
}

fn report(e: &Error) {
    let _ = writeln!(std::io::stderr(), "{}", render(e));
}

/// Prints one result: `human` as text, or the value as JSON (one line) or YAML.
fn document(
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

fn stdout(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(Error::Stdout)
}

/// Prints a topology's warnings, if any.
fn warn(loaded: &Loaded) {
    if loaded.warnings.is_empty() {
        return;
    }
    let diags = FileDiagnostics::new(&loaded.origin, &loaded.text, loaded.warnings.clone());
    let _ = writeln!(std::io::stderr(), "{}", render(&WarningsOnly(&diags)));
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

/// Loads the topology, workflow sources and chart patches a command names.
pub fn inputs(args: &LabArgs) -> Result<(Loaded, Sources, PatchSet), Error> {
    let mut loaded = topology::load_arg(args.topology.as_deref())?;
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

fn run(cli: &Cli) -> Result<(), Error> {
    match &cli.command {
        Command::Plan(args) => {
            let (loaded, sources, patches) = inputs(&args.lab)?;
            warn(&loaded);
            let plan =
                crate::workflow::plan::plan(&loaded.lab, &sources, &patches, &args.workflow)?;
            match (&args.out, cli.output()) {
                (Some(dir), output) => {
                    let written = plan_out::write(&loaded.lab, &plan, dir)?;
                    let result = serde_json::json!({
                        "lab": plan.lab,
                        "workflow": plan.workflow,
                        "dir": dir,
                        "steps": plan.steps.len(),
                        "files": written,
                    });
                    document(output, &result, || {
                        format!(
                            "wrote the plan of lab `{}` ({}, {}) to {}\n",
                            plan.lab,
                            crate::text::count(plan.steps.len(), "step", "steps"),
                            crate::text::count(written, "file", "files"),
                            dir.display()
                        )
                    })
                }
                (None, Output::Json) => stdout(&format!(
                    "{}\n",
                    serde_json::to_string_pretty(&plan).expect("plans serialize")
                )),
                (None, Output::Yaml) => {
                    stdout(&serde_saphyr::to_string(&plan).expect("plans serialize to YAML"))
                }
                (None, Output::Human) => stdout(&plan_out::summary(&loaded.lab, &plan)),
            }
        }
        Command::Topology(TopologyCommand::Check { topology, output }) => {
            let loaded = topology::load_arg(Some(topology))?;
            warn(&loaded);
            let lab = &loaded.lab;
            let checks: Vec<&str> = lab.verify.checks.iter().map(|c| c.as_str()).collect();
            let result = serde_json::json!({
                "file": loaded.origin,
                "ok": true,
                "lab": lab.name,
                "hub": lab.hub.cluster.name,
                "spokes": lab.spokes.iter().map(|s| &s.cluster.name).collect::<Vec<_>>(),
                "clusterSets": lab.cluster_sets.iter().map(|s| &s.name).collect::<Vec<_>>(),
                "bindings": lab.bindings.len(),
                "checks": checks,
                "warnings": loaded.warnings.len(),
            });
            document(output.output, &result, || {
                use crate::text::count;
                format!(
                    "{}: ok: lab `{}`, hub `{}`, {}, {}, {}, checks: {}\n",
                    loaded.origin,
                    lab.name,
                    lab.hub.cluster.name,
                    count(lab.spokes.len(), "spoke", "spokes"),
                    count(lab.cluster_sets.len(), "set", "sets"),
                    count(lab.bindings.len(), "binding", "bindings"),
                    checks.join(", ")
                )
            })
        }
        Command::Topology(TopologyCommand::Schema) => stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&topology::json_schema()).expect("schemas serialize")
        )),
        Command::Topology(TopologyCommand::List { output }) => {
            let list: Vec<serde_json::Value> = embedded::TOPOLOGIES
                .iter()
                .map(|(name, text)| {
                    let desc = topology::load_str(name, text)
                        .ok()
                        .and_then(|l| l.lab.description)
                        .unwrap_or_default();
                    serde_json::json!({"name": name, "description": desc})
                })
                .collect();
            document(output.output, &list, || {
                list.iter()
                    .map(|t| {
                        let name = t["name"].as_str().unwrap_or_default();
                        let desc = t["description"].as_str().unwrap_or_default();
                        format!("{name:<10} {desc}\n")
                    })
                    .collect()
            })
        }
        Command::Topology(TopologyCommand::Show { name }) => match embedded::topology(name) {
            Some(text) => stdout(text),
            None => Err(topology::load_arg(Some(name)).err().map_or_else(
                || unreachable!("a missing embedded topology fails to load"),
                Error::from,
            )),
        },
        Command::Up(a) => run_workflows(cli, &a.into(), &["up"]),
        Command::Verify(a) => run_workflows(cli, &a.into(), &["verify"]),
        Command::Down(a) => run_workflows(cli, &a.into(), &["down"]),
        Command::Status(a) => status(cli, &a.into()),
        Command::Diagnose(a) => diagnose(a),
        // Remove what participants added, then `up`: it restores what they changed and verifies. One lock
        // over both, so no other command can take the lab between the prune and the `up`.
        Command::Reset(a) => run_workflows(cli, &a.into(), &["reset", "up"]),
        Command::Doctor(a) => doctor(cli, &a.into()),
        Command::Images(c) => crate::images::command(c),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(
                *shell,
                &mut <Cli as clap::CommandFactory>::command(),
                "ocm-lab",
                &mut script,
            );
            stdout(&String::from_utf8_lossy(&script))
        }
    }
}

/// The backends a command runs against, and the simulated world to save afterwards.
struct Opened {
    backends: crate::backend::Backends,
    sim: Option<Arc<SimLab>>,
    /// What setting up the real backends found (tools, Docker), for preflight and doctor.
    findings: Vec<crate::doctor::Finding>,
    docker: Option<crate::backend::docker::Docker>,
    /// Versions of the tools the backends run (part of every step's input digest).
    tool_versions: std::collections::BTreeMap<String, String>,
}

impl Opened {
    fn save(&self, state: &StateDir) -> Result<(), Error> {
        match &self.sim {
            Some(sim) => sim
                .save(&state.sim_world())
                .map_err(|source| Error::SimSave {
                    path: state.sim_world().display().to_string(),
                    source,
                }),
            None => Ok(()),
        }
    }
}

/// Sets up the backends. Only `up` may download tools; read-only commands never do. A piece that cannot be
/// set up (Docker down, a tool missing) becomes `Unavailable`, failing with its message only if used.
fn open_backends(
    rt: &tokio::runtime::Runtime,
    args: &crate::cli::RunArgs,
    state: &StateDir,
    command: &'static str,
    node_image: &str,
) -> Result<Opened, Error> {
    use crate::backend::{
        Unavailable, docker::Docker, helm::Helm, kind::Kind, kube::KubeConnector, tools,
    };
    if args.simulate {
        let path = state.sim_world();
        let sim = match SimLab::load(&path) {
            Ok(sim) => sim,
            // `down` of a simulated lab whose saved world cannot be read: there is nothing left to tear
            // down in the simulation, so the damaged file goes and `down` proceeds on an empty world.
            Err(e) if command == "down" && e.kind() == std::io::ErrorKind::InvalidData => {
                tracing::warn!(
                    "{e}: nothing to tear down in the simulation, removing the damaged file"
                );
                std::fs::remove_file(&path).map_err(|source| Error::SimSave {
                    path: path.display().to_string(),
                    source,
                })?;
                SimLab::new()
            }
            Err(source) => {
                return Err(Error::SimLoad {
                    path: path.display().to_string(),
                    source,
                    help: format!(
                        "the saved simulated lab cannot be used: run `{}` (it removes the damaged file), then `{}`",
                        lab_command(args, "down"),
                        lab_command(args, "up")
                    ),
                });
            }
        };
        return Ok(Opened {
            backends: sim.backends(),
            sim: Some(sim),
            findings: Vec::new(),
            docker: None,
            tool_versions: Default::default(),
        });
    }
    // `reset` ends with an `up`, which may download: its preflight judges the same tools.
    let may_download = matches!(command, "up" | "reset") && !args.no_download;
    let mut cfg = tools::ToolsConfig::from_env(if may_download {
        tools::Downloads::Allow
    } else {
        tools::Downloads::Forbid
    })?;
    // A kind too old for the node image is passed over like any too-old kind.
    cfg.kind_minimum = Some(crate::topology::catalog::kind_for_node_image(node_image));
    // Resolving runs the tools (and may download): blocking, so outside the runtime.
    let kind = tools::resolve(tools::ToolName::Kind, &cfg);
    let helm = tools::resolve(tools::ToolName::Helm, &cfg);
    let tool_versions = [("kind", &kind), ("helm", &helm)]
        .into_iter()
        .filter_map(|(name, t)| Some((name.to_owned(), t.as_ref().ok()?.version.to_string())))
        .collect();
    // `doctor` says a missing tool would be downloaded unless asked about `--no-download`.
    let mut findings = crate::doctor::tools(
        &kind,
        &helm,
        may_download || (command == "doctor" && !args.no_download),
        &crate::topology::catalog::kind_for_node_image(node_image).0,
    );
    let docker = rt.block_on(Docker::connect());
    let backends = crate::backend::Backends {
        docker: match &docker {
            Ok(d) => Arc::new(d.clone()),
            Err(e) => Arc::new(Unavailable(e.clone())),
        },
        kind: match kind {
            Ok(t) => Arc::new(Kind::new(t)),
            Err(e) => Arc::new(Unavailable(e.into())),
        },
        helm: match helm {
            Ok(t) => Arc::new(Helm::new(t)),
            Err(e) => Arc::new(Unavailable(e.into())),
        },
        kube: Arc::new(KubeConnector::new()),
        simulated: false,
    };
    if let Err(e) = &docker {
        findings.retain(|f| f.check != "docker");
        tracing::debug!("docker: {e}");
    }
    Ok(Opened {
        backends,
        sim: None,
        findings,
        docker: docker.ok(),
        tool_versions,
    })
}

/// Everything the doctor checks: tools (from opening the backends), Docker, kernel, memory, ports, clashes.
fn doctor_findings(
    rt: &tokio::runtime::Runtime,
    lab: &crate::topology::Lab,
    opened: &Opened,
    state: &StateDir,
) -> Vec<crate::doctor::Finding> {
    let mut findings = opened.findings.clone();
    findings.extend(rt.block_on(crate::doctor::check(
        lab,
        &opened.backends,
        opened.docker.as_ref(),
        state,
    )));
    findings
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::Runtime)
}

/// `ocm-lab doctor`: every finding with what to do; exit 1 when something would stop `up`.
fn doctor(cli: &Cli, args: &crate::cli::RunArgs) -> Result<(), Error> {
    let (loaded, _, _) = inputs(&args.lab)?;
    warn(&loaded);
    let state = StateDir::for_run(&loaded.lab.name, args.simulate)?;
    let rt = runtime()?;
    let opened = open_backends(
        &rt,
        args,
        &state,
        "doctor",
        &loaded.lab.versions.kind_node_image,
    )?;
    let findings = doctor_findings(&rt, &loaded.lab, &opened, &state);
    rt.shutdown_background();
    document(cli.output(), &findings, || crate::doctor::render(&findings))?;
    if crate::doctor::failed(&findings) {
        let failed: Vec<&str> = findings
            .iter()
            .filter(|f| f.level == crate::doctor::Level::Fail)
            .map(|f| f.check)
            .collect();
        Err(Error::Preflight(failed.join(", ")))
    } else {
        Ok(())
    }
}

/// `ocm-lab diagnose`: read-only, so it takes no lock (it is most useful while something hangs).
fn diagnose(args: &crate::cli::DiagnoseArgs) -> Result<(), Error> {
    let run = RunArgs::from(args);
    let (loaded, _, patches) = inputs(&run.lab)?;
    let lab = loaded.lab;
    let state = StateDir::for_run(&lab.name, run.simulate)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, &run, &state, "diagnose", &lab.versions.kind_node_image)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| format!("ocm-lab-{}-diagnostics.tar.gz", lab.name).into());
    let files = rt.block_on(async {
        let (events, _rx) = Events::channel();
        let ctx = RunCtx::new(
            lab.clone(),
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            CancellationToken::new(),
        );
        crate::diagnose::gather(&ctx, &loaded.text).await
    });
    rt.shutdown_background();
    let root = format!("ocm-lab-{}-diagnostics", lab.name);
    crate::diagnose::write_tarball(&out, &root, &files).map_err(|source| Error::WriteFile {
        path: out.display().to_string(),
        source,
    })?;
    stdout(&format!(
        "wrote {} ({}, secrets redacted)\n",
        out.display(),
        crate::text::count(files.len(), "file", "files")
    ))
}

/// `ocm-lab status`: read-only, so it takes no lock. Exit 1 when something is unhealthy.
fn status(cli: &Cli, args: &crate::cli::RunArgs) -> Result<(), Error> {
    let (loaded, _, patches) = inputs(&args.lab)?;
    warn(&loaded);
    let lab = loaded.lab;
    let state = StateDir::for_run(&lab.name, args.simulate)?;
    ensure_up(&lab, &state, args)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, args, &state, "status", &lab.versions.kind_node_image)?;
    let status = rt.block_on(async {
        let (events, _rx) = Events::channel();
        let ctx = RunCtx::new(
            lab,
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            CancellationToken::new(),
        );
        crate::status::collect(&ctx).await
    });
    rt.shutdown_background();
    document(cli.output(), &status, || {
        crate::status::render_for(&status, &args.command_line("verify"))
    })?;
    if status.healthy() {
        Ok(())
    } else {
        Err(Error::Unhealthy {
            lab: status.lab.clone(),
            help: format!(
                "`{}` repairs what it can; `{}` says which hop is broken",
                args.command_line("up"),
                args.command_line("verify")
            ),
        })
    }
}

/// Runs workflows one after the other against the lab, under one lock: `reset` is `reset` then `up`, and
/// no other command may take the lab in between.
fn run_workflows(cli: &Cli, args: &crate::cli::RunArgs, workflows: &[&str]) -> Result<(), Error> {
    let (loaded, sources, patches) = inputs(&args.lab)?;
    warn(&loaded);
    let mut lab = loaded.lab;
    if !args.checks.is_empty() {
        lab.verify.checks = args.checks.iter().map(|c| (*c).into()).collect();
    }
    // Every workflow is planned before anything is touched: a broken workflow file fails first.
    let plans = workflows
        .iter()
        .map(|w| crate::workflow::plan::plan(&lab, &sources, &patches, w))
        .collect::<Result<Vec<_>, _>>()?;
    let state = StateDir::for_run(&lab.name, args.simulate)?;
    let _lock = state.lock(&lab.name, workflows.first().copied().unwrap_or("run"))?;
    state.cut_torn_owned_line()?;
    if workflows.iter().any(|w| *w != "down") {
        // A damaged ownership record stops everything but `down`, which reads around the damage.
        state.owned_or(&lab_command(args, "down"))?;
    }
    for plan in &plans {
        run_workflow(cli, args, &lab, &state, plan, patches.clone())?;
    }
    Ok(())
}

/// Runs one workflow against the lab, whose lock the caller holds: backends, reporter, engine, Ctrl-C.
fn run_workflow(
    cli: &Cli,
    args: &crate::cli::RunArgs,
    lab: &crate::topology::Lab,
    state: &StateDir,
    plan: &crate::workflow::Plan,
    patches: PatchSet,
) -> Result<(), Error> {
    let workflow = plan.workflow.as_str();
    if matches!(workflow, "verify" | "reset") {
        ensure_up(lab, state, args)?;
    }
    let runtime = runtime()?;
    let opened = open_backends(
        &runtime,
        args,
        state,
        command_name(workflow),
        &lab.versions.kind_node_image,
    )?;
    if matches!(workflow, "up" | "reset") && opened.sim.is_none() {
        // Stop before creating anything when the machine cannot finish the lab; a reset that could not
        // finish its `up` does not start deleting either.
        let findings = doctor_findings(&runtime, lab, &opened, state);
        if crate::doctor::failed(&findings) {
            let _ = writeln!(std::io::stderr(), "{}", crate::doctor::render(&findings));
            let failed: Vec<&str> = findings
                .iter()
                .filter(|f| f.level == crate::doctor::Level::Fail)
                .map(|f| f.check)
                .collect();
            return Err(Error::Preflight(failed.join(", ")));
        }
    }
    let result = runtime.block_on(async {
        let (events, rx) = Events::channel();
        let reporter = tokio::spawn(report::reporter(rx, cli.output()));
        let cancel = CancellationToken::new();
        let on_ctrl_c = cancel.clone();
        let ctrl_c = tokio::spawn(async move {
            // The first Ctrl-C stops gracefully: no new steps, running ones cancelled, the journal and
            // the simulated world saved. A second one means "now": exit at once (the journal and the
            // simulated world are written so that this is safe, see the engine's module documentation).
            if tokio::signal::ctrl_c().await.is_ok() {
                on_ctrl_c.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    let _ = writeln!(
                        std::io::stderr(),
                        "\nstopped at once (second Ctrl-C); run the same command again to resume"
                    );
                    std::process::exit(i32::from(crate::error::exit::CANCELLED));
                }
            }
        });
        let mut ctx = RunCtx::new(
            lab.clone(),
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            cancel,
        );
        ctx.tool_versions = opened.tool_versions.clone();
        if let Some(sim) = &opened.sim {
            // Each step's effects on the simulated world are saved before the journal says it is done.
            ctx = ctx.with_durability(sim.durability(&state.sim_world()));
        }
        let ctx = Arc::new(ctx);
        let run_id = ctx.run_id.clone();
        let opts = RunOptions {
            concurrency: usize::from(args.concurrency),
        };
        let result = engine::run(plan, ctx.clone(), &opts).await;
        ctrl_c.abort();
        drop(ctx);
        let _ = reporter.await;
        // The simulated world persists, so the next command sees the same simulated lab.
        opened.save(state)?;
        Ok::<_, Error>((result?, run_id))
    });
    runtime.shutdown_background();
    let (result, run_id) = result?;
    verification_report(cli, args, state, &lab.name, &run_id)?;
    if result.ok && workflow == "down" {
        // The lab is gone: forget its journal, simulated world and ownership records.
        for f in [
            state.journal(),
            state.sim_world(),
            state.owned_log(),
            state.path.join("last-verification.json"),
        ] {
            let _ = std::fs::remove_file(f);
        }
    }
    if result.cancelled {
        return Err(Error::Cancelled);
    }
    match result.failed {
        Some((step, e)) => Err(Error::StepFailed {
            step,
            message: e.message,
            help: e.help,
        }),
        None => Ok(()),
    }
}

/// `verify`, `reset` and `status` need a lab: say so, and what to run, when this machine never created
/// it. A lab with an `existing` cluster is assumed up (someone else runs it); connecting then tells the
/// truth.
fn ensure_up(
    lab: &crate::topology::Lab,
    state: &StateDir,
    args: &crate::cli::RunArgs,
) -> Result<(), Error> {
    use crate::topology::Provider;
    if args.simulate {
        if state.sim_world().exists() {
            return Ok(());
        }
        return Err(Error::NotUp {
            lab: lab.name.clone(),
            why: format!(
                "no simulated lab was brought up (no {})",
                state.sim_world().display()
            ),
            help: format!("run `{}` first", args.command_line("up")),
        });
    }
    let any_known = lab.clusters().any(|c| {
        matches!(c.provider, Provider::Existing { .. }) || state.kubeconfig(&c.name).exists()
    });
    if any_known {
        return Ok(());
    }
    let simulated_hint = if state.simulated_dir().sim_world().exists() {
        " (a simulated lab of this name exists: add `--simulate` to use it)"
    } else {
        ""
    };
    Err(Error::NotUp {
        lab: lab.name.clone(),
        why: format!(
            "none of its clusters was created on this machine (no kubeconfig in {}){simulated_hint}",
            state.path.join("kubeconfigs").display()
        ),
        help: format!("run `{}` first", args.command_line("up")),
    })
}

/// The command line of `ocm-lab <verb>` for the same lab as this command (`-t`, `--simulate`), for help
/// texts: a command the user can paste.
fn lab_command(args: &crate::cli::RunArgs, verb: &str) -> String {
    let mut cmd = format!("ocm-lab {verb}");
    if let Some(t) = &args.lab.topology {
        cmd.push_str(&format!(" -t {t}"));
    }
    if args.simulate {
        cmd.push_str(" --simulate");
    }
    cmd
}

fn command_name(workflow: &str) -> &'static str {
    match workflow {
        "up" => "up",
        "verify" => "verify",
        "down" => "down",
        "reset" => "reset",
        "doctor" => "doctor",
        _ => "run",
    }
}

/// Prints the verification table of this run (if it verified) and writes `--junit`.
fn verification_report(
    cli: &Cli,
    args: &crate::cli::RunArgs,
    state: &StateDir,
    lab: &str,
    run_id: &str,
) -> Result<(), Error> {
    let Some(report) = std::fs::read_to_string(state.path.join("last-verification.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .filter(|r| r["run"] == run_id)
    else {
        return Ok(());
    };
    let results: Vec<crate::verify::CheckResult> =
        serde_json::from_value(report["results"].clone()).unwrap_or_default();
    if cli.output() == Output::Human && !results.is_empty() {
        stdout(&format!("\n{}", crate::verify::report::table(&results)))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, crate::verify::report::junit(lab, &results)).map_err(|source| {
            Error::WriteFile {
                path: path.display().to_string(),
                source,
            }
        })?;
    }
    Ok(())
}
