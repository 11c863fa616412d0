//! The simulated lab fails with the real backends' errors: an injected fault, or an answer the real tool
//! would give (kind's and helm's stderr, a Docker daemon status, an API server status), becomes the
//! variant the real adapter builds for it, with the text the real tool prints. The engine, the reports
//! and the tests see the same types as on a real lab; "simulated" is a property of the run, not of an
//! error.

use ocm_lab_core::backend::tools::{ToolFailure, Verdict};
use ocm_lab_core::backend::{DockerError, HelmError, KindError, KubeError, Transience, helm, kind};
use ocm_lab_core::charts::ChartPlan;

/// A failing fault of a backend call: its message, and whether a retry may help (`FailOnce`) or not
/// (`FailAlways`).
#[derive(Debug, Clone)]
pub(crate) struct Injected {
    pub message: String,
    pub transience: Transience,
}

/// A backend error built from an injected fault on a call (its verb, `kind.create`; the lab cluster;
/// what it was about), as the real adapter reports that kind of failure.
pub(crate) trait FromInjected {
    fn from_injected(fault: Injected, verb: &str, cluster: &str, object: &str) -> Self;
}

/// What a failed call was doing: `<verb> <object>`.
fn what(verb: &str, object: &str) -> String {
    format!("{verb} {object}").trim_end().to_owned()
}

/// A tool that exited 1 (as kind and helm exit on an error) with `stderr`.
fn tool_failure(command: String, stderr: String) -> ToolFailure {
    #[cfg(unix)]
    let status = std::os::unix::process::ExitStatusExt::from_raw(1 << 8);
    #[cfg(windows)]
    let status = std::os::windows::process::ExitStatusExt::from_raw(1);
    ToolFailure {
        command,
        status,
        stderr_tail: stderr,
    }
}

impl FromInjected for DockerError {
    /// The daemon's answer: 503 (the daemon is busy, transient) or 400 (refused, permanent), as
    /// `DockerError::Daemon` classes statuses.
    fn from_injected(fault: Injected, verb: &str, _: &str, object: &str) -> Self {
        let status = match fault.transience {
            Transience::Transient => 503,
            Transience::Permanent => 400,
        };
        DockerError::Daemon {
            what: what(verb, object),
            status,
            message: fault.message,
        }
    }
}

impl FromInjected for KindError {
    /// `kind create cluster` exiting 1 with the message on stderr (the verdict is the fault's, the help
    /// the real classifier's); any other kind command as the real adapter reports it.
    fn from_injected(fault: Injected, verb: &str, cluster: &str, object: &str) -> Self {
        let stderr = format!("ERROR: {}", fault.message);
        match verb {
            "kind.create" => kind_create_failed(cluster, stderr, Some(fault.transience)),
            _ => kind_command_failed(what(verb, object), verb.replace('.', " "), stderr),
        }
    }
}

impl FromInjected for HelmError {
    /// Helm exiting 1 with `Error: <message>`: a render or install (`Template`, with the fault's
    /// verdict), or a read of its release records and an uninstall (`Release`, which the real adapter
    /// always retries).
    fn from_injected(fault: Injected, verb: &str, _: &str, object: &str) -> Self {
        let what = what(verb, object);
        let failure = tool_failure(verb.replace('.', " "), format!("Error: {}", fault.message));
        match verb {
            "helm.list" | "helm.uninstall" => HelmError::Release { what, failure },
            _ => HelmError::Template {
                what,
                failure,
                verdict: Verdict {
                    transience: fault.transience,
                    help: None,
                },
            },
        }
    }
}

impl FromInjected for KubeError {
    /// The API server's answer: 503 (transient) or a refusal with status 400 (permanent).
    fn from_injected(fault: Injected, _: &str, _: &str, _: &str) -> Self {
        let message = fault.message;
        match fault.transience {
            Transience::Transient => KubeError::ServerFailed { code: 503, message },
            Transience::Permanent => KubeError::Rejected { code: 400, message },
        }
    }
}

/// Helm's install or upgrade of `release` failing on a request to the cluster: helm prints the API
/// server's answer after `Error: <what> FAILED:`; whether a retry helps is the answer's.
pub(crate) fn helm_request_failed(release: &str, e: &KubeError) -> HelmError {
    HelmError::Template {
        what: format!("install {release}"),
        failure: tool_failure(
            format!("helm upgrade --install {release}"),
            format!("Error: {e}"),
        ),
        verdict: Verdict {
            transience: e.transience(),
            help: e.help(),
        },
    }
}

/// A read of helm's release records (`helm list`) or an uninstall failing on a request to the cluster:
/// the real adapter reports it as `Release` (retried).
pub(crate) fn helm_release_failed(what: String, command: String, e: &KubeError) -> HelmError {
    HelmError::Release {
        what,
        failure: tool_failure(command, format!("Error: {e}")),
    }
}

/// `kind create cluster --name <name>` exiting 1 with `stderr`, classified as the real adapter does
/// (an injected fault's `transience` overrides the classifier's).
pub(crate) fn kind_create_failed(
    name: &str,
    stderr: String,
    transience: Option<Transience>,
) -> KindError {
    let mut verdict = kind::classify_create_failure(name, &stderr);
    verdict.transience = transience.unwrap_or(verdict.transience);
    KindError::Create {
        cluster: name.to_owned(),
        port: 0,
        verdict,
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
pub(crate) fn helm_template_failed(chart: &ChartPlan, message: String) -> HelmError {
    let (name, version) = (chart.chart.name(), &chart.version);
    HelmError::Template {
        what: format!("render {name} {version}"),
        failure: tool_failure(
            format!("helm template {name} --version {version}"),
            format!("Error: {message}"),
        ),
        verdict: Verdict::permanent(None),
    }
}

/// `helm template` of a chart version the repository does not have: what real helm prints, classified
/// by the real classifier.
pub(crate) fn chart_not_found(chart: &ChartPlan) -> HelmError {
    let (name, version, repo) = (chart.chart.name(), &chart.version, &chart.repo);
    let stderr =
        format!("Error: chart \"{name}\" version \"{version}\" not found in {repo} repository");
    HelmError::Template {
        what: format!("render {name} {version}"),
        verdict: helm::classify_template_failure(chart, &stderr),
        failure: tool_failure(
            format!("helm template {name} --repo {repo} --version {version}"),
            stderr,
        ),
    }
}
