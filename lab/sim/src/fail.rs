//! The simulated lab fails with the real backends' errors: an injected fault, or an answer the real tool
//! would give (kind's and helm's stderr, a Docker daemon status, an API server status), becomes the
//! variant the real adapter builds for it, with the text the real tool prints. The engine, the reports
//! and the tests see the same types as on a real lab; "simulated" is a property of the run, not of an
//! error.

use std::process::ExitStatus;

use ocm_lab_core::backend::tools::{ToolFailure, Verdict};
use ocm_lab_core::backend::{DockerError, HelmError, KindError, KubeError, Transience};

/// A failing fault of a backend call: its message, and whether a retry may help (`FailOnce`) or not
/// (`FailAlways`).
#[derive(Debug, Clone)]
pub(crate) struct Injected {
    pub message: String,
    pub transience: Transience,
}

/// The call a fault failed: `kind.create`, the lab cluster, and what it was about.
pub(crate) struct Called<'a> {
    pub verb: &'a str,
    pub cluster: &'a str,
    pub object: &'a str,
}

/// A backend error built from an injected fault, as the real adapter reports that kind of failure.
pub(crate) trait FromInjected {
    fn from_injected(fault: Injected, call: &Called<'_>) -> Self;
}

/// The exit status of a tool that failed (exit code 1, as kind and helm exit on an error).
fn exit_1() -> ExitStatus {
    #[cfg(unix)]
    {
        std::os::unix::process::ExitStatusExt::from_raw(1 << 8)
    }
    #[cfg(windows)]
    {
        std::os::windows::process::ExitStatusExt::from_raw(1)
    }
}

/// A tool that exited 1 with `stderr`.
pub(crate) fn tool_failure(command: impl Into<String>, stderr: impl Into<String>) -> ToolFailure {
    ToolFailure {
        command: command.into(),
        status: exit_1(),
        stderr_tail: stderr.into(),
    }
}

fn verdict(transience: Transience, help: Option<String>) -> Verdict {
    match transience {
        Transience::Transient => Verdict { transience, help },
        Transience::Permanent => Verdict::permanent(help),
    }
}

impl FromInjected for DockerError {
    /// The daemon's answer: 503 (the daemon is busy, transient) or 400 (refused, permanent), as
    /// `DockerError::Daemon` classes statuses.
    fn from_injected(fault: Injected, call: &Called<'_>) -> Self {
        DockerError::Daemon {
            what: format!("{} {}", call.verb, call.object)
                .trim_end()
                .to_owned(),
            status: match fault.transience {
                Transience::Transient => 503,
                Transience::Permanent => 400,
            },
            message: fault.message,
        }
    }
}

impl FromInjected for KindError {
    /// `kind create cluster` exiting 1 with the message on stderr (the verdict is the fault's, the help
    /// the real classifier's); any other kind command as the real adapter reports it.
    fn from_injected(fault: Injected, call: &Called<'_>) -> Self {
        let stderr = format!("ERROR: {}", fault.message);
        match call.verb {
            "kind.create" => KindError::Create {
                cluster: call.cluster.to_owned(),
                port: 0,
                verdict: verdict(
                    fault.transience,
                    ocm_lab_core::backend::kind::classify_create_failure(call.cluster, &stderr)
                        .help,
                ),
                failure: tool_failure(
                    format!("kind create cluster --name {}", call.cluster),
                    stderr,
                ),
            },
            verb => KindError::Command {
                action: format!("{verb} {}", call.object).trim_end().to_owned(),
                failure: tool_failure(verb.replace('.', " "), stderr),
                docker_problem: false,
            },
        }
    }
}

impl FromInjected for HelmError {
    /// Helm exiting 1 with `Error: <message>`: a render or install (`Template`, with the fault's
    /// verdict), or a read of its release records and an uninstall (`Release`, which the real adapter
    /// always retries).
    fn from_injected(fault: Injected, call: &Called<'_>) -> Self {
        let what = format!("{} {}", call.verb, call.object)
            .trim_end()
            .to_owned();
        let failure = tool_failure(
            call.verb.replace('.', " "),
            format!("Error: {}", fault.message),
        );
        match call.verb {
            "helm.list" | "helm.uninstall" => HelmError::Release { what, failure },
            _ => HelmError::Template {
                what,
                failure,
                verdict: verdict(fault.transience, None),
            },
        }
    }
}

impl FromInjected for KubeError {
    /// The API server's answer: 503 (transient) or a refusal with status 400 (permanent).
    fn from_injected(fault: Injected, _: &Called<'_>) -> Self {
        match fault.transience {
            Transience::Transient => KubeError::ServerFailed {
                code: 503,
                message: fault.message,
            },
            Transience::Permanent => KubeError::Rejected {
                code: 400,
                message: fault.message,
            },
        }
    }
}

/// Helm's install or upgrade failing on a request to the cluster: helm prints the API server's answer
/// after `Error: <what> FAILED:`; whether a retry helps is the answer's.
pub(crate) fn helm_request_failed(what: &str, command: &str, e: &KubeError) -> HelmError {
    HelmError::Template {
        what: what.to_owned(),
        failure: tool_failure(command, format!("Error: {e}")),
        verdict: verdict(e.transience(), e.help()),
    }
}

/// A read of helm's release records (`helm list`) or an uninstall failing on a request to the cluster:
/// the real adapter reports it as `Release` (retried).
pub(crate) fn helm_release_failed(what: &str, command: &str, e: &KubeError) -> HelmError {
    HelmError::Release {
        what: what.to_owned(),
        failure: tool_failure(command, format!("Error: {e}")),
    }
}

/// `kind create cluster --name <name>` exiting 1 with `stderr`, classified as the real adapter does.
pub(crate) fn kind_create_failed(name: &str, stderr: String) -> KindError {
    KindError::Create {
        cluster: name.to_owned(),
        port: 0,
        verdict: ocm_lab_core::backend::kind::classify_create_failure(name, &stderr),
        failure: tool_failure(format!("kind create cluster --name {name}"), stderr),
    }
}

/// Another kind command exiting 1 with `stderr`.
pub(crate) fn kind_command_failed(action: String, command: String, stderr: String) -> KindError {
    KindError::Command {
        action,
        failure: tool_failure(command, stderr),
        docker_problem: false,
    }
}

/// `helm template` failing with `Error: <message>` (a post-renderer's failure, a bad chart version):
/// permanent, as the same input fails the same way.
pub(crate) fn helm_template_failed(
    chart: &ocm_lab_core::charts::ChartPlan,
    message: String,
) -> HelmError {
    HelmError::Template {
        what: format!("render {} {}", chart.chart.name(), chart.version),
        failure: tool_failure(
            format!(
                "helm template {} --version {}",
                chart.chart.name(),
                chart.version
            ),
            format!("Error: {message}"),
        ),
        verdict: Verdict::permanent(None),
    }
}

/// `helm template` of a chart version the repository does not have: what real helm prints, classified
/// by the real classifier.
pub(crate) fn chart_not_found(chart: &ocm_lab_core::charts::ChartPlan) -> HelmError {
    let stderr = format!(
        "Error: chart \"{}\" version \"{}\" not found in {} repository",
        chart.chart.name(),
        chart.version,
        chart.repo
    );
    HelmError::Template {
        what: format!("render {} {}", chart.chart.name(), chart.version),
        verdict: ocm_lab_core::backend::helm::classify_template_failure(chart, &stderr),
        failure: tool_failure(
            format!(
                "helm template {} --repo {} --version {}",
                chart.chart.name(),
                chart.repo,
                chart.version
            ),
            stderr,
        ),
    }
}
