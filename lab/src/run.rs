//! Entry point: parse arguments, set up logging, dispatch to the command (`commands/`), render errors,
//! return an exit code.

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::commands;
use crate::error::{Error, exit, render};

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
    if let Some(flag) = unused_global_flag(&cli) {
        // As clap refuses any other option a command does not take: a usage error, exit 2.
        let e = <Cli as clap::CommandFactory>::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "`{flag}` is for commands that read a topology's clusters; this command reads none"
            ),
        );
        let _ = e.print();
        return ExitCode::from(exit::INVALID_INPUT);
    }
    if let Command::Bundle(crate::cli::BundleCommand::Save(save)) = &cli.command
        && let Some(file) = &save.old_output
    {
        let e = <Cli as clap::CommandFactory>::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "`-o`/`--output` is the output format in every command; the bundle file is `--out FILE`: `ocm-lab bundle save --out {}`",
                file.display()
            ),
        );
        let _ = e.print();
        return ExitCode::from(exit::INVALID_INPUT);
    }
    init_tracing(cli.verbose);
    let host = commands::host(cli.kubeconfig.as_deref(), cli.context.clone());
    match run(&cli, &host) {
        Ok(()) => ExitCode::from(exit::OK),
        Err(e) => {
            report(&e);
            structured_error(cli.output(), &e);
            ExitCode::from(e.exit_code())
        }
    }
}

/// With `-o json` or `-o yaml`, a failure the command printed nothing for on stdout (a topology that
/// does not validate, a lab that is not up, a tool missing) is also a document there, so a script always
/// reads one: `{"ok": false, "error": {"code", "message", "help", "problems", "exitCode"}}`. A failed step or
/// preflight, a cancelled run and an unhealthy `status` already printed their events or document.
fn structured_error(output: crate::cli::Output, e: &Error) {
    use crate::cli::Output;
    use miette::Diagnostic as _;
    if output == Output::Human
        || matches!(
            e,
            Error::StepFailed { .. }
                | Error::Cancelled
                | Error::Unhealthy { .. }
                | Error::Preflight { .. }
                | Error::DoctorFailed { .. }
                | Error::ExerciseUnsolved { .. }
                // `ci matrix` prints a matrix or nothing: its stdout goes to GitHub as the matrix.
                | Error::CiNothingFits { .. }
        )
    {
        return;
    }
    let problems: Vec<String> = e
        .related()
        .into_iter()
        .flatten()
        .map(|d| d.to_string())
        .collect();
    let doc = serde_json::json!({"ok": false, "error": {
        "code": e.code().map(|c| c.to_string()),
        "message": e.to_string(),
        "help": e.help().map(|h| h.to_string()),
        "problems": problems,
        "exitCode": e.exit_code(),
    }});
    let text = match output {
        Output::Yaml => serde_saphyr::to_string(&doc).unwrap_or_default(),
        _ => format!("{doc}\n"),
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The global `--kubeconfig` or `--context` given to a command that reads no topology, where it would be
/// accepted and ignored.
fn unused_global_flag(cli: &Cli) -> Option<&'static str> {
    use crate::cli::{CiCommand, TopologyCommand};
    let reads_no_topology = matches!(
        cli.command,
        Command::Completions { .. }
            | Command::Topology(TopologyCommand::List { .. })
            | Command::Ci(CiCommand::Matrix(_))
            | Command::Bundle(_)
            | Command::Images(_)
            | Command::Exercise(crate::cli::ExerciseCommand::List(_))
            | Command::PostRender(_)
    );
    if !reads_no_topology {
        return None;
    }
    if cli.kubeconfig.is_some() {
        Some("--kubeconfig")
    } else if cli.context.is_some() {
        Some("--context")
    } else {
        None
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

fn report(e: &Error) {
    let _ = writeln!(std::io::stderr(), "{}", render(e));
}

/// Runs the command the arguments name: each lives in its own file under `commands/`. `host` is what the
/// command line and the environment say about this machine, built once in [`main`].
fn run(cli: &Cli, host: &crate::topology::Host) -> Result<(), Error> {
    match &cli.command {
        Command::Plan(args) => commands::plan::run(args, host),
        Command::Topology(command) => commands::topology::run(command, host),
        Command::Up(args) => commands::up::run(args, host),
        Command::Verify(args) => commands::verify::run(args, host),
        Command::Down(args) => commands::down::run(args, host),
        Command::Status(args) if args.watch => commands::picture::text::watch(args, host),
        Command::Status(args) => commands::status::run(args, host),
        Command::Dashboard(args) => commands::dashboard::run(args, host),
        Command::Consumer(args) => commands::consumer::run(args, host),
        Command::Diagnose(args) => commands::diagnose::run(args, host),
        Command::Reset(args) => commands::reset::run(args, host),
        Command::Doctor(args) => commands::doctor::run(args, host),
        Command::PostRender(args) => commands::postrender::run(args),
        Command::Completions { shell } => commands::completions::run(*shell),
        Command::Ci(command) => commands::ci::run(command, host),
        Command::Images(command) => commands::images::run(command, host),
        Command::Bundle(command) => commands::bundle::run(command, host),
        Command::Exercise(command) => commands::exercise::run(command, host),
    }
}
