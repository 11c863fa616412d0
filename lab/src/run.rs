//! Entry point: parse arguments, set up logging, dispatch to the command (`commands/`), render errors,
//! return an exit code.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use miette::{GraphicalReportHandler, GraphicalTheme};

use crate::cli::{Cli, Command};
use crate::commands;
use crate::error::{Error, exit};

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
    crate::topology::set_kubeconfig_flags(crate::topology::KubeconfigFlags {
        kubeconfig: cli.kubeconfig.as_ref().map(|p| {
            std::path::absolute(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string()
        }),
        context: cli.context.clone(),
    });
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

/// Runs the command the arguments name: each lives in its own file under `commands/`.
fn run(cli: &Cli) -> Result<(), Error> {
    match &cli.command {
        Command::Plan(args) => commands::plan::run(args),
        Command::Topology(command) => commands::topology::run(command),
        Command::Up(args) => commands::up::run(args),
        Command::Verify(args) => commands::verify::run(args),
        Command::Down(args) => commands::down::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Consumer(args) => commands::consumer::run(args),
        Command::Diagnose(args) => commands::diagnose::run(args),
        Command::Reset(args) => commands::reset::run(args),
        Command::Doctor(args) => commands::doctor::run(args),
        Command::PostRender(args) => commands::postrender::run(args),
        Command::Completions { shell } => commands::completions::run(*shell),
        Command::Ci(command) => commands::ci::run(command),
        Command::Images(command) => crate::images::command(command),
        Command::Bundle(command) => commands::bundle::run(command),
    }
}
