//! A ClusterProfile consumer: what the lab exists for.
//!
//! It lists the ClusterProfiles in a namespace of the hub, takes each one's `open-cluster-management` access
//! provider (written by the cluster-proxy addon manager: the user server's address for the spoke, its CA,
//! and the spoke's name in the `client.authentication.k8s.io/exec` extension) and the token
//! managed-serviceaccount synced next to the profile (Secret `<cluster>-<msa>`, key `token`), builds a
//! kube-rs client per spoke from them, and asks each spoke, through cluster-proxy, for its version and its
//! namespaces.
//!
//! How this maps to the Cluster Inventory API's access conventions (cluster-inventory-api v0.1.2
//! `pkg/access`, FACTS-OCM-ROUND2 §6): `BuildConfigFromCP` picks the provider by name from
//! `status.accessProviders` (overriding the deprecated `status.credentialProviders`), and builds the REST
//! config from the provider's `cluster`: `server`, `certificate-authority-data` and `proxy-url` only (not
//! `tls-server-name` or `insecure-skip-tls-verify`). So does [`access`] and [`spoke_kubeconfig`]. For the
//! credentials, the convention is an exec plugin named in a provider file, which gets the `exec`
//! extension (`{clusterName: <cluster>}`) as `ExecCredential.spec.cluster.config`. For OCM that plugin
//! would return the token managed-serviceaccount synced beside the profile; this consumer does the same
//! in-process, reading that Secret with its own hub credentials instead of running a plugin, and takes the
//! cluster name from the same extension.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};

/// The access provider cluster-proxy writes (OCM-FACTS §6).
pub const PROVIDER: &str = "open-cluster-management";
/// The extension holding `{clusterName: <cluster>}`, handed to an exec plugin as its cluster config.
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";
/// The label OCM puts on each ClusterProfile with its ManagedCluster's name.
pub const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";
/// How long one spoke may take to answer both requests.
pub const SPOKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Lists the ClusterProfiles of a namespace and reaches each spoke through its access provider.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "ocm-lab-consumer", version)]
pub struct Args {
    /// The hub's context in the kubeconfig (KUBECONFIG, else ~/.kube/config). Default: its current context.
    #[arg(long)]
    pub context: Option<String>,
    /// The namespace whose ClusterProfiles to read (one a ManagedClusterSet is bound to).
    #[arg(short = 'n', long, default_value = "cluster-inventory")]
    pub namespace: String,
    /// The ManagedServiceAccount whose token is synced next to each ClusterProfile as `<cluster>-<msa>`.
    #[arg(long, default_value = "inventory-reader")]
    pub msa: String,
    /// Send the requests to this address (`https://localhost:19092`) instead of the provider's host, keeping
    /// its path. The provider's server is a Service address that resolves only inside the hub: forward it
    /// first with `kubectl -n open-cluster-management-addon port-forward svc/cluster-proxy-addon-user
    /// 19092:9092` (`localhost` is in the user server's certificate).
    #[arg(long, value_name = "URL")]
    pub user_server: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read the hub's kubeconfig: {0}")]
    HubConfig(#[source] kube::config::KubeconfigError),
    #[error("failed to build a client: {0}")]
    Client(#[source] kube::Error),
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
        "ClusterProfile {profile} has no `{PROVIDER}` access provider (it has: {have}); cluster-proxy writes it once its ClusterProfile gate is on and its user serving cert exists"
    )]
    NoProvider { profile: String, have: String },
    #[error("ClusterProfile {profile}: the `{PROVIDER}` access provider has no server")]
    NoServer { profile: String },
    #[error("`{0}` is not an https URL with a host (`https://host:port/path`)")]
    BadUrl(String),
    #[error(
        "Secret {namespace}/{name} holds no token: label the ManagedServiceAccount for syncing (sync-to-clusterprofile=true) and turn on managed-serviceaccount's ClusterProfileCredSyncer gate"
    )]
    NoToken { namespace: String, name: String },
    #[error("failed to read Secret {namespace}/{name}: {source}")]
    Secret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("failed to build the spoke's client config: {0}")]
    SpokeConfig(String),
    #[error("{what} failed: {source}")]
    Spoke {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// What a ClusterProfile's access provider says about reaching its spoke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub profile: String,
    /// The spoke's name: the exec extension's `clusterName`, else the profile's cluster-name label, else
    /// the profile's name.
    pub cluster: String,
    pub server: String,
    /// `certificate-authority-data` (base64 PEM), as the provider gives it.
    pub ca_data: Option<String>,
    pub proxy_url: Option<String>,
}

/// The `open-cluster-management` access provider of a ClusterProfile, as `BuildConfigFromCP` reads it.
pub fn access(profile: &Value) -> Result<Access, Error> {
    let name = profile["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    // The deprecated list first, then accessProviders, whose entries win by name.
    let mut providers: Vec<(&str, &Value)> = Vec::new();
    for key in ["credentialProviders", "accessProviders"] {
        for p in profile["status"][key].as_array().into_iter().flatten() {
            let pname = p["name"].as_str().unwrap_or_default();
            providers.retain(|(n, _)| *n != pname);
            providers.push((pname, &p["cluster"]));
        }
    }
    let Some((_, cluster)) = providers.iter().find(|(n, _)| *n == PROVIDER) else {
        let have: Vec<&str> = providers.iter().map(|(n, _)| *n).collect();
        return Err(Error::NoProvider {
            profile: name,
            have: if have.is_empty() {
                "none".into()
            } else {
                have.join(", ")
            },
        });
    };
    let server = cluster["server"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::NoServer {
            profile: name.clone(),
        })?
        .to_owned();
    let from_extension = cluster["extensions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == EXEC_EXTENSION)
        .and_then(|e| e["extension"]["clusterName"].as_str());
    let from_label = profile["metadata"]["labels"][CLUSTER_NAME_LABEL].as_str();
    Ok(Access {
        cluster: from_extension.or(from_label).unwrap_or(&name).to_owned(),
        profile: name,
        server,
        ca_data: cluster["certificate-authority-data"]
            .as_str()
            .map(str::to_owned),
        proxy_url: cluster["proxy-url"].as_str().map(str::to_owned),
    })
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
/// copies them) and the synced token.
pub fn spoke_kubeconfig(
    access: &Access,
    token: &str,
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
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": access.cluster, "cluster": cluster }],
        "users": [{ "name": "managed-serviceaccount", "user": { "token": token } }],
        "contexts": [{
            "name": access.cluster,
            "context": { "cluster": access.cluster, "user": "managed-serviceaccount" }
        }],
        "current-context": access.cluster,
    });
    serde_json::from_value(kubeconfig).map_err(|e| Error::SpokeConfig(e.to_string()))
}

/// The token managed-serviceaccount synced next to the profile (Secret `<cluster>-<msa>`, key `token`).
pub async fn synced_token(
    secrets: &Api<Secret>,
    namespace: &str,
    cluster: &str,
    msa: &str,
) -> Result<String, Error> {
    let name = format!("{cluster}-{msa}");
    let secret = secrets
        .get_opt(&name)
        .await
        .map_err(|source| Error::Secret {
            namespace: namespace.to_owned(),
            name: name.clone(),
            source,
        })?;
    secret
        .and_then(|s| s.data)
        .and_then(|mut d| d.remove("token"))
        .and_then(|t| String::from_utf8(t.0).ok())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::NoToken {
            namespace: namespace.to_owned(),
            name,
        })
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
                    "{}/{}{cluster}{via}: failed: {e}",
                    self.namespace, s.profile
                ),
            };
            out.push_str(&line);
            out.push('\n');
        }
        out
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

/// The run, with the hub's client and the way to make a spoke's client given (tests give mocks).
pub async fn run_with<F, Fut>(hub: Client, args: &Args, connect: F) -> Result<Report, Error>
where
    F: Fn(Kubeconfig) -> Fut,
    Fut: std::future::Future<Output = Result<Client, Error>>,
{
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusterprofiles");
    let profiles: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), &args.namespace, &resource);
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
    let secrets: Api<Secret> = Api::namespaced(hub, &args.namespace);
    let mut spokes = Vec::new();
    for profile in list.items {
        let value = serde_json::to_value(&profile).expect("objects serialize");
        let name = profile.metadata.name.clone().unwrap_or_default();
        let access = match access(&value) {
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
            let token = synced_token(&secrets, &args.namespace, &access.cluster, &args.msa).await?;
            let kubeconfig = spoke_kubeconfig(&access, &token, args.user_server.as_deref())?;
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

/// The run against the hub of the kubeconfig (KUBECONFIG, else ~/.kube/config) and the real spokes.
pub async fn run(args: &Args) -> Result<Report, Error> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = Config::from_kubeconfig(&options)
        .await
        .map_err(Error::HubConfig)?;
    let hub = Client::try_from(config).map_err(Error::Client)?;
    run_with(hub, args, spoke_client).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use http::{Request, Response};
    use kube::client::Body;
    use std::sync::{Arc, Mutex};

    fn b64(text: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(text)
    }

    /// `../shared/fixtures` (the objects recorded from a real lab), as the lab's tests find it.
    fn fixtures() -> Option<std::path::PathBuf> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures");
        if dir.is_dir() {
            return Some(dir);
        }
        assert!(
            std::env::var("OCM_LAB_REQUIRE_FIXTURES").as_deref() != Ok("1"),
            "OCM_LAB_REQUIRE_FIXTURES=1 but {} does not exist",
            dir.display()
        );
        eprintln!("skipped: {} not found", dir.display());
        None
    }

    fn recorded_profile() -> Option<Value> {
        let path = fixtures()?.join(
            "recorded/8-access-providers-and-agent-loss/clusterprofile-cluster1.with-access-providers.yaml",
        );
        Some(serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap())
    }

    #[tokio::test]
    async fn a_recorded_profile_gives_a_client_config_for_its_spoke_through_the_forwarded_user_server()
     {
        let Some(profile) = recorded_profile() else {
            return;
        };
        let a = access(&profile).unwrap();
        assert_eq!(a.cluster, "cluster1");
        assert_eq!(
            a.server,
            "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1"
        );
        let kc = spoke_kubeconfig(&a, "the-token", Some("https://localhost:19092/")).unwrap();
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap();
        assert_eq!(
            config.cluster_url.to_string(),
            "https://localhost:19092/cluster1"
        );
        // The provider's CA bundle: the user server's serving cert and the cluster-proxy CA.
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(2));
        assert!(config.auth_info.token.is_some());
        assert!(
            !format!("{config:?}").contains("the-token"),
            "the token is never shown"
        );
    }

    #[test]
    fn the_provider_is_taken_by_name_with_access_providers_over_the_deprecated_list() {
        let profile = json!({
            "metadata": {"name": "p1", "labels": {CLUSTER_NAME_LABEL: "from-label"}},
            "status": {
                "credentialProviders": [
                    {"name": PROVIDER, "cluster": {"server": "https://old:1/x"}},
                    {"name": "other", "cluster": {"server": "https://other:1"}}
                ],
                "accessProviders": [
                    {"name": PROVIDER, "cluster": {"server": "https://new:1/p1", "proxy-url": "http://proxy:3128",
                     "tls-server-name": "ignored", "insecure-skip-tls-verify": true}}
                ]
            }
        });
        let a = access(&profile).unwrap();
        assert_eq!(a.server, "https://new:1/p1");
        assert_eq!(
            a.cluster, "from-label",
            "no exec extension: the label names the cluster"
        );
        assert_eq!(a.proxy_url.as_deref(), Some("http://proxy:3128"));
        let kc = serde_json::to_value(spoke_kubeconfig(&a, "t", None).unwrap()).unwrap();
        let cluster = &kc["clusters"][0]["cluster"];
        assert_eq!(cluster["server"], "https://new:1/p1");
        assert!(
            cluster.get("tls-server-name").is_none()
                && cluster.get("insecure-skip-tls-verify").is_none(),
            "BuildConfigFromCP copies neither: {cluster}"
        );

        let only_other = json!({"metadata": {"name": "p2"},
            "status": {"accessProviders": [{"name": "gke", "cluster": {"server": "https://x"}}]}});
        let e = access(&only_other).unwrap_err().to_string();
        assert!(e.contains("p2") && e.contains("(it has: gke)"), "{e}");
        let none = json!({"metadata": {"name": "p3"}, "status": {}});
        assert!(
            access(&none)
                .unwrap_err()
                .to_string()
                .contains("(it has: none)")
        );
    }

    #[test]
    fn rebase_keeps_the_path_and_refuses_what_is_not_an_https_url() {
        let s = "https://cluster-proxy-addon-user.ns:9092/cluster1";
        assert_eq!(
            rebase(s, "https://localhost:19092").unwrap(),
            "https://localhost:19092/cluster1"
        );
        assert_eq!(
            rebase(s, "https://127.0.0.1:1/").unwrap(),
            "https://127.0.0.1:1/cluster1"
        );
        assert!(matches!(
            rebase(s, "localhost:19092"),
            Err(Error::BadUrl(_))
        ));
        assert!(matches!(
            rebase("http://x/c", "https://l:1"),
            Err(Error::BadUrl(_))
        ));
    }

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    /// Answers every request on `handle` by its path, until the client is dropped.
    fn serve(mut handle: Handle, answer: impl Fn(&str) -> (u16, Value) + Send + 'static) {
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let (status, body) = answer(req.uri().path());
                send.send_response(
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
        });
    }

    fn not_found(what: &str) -> (u16, Value) {
        (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                     "message": format!("{what} not found"), "reason": "NotFound", "code": 404}),
        )
    }

    fn profile(name: &str, cluster: &str) -> Value {
        json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
               "metadata": {"name": name, "namespace": "cluster-inventory"},
               "status": {"accessProviders": [{"name": PROVIDER, "cluster": {
                   "server": format!("https://cluster-proxy-addon-user.open-cluster-management-addon:9092/{cluster}"),
                   "extensions": [{"name": EXEC_EXTENSION, "extension": {"clusterName": cluster}}]}}]}})
    }

    #[tokio::test]
    async fn each_profile_is_reached_with_its_synced_token_and_a_missing_token_says_what_to_do() {
        let (service, hub) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        serve(hub, |path| match path {
            "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/cluster-inventory/clusterprofiles" => {
                (
                    200,
                    json!({
                "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfileList", "metadata": {},
                "items": [profile("cluster1", "cluster1"), profile("cluster2", "cluster2"),
                          {"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
                           "metadata": {"name": "bare", "namespace": "cluster-inventory"}}]}),
                )
            }
            "/api/v1/namespaces/cluster-inventory/secrets/cluster1-inventory-reader" => (
                200,
                json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "cluster1-inventory-reader"},
                "data": {"token": b64("token-of-cluster1"), "ca.crt": b64("ca")}}),
            ),
            p => not_found(p),
        });
        let connected = Arc::new(Mutex::new(Vec::new()));
        let seen = connected.clone();
        let connect = move |kc: Kubeconfig| {
            let seen = seen.clone();
            async move {
                let v = serde_json::to_value(&kc).unwrap();
                seen.lock().unwrap().push((
                    v["clusters"][0]["cluster"]["server"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                    v["users"][0]["user"]["token"].as_str().unwrap().to_owned(),
                ));
                let (service, spoke) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
                serve(spoke, |path| match path {
                    "/version" => (
                        200,
                        json!({"major": "1", "minor": "36", "gitVersion": "v1.36.1",
                        "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "",
                        "compiler": "", "platform": "linux/amd64"}),
                    ),
                    "/api/v1/namespaces" => (
                        200,
                        json!({"apiVersion": "v1", "kind": "NamespaceList",
                        "metadata": {}, "items": [{"metadata": {"name": "default"}}, {"metadata": {"name": "kube-system"}}]}),
                    ),
                    p => not_found(p),
                });
                Ok(Client::new(service, "default"))
            }
        };
        let args = Args {
            context: None,
            namespace: "cluster-inventory".into(),
            msa: "inventory-reader".into(),
            user_server: Some("https://localhost:19092".into()),
        };
        let report = run_with(Client::new(service, "default"), &args, connect)
            .await
            .unwrap();
        assert_eq!(
            *connected.lock().unwrap(),
            [(
                "https://localhost:19092/cluster1".to_owned(),
                "token-of-cluster1".to_owned()
            )],
            "only cluster1 has a synced token"
        );
        assert!(!report.all_ok());
        let text = report.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with(
                "cluster-inventory/cluster1 (cluster cluster1) via https://cluster-proxy-addon-user"
            ),
            "{text}"
        );
        assert!(
            lines[0].ends_with(": Kubernetes v1.36.1, 2 namespaces"),
            "{text}"
        );
        assert!(
            lines[1].contains(
                "failed: Secret cluster-inventory/cluster2-inventory-reader holds no token"
            ),
            "{text}"
        );
        assert!(
            lines[2].contains(
                "bare: failed: ClusterProfile bare has no `open-cluster-management` access provider"
            ),
            "{text}"
        );
        assert!(
            !text.contains("token-of-cluster1"),
            "the token is never printed"
        );
    }

    #[tokio::test]
    async fn a_namespace_without_profiles_is_an_error_saying_to_bind_a_set() {
        let (service, hub) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        serve(hub, |_| {
            (
                200,
                json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ClusterProfileList", "metadata": {}, "items": []}),
            )
        });
        let args = Args {
            context: None,
            namespace: "empty".into(),
            msa: "m".into(),
            user_server: None,
        };
        let e = run_with(Client::new(service, "default"), &args, spoke_client)
            .await
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("namespace empty holds no ClusterProfile: bind a ManagedClusterSet"),
            "{e}"
        );
    }
}
