//! Request-level tests of the kube-rs backend: a `tower_test` mock stands in for the API server, answers
//! the requests a test expects, and returns what the client sent so the test can check it.

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::api::GroupVersionKind;
use kube::client::Body;
use ocm_lab::backend::kube::KubeApi;
use ocm_lab::backend::{ClusterApi, Condition, ObjectRef, WaitError};
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

/// How long a test waits for the client and the mock to finish: a missing request fails, not hangs.
const LIMIT: Duration = Duration::from_secs(10);

/// A request as the mock API server received it.
#[derive(Debug)]
struct Sent {
    method: http::Method,
    path: String,
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    accept: Option<String>,
    body: Value,
}

impl Sent {
    fn q(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }
}

/// The mock API server's side of the connection.
struct ApiServer(Handle<Request<Body>, Response<Body>>);

impl ApiServer {
    /// Takes the next request without answering it.
    async fn next(&mut self) -> (Sent, SendResponse<Response<Body>>) {
        let (req, send) = self
            .0
            .next_request()
            .await
            .expect("the client sent a request");
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.expect("request body");
        let query = parts
            .uri
            .query()
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.replace("%3D", "=").replace("%2F", "/"))
            })
            .collect();
        let sent = Sent {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query,
            content_type: parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .map(|v| v.to_str().unwrap().to_owned()),
            accept: parts
                .headers
                .get(http::header::ACCEPT)
                .map(|v| v.to_str().unwrap().to_owned()),
            body: if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).expect("a JSON request body")
            },
        };
        (sent, send)
    }

    /// Answers the next request with `status` and a JSON body; returns what was sent.
    async fn answer(&mut self, status: u16, body: Value) -> Sent {
        self.answer_raw(status, serde_json::to_vec(&body).unwrap())
            .await
    }

    /// Answers the next request with `status` and `body` as is.
    async fn answer_raw(&mut self, status: u16, body: Vec<u8>) -> Sent {
        let (sent, send) = self.next().await;
        send.send_response(response(status, body));
        sent
    }
}

fn response(status: u16, body: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap())
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap()
}

/// A `Status` body, as the API server sends with errors.
fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// A client on a mock API server, with a discovery cache that knows the kinds these tests touch.
fn setup() -> (KubeApi, ApiServer) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let gvk = GroupVersionKind::gvk;
    let api = KubeApi::with_resources(
        client,
        &[
            (
                gvk("cluster.open-cluster-management.io", "v1", "ManagedCluster"),
                "managedclusters",
                false,
            ),
            (
                gvk(
                    "proxy.open-cluster-management.io",
                    "v1alpha1",
                    "ManagedProxyConfiguration",
                ),
                "managedproxyconfigurations",
                false,
            ),
            (
                gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile"),
                "clusterprofiles",
                true,
            ),
        ],
    );
    (api, ApiServer(handle))
}

/// Runs the client call and the mock server side together, within [`LIMIT`].
async fn exchange<A, S>(client: A, server: S) -> (A::Output, S::Output)
where
    A: Future,
    S: Future,
{
    tokio::time::timeout(LIMIT, async { tokio::join!(client, server) })
        .await
        .expect("the exchange finished in time")
}

fn managed_cluster() -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": {"name": "cluster1", "labels": {"lab": "x"}},
        "spec": {"hubAcceptsClient": true}
    })
}

fn managed_proxy_configuration() -> Value {
    json!({
        "apiVersion": "proxy.open-cluster-management.io/v1alpha1",
        "kind": "ManagedProxyConfiguration",
        "metadata": {"name": "cluster-proxy"},
        "spec": {"proxyAgent": {"image": "x", "additionalValues": {"a": "b"}}}
    })
}

fn assert_server_side_apply(sent: &Sent) {
    assert_eq!(sent.method, http::Method::PATCH);
    assert_eq!(
        sent.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(sent.q("fieldManager"), Some("ocm-lab"));
    assert_eq!(sent.q("force"), Some("true"));
    assert_eq!(sent.q("fieldValidation"), Some("Strict"));
}

#[tokio::test]
async fn apply_cluster_scoped_custom_resource_is_a_forced_strict_server_side_apply() {
    let (api, mut server) = setup();
    let obj = managed_cluster();
    let (res, sent) = exchange(api.apply(&obj), server.answer(200, obj.clone())).await;
    res.unwrap();
    assert_server_side_apply(&sent);
    assert_eq!(
        sent.path,
        "/apis/cluster.open-cluster-management.io/v1/managedclusters/cluster1"
    );
    assert_eq!(sent.body, obj);
}

#[tokio::test]
async fn apply_namespaced_custom_resource_uses_its_namespace() {
    let (api, mut server) = setup();
    let obj = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {"name": "cluster1", "namespace": "cluster-inventory"},
        "spec": {"displayName": "cluster1"}
    });
    let (res, sent) = exchange(api.apply(&obj), server.answer(201, obj.clone())).await;
    res.unwrap();
    assert_server_side_apply(&sent);
    assert_eq!(
        sent.path,
        "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/cluster-inventory/clusterprofiles/cluster1"
    );
}

#[tokio::test]
async fn apply_of_a_namespaced_object_without_namespace_uses_the_context_namespace() {
    let (api, mut server) = setup();
    let obj = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "ClusterProfile",
        "metadata": {"name": "cluster1"},
    });
    let (res, sent) = exchange(api.apply(&obj), server.answer(201, obj.clone())).await;
    res.unwrap();
    assert_eq!(
        sent.path,
        "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/default/clusterprofiles/cluster1"
    );
}

#[tokio::test]
async fn apply_of_a_kind_discovery_does_not_know_looks_its_group_version_up_again() {
    let (api, mut server) = setup();
    let obj = json!({
        "apiVersion": "about.k8s.io/v1alpha1",
        "kind": "ClusterProperty",
        "metadata": {"name": "region"},
        "spec": {"value": "eu-west-1"}
    });
    let server_side = async {
        // The kind is missing from the cache: one discovery request for its group version.
        let discovery = server
            .answer(
                200,
                json!({
                    "kind": "APIResourceList",
                    "apiVersion": "v1",
                    "groupVersion": "about.k8s.io/v1alpha1",
                    "resources": [{
                        "name": "clusterproperties", "singularName": "clusterproperty",
                        "namespaced": false, "kind": "ClusterProperty",
                        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]
                    }]
                }),
            )
            .await;
        let apply = server.answer(201, obj.clone()).await;
        (discovery, apply)
    };
    let (res, (discovery, apply)) = exchange(api.apply(&obj), server_side).await;
    res.unwrap();
    assert_eq!(discovery.method, http::Method::GET);
    assert_eq!(discovery.path, "/apis/about.k8s.io/v1alpha1");
    assert_server_side_apply(&apply);
    assert_eq!(
        apply.path,
        "/apis/about.k8s.io/v1alpha1/clusterproperties/region"
    );
}

#[tokio::test]
async fn apply_of_a_kind_the_server_does_not_serve_is_permanent() {
    let (api, mut server) = setup();
    let obj = json!({
        "apiVersion": "about.k8s.io/v1alpha1",
        "kind": "ClusterProperty",
        "metadata": {"name": "region"},
    });
    // What an API server answers for a group version it does not serve.
    let (res, sent) = exchange(
        api.apply(&obj),
        server.answer_raw(404, b"404 page not found\n".to_vec()),
    )
    .await;
    assert_eq!(sent.path, "/apis/about.k8s.io/v1alpha1");
    let e = res.unwrap_err();
    assert!(!e.is_transient());
    assert_eq!(
        e.to_string(),
        "no matches for kind \"ClusterProperty\" in version \"about.k8s.io/v1alpha1\""
    );
    assert!(e.help().unwrap().contains("apply its CRD first"));
}

/// The response the real API server (v1.36.2) gave to a strict SSA with a field the CRD lacks: `../shared`
/// has the recording; without it (`lab/build.rs`, unless `OCM_LAB_REQUIRE_FIXTURES=1`) a verbatim copy of its body.
fn recorded_ssa_500() -> (u16, Vec<u8>) {
    const INLINE: &str = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"failed to create typed patch object (/cluster-proxy; proxy.open-cluster-management.io/v1alpha1, Kind=ManagedProxyConfiguration): .spec.proxyAgent.additionalValues: field not declared in schema","code":500}"#;
    if cfg!(ocm_lab_tests_no_fixtures) {
        return (500, INLINE.as_bytes().to_vec());
    }
    let dir = crate::common::fixtures();
    let raw = std::fs::read_to_string(
        dir.join("recorded/6-ssa-field-validation/01-ssa-strict.http-response.txt"),
    )
    .expect("the recorded response");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .expect("headers, blank line, body");
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    assert_eq!(body.trim(), INLINE, "the inline copy matches the recording");
    (code, body.as_bytes().to_vec())
}

#[tokio::test]
async fn recorded_ssa_500_for_an_undeclared_field_is_permanent_and_names_the_field() {
    let (code, body) = recorded_ssa_500();
    assert_eq!(code, 500);
    let (api, mut server) = setup();
    let obj = managed_proxy_configuration();
    let (res, sent) = exchange(api.apply(&obj), server.answer_raw(code, body)).await;
    assert_server_side_apply(&sent);
    assert_eq!(
        sent.path,
        "/apis/proxy.open-cluster-management.io/v1alpha1/managedproxyconfigurations/cluster-proxy"
    );
    let e = res.unwrap_err();
    assert!(
        !e.is_transient(),
        "a schema rejection is not retried: {e:?}"
    );
    assert!(
        e.to_string()
            .starts_with("field `.spec.proxyAgent.additionalValues` is not declared in the schema"),
        "{}",
        e.to_string()
    );
    assert!(e.help().unwrap().contains("charts-patches"));
}

#[tokio::test]
async fn conflict_and_unavailable_are_transient() {
    for (code, reason) in [(409, "Conflict"), (503, "ServiceUnavailable")] {
        let (api, mut server) = setup();
        let obj = managed_cluster();
        let (res, _) = exchange(
            api.apply(&obj),
            server.answer(code, status(code, reason, "try again later")),
        )
        .await;
        let e = res.unwrap_err();
        assert!(e.is_transient(), "{code}: {e:?}");
        assert!(
            e.to_string().contains("try again later"),
            "{}",
            e.to_string()
        );
    }
}

#[tokio::test]
async fn other_client_errors_are_permanent_with_the_servers_message() {
    let (api, mut server) = setup();
    let msg = "ManagedCluster.cluster.open-cluster-management.io \"cluster1\" is invalid: spec: Required value";
    let (res, _) = exchange(
        api.apply(&managed_cluster()),
        server.answer(422, status(422, "Invalid", msg)),
    )
    .await;
    let e = res.unwrap_err();
    assert!(!e.is_transient());
    assert_eq!(e.to_string(), format!("rejected (HTTP 422): {msg}"));
}

#[tokio::test]
async fn approve_csr_puts_the_approved_condition_to_the_approval_subresource() {
    let (api, mut server) = setup();
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "cluster1-abcde", "resourceVersion": "7",
                     "labels": {"open-cluster-management.io/cluster-name": "cluster1"}},
        "spec": {"request": "UkVEQUNURUQ=", "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["client auth"]},
        "status": {}
    });
    let server_side = async {
        let get = server.answer(200, csr.clone()).await;
        let put = server.answer(200, csr.clone()).await;
        (get, put)
    };
    let (res, (get, put)) = exchange(
        api.approve_csr("cluster1-abcde", "ocm-lab accept"),
        server_side,
    )
    .await;
    res.unwrap();
    assert_eq!(get.method, http::Method::GET);
    assert_eq!(
        get.path,
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/cluster1-abcde"
    );
    assert_eq!(put.method, http::Method::PUT);
    assert_eq!(
        put.path,
        "/apis/certificates.k8s.io/v1/certificatesigningrequests/cluster1-abcde/approval"
    );
    assert_eq!(
        put.body["status"]["conditions"],
        json!([{"type": "Approved", "status": "True", "reason": "ocm-lab accept",
                "message": "This CSR was approved by ocm-lab."}])
    );
    // The PUT carries the object it read (resourceVersion included), so a concurrent change is a 409.
    assert_eq!(put.body["metadata"]["resourceVersion"], "7");
}

#[tokio::test]
async fn approve_csr_of_an_approved_csr_changes_nothing() {
    let (api, mut server) = setup();
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": "c"},
        "spec": {"request": "UkVEQUNURUQ=", "signerName": "kubernetes.io/kube-apiserver-client"},
        "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "r"}]}
    });
    let (res, get) = exchange(api.approve_csr("c", "r"), server.answer(200, csr)).await;
    res.unwrap();
    assert_eq!(get.method, http::Method::GET);
}

#[tokio::test]
async fn merge_patch_sends_a_json_merge_patch() {
    let (api, mut server) = setup();
    let r = ObjectRef::new(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "cluster1",
    );
    let patch = json!({"spec": {"hubAcceptsClient": true}});
    let (res, sent) = exchange(
        api.merge_patch(&r, &patch),
        server.answer(200, managed_cluster()),
    )
    .await;
    res.unwrap();
    assert_eq!(sent.method, http::Method::PATCH);
    assert_eq!(
        sent.content_type.as_deref(),
        Some("application/merge-patch+json")
    );
    assert_eq!(
        sent.path,
        "/apis/cluster.open-cluster-management.io/v1/managedclusters/cluster1"
    );
    assert_eq!(sent.body, json!({"spec": {"hubAcceptsClient": true}}));
}

#[tokio::test]
async fn token_request_posts_to_the_token_subresource_and_keeps_the_token_secret() {
    let (api, mut server) = setup();
    let token = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJl";
    // The shape of fixtures/recorded/7-tokenrequest-cluster-info/tokenrequest.http.json.
    let resp = json!({
        "kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": "agent-registration-bootstrap", "namespace": "open-cluster-management",
                     "creationTimestamp": "2026-11-22T03:20:33Z"},
        "spec": {"audiences": ["https://kubernetes.default.svc.cluster.local"],
                 "expirationSeconds": 3600, "boundObjectRef": null},
        "status": {"token": token, "expirationTimestamp": "2026-11-22T04:20:33Z"}
    });
    let (res, sent) = exchange(
        api.token_request(
            "open-cluster-management",
            "agent-registration-bootstrap",
            3600,
        ),
        server.answer(201, resp),
    )
    .await;
    assert_eq!(sent.method, http::Method::POST);
    assert_eq!(
        sent.path,
        "/api/v1/namespaces/open-cluster-management/serviceaccounts/agent-registration-bootstrap/token"
    );
    assert_eq!(sent.body["kind"], "TokenRequest");
    assert_eq!(sent.body["apiVersion"], "authentication.k8s.io/v1");
    assert_eq!(sent.body["spec"]["expirationSeconds"], 3600);
    assert!(!format!("{res:?}").contains(token), "{res:?}");
    assert_eq!(res.unwrap().expose(), token);
}

#[tokio::test]
async fn get_of_a_missing_object_is_none_and_delete_of_one_is_false() {
    let (api, mut server) = setup();
    let r = ObjectRef::new(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "gone",
    );
    let nf = status(
        404,
        "NotFound",
        "managedclusters.cluster.open-cluster-management.io \"gone\" not found",
    );
    let (res, sent) = exchange(api.get(&r), server.answer(404, nf.clone())).await;
    assert_eq!(res.unwrap(), None);
    assert_eq!(sent.method, http::Method::GET);
    let (res, sent) = exchange(api.delete(&r), server.answer(404, nf)).await;
    assert!(!res.unwrap());
    assert_eq!(sent.method, http::Method::DELETE);
    assert_eq!(
        sent.path,
        "/apis/cluster.open-cluster-management.io/v1/managedclusters/gone"
    );
}

#[tokio::test]
async fn list_sends_the_label_selector_and_fills_in_apiversion_and_kind() {
    let (api, mut server) = setup();
    let list = json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfileList",
        "metadata": {"resourceVersion": "9"},
        "items": [{"metadata": {"name": "cluster1", "namespace": "cluster-inventory"}}]
    });
    let (res, sent) = exchange(
        api.list(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            Some("x-k8s.io/cluster-manager=ocm"),
        ),
        server.answer(200, list),
    )
    .await;
    assert_eq!(
        sent.path,
        "/apis/multicluster.x-k8s.io/v1alpha1/namespaces/cluster-inventory/clusterprofiles"
    );
    assert_eq!(
        sent.q("labelSelector"),
        Some("x-k8s.io/cluster-manager=ocm")
    );
    let items = res.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        ObjectRef::of(&items[0]).unwrap(),
        ObjectRef::new(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            "cluster1"
        )
    );
}

#[tokio::test]
async fn list_metadata_asks_for_partial_object_metadata_and_keeps_only_metadata() {
    let (api, mut server) = setup();
    // What an API server answers a PartialObjectMetadataList request with: metadata only.
    let list = json!({
        "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
        "metadata": {"resourceVersion": "12"},
        "items": [{"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                   "metadata": {"name": "cluster1", "namespace": "cluster-inventory",
                                "labels": {"ocm-lab.open-cluster-management.io/lab": "ocm-lab"},
                                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                                                     "name": "o", "uid": "u1"}]}}]
    });
    let (res, sent) = exchange(
        api.list_metadata(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            None,
            Some("ocm-lab.open-cluster-management.io/lab=ocm-lab"),
        ),
        server.answer(200, list),
    )
    .await;
    assert_eq!(
        sent.path,
        "/apis/multicluster.x-k8s.io/v1alpha1/clusterprofiles"
    );
    assert_eq!(
        sent.q("labelSelector"),
        Some("ocm-lab.open-cluster-management.io/lab=ocm-lab")
    );
    let accept = sent.accept.unwrap_or_default();
    assert!(
        accept.contains("as=PartialObjectMetadataList"),
        "the list asks for metadata only: {accept}"
    );
    let items = res.unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(
        ObjectRef::of(&items[0]).unwrap(),
        ObjectRef::new(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            "cluster1"
        )
    );
    assert_eq!(items[0]["metadata"]["ownerReferences"][0]["uid"], "u1");
    assert_eq!(
        items[0].as_object().unwrap().len(),
        3,
        "apiVersion, kind and metadata only: {}",
        items[0]
    );
}

fn cluster1(rv: &str, available: Option<&str>) -> Value {
    let mut o = managed_cluster();
    o["metadata"]["resourceVersion"] = json!(rv);
    if let Some(s) = available {
        o["status"] = json!({"conditions": [{
            "type": "ManagedClusterConditionAvailable", "status": s,
            "reason": "ManagedClusterAvailable", "message": "", "lastTransitionTime": "2026-11-22T03:15:23Z"
        }]});
    }
    o
}

fn object_list(items: Vec<Value>, rv: &str) -> Value {
    json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedClusterList",
           "metadata": {"resourceVersion": rv}, "items": items})
}

/// Newline-delimited watch events, as a watch response body carries them.
fn watch_events(events: &[(&str, Value)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (kind, obj) in events {
        serde_json::to_writer(&mut out, &json!({"type": kind, "object": obj})).unwrap();
        out.push(b'\n');
    }
    out
}

fn assert_watch_of_cluster1(sent: &Sent) {
    assert_eq!(sent.method, http::Method::GET);
    assert_eq!(
        sent.path,
        "/apis/cluster.open-cluster-management.io/v1/managedclusters"
    );
    assert_eq!(sent.q("fieldSelector"), Some("metadata.name=cluster1"));
}

#[tokio::test]
async fn wait_resolves_when_a_watch_event_meets_the_condition() {
    let (api, mut server) = setup();
    let r = ObjectRef::new(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "cluster1",
    );
    let cond = Condition::status_true("ManagedClusterConditionAvailable");
    let server_side = async {
        // The initial list: the object does not exist yet.
        let list = server.answer(200, object_list(vec![], "1")).await;
        // The watch: created without the condition, then it becomes Available.
        let body = watch_events(&[
            ("ADDED", cluster1("2", None)),
            ("MODIFIED", cluster1("3", Some("True"))),
        ]);
        let watch = server.answer_raw(200, body).await;
        (list, watch)
    };
    let (res, (list, watch)) =
        exchange(api.wait(&r, &cond, Duration::from_secs(5)), server_side).await;
    assert_watch_of_cluster1(&list);
    assert_watch_of_cluster1(&watch);
    assert_eq!(watch.q("watch"), Some("true"));
    assert_eq!(watch.q("resourceVersion"), Some("1"));
    let obj = res.unwrap();
    assert_eq!(obj["metadata"]["resourceVersion"], "3");
}

#[tokio::test]
async fn wait_timeout_reports_the_last_object_seen() {
    let (api, mut server) = setup();
    let r = ObjectRef::new(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        "cluster1",
    );
    let cond = Condition::status_true("ManagedClusterConditionAvailable");
    let server_side = async {
        server
            .answer(200, object_list(vec![cluster1("2", None)], "2"))
            .await;
        let body = watch_events(&[("MODIFIED", cluster1("3", Some("False")))]);
        server.answer_raw(200, body).await;
        // The watch body ended, so the watcher watches again from resourceVersion 3: leave that request
        // unanswered until the wait has timed out.
        let (rewatch, pending) = server.next().await;
        assert_eq!(rewatch.q("resourceVersion"), Some("3"));
        pending
    };
    let (res, _pending) =
        exchange(api.wait(&r, &cond, Duration::from_millis(500)), server_side).await;
    match res {
        Err(WaitError::Timeout {
            object,
            condition,
            after,
            last: Some(last),
        }) => {
            assert_eq!(object, r);
            assert_eq!(condition, "condition ManagedClusterConditionAvailable=True");
            assert_eq!(after, Duration::from_millis(500));
            assert_eq!(last["metadata"]["resourceVersion"], "3");
            assert_eq!(last["status"]["conditions"][0]["status"], "False");
        }
        other => panic!("expected a timeout with the last object, got {other:?}"),
    }
}

/// What `GET /apis/<group>/<version>` answers for a group version serving `ClusterProperty`.
fn cluster_property_resources() -> Value {
    json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "about.k8s.io/v1alpha1",
        "resources": [{"name": "clusterproperties", "singularName": "clusterproperty", "namespaced": false,
                       "kind": "ClusterProperty", "verbs": ["get", "list", "watch", "patch"]}]
    })
}

#[tokio::test]
async fn served_runs_aggregated_discovery_once_then_looks_misses_up_by_group_version() {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let api = KubeApi::new(kube::Client::new(service, "default"));
    let mut server = ApiServer(handle);
    let resource = |plural: &str, group: &str, kind: &str, scope: &str| {
        json!({"resource": plural, "scope": scope, "verbs": ["get", "list"],
               "responseKind": {"group": group, "version": "v1", "kind": kind}})
    };
    let apis = json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
        "items": [{"metadata": {"name": "cluster.open-cluster-management.io"}, "versions": [{
            "version": "v1", "freshness": "Current",
            "resources": [resource("managedclusters", "cluster.open-cluster-management.io", "ManagedCluster", "Cluster")]
        }]}]
    });
    let core = json!({
        "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
        "items": [{"metadata": {}, "versions": [{
            "version": "v1", "freshness": "Current",
            "resources": [resource("namespaces", "", "Namespace", "Cluster")]
        }]}]
    });
    let server_side = async {
        let (apis_req, send) = server.0.next_request().await.unwrap();
        let accept = apis_req.headers()[http::header::ACCEPT]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(apis_req.uri().path(), "/apis");
        send.send_response(response(200, serde_json::to_vec(&apis).unwrap()));
        let sent = server.answer(200, core).await;
        assert_eq!(sent.path, "/api");
        accept
    };
    let (served, accept) = exchange(
        api.served("cluster.open-cluster-management.io/v1", "ManagedCluster"),
        server_side,
    )
    .await;
    assert!(served.unwrap());
    assert!(accept.contains("as=APIGroupDiscoveryList"), "{accept}");
    // Answered from the cache, without a request (which nobody would answer).
    let cached = tokio::time::timeout(Duration::from_secs(1), api.served("v1", "Namespace"));
    assert!(cached.await.expect("answered from the cache").unwrap());
    // A miss: one request for its group version, which is not served.
    let (served, sent) = exchange(
        api.served("about.k8s.io/v1alpha1", "ClusterProperty"),
        server.answer_raw(404, b"404 page not found\n".to_vec()),
    )
    .await;
    assert!(!served.unwrap());
    assert_eq!(sent.path, "/apis/about.k8s.io/v1alpha1");
}

fn cluster_property_crd(rv: &str, established: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clusterproperties.about.k8s.io", "resourceVersion": rv},
        "spec": {"group": "about.k8s.io", "scope": "Cluster",
                 "names": {"kind": "ClusterProperty", "plural": "clusterproperties", "listKind": "ClusterPropertyList"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true}]},
        "status": {"conditions": [
            {"type": "NamesAccepted", "status": "True"},
            {"type": "Established", "status": if established { "True" } else { "False" }}
        ]}
    })
}

#[tokio::test]
async fn wait_served_watches_the_crds_until_the_kinds_crd_is_established() {
    let (api, mut server) = setup();
    let server_side = async {
        // Not served yet.
        let miss = server
            .answer_raw(404, b"404 page not found\n".to_vec())
            .await;
        // The CRD watch: list, then watch with the CRD created, then Established.
        let list = server
            .answer(
                200,
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinitionList",
                       "metadata": {"resourceVersion": "1"}, "items": []}),
            )
            .await;
        let watch = server
            .answer_raw(
                200,
                watch_events(&[
                    ("ADDED", cluster_property_crd("2", false)),
                    ("MODIFIED", cluster_property_crd("3", true)),
                ]),
            )
            .await;
        // Established: discovery is asked again.
        let hit = server.answer(200, cluster_property_resources()).await;
        (miss, list, watch, hit)
    };
    let (res, (miss, list, watch, hit)) = exchange(
        api.wait_served(
            "about.k8s.io/v1alpha1",
            "ClusterProperty",
            Duration::from_secs(5),
        ),
        server_side,
    )
    .await;
    res.unwrap();
    assert_eq!(miss.path, "/apis/about.k8s.io/v1alpha1");
    assert_eq!(
        list.path,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    );
    assert_eq!(watch.q("watch"), Some("true"));
    assert_eq!(hit.path, "/apis/about.k8s.io/v1alpha1");
    // Now served from the cache, without a request.
    let cached = tokio::time::timeout(
        Duration::from_secs(1),
        api.served("about.k8s.io/v1alpha1", "ClusterProperty"),
    );
    assert!(cached.await.expect("answered from the cache").unwrap());
}

/// Discovery lagging an Established CRD by longer than a few retries (here about 20 s, ten misses) must
/// not leave the wait on the CRD watch, whose next event may be its relist minutes later: discovery is
/// asked until it serves the kind, within the caller's deadline.
#[tokio::test(start_paused = true)]
async fn wait_served_keeps_asking_discovery_while_it_lags_an_established_crd() {
    let (api, mut server) = setup();
    let server_side = async {
        server
            .answer_raw(404, b"404 page not found\n".to_vec())
            .await;
        server
            .answer(
                200,
                json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinitionList",
                       "metadata": {"resourceVersion": "1"}, "items": [cluster_property_crd("1", true)]}),
            )
            .await;
        // Established from the start; discovery does not serve it for ten more asks.
        let mut after = Vec::new();
        for _ in 0..10 {
            after.push(
                server
                    .answer_raw(404, b"404 page not found\n".to_vec())
                    .await
                    .path,
            );
        }
        after.push(server.answer(200, cluster_property_resources()).await.path);
        after
    };
    // The clock is paused: the backoff's sleeps (about 11 s in all) pass at once.
    let (res, after) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(
            api.wait_served(
                "about.k8s.io/v1alpha1",
                "ClusterProperty",
                Duration::from_secs(60),
            ),
            server_side
        )
    })
    .await
    .expect("the exchange finished in time");
    assert!(
        after.iter().all(|p| p == "/apis/about.k8s.io/v1alpha1"),
        "after the CRD was Established only discovery was asked: {after:?}"
    );
    res.unwrap();
}
