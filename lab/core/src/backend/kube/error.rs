//! The Kubernetes API backend's error: what the API server answered (status code and message), or why
//! it could not be asked, with whether a retry may help and what the user can do.
//!
//! The real client ([`super::classify`]) and the simulated API server (crate `ocm-lab-sim`) build the same
//! variants, so both read the same to the user and to the engine's retry.

use std::time::Duration;

use crate::backend::{Failure, ObjectRef, Transience};

/// Help for an API server that cannot be reached.
const UNREACHABLE_HELP: &str = "check that the cluster is running (for kind: `docker ps` lists its control-plane \
     container) and that the kubeconfig's server address is reachable from this machine";

/// Why an API server answered 403.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForbiddenCause {
    /// The namespace the object goes into is being deleted ("… because it is being terminated"): it
    /// passes once the namespace is gone.
    NamespaceTerminating,
    /// The ManagedCluster webhook denies an accept while the cluster's namespace on the hub is still
    /// Terminating (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/webhook/v1/managedcluster_validating.go`): it passes once the namespace is gone.
    ClusterNamespaceTerminating,
    /// RBAC, or a webhook that denies for good.
    Denied,
}

/// What went wrong with a request to a cluster's API.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KubeError {
    /// Server-side apply set fields the CRD's schema does not declare (kubernetes#122480 reports them
    /// as a 500): retrying sends the same object and fails the same way.
    #[error("{} not declared in the schema the cluster has for this kind (HTTP {code}: {message})", fields_text(.fields))]
    UndeclaredFields {
        code: u16,
        fields: Vec<String>,
        message: String,
    },
    #[error("conflict (HTTP 409): {message}")]
    Conflict { message: String },
    #[error("gone (HTTP 410): {message}")]
    Gone { message: String },
    #[error("the API server is throttling requests (HTTP 429): {message}")]
    Throttled { message: String },
    #[error("the API server failed (HTTP {code}): {message}")]
    ServerFailed { code: u16, message: String },
    #[error("unauthorized (HTTP 401): {message}")]
    Unauthorized { message: String },
    #[error("{}", forbidden_text(*.cause, .message))]
    Forbidden {
        message: String,
        cause: ForbiddenCause,
    },
    #[error("not found (HTTP 404): {message}")]
    NotFound { message: String },
    /// Any other status the server refused with (`code` 0: a status without a code).
    #[error("{}", rejected_text(*.code, .message))]
    Rejected { code: u16, message: String },
    /// An answer with advice that only its context knows (an API server's 404s and 422s whose cause the caller knows).
    #[error("{source}")]
    Hinted {
        source: Box<KubeError>,
        help: String,
    },

    #[error("failed to verify the TLS certificate of the API server at {server}: {detail}")]
    Tls { server: String, detail: String },
    #[error("failed to reach the API server at {server}: {detail}")]
    Unreachable { server: String, detail: String },
    #[error("failed to authenticate to the API server at {server}: {detail}")]
    Auth { server: String, detail: String },
    #[error("failed to open a streaming connection to the API server at {server}: {detail}")]
    Stream { server: String, detail: String },
    /// Anything else the client reports.
    #[error("{detail}")]
    Client { detail: String },
    #[error("the API server at {server} did not answer within {after:?}")]
    ProbeTimeout { server: String, after: Duration },

    #[error("kubeconfig {path} does not exist")]
    KubeconfigMissing { path: String },
    #[error("failed to read kubeconfig {path}: {detail}")]
    KubeconfigUnreadable { path: String, detail: String },
    #[error("kubeconfig {path} has no context `{context}` ({})", contexts_text(.have))]
    NoContext {
        path: String,
        context: String,
        have: Vec<String>,
    },
    #[error("failed to load context `{context}` of kubeconfig {path}: {detail}")]
    BadContext {
        path: String,
        context: String,
        detail: String,
    },
    #[error("failed to build a client for {server}: {detail}")]
    ClientBuild { server: String, detail: String },
    #[error("failed to use context `{context}` of kubeconfig {path}: {source}")]
    UseContext {
        path: String,
        context: String,
        source: Box<KubeError>,
    },
    #[error("`{cluster}` is not a cluster of lab `{lab}`")]
    UnknownCluster { cluster: String, lab: String },
    /// Connecting to a lab cluster failed; `help` says how to get a working kubeconfig for it when the
    /// cause has no advice of its own.
    #[error("failed to connect to cluster `{cluster}`: {source}")]
    Connect {
        cluster: String,
        source: Box<KubeError>,
        help: Option<String>,
    },
    /// A kind cluster that does not answer, and whose control-plane container Docker reports stopped
    /// (`stopped_node`) or gone (`None`): waiting will not bring it back.
    #[error("{source} ({}, as Docker reports)", node_text(.stopped_node))]
    ClusterDown {
        source: Box<KubeError>,
        stopped_node: Option<String>,
    },

    /// A watch stream ended (`what`: "the watch", "the CRD watch").
    #[error("{what} ended unexpectedly")]
    WatchEnded { what: &'static str },
    /// A wait saw nothing because its watch kept failing.
    #[error(
        "timed out after {after:?} waiting for {object}: {condition}; the watch kept failing: {source}"
    )]
    WatchKeptFailing {
        object: Box<ObjectRef>,
        condition: String,
        after: Duration,
        source: Box<KubeError>,
    },
    #[error("the request task failed: {detail}")]
    TaskFailed { detail: String },
    #[error(
        "the object has no apiVersion, kind or metadata.name: server-side apply needs all three"
    )]
    NoIdentity,
    /// An object the server returned does not read as the lab's type of its kind (a field of another type
    /// than the kind's API declares): a server or CRD version the lab does not know.
    #[error("{object} does not read as its kind's type: {detail}")]
    Decode { object: String, detail: String },
    #[error("invalid apiVersion/kind `{api_version}`/`{kind}`")]
    BadKind { api_version: String, kind: String },
    /// Discovery does not know the kind (in kubectl's wording).
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    NotServed { api_version: String, kind: String },
    #[error("unable to parse requirement: invalid label selector {selector:?}")]
    BadSelector { selector: String },
    #[error("the TokenRequest for ServiceAccount {service_account} returned no token")]
    NoToken { service_account: String },
    #[error("CertificateSigningRequest {name} does not exist")]
    CsrMissing { name: String },
    #[error("CertificateSigningRequest {name} was denied; a denied CSR cannot be approved")]
    CsrDenied { name: String },

    #[error("Service {service} does not exist")]
    ServiceMissing { service: String },
    #[error("Service {service} has no selector: there is no Pod to forward to")]
    NoSelector { service: String },
    #[error("Service {service} has no port {port} (it has: {})", .have.join(", "))]
    NoServicePort {
        service: String,
        port: u16,
        have: Vec<String>,
    },
    #[error("no running Pod behind Service {service} (selector {selector})")]
    NoReadyPod { service: String, selector: String },
    #[error("Service {service} port {port} targets a port that Pod {pod} does not declare")]
    UndeclaredTargetPort {
        service: String,
        port: u16,
        pod: String,
    },
    #[error("failed to listen on 127.0.0.1: {detail}")]
    Listen { detail: String },
    #[error("the CA bundle holds no PEM certificate")]
    NoCaCertificate,
    #[error("GET {url} failed: {detail}")]
    Request { url: String, detail: String },
    #[error("GET {url}: reading the answer failed: {detail}")]
    ReadAnswer { url: String, detail: String },
}

fn fields_text(fields: &[String]) -> String {
    let list = fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if fields.len() == 1 {
        format!("field {list} is")
    } else {
        format!("fields {list} are")
    }
}

fn forbidden_text(cause: ForbiddenCause, message: &str) -> String {
    match cause {
        ForbiddenCause::ClusterNamespaceTerminating => format!(
            "forbidden while the cluster's hub namespace is still being deleted (HTTP 403): {message}"
        ),
        _ => format!("forbidden (HTTP 403): {message}"),
    }
}

fn rejected_text(code: u16, message: &str) -> String {
    match code {
        0 => message.to_owned(),
        _ => format!("rejected (HTTP {code}): {message}"),
    }
}

fn contexts_text(have: &[String]) -> String {
    if have.is_empty() {
        "it has no contexts".to_owned()
    } else {
        format!("it has: {}", have.join(", "))
    }
}

fn node_text(stopped_node: &Option<String>) -> String {
    match stopped_node {
        Some(n) => format!("its node container `{n}` is stopped"),
        None => "it has no control-plane container any more".to_owned(),
    }
}

impl KubeError {
    /// The HTTP status the API server answered with, when it answered.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            KubeError::UndeclaredFields { code, .. }
            | KubeError::ServerFailed { code, .. }
            | KubeError::Rejected { code, .. } => Some(*code).filter(|c| *c != 0),
            KubeError::Conflict { .. } => Some(409),
            KubeError::Gone { .. } => Some(410),
            KubeError::Throttled { .. } => Some(429),
            KubeError::Unauthorized { .. } => Some(401),
            KubeError::Forbidden { .. } => Some(403),
            KubeError::NotFound { .. } => Some(404),
            KubeError::Hinted { source, .. } => source.status_code(),
            _ => None,
        }
    }

    /// The same answer, with advice only the caller knows.
    #[must_use]
    pub fn with_help(self, help: impl Into<String>) -> Self {
        KubeError::Hinted {
            source: Box::new(self),
            help: help.into(),
        }
    }
}

impl Failure for KubeError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::Kube
    }
    fn transience(&self) -> Transience {
        use Transience::{Permanent, Transient};
        match self {
            KubeError::Conflict { .. }
            | KubeError::Gone { .. }
            | KubeError::Throttled { .. }
            | KubeError::ServerFailed { .. }
            | KubeError::Unreachable { .. }
            | KubeError::Stream { .. }
            | KubeError::ProbeTimeout { .. }
            | KubeError::WatchEnded { .. }
            | KubeError::NoReadyPod { .. }
            | KubeError::ReadAnswer { .. } => Transient,
            KubeError::Forbidden { cause, .. } => match cause {
                ForbiddenCause::Denied => Permanent,
                _ => Transient,
            },
            KubeError::Hinted { source, .. }
            | KubeError::UseContext { source, .. }
            | KubeError::Connect { source, .. }
            | KubeError::WatchKeptFailing { source, .. } => source.transience(),
            _ => Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        Some(match self {
            KubeError::UndeclaredFields { .. } => {
                "the object sets a field the installed CRD does not define: remove it, or patch the chart \
                 that renders it (charts-patches/); retrying cannot help"
                    .to_owned()
            }
            KubeError::Unauthorized { .. } => {
                "the API server does not accept the kubeconfig's credentials: regenerate the kubeconfig \
                 (kind: `kind export kubeconfig --name <cluster>`)"
                    .to_owned()
            }
            KubeError::Forbidden { cause, .. } => match cause {
                ForbiddenCause::NamespaceTerminating => return None,
                ForbiddenCause::ClusterNamespaceTerminating => {
                    "a `reset` or `down` left the cluster's namespace on the hub Terminating; the accept \
                     passes once it is gone"
                        .to_owned()
                }
                ForbiddenCause::Denied => {
                    "the kubeconfig's user lacks the RBAC permission for this request".to_owned()
                }
            },
            KubeError::Hinted { help, .. } => help.clone(),
            KubeError::Tls { .. } => {
                "the kubeconfig's certificate-authority data does not match the server: regenerate the \
                 kubeconfig for this cluster"
                    .to_owned()
            }
            KubeError::Unreachable { .. } | KubeError::ProbeTimeout { .. } => {
                UNREACHABLE_HELP.to_owned()
            }
            KubeError::Auth { .. } => {
                "the kubeconfig's user credentials cannot be used: regenerate the kubeconfig".to_owned()
            }
            KubeError::UseContext { source, .. } | KubeError::WatchKeptFailing { source, .. } => {
                return source.help();
            }
            KubeError::Connect { source, help, .. } => return source.help().or_else(|| help.clone()),
            // Advice the answer's context gave (a `Hinted` source) knows better than Docker's view.
            KubeError::ClusterDown { source, .. } if matches!(**source, KubeError::Hinted { .. }) => {
                return source.help();
            }
            KubeError::ClusterDown { stopped_node, .. } => match stopped_node {
                Some(n) => format!(
                    "start it with `docker start {n}` and run the command again, or rebuild the lab with \
                     `ocm-lab down` then `ocm-lab up` (with the same `-t`)"
                ),
                None => {
                    "rebuild the lab with `ocm-lab down` then `ocm-lab up` (with the same `-t`)".to_owned()
                }
            },
            KubeError::NotServed { .. } => {
                "the cluster does not serve this kind: apply its CRD first and wait until it is Established \
                 (OCM's gated kinds appear only once the operator installs them)"
                    .to_owned()
            }
            KubeError::CsrDenied { .. } => {
                "the agent creates a new CSR after a while; approve that one".to_owned()
            }
            KubeError::NoReadyPod { .. } => {
                "wait for the Service's Deployment to roll out, then try again".to_owned()
            }
            _ => return None,
        })
    }
}
