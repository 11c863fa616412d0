//! What the commands that run workflows share: backend setup, the preflight, the lab lock, the reporter
//! task, Ctrl-C, and saving the simulated world. The read-only commands (`status`, `doctor`, `diagnose`)
//! use [`open_backends`] and [`runtime`] only: they take no lock.

use std::io::Write;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::checks as doctor;
pub use super::purpose::{Purpose, Workflow};
pub use super::runtime;
use crate::backend::Backends;
use crate::cli::{RunArgs, StreamOutput};
use crate::engine::{self, RunOptions, report};
use crate::error::Error;
use crate::patch::PatchSet;
use crate::simulate::Simulated;
use crate::state::StateDir;
use crate::step::RunCtx;
use crate::step::events::Events;
use crate::topology::Lab;
use crate::topology::Provider;
use crate::workflow::Plan;

/// The backends a command runs against, and the simulated world to save afterwards.
pub struct Opened {
    pub backends: Backends,
    sim: Option<Simulated>,
    /// What setting up the real backends found (tools, Docker), for preflight and doctor.
    findings: Vec<doctor::Finding>,
    docker: Option<crate::backend::docker::Docker>,
    /// Versions of the tools the backends run (which of the found and bundled tools was picked).
    tool_versions: std::collections::BTreeMap<String, String>,
}

impl Opened {
    /// The versions of the tools the backends run (`kind`, `helm`), as resolved for this run.
    pub fn tool_versions(&self) -> &std::collections::BTreeMap<String, String> {
        &self.tool_versions
    }

    /// Saves the simulated world (nothing for a real lab): the next command sees the same simulated lab.
    pub fn save(&self, state: &StateDir) -> Result<(), Error> {
        match &self.sim {
            Some(sim) => sim.save(state),
            None => Ok(()),
        }
    }

    /// Everything the doctor checks: tools (from opening the backends), Docker, kernel, memory, ports,
    /// clashes.
    pub fn doctor_findings(
        &self,
        rt: &tokio::runtime::Runtime,
        lab: &Lab,
        state: &StateDir,
        images: &Result<Vec<crate::images::LabImage>, String>,
        image_aliases: &std::collections::BTreeMap<String, String>,
    ) -> Vec<doctor::Finding> {
        let mut findings = self.findings.clone();
        findings.extend(rt.block_on(doctor::check(
            lab,
            &self.backends,
            self.docker.as_ref(),
            state,
            images,
            image_aliases,
        )));
        findings
    }
}

/// Sets up the backends. Only `up` and `reset` may download tools; read-only commands never do. A piece
/// that cannot be set up (Docker down, a tool missing) becomes `Unavailable`, failing with its message only
/// if used.
pub fn open_backends(
    rt: &tokio::runtime::Runtime,
    args: &RunArgs,
    state: &StateDir,
    purpose: Purpose,
    lab: &Lab,
) -> Result<Opened, Error> {
    use crate::backend::{
        Unavailable, chart_cache::ChartCache, docker::Docker, helm::Helm, kind::Kind,
        kube::KubeConnector, tools,
    };
    if args.simulate {
        return open_simulated(args, state, purpose, lab);
    }
    let may_download = matches!(purpose, Purpose::Run(w) if w.may_download()) && !args.no_download;
    let mut cfg = tools::ToolsConfig::from_env(if may_download {
        tools::Downloads::Allow
    } else {
        tools::Downloads::Forbid
    })?;
    cfg.bundled = args.bundled_tools.clone();
    let node_image = lab.versions.kind_node_image.as_str();
    // A kind too old for the node image is passed over like any too-old kind.
    cfg.kind_minimum = Some(crate::topology::catalog::kind_for_node_image(node_image));
    // A lab whose clusters all exist never runs kind: it is not looked for, let alone downloaded.
    let needs_kind = lab.clusters().any(|c| c.provider == Provider::Kind);
    // Resolving runs the tools (and may download): blocking, so outside the runtime.
    let kind = if needs_kind {
        Some(tools::resolve(tools::ToolName::Kind, &cfg))
    } else {
        None
    };
    let helm = tools::resolve(tools::ToolName::Helm, &cfg);
    let tool_versions = [("kind", kind.as_ref()), ("helm", Some(&helm))]
        .into_iter()
        .filter_map(|(name, t)| Some((name.to_owned(), t?.as_ref().ok()?.version.to_string())))
        .collect();
    let mut findings = tool_findings(
        args,
        purpose,
        may_download,
        &cfg,
        kind.as_ref(),
        &helm,
        node_image,
    );
    let docker = rt.block_on(Docker::connect());
    let backends = Backends {
        docker: match &docker {
            Ok(d) => Arc::new(d.clone()),
            Err(e) => Arc::new(Unavailable(e.clone())),
        },
        kind: match kind {
            Some(Ok(t)) => Arc::new(Kind::new(t)),
            Some(Err(e)) => Arc::new(Unavailable(e.into())),
            None => Arc::new(Unavailable(
                tools::ToolError::NotNeeded {
                    tool: tools::ToolName::Kind,
                }
                .into(),
            )),
        },
        helm: match helm {
            Ok(t) => {
                let helm = Helm::new(t, post_renderer(args, &cfg)?);
                Arc::new(match ChartCache::from_env() {
                    Some(cache) => helm.with_chart_cache(cache),
                    None => helm,
                })
            }
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

/// The simulated lab's backends (`--simulate`): no tool is looked for, nothing is downloaded.
fn open_simulated(
    args: &RunArgs,
    state: &StateDir,
    purpose: Purpose,
    lab: &Lab,
) -> Result<Opened, Error> {
    let command_line = |c: &str| args.command_line(c);
    let (backends, sim) = crate::simulate::open(
        &command_line,
        args.lab.chart_patches.as_deref(),
        state,
        purpose,
        lab,
    )?;
    Ok(Opened {
        backends,
        sim: Some(sim),
        findings: Vec::new(),
        docker: None,
        tool_versions: Default::default(),
    })
}

/// The doctor's findings about kind and helm: found, too old, or missing, and whether the release host
/// would give a missing one (asked only by `doctor`).
fn tool_findings(
    args: &RunArgs,
    purpose: Purpose,
    may_download: bool,
    cfg: &crate::backend::tools::ToolsConfig,
    kind: Option<&Result<crate::backend::tools::Tool, crate::backend::tools::ToolError>>,
    helm: &Result<crate::backend::tools::Tool, crate::backend::tools::ToolError>,
    node_image: &str,
) -> Vec<doctor::Finding> {
    use crate::backend::tools;
    // How a missing tool would reach `up`: `doctor` asks the release host (unless `--no-download`), `up`
    // and `reset` already tried, a read-only command never downloads.
    let download = |r: Option<&Result<tools::Tool, tools::ToolError>>, name| match purpose {
        Purpose::Doctor if !args.no_download => doctor::Download::Probed(
            r.is_some_and(|r| {
                matches!(
                    r,
                    Err(tools::ToolError::NotFound { .. } | tools::ToolError::TooOld { .. })
                )
            })
            .then(|| {
                tools::probe_download(name, cfg, tools::DOWNLOAD_PROBE_TIMEOUT).map_err(Box::new)
            }),
        ),
        _ if may_download => doctor::Download::Tried,
        _ => doctor::Download::Off,
    };
    // Both hosts are asked at once: a host that does not answer costs the probe's timeout once.
    let (kind_download, helm_download) = std::thread::scope(|s| {
        let k = s.spawn(|| download(kind, tools::ToolName::Kind));
        let h = download(Some(helm), tools::ToolName::Helm);
        (k.join().expect("the probe does not panic"), h)
    });
    doctor::tools(
        kind.map(|k| (k, kind_download)),
        (helm, helm_download),
        &crate::topology::catalog::kind_for_node_image(node_image).0,
    )
}

/// How helm runs this binary as its post-renderer, with the run's `--chart-patches`.
fn post_renderer(
    args: &RunArgs,
    cfg: &crate::backend::tools::ToolsConfig,
) -> Result<crate::backend::helm::PostRenderer, Error> {
    let exe = std::env::current_exe().map_err(Error::CurrentExe)?;
    Ok(crate::backend::helm::PostRenderer {
        exe,
        // Absolute: helm may run the post-renderer from another folder.
        chart_patches: args
            .lab
            .chart_patches
            .as_ref()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone())),
        plugins_dir: cfg.cache_dir.join("helm-plugins"),
    })
}

/// Runs workflows one after the other against the lab, under one lock: `reset` is `reset` then `up`, and
/// no other command may take the lab in between.
pub fn run_workflows(
    args: &RunArgs,
    output: StreamOutput,
    workflows: &[Workflow],
    host: &crate::topology::Host,
) -> Result<(), Error> {
    let (loaded, sources, patches) = super::inputs(&args.lab, host)?;
    super::warn(&loaded);
    let mut lab = loaded.lab;
    if !args.checks.is_empty() {
        lab.verify.checks = args.checks.iter().map(|c| (*c).into()).collect();
    }
    if let Some(image) = &args.consumer_image {
        lab.verify.consumer_image = Some(image.clone());
    }
    if let Some(timeout) = args.verify_timeout {
        lab.verify.timeout = timeout;
    }
    if let Some(bundle) = &args.bundle {
        // `--bundle` replaces `spec.bundle` (absolute: the run's steps may not share the current folder).
        lab.bundle = Some(std::path::absolute(bundle).unwrap_or_else(|_| bundle.clone()));
    }
    // Every workflow is planned before anything is touched: a broken workflow file fails first.
    let plans = workflows
        .iter()
        .map(|w| {
            Ok((
                *w,
                crate::workflow::plan::plan(
                    &lab,
                    &sources,
                    &crate::actions::Registry,
                    &patches,
                    w.name(),
                )?,
            ))
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let state = StateDir::for_run(&lab.name, args.simulate)?;
    let first = workflows.first().map_or("run", |w| w.name());
    let lock = state.lock(&lab.name, first)?;
    state.cut_torn_owned_line()?;
    if workflows.iter().any(|w| *w != Workflow::Down) {
        // A damaged ownership record stops everything but `down`, which reads around the damage.
        state.owned_or(&args.command_line("down"))?;
    }
    // The preflight's image check lists what `up` runs, with this command's workflows and patches.
    let images = if !args.simulate && workflows.iter().any(|w| w.preflight()) {
        crate::images::for_doctor(&lab, &sources, &patches)
    } else {
        Ok(Vec::new())
    };
    for (i, (workflow, plan)) in plans.iter().enumerate() {
        let ready = match prepare(args, output, &lab, &state, *workflow, plan, &images) {
            Ok(ready) => ready,
            Err(e) if i == 0 => {
                // Nothing ran: the command leaves nothing behind, not even a lock file.
                lock.discard();
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        run_workflow(
            args,
            output,
            &lab,
            &state,
            *workflow,
            plan,
            patches.clone(),
            ready,
        )?;
    }
    if workflows.last() == Some(&Workflow::Down) {
        // The lab is gone: its lock file and emptied folders go too.
        lock.release_forgotten(&state);
    }
    Ok(())
}

/// A workflow ready to run: its runtime and backends.
struct Ready {
    runtime: tokio::runtime::Runtime,
    opened: Opened,
}

/// What a workflow needs before it runs, none of which touches the lab: a lab that is up (for `verify`
/// and `reset`), the backends, and on a real lab the preflight (the doctor's checks).
fn prepare(
    args: &RunArgs,
    output: StreamOutput,
    lab: &Lab,
    state: &StateDir,
    workflow: Workflow,
    plan: &Plan,
    images: &Result<Vec<crate::images::LabImage>, String>,
) -> Result<Ready, Error> {
    if workflow.needs_lab() {
        ensure_up(lab, state, args)?;
    }
    let runtime = runtime()?;
    let opened = open_backends(&runtime, args, state, Purpose::Run(workflow), lab)?;
    if workflow.preflight() && opened.sim.is_none() {
        let findings = opened.doctor_findings(&runtime, lab, state, images, &args.image_aliases);
        if doctor::failed(&findings) {
            let _ = writeln!(std::io::stderr(), "{}", doctor::render(&findings));
            if output == StreamOutput::Json {
                runtime.block_on(preflight_events(lab, plan, &findings));
            }
            runtime.shutdown_background();
            return Err(doctor::preflight_error(&findings));
        }
    }
    Ok(Ready { runtime, opened })
}

/// The event stream of a run whose preflight failed, as any run's: `run-started`, the failure (a
/// `step-failed` of the step `preflight`, with every failed finding and what to do), `run-finished`.
async fn preflight_events(lab: &Lab, plan: &Plan, findings: &[doctor::Finding]) {
    use crate::step::events::Event;
    let (events, rx) = Events::channel();
    let reporter = tokio::spawn(report::reporter(
        rx,
        report::Style::Json,
        report::ShowTiming::Never,
    ));
    events.emit(Event::RunStarted {
        lab: lab.name.clone(),
        workflow: plan.workflow.clone(),
        steps: plan.steps.len(),
        simulated: false,
    });
    let failed: Vec<&doctor::Finding> = findings
        .iter()
        .filter(|f| f.level == doctor::Level::Fail)
        .collect();
    let error = failed
        .iter()
        .map(|f| format!("{}: {}", f.check, f.detail))
        .collect::<Vec<_>>()
        .join("; ");
    let help = failed
        .iter()
        .filter_map(|f| f.fix.as_deref())
        .collect::<Vec<_>>()
        .join("; ");
    events.emit(Event::StepFailed {
        step: "preflight".into(),
        error: format!("the machine cannot finish the lab: {error}"),
        help: (!help.is_empty()).then_some(help),
        elapsed_ms: events.elapsed_ms(),
        backend: None,
    });
    events.emit(Event::RunFinished {
        ok: false,
        elapsed_ms: events.elapsed_ms(),
        changed: 0,
        unchanged: 0,
        failed: Some("preflight".into()),
        cancelled: false,
    });
    drop(events);
    let _ = reporter.await;
}

/// Runs one workflow against the lab, whose lock the caller holds: reporter, engine, Ctrl-C, saving the
/// simulated world, the verification report, and forgetting a lab that went `down`.
#[expect(
    clippy::too_many_arguments,
    reason = "the run's parts, each used once; a struct would only name them again"
)]
fn run_workflow(
    args: &RunArgs,
    output: StreamOutput,
    lab: &Lab,
    state: &StateDir,
    workflow: Workflow,
    plan: &Plan,
    patches: PatchSet,
    ready: Ready,
) -> Result<(), Error> {
    let Ready { runtime, opened } = ready;
    // What `node-images` puts into each cluster's nodes (only `up` has that step).
    let node_images = if workflow == Workflow::Up {
        super::bundle::node_images(lab, plan)?
    } else {
        Default::default()
    };
    let result = runtime.block_on(async {
        let (events, rx) = Events::channel();
        // Where the time went: when asked, or after a long `up` (a `reset` ends with one).
        let timing = if args.timing {
            report::ShowTiming::Always
        } else if workflow == Workflow::Up {
            report::ShowTiming::AfterMs(crate::cli::LONG_RUN_MS)
        } else {
            report::ShowTiming::Never
        };
        let reporter = tokio::spawn(report::reporter(rx, output.into(), timing));
        let cancel = CancellationToken::new();
        // Counted by a handler registered before the run starts, on a thread of its own: a second
        // Ctrl-C is honoured however soon after the first it comes, and while the runtime is busy.
        let interrupts = Interrupts::start(cancel.clone());
        let mut ctx = RunCtx::new(
            lab.clone(),
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            cancel,
        );
        ctx.node_images = node_images;
        ctx.image_aliases = args.image_aliases.clone();
        let ctx = Arc::new(ctx);
        let opts = RunOptions {
            concurrency: usize::from(args.concurrency),
        };
        let result = engine::run(plan, ctx.clone(), &opts).await;
        drop(interrupts);
        drop(ctx);
        let _ = reporter.await;
        // The simulated world persists, so the next command sees the same simulated lab.
        opened.save(state)?;
        Ok::<_, Error>(result?)
    });
    runtime.shutdown_background();
    let result = result?;
    if let Some(results) = &result.verification {
        verification_report(output, args, &lab.name, results)?;
    }
    if result.ok && workflow == Workflow::Down {
        // The lab is gone: forget its journal, simulated world, ownership record and last verification.
        // A simulated world that still holds clusters someone else runs (`existing:`) stays: the
        // simulation keeps serving them, as the real ones keep running.
        let keep_world = opened
            .sim
            .as_ref()
            .is_some_and(|sim| sim.has_foreign_clusters());
        state.forget(keep_world)?;
        if keep_world {
            let _ = writeln!(
                std::io::stderr(),
                "the simulated world keeps the clusters this lab did not create (its `existing:` clusters, someone else's in the simulation); delete {} to start from an empty simulated world",
                state.sim_world().display()
            );
        }
    }
    if result.cancelled {
        return Err(Error::Cancelled);
    }
    match result.failed {
        Some((step, e)) => Err(Error::StepFailed {
            step,
            backend: e.backend,
            message: e.message,
            help: e.help,
        }),
        None => Ok(()),
    }
}

/// What a read-only command (`status`, `status --watch`, `dashboard`) looks at: the topology's lab (its
/// warnings printed), its state folder, never created (a look at a lab that is not up leaves nothing
/// behind), and the chart patches. A lab that is not up is [`ensure_up`]'s error.
pub fn look_at(
    args: &RunArgs,
    host: &crate::topology::Host,
) -> Result<(Lab, StateDir, PatchSet), Error> {
    let (loaded, _, patches) = super::inputs(&args.lab, host)?;
    super::warn(&loaded);
    let lab = loaded.lab;
    let state = StateDir::to_look_at(&lab.name, args.simulate)?;
    ensure_up(&lab, &state, args)?;
    Ok((lab, state, patches))
}

/// `verify`, `reset` and `status` need a lab: say so, and what to run, when this machine never created
/// it. A lab with an `existing` cluster is assumed up (someone else runs it); connecting then tells the
/// truth.
pub fn ensure_up(lab: &Lab, state: &StateDir, args: &RunArgs) -> Result<(), Error> {
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
            state.kubeconfigs().display()
        ),
        help: format!("run `{}` first", args.command_line("up")),
    })
}

/// Prints the verification table of this run and writes `--junit`.
fn verification_report(
    output: StreamOutput,
    args: &RunArgs,
    lab: &str,
    results: &[crate::verify::CheckResult],
) -> Result<(), Error> {
    if output == StreamOutput::Human && !results.is_empty() {
        // The table is what a person reads last: it says itself when it is the simulation's.
        let title = if args.simulate {
            "Verification of the SIMULATED lab (a test double, not real clusters):\n"
        } else {
            ""
        };
        // On a terminal no table line passes its width; piped, the table is whole.
        let width = {
            use std::io::IsTerminal as _;
            let term = console::Term::stdout();
            std::io::stdout()
                .is_terminal()
                .then(|| term.size_checked())
                .flatten()
                .map_or(usize::MAX, |(_, w)| usize::from(w))
        };
        super::stdout(&format!(
            "\n{title}{}",
            crate::verify::report::table_within(results, width)
        ))?;
    }
    if let Some(path) = &args.junit {
        std::fs::write(path, crate::verify::report::junit(lab, results)).map_err(|source| {
            Error::WriteFile {
                path: path.display().to_string(),
                source,
            }
        })?;
    }
    Ok(())
}

/// Ctrl-C during a run. The first cancels the run (it stops gracefully: no new steps, running ones
/// cancelled, the journal and the simulated world saved); a second one means "now": exit at once (the
/// journal and the simulated world are written so that this is safe, see the engine's module
/// documentation).
///
/// On Unix each SIGINT writes one byte into a socket from the signal handler itself, and a thread of its
/// own counts them: nothing is lost when two come close together (tokio's `Signal` reports signals that
/// arrive before its task runs again as one) or while the runtime's threads are busy.
enum Interrupts {
    #[cfg(unix)]
    Counted(signal_hook_registry::SigId),
    Tokio(tokio::task::JoinHandle<()>),
}

/// SIGINT's number: 2 in POSIX's XSI table, on every Unix.
#[cfg(unix)]
const SIGINT: i32 = 2;

impl Interrupts {
    /// Must be called inside the runtime (the fallback spawns a task).
    fn start(cancel: CancellationToken) -> Self {
        #[cfg(unix)]
        if let Some(id) = Self::counted(cancel.clone()) {
            return Interrupts::Counted(id);
        }
        Interrupts::Tokio(tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                cancel.cancel();
                if tokio::signal::ctrl_c().await.is_ok() {
                    stop_at_once();
                }
            }
        }))
    }

    #[cfg(unix)]
    fn counted(cancel: CancellationToken) -> Option<signal_hook_registry::SigId> {
        use std::io::{Read as _, Write as _};
        let (mut rx, tx) = std::os::unix::net::UnixStream::pair().ok()?;
        tx.set_nonblocking(true).ok()?;
        // SAFETY: the action is async-signal-safe: one write(2) of one byte to a non-blocking socket; it
        // allocates nothing and takes no lock.
        let id = unsafe {
            signal_hook_registry::register(SIGINT, move || {
                let _ = (&tx).write(&[1]);
            })
        }
        .ok()?;
        let counter = std::thread::Builder::new()
            .name("ctrl-c".to_owned())
            .spawn(move || {
                let mut byte = [0u8; 1];
                let mut seen = 0;
                // Ends when the action (holding the other end) is unregistered and dropped.
                while let Ok(1) = rx.read(&mut byte) {
                    seen += 1;
                    if seen == 1 {
                        cancel.cancel();
                    } else {
                        stop_at_once();
                    }
                }
            });
        if counter.is_err() {
            signal_hook_registry::unregister(id);
            return None;
        }
        Some(id)
    }
}

impl Drop for Interrupts {
    fn drop(&mut self) {
        match self {
            #[cfg(unix)]
            Interrupts::Counted(id) => {
                signal_hook_registry::unregister(*id);
            }
            Interrupts::Tokio(task) => task.abort(),
        }
    }
}

/// The second Ctrl-C: exit now.
fn stop_at_once() -> ! {
    let _ = writeln!(
        std::io::stderr(),
        "\nstopped at once (second Ctrl-C); run the same command again to finish"
    );
    std::process::exit(i32::from(crate::error::exit::CANCELLED))
}
