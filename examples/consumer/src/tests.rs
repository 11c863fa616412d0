//! The consumer's path end to end, against mock API servers (the simulated lab serves no HTTP) and a stand-in
//! for `cp-creds` that speaks the ExecCredential protocol.

use super::*;
use http::{Request, Response};
use kube::client::Body;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// `../shared/fixtures` (the objects recorded from a real lab), as the lab's tests find it. A test reading it
/// is ignored where it is missing (`build.rs` sets `ocm_lab_tests_no_fixtures`).
fn fixtures() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures");
    assert!(dir.is_dir(), "{} does not exist", dir.display());
    dir
}

fn recorded_profile() -> Value {
    let path = fixtures().join(
        "recorded/8-access-providers-and-agent-loss/clusterprofile-cluster1.with-access-providers.yaml",
    );
    serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A stand-in for managed-serviceaccount v0.10.0's `cp-creds`, run by `/bin/sh` (so no freshly written file is
/// executed while another test forks). It refuses what the real one refuses
/// (`cmd/clusterprofile-credentials-plugin/main.go`, and cluster-inventory-api v0.1.2
/// `pkg/credentialplugin/core.go`): no `--managed-serviceaccount`, no `spec.cluster.server`, no `clusterName`
/// in `spec.cluster.config`, and no synced Secret `<clusterName>-<msa>` (here a file of that name in
/// `$STANDIN_SECRETS`, holding the token). It appends each `KUBERNETES_EXEC_INFO` it gets to `$STANDIN_LOG`,
/// and adds `$STANDIN_EXPIRES` as the `expirationTimestamp` when set.
const STAND_IN: &str = r#"
msa=
for arg in "$@"; do
  case "$arg" in --managed-serviceaccount=*) msa=${arg#--managed-serviceaccount=} ;; esac
done
[ -n "$msa" ] || { echo "Error: --managed-serviceaccount flag is required" >&2; exit 1; }
info=$KUBERNETES_EXEC_INFO
printf '%s\n' "$info" >>"$STANDIN_LOG"
case "$info" in
  *'"server":"'?*) ;;
  *) echo "[open-cluster-management] spec.cluster.server is missing in KUBERNETES_EXEC_INFO" >&2; exit 1 ;;
esac
cluster=$(printf '%s' "$info" | sed -n 's/.*"clusterName":"\([^"]*\)".*/\1/p')
[ -n "$cluster" ] || { echo "[open-cluster-management] missing clusterName in ExecCredential.Spec.Cluster.Config" >&2; exit 1; }
secret="$STANDIN_SECRETS/$cluster-$msa"
[ -f "$secret" ] || { echo "[open-cluster-management] failed to get synced credential secret cluster-inventory/$cluster-$msa: secrets \"$cluster-$msa\" not found" >&2; exit 1; }
expires=
[ -z "${STANDIN_EXPIRES:-}" ] || expires=",\"expirationTimestamp\":\"$STANDIN_EXPIRES\""
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"%s}}\n' "$(cat "$secret")" "$expires"
"#;

/// A directory with the stand-in, its Secrets, and a provider file naming it.
struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn new(secrets: &[(&str, &str)], expires: Option<&str>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = |p: &str| dir.path().join(p).display().to_string();
        std::fs::write(dir.path().join("cp-creds.sh"), STAND_IN).unwrap();
        std::fs::create_dir(dir.path().join("secrets")).unwrap();
        for (name, token) in secrets {
            std::fs::write(dir.path().join("secrets").join(name), token).unwrap();
        }
        let mut env = vec![
            json!({"name": "STANDIN_SECRETS", "value": path("secrets")}),
            json!({"name": "STANDIN_LOG", "value": path("exec-info.log")}),
        ];
        if let Some(at) = expires {
            env.push(json!({"name": "STANDIN_EXPIRES", "value": at}));
        }
        let file = json!({"providers": [{"name": "open-cluster-management", "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh",
            "args": [path("cp-creds.sh"), "--managed-serviceaccount=inventory-reader"],
            "env": env, "provideClusterInfo": true, "interactiveMode": "Never"}}]});
        std::fs::write(dir.path().join("providers.json"), file.to_string()).unwrap();
        Lab { dir }
    }

    fn provider_file(&self) -> ProviderFile {
        ProviderFile::read(&self.dir.path().join("providers.json")).unwrap()
    }

    /// Each `KUBERNETES_EXEC_INFO` the stand-in got, in order.
    fn exec_infos(&self) -> Vec<Value> {
        let log = self.dir.path().join("exec-info.log");
        if !Path::new(&log).exists() {
            return Vec::new();
        }
        std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
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

fn status(code: u16, reason: &str, message: &str) -> (u16, Value) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": message, "reason": reason, "code": code}),
    )
}

fn profile(name: &str) -> Value {
    json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
           "metadata": {"name": name, "namespace": "cluster-inventory"},
           "status": {"accessProviders": [{"name": PROVIDER, "cluster": {
               "server": format!("https://cluster-proxy-addon-user.open-cluster-management-addon:9092/{name}"),
               "certificate-authority-data": "Q0E=",
               "extensions": [{"name": EXEC_EXTENSION, "extension": {"clusterName": name}}]}}]}})
}

/// A hub serving `profiles` in `cluster-inventory`, and nothing else: the consumer reads no Secret.
fn hub(profiles: Vec<Value>) -> Client {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    serve(handle, move |path| match path {
        "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/cluster-inventory/clusterprofiles" => (
            200,
            json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfileList",
                   "metadata": {}, "items": profiles}),
        ),
        p => status(404, "NotFound", &format!("{p} not found")),
    });
    Client::new(service, "default")
}

/// Connects to mock spokes, recording (server, token) per connection; `cluster2`'s user server has no agent.
#[expect(clippy::type_complexity, reason = "a test's recorder")]
fn spokes() -> (
    Arc<Mutex<Vec<(String, String)>>>,
    impl Fn(Kubeconfig) -> std::pin::Pin<Box<dyn Future<Output = Result<Client, Error>>>>,
) {
    let connected = Arc::new(Mutex::new(Vec::new()));
    let seen = connected.clone();
    let connect = move |kc: Kubeconfig| {
        let v = serde_json::to_value(&kc).unwrap();
        let server = v["clusters"][0]["cluster"]["server"]
            .as_str()
            .unwrap()
            .to_owned();
        seen.lock().unwrap().push((
            server.clone(),
            v["users"][0]["user"]["token"].as_str().unwrap().to_owned(),
        ));
        let fut: std::pin::Pin<Box<dyn Future<Output = Result<Client, Error>>>> = Box::pin(
            async move {
                let (service, spoke) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
                let no_agent = server.ends_with("/cluster2");
                serve(spoke, move |path| match path {
                    _ if no_agent => status(
                        502,
                        "BadGateway",
                        "proxy to anp-proxy-server failed because No agent available",
                    ),
                    "/version" => (
                        200,
                        json!({"major": "1", "minor": "36", "gitVersion": "v1.36.1",
                        "gitCommit": "", "gitTreeState": "", "buildDate": "", "goVersion": "",
                        "compiler": "", "platform": "linux/amd64"}),
                    ),
                    "/api/v1/namespaces" => (
                        200,
                        json!({"apiVersion": "v1", "kind": "NamespaceList", "metadata": {},
                        "items": [{"metadata": {"name": "default"}}, {"metadata": {"name": "kube-system"}}]}),
                    ),
                    p => status(404, "NotFound", &format!("{p} not found")),
                });
                Ok(Client::new(service, "default"))
            },
        );
        fut
    };
    (connected, connect)
}

fn args() -> Args {
    Args {
        context: None,
        namespace: "cluster-inventory".into(),
        provider_file: "unused".into(),
        user_server: Some("https://localhost:19092".into()),
        report: None,
    }
}

#[tokio::test]
async fn the_provider_files_plugin_gets_each_profiles_cluster_and_its_token_reaches_the_spoke() {
    let lab = Lab::new(
        &[
            ("cluster1-inventory-reader", "token-of-cluster1"),
            ("cluster2-inventory-reader", "token-of-cluster2"),
        ],
        None,
    );
    let bare = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
                      "metadata": {"name": "bare", "namespace": "cluster-inventory"}});
    let hub = hub(vec![
        profile("cluster1"),
        profile("cluster2"),
        profile("cluster3"),
        bare,
    ]);
    let (connected, connect) = spokes();
    let report = run_with(hub, &args(), &lab.provider_file(), connect)
        .await
        .unwrap();

    // The plugin ran once per profile with a provider, with what client-go sends: never interactive, the
    // provider's own server (not the forwarded one), its CA, and the exec extension as `config`.
    let infos = lab.exec_infos();
    assert_eq!(infos.len(), 3, "{infos:?}");
    assert_eq!(
        infos[0],
        json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
               "spec": {"interactive": false, "cluster": {
                   "server": "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1",
                   "certificate-authority-data": "Q0E=",
                   "config": {"clusterName": "cluster1"}}}})
    );
    assert_eq!(
        *connected.lock().unwrap(),
        [
            (
                "https://localhost:19092/cluster1".to_owned(),
                "token-of-cluster1".to_owned()
            ),
            (
                "https://localhost:19092/cluster2".to_owned(),
                "token-of-cluster2".to_owned()
            ),
        ],
        "cluster3 has no synced Secret, so the plugin refused and nothing connected"
    );
    assert!(!report.all_ok());
    let hops: Vec<Option<Hop>> = report
        .spokes
        .iter()
        .map(|s| s.outcome.as_ref().err().map(Error::hop))
        .collect();
    assert_eq!(
        hops,
        [
            None,
            Some(Hop::Proxy),
            Some(Hop::PluginRefused),
            Some(Hop::Provider)
        ]
    );
    let text = report.text();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(
            "cluster-inventory/cluster1 (cluster cluster1) via https://cluster-proxy-addon-user"
        ) && lines[0].ends_with(": Kubernetes v1.36.1, 2 namespaces"),
        "{text}"
    );
    assert!(
        lines[1].contains("failed at the proxy hop: GET /version failed")
            && lines[1].contains("No agent available"),
        "{text}"
    );
    assert!(
        lines[2].contains("failed at the plugin-refused hop: the exec plugin `/bin/sh` refused (exit status 1): [open-cluster-management] failed to get synced credential secret cluster-inventory/cluster3-inventory-reader"),
        "{text}"
    );
    assert!(
        lines[3].contains("bare: failed at the provider hop: ClusterProfile bare has none of the provider file's access providers (open-cluster-management; it has: none)"),
        "{text}"
    );
    assert!(
        !text.contains("token-of-cluster"),
        "the token is never printed"
    );
}

#[tokio::test]
async fn an_expired_credential_is_reported_once_and_never_sent() {
    let lab = Lab::new(
        &[("cluster1-inventory-reader", "old-token")],
        Some("2020-01-01T00:00:00Z"),
    );
    let (connected, connect) = spokes();
    let report = run_with(
        hub(vec![profile("cluster1")]),
        &args(),
        &lab.provider_file(),
        connect,
    )
    .await
    .unwrap();
    let e = report.spokes[0].outcome.as_ref().unwrap_err();
    assert_eq!(e.hop(), Hop::Credential);
    assert!(
        e.to_string()
            .contains("returned a credential that expired at 2020-01-01T00:00:00Z"),
        "{e}"
    );
    assert_eq!(
        lab.exec_infos().len(),
        1,
        "the plugin ran once, not again and again"
    );
    assert!(connected.lock().unwrap().is_empty(), "nothing was sent");

    // The same plugin with a credential valid for a long while is used, its expiry kept.
    let lab = Lab::new(
        &[("cluster1-inventory-reader", "new-token")],
        Some("2999-01-01T00:00:00Z"),
    );
    let access = provider::access(&profile("cluster1"), &lab.provider_file()).unwrap();
    let c = exec::credential(&access, Timestamp::now()).await.unwrap();
    assert_eq!(c.expires(), Some("2999-01-01T00:00:00Z".parse().unwrap()));
}

#[tokio::test]
async fn a_plugin_that_is_missing_or_called_without_its_argument_is_reported_by_hop() {
    let lab = Lab::new(&[("cluster1-inventory-reader", "t")], None);
    let mut file = lab.provider_file();
    let access = |file: &ProviderFile| provider::access(&profile("cluster1"), file).unwrap();

    file.providers[0].exec_config.as_mut().unwrap().args.pop();
    let e = exec::credential(&access(&file), Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(e.hop(), Hop::PluginRefused);
    assert!(
        e.to_string()
            .ends_with("refused (exit status 1): Error: --managed-serviceaccount flag is required"),
        "{e}"
    );

    file.providers[0].exec_config.as_mut().unwrap().command = "/nonexistent/cp-creds".into();
    file.providers[0].exec_config.as_mut().unwrap().install_hint =
        Some("copy /cp-creds out of the managed-serviceaccount image".into());
    let e = exec::credential(&access(&file), Timestamp::now())
        .await
        .unwrap_err();
    assert_eq!(e.hop(), Hop::PluginMissing);
    assert_eq!(
        e.to_string(),
        "the exec plugin `/nonexistent/cp-creds` was not found (copy /cp-creds out of the managed-serviceaccount image)"
    );
}

#[tokio::test]
async fn without_provide_cluster_info_the_plugin_gets_no_cluster_and_cp_creds_refuses() {
    let lab = Lab::new(&[("cluster1-inventory-reader", "t")], None);
    let mut file = lab.provider_file();
    file.providers[0]
        .exec_config
        .as_mut()
        .unwrap()
        .provide_cluster_info = false;
    let access = provider::access(&profile("cluster1"), &file).unwrap();
    let e = exec::credential(&access, Timestamp::now())
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.cluster.server is missing in KUBERNETES_EXEC_INFO"),
        "{e}"
    );
    assert_eq!(
        lab.exec_infos(),
        [
            json!({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                "spec": {"interactive": false}})
        ]
    );
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (objects recorded from a real lab), not beside this checkout"
)]
async fn a_recorded_profile_gives_a_client_config_for_its_spoke_through_the_forwarded_user_server()
{
    let profile = recorded_profile();
    let file = ProviderFile::parse(
        r#"{"providers": [{"name": "open-cluster-management", "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/cp-creds",
            "args": ["--managed-serviceaccount=inventory-reader"], "provideClusterInfo": true}}]}"#,
    )
    .unwrap();
    let a = provider::access(&profile, &file).unwrap();
    assert_eq!(a.cluster, "cluster1");
    assert_eq!(
        a.server,
        "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1"
    );
    assert_eq!(
        exec::exec_info(&a)["spec"]["cluster"]["config"],
        json!({"clusterName": "cluster1"})
    );
    let credential = Credential::Token {
        token: "the-token".into(),
        expires: None,
    };
    let kc = spoke_kubeconfig(&a, &credential, Some("https://localhost:19092/")).unwrap();
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

#[tokio::test]
async fn a_namespace_without_profiles_is_an_error_saying_to_bind_a_set() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    serve(handle, |_| {
        (
            200,
            json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1",
            "kind": "ClusterProfileList", "metadata": {}, "items": []}),
        )
    });
    let args = Args {
        namespace: "empty".into(),
        ..args()
    };
    let file = ProviderFile { providers: vec![] };
    let e = run_with(Client::new(service, "default"), &args, &file, spoke_client)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("namespace empty holds no ClusterProfile: bind a ManagedClusterSet"),
        "{e}"
    );
}

#[tokio::test]
async fn a_server_that_does_not_resolve_is_the_dns_hop_and_a_failed_handshake_the_tls_hop() {
    // `.invalid` never resolves (RFC 6761): as the provider's in-hub name does not outside the hub.
    let lab = Lab::new(&[("cluster1-inventory-reader", "t")], None);
    let mut p = profile("cluster1");
    p["status"]["accessProviders"][0]["cluster"]["server"] =
        json!("https://cluster-proxy-addon-user.ns.invalid:9092/cluster1");
    let (connected, connect) = spokes();
    let args = Args {
        user_server: None,
        ..args()
    };
    let report = run_with(hub(vec![p]), &args, &lab.provider_file(), connect)
        .await
        .unwrap();
    let e = report.spokes[0].outcome.as_ref().unwrap_err();
    assert_eq!(e.hop(), Hop::Dns, "{e}");
    assert!(
        e.to_string()
            .starts_with("cluster-proxy-addon-user.ns.invalid does not resolve here")
            && e.to_string().ends_with("give --user-server"),
        "{e}"
    );
    assert!(connected.lock().unwrap().is_empty());

    // A server that answers plain HTTP where TLS is expected: rustls refuses the handshake.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::Write;
        for stream in listener.incoming() {
            let _ = stream
                .unwrap()
                .write_all(b"HTTP/1.1 400 Bad Request\r\n\r\nnot TLS");
        }
    });
    let access = provider::access(&profile("cluster1"), &lab.provider_file()).unwrap();
    let credential = Credential::Token {
        token: "t".into(),
        expires: None,
    };
    let user_server = format!("https://127.0.0.1:{port}");
    let kc = spoke_kubeconfig(&access, &credential, Some(&user_server)).unwrap();
    let e = ask(spoke_client(kc).await.unwrap()).await.unwrap_err();
    assert_eq!(e.hop(), Hop::Tls, "{e:?}");
    // A refused connection is neither.
    let kc = spoke_kubeconfig(&access, &credential, Some("https://127.0.0.1:1")).unwrap();
    let e = ask(spoke_client(kc).await.unwrap()).await.unwrap_err();
    assert_eq!(e.hop(), Hop::Spoke, "{e:?}");
}

#[test]
fn host_port_reads_the_authority_of_an_https_url() {
    assert_eq!(
        host_port("https://cluster-proxy-addon-user.ns:9092/cluster1"),
        Some(("cluster-proxy-addon-user.ns".into(), 9092))
    );
    assert_eq!(host_port("https://h/x"), Some(("h".into(), 443)));
    assert_eq!(
        host_port("https://[::1]:19092/c"),
        Some(("::1".into(), 19092))
    );
    assert_eq!(host_port("https://[::1]/c"), Some(("::1".into(), 443)));
    assert_eq!(host_port("http://h/x"), None);
}
