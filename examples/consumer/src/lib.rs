//! A ClusterProfile consumer, and the Cluster Inventory API's access convention in Rust: profile → provider →
//! exec credential → client.
//!
//! It lists the ClusterProfiles in a namespace of the hub and, for each, does what the Go helper
//! (kubernetes-sigs/cluster-inventory-api v0.1.2 `pkg/access/config.go`, `BuildConfigFromCP`) does: it takes the
//! first provider of a provider file that the profile has ([`provider::access`]), runs that provider's exec
//! plugin per the client-go credential plugin protocol ([`exec::credential`]), and builds a kube-rs client from
//! the provider's cluster and the plugin's credential ([`spoke_kubeconfig`]). Then it asks each spoke for its
//! version and its namespaces.
//!
//! For OCM the provider is `open-cluster-management`, written by cluster-proxy (the user server's address for the
//! spoke, its CA, and `{clusterName}` in the exec extension), and the plugin is managed-serviceaccount's
//! `cp-creds`, which returns the token synced next to the profile (Secret `<cluster>-<msa>`) and so needs `get`
//! on that Secret under the consumer's own identity
//! (open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/clusterprofile-credentials-plugin/main.go`).
//! This crate never reads that Secret itself.

pub mod exec;
pub mod provider;
pub mod report;

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::json;

pub use exec::Credential;
pub use provider::{Access, EXEC_EXTENSION, PROVIDER, ProviderFile};
pub use report::{PodReport, PodSpoke};

/// How long one spoke may take to answer both requests.
pub const SPOKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Lists the ClusterProfiles of a namespace and reaches each spoke through its access provider.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "ocm-lab-consumer", version)]
pub struct Args {
    /// The hub's context in the kubeconfig (KUBECONFIG, else ~/.kube/config). Default: the kubeconfig's
    /// current context, or the Pod's ServiceAccount when run in a Pod without a kubeconfig.
    #[arg(long)]
    pub context: Option<String>,
    /// The namespace whose ClusterProfiles to read (one a ManagedClusterSet is bound to).
    #[arg(short = 'n', long, default_value = "cluster-inventory")]
    pub namespace: String,
    /// The provider file: `{"providers": [{"name": "open-cluster-management", "execConfig": {...}}]}`, as the
    /// Cluster Inventory API's `-clusterprofile-provider-file` (same default).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "clusterprofile-provider-file.json"
    )]
    pub provider_file: PathBuf,
    /// Send the requests to this address (`https://localhost:19092`) instead of the provider's host, keeping
    /// its path. The provider's server is a Service address that resolves only inside the hub: from a laptop,
    /// forward it first with `kubectl -n open-cluster-management-addon port-forward
    /// svc/cluster-proxy-addon-user 19092:9092` (`localhost` is in the user server's certificate). The plugin
    /// still gets the provider's own server in `spec.cluster.server`.
    #[arg(long, value_name = "URL")]
    pub user_server: Option<String>,
    /// Also write the report as JSON ([`PodReport`]) to this file: in a Pod, `/dev/termination-log`, where
    /// the kubelet keeps it in the container's status (`state.terminated.message`) for whoever started it.
    #[arg(long, value_name = "PATH")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read the hub's client config: {0}")]
    HubConfig(String),
    #[error("failed to build a client: {0}")]
    Client(#[source] kube::Error),
    #[error("failed to read the provider file {}: {source}", path.display())]
    ProviderFileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the provider file {} is not `{{\"providers\": [{{\"name\", \"execConfig\"}}]}}`: {source}", path.display())]
    ProviderFileParse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to list ClusterProfiles in namespace {namespace}: {source}")]
    List {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "namespace {0} holds no ClusterProfile: bind a ManagedClusterSet to it (ManagedClusterSetBinding), or give -n"
    )]
    NoProfiles(String),
    #[error(
        "ClusterProfile {profile} has none of the provider file's access providers ({wanted}; it has: {have}); cluster-proxy writes `open-cluster-management` once its ClusterProfile gate is on and its user serving cert exists"
    )]
    NoProvider {
        profile: String,
        wanted: String,
        have: String,
    },
    #[error("the provider file's `{provider}` has no execConfig")]
    NoExecConfig { provider: String },
    #[error(
        "the provider file's `{provider}` sets {what}: {policy}, which this consumer does not support (only Ignore)"
    )]
    UnsupportedPolicy {
        provider: String,
        what: &'static str,
        policy: String,
    },
    #[error("ClusterProfile {profile}: the `{provider}` access provider has no server")]
    NoServer { profile: String, provider: String },
    #[error("`{0}` is not an https URL with a host (`https://host:port/path`)")]
    BadUrl(String),
    #[error("the exec plugin `{command}` was not found{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    PluginMissing {
        command: String,
        hint: Option<String>,
    },
    #[error("failed to run the exec plugin `{command}`: {source}")]
    PluginStart {
        command: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the exec plugin `{command}` gave no answer within {after:?}")]
    PluginTimeout { command: String, after: Duration },
    #[error("the exec plugin `{command}` refused ({}): {stderr}", status.map_or("killed by a signal".into(), |c| format!("exit status {c}")))]
    PluginFailed {
        command: String,
        status: Option<i32>,
        /// The end of what it printed on stderr.
        stderr: String,
    },
    #[error("exec plugin `{command}` is configured to use API version {configured}{}", returned.as_deref().map(|r| format!(", plugin returned version {r}")).unwrap_or_else(|| String::from(", which client-go does not speak")))]
    PluginApiVersion {
        command: String,
        configured: String,
        returned: Option<String>,
    },
    #[error("the exec plugin `{command}` gave an unusable answer: {why}")]
    PluginAnswer { command: String, why: String },
    #[error("the exec plugin `{command}` returned a credential that expired at {at}")]
    Expired { command: String, at: String },
    #[error("failed to build the spoke's client config: {0}")]
    SpokeConfig(String),
    #[error(
        "{host} does not resolve here ({source}); the provider's server is a Service address that resolves only inside the hub: from outside it, forward the user server and give --user-server"
    )]
    Dns {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed: {source}")]
    Spoke {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// Which hop of the consumer's path an error broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hop {
    /// The provider file or the profile's access providers.
    Provider,
    /// The plugin could not be run.
    PluginMissing,
    /// The plugin ran and refused (for `cp-creds`: no `get` on the synced Secret, or no such Secret).
    PluginRefused,
    /// The plugin answered something unusable, or an expired credential.
    Credential,
    /// The server's host name does not resolve where the consumer runs.
    Dns,
    /// The TLS handshake with the server failed (for example its certificate is not signed by the provider's CA).
    Tls,
    /// cluster-proxy's user server: 400 (its tunnel to the proxy-server) or 502 (no agent for the cluster).
    Proxy,
    /// Everything else on the way to and at the spoke.
    Spoke,
    /// The hub, or the consumer's own setup.
    Hub,
}

impl Error {
    pub fn hop(&self) -> Hop {
        match self {
            Error::NoProvider { .. }
            | Error::NoExecConfig { .. }
            | Error::UnsupportedPolicy { .. }
            | Error::NoServer { .. } => Hop::Provider,
            Error::PluginMissing { .. } | Error::PluginStart { .. } => Hop::PluginMissing,
            Error::PluginFailed { .. } | Error::PluginTimeout { .. } => Hop::PluginRefused,
            Error::PluginApiVersion { .. } | Error::PluginAnswer { .. } | Error::Expired { .. } => {
                Hop::Credential
            }
            // cluster-proxy v0.10.0 `pkg/userserver/user_server.go`: 400 when its tunnel to the proxy-server
            // fails, 502 when the proxy-server has no agent for the cluster ("No agent available").
            Error::Spoke {
                source: kube::Error::Api(status),
                ..
            } if matches!(status.code, 400 | 502) => Hop::Proxy,
            Error::Dns { .. } => Hop::Dns,
            Error::Spoke { source, .. } if is_tls(source) => Hop::Tls,
            Error::BadUrl(_) | Error::SpokeConfig(_) | Error::Spoke { .. } | Error::Timeout(_) => {
                Hop::Spoke
            }
            Error::HubConfig(_)
            | Error::Client(_)
            | Error::ProviderFileRead { .. }
            | Error::ProviderFileParse { .. }
            | Error::List { .. }
            | Error::NoProfiles(_) => Hop::Hub,
        }
    }
}

/// `server` with its scheme, host and port replaced by `base`'s, its path kept:
/// (`https://cluster-proxy-addon-user.ns:9092/cluster1`, `https://localhost:19092`) →
/// `https://localhost:19092/cluster1`.
pub fn rebase(server: &str, base: &str) -> Result<String, Error> {
    let path = |url: &str| -> Result<String, Error> {
        let rest = url
            .strip_prefix("https://")
            .filter(|r| !r.is_empty() && !r.starts_with('/'))
            .ok_or_else(|| Error::BadUrl(url.to_owned()))?;
        Ok(rest
            .find('/')
            .map_or(String::new(), |i| rest[i..].to_owned()))
    };
    let p = path(server)?;
    path(base)?;
    Ok(format!("{}{p}", base.trim_end_matches('/')))
}

/// A kubeconfig for one spoke: the provider's cluster (server, CA data, proxy URL, as `BuildConfigFromCP`
/// copies them) and the plugin's credential.
pub fn spoke_kubeconfig(
    access: &Access,
    credential: &Credential,
    user_server: Option<&str>,
) -> Result<Kubeconfig, Error> {
    let server = match user_server {
        Some(base) => rebase(&access.server, base)?,
        None => access.server.clone(),
    };
    let mut cluster = json!({ "server": server });
    if let Some(ca) = &access.ca_data {
        cluster["certificate-authority-data"] = json!(ca);
    }
    if let Some(proxy) = &access.proxy_url {
        cluster["proxy-url"] = json!(proxy);
    }
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let user = match credential {
        Credential::Token { token, .. } => json!({ "token": token }),
        Credential::ClientCertificate {
            certificate, key, ..
        } => json!({ "client-certificate-data": b64(certificate), "client-key-data": b64(key) }),
    };
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": access.cluster, "cluster": cluster }],
        "users": [{ "name": access.provider, "user": user }],
        "contexts": [{
            "name": access.cluster,
            "context": { "cluster": access.cluster, "user": access.provider }
        }],
        "current-context": access.cluster,
    });
    serde_json::from_value(kubeconfig).map_err(|e| Error::SpokeConfig(e.to_string()))
}

/// What one spoke answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub version: String,
    pub namespaces: usize,
}

/// One ClusterProfile's line of the report.
#[derive(Debug)]
pub struct SpokeResult {
    pub profile: String,
    pub cluster: Option<String>,
    pub server: Option<String>,
    pub outcome: Result<Answer, Error>,
}

#[derive(Debug)]
pub struct Report {
    pub namespace: String,
    pub spokes: Vec<SpokeResult>,
}

impl Report {
    pub fn all_ok(&self) -> bool {
        self.spokes.iter().all(|s| s.outcome.is_ok())
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        for s in &self.spokes {
            let via = s
                .server
                .as_deref()
                .map_or(String::new(), |v| format!(" via {v}"));
            let cluster = s
                .cluster
                .as_deref()
                .map_or(String::new(), |c| format!(" (cluster {c})"));
            let line = match &s.outcome {
                Ok(a) => format!(
                    "{}/{}{cluster}{via}: Kubernetes {}, {} namespaces",
                    self.namespace, s.profile, a.version, a.namespaces
                ),
                Err(e) => format!(
                    "{}/{}{cluster}{via}: failed at the {} hop: {e}",
                    self.namespace,
                    s.profile,
                    hop_name(e.hop())
                ),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// Whether a TLS library error is somewhere in `e`'s chain. hyper-rustls hands rustls' error up wrapped in
/// `std::io::Error`s, whose `source()` skips the error they wrap, so each one is opened with `get_ref`.
fn is_tls(e: &kube::Error) -> bool {
    fn find(e: &(dyn std::error::Error + 'static)) -> bool {
        if e.downcast_ref::<rustls::Error>().is_some() {
            return true;
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && find(inner)
        {
            return true;
        }
        e.source().is_some_and(find)
    }
    find(e)
}

/// `host` and port of an `https://host[:port]/path` URL.
fn host_port(url: &str) -> Option<(String, u16)> {
    let authority = url.strip_prefix("https://")?.split('/').next()?;
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !p.contains(']') => (h, p.parse().ok()?),
        _ => (authority, 443),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_owned(), port))
}

/// Resolves the host a spoke's client will connect to, so that a name that does not resolve here is the DNS
/// hop, not a connection error among others. Through a proxy the proxy resolves it: nothing to do.
pub async fn resolve(access: &Access, user_server: Option<&str>) -> Result<(), Error> {
    if access.proxy_url.is_some() {
        return Ok(());
    }
    let url = match user_server {
        Some(base) => rebase(&access.server, base)?,
        None => access.server.clone(),
    };
    let (host, port) = host_port(&url).ok_or_else(|| Error::BadUrl(url.clone()))?;
    let looked_up = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map(drop);
    looked_up.map_err(|source| Error::Dns { host, source })
}

fn hop_name(hop: Hop) -> &'static str {
    match hop {
        Hop::Dns => "dns",
        Hop::Tls => "tls",
        Hop::Provider => "provider",
        Hop::PluginMissing => "plugin-missing",
        Hop::PluginRefused => "plugin-refused",
        Hop::Credential => "credential",
        Hop::Proxy => "proxy",
        Hop::Spoke => "spoke",
        Hop::Hub => "hub",
    }
}

/// Asks a spoke for its version and its namespaces.
pub async fn ask(client: Client) -> Result<Answer, Error> {
    let version = client
        .apiserver_version()
        .await
        .map_err(|source| Error::Spoke {
            what: "GET /version",
            source,
        })?;
    let namespaces = Api::<Namespace>::all(client)
        .list_metadata(&ListParams::default())
        .await
        .map_err(|source| Error::Spoke {
            what: "listing namespaces",
            source,
        })?;
    Ok(Answer {
        version: version.git_version,
        namespaces: namespaces.items.len(),
    })
}

/// A client for a spoke from its kubeconfig.
pub async fn spoke_client(kubeconfig: Kubeconfig) -> Result<Client, Error> {
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::SpokeConfig(e.to_string()))?;
    Client::try_from(config).map_err(Error::Client)
}

/// The run, with the hub's client, the provider file, and the way to make a spoke's client given (tests give
/// mocks). Each profile's plugin runs once; a failure is that profile's line of the report, never retried.
pub async fn run_with<F, Fut>(
    hub: Client,
    args: &Args,
    file: &ProviderFile,
    connect: F,
) -> Result<Report, Error>
where
    F: Fn(Kubeconfig) -> Fut,
    Fut: std::future::Future<Output = Result<Client, Error>>,
{
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles");
    let profiles: Api<DynamicObject> = Api::namespaced_with(hub, &args.namespace, &resource);
    let list = profiles
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::List {
            namespace: args.namespace.clone(),
            source,
        })?;
    if list.items.is_empty() {
        return Err(Error::NoProfiles(args.namespace.clone()));
    }
    let mut spokes = Vec::new();
    for profile in list.items {
        let value = serde_json::to_value(&profile).expect("objects serialize");
        let name = profile.metadata.name.clone().unwrap_or_default();
        let access = match provider::access(&value, file) {
            Ok(a) => a,
            Err(e) => {
                spokes.push(SpokeResult {
                    profile: name,
                    cluster: None,
                    server: None,
                    outcome: Err(e),
                });
                continue;
            }
        };
        let outcome = async {
            let credential = exec::credential(&access, Timestamp::now()).await?;
            resolve(&access, args.user_server.as_deref()).await?;
            let kubeconfig = spoke_kubeconfig(&access, &credential, args.user_server.as_deref())?;
            let client = connect(kubeconfig).await?;
            tokio::time::timeout(SPOKE_TIMEOUT, ask(client))
                .await
                .map_err(|_| Error::Timeout(SPOKE_TIMEOUT))?
        }
        .await;
        spokes.push(SpokeResult {
            profile: name,
            cluster: Some(access.cluster.clone()),
            server: Some(access.server.clone()),
            outcome,
        });
    }
    Ok(Report {
        namespace: args.namespace.clone(),
        spokes,
    })
}

/// The run against the hub (the kubeconfig's context, else the Pod's ServiceAccount) and the real spokes.
pub async fn run(args: &Args) -> Result<Report, Error> {
    let file = ProviderFile::read(&args.provider_file)?;
    let config = match &args.context {
        Some(context) => {
            let options = KubeConfigOptions {
                context: Some(context.clone()),
                ..KubeConfigOptions::default()
            };
            Config::from_kubeconfig(&options)
                .await
                .map_err(|e| Error::HubConfig(e.to_string()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| Error::HubConfig(e.to_string()))?,
    };
    let hub = Client::try_from(config).map_err(Error::Client)?;
    run_with(hub, args, &file, spoke_client).await
}

#[cfg(test)]
mod tests;
