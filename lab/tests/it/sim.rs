//! The simulated lab, driven through the backend traits only, as the engine drives it.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ocm_lab::backend::{
    Backends, ClusterApi, Condition, CreateCluster, ObjectRef, WaitError, condition_status,
};
use ocm_lab::charts::ChartPlan;
use ocm_lab::patch::PatchSet;
use ocm_lab::step::ActionError;
use ocm_lab::topology::catalog::Chart;
use ocm_lab::topology::{Cluster, Provider, Role};
use ocm_lab_sim::{Behaviour, Fault, SimLab};
use serde_json::{Value, json};
use tokio::time::Instant;

const T: Duration = Duration::from_secs(30);
const CLUSTERSET: &str = "cluster.open-cluster-management.io/clusterset";

// ---- a compact builder: what the engine's actions do, through the traits ---------------------------

fn topo(name: &str) -> Cluster {
    Cluster {
        name: name.to_owned(),
        role: Role::Spoke,
        provider: Provider::Kind,
        context: format!("kind-{name}"),
        internal_endpoint: Some(format!("https://{name}-control-plane:6443")),
        adopt: false,
    }
}

fn r(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, ns, name)
}

fn mc(name: &str) -> ObjectRef {
    r(
        "cluster.open-cluster-management.io/v1",
        "ManagedCluster",
        None,
        name,
    )
}

fn klusterlet() -> ObjectRef {
    r(
        "operator.open-cluster-management.io/v1",
        "Klusterlet",
        None,
        "klusterlet",
    )
}

fn profile(ns: &str, name: &str) -> ObjectRef {
    r(
        "multicluster.x-k8s.io/v1alpha1",
        "ClusterProfile",
        Some(ns),
        name,
    )
}

fn secret(ns: &str, name: &str) -> ObjectRef {
    r("v1", "Secret", Some(ns), name)
}

fn cond<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    o["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
}

fn label<'a>(o: &'a Value, key: &str) -> Option<&'a str> {
    o["metadata"]["labels"][key].as_str()
}

fn claim_names(o: &Value) -> Vec<String> {
    o["status"]["clusterClaims"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn property(name: &str, value: &str) -> Value {
    json!({"apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty", "metadata": {"name": name}, "spec": {"value": value}})
}

fn gates(list: &[&str]) -> Value {
    json!(
        list.iter()
            .map(|g| json!({"feature": g, "mode": "Enable"}))
            .collect::<Vec<_>>()
    )
}

struct Sim {
    lab: Arc<SimLab>,
    b: Backends,
    dir: tempfile::TempDir,
}

impl Sim {
    fn new() -> Self {
        let lab = SimLab::recording();
        // No post-renderer patches: `install` applies them itself when asked, to show both outcomes.
        let b = lab.backends_with_patches(PatchSet::default());
        Sim {
            lab,
            b,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// `kind create cluster` with its own kubeconfig, then a client for it.
    async fn cluster(&self, name: &str) -> Arc<dyn ClusterApi> {
        let kubeconfig = self.dir.path().join(format!("{name}.kubeconfig"));
        self.b
            .kind
            .create(&CreateCluster {
                name: name.to_owned(),
                image: "kindest/node:v1.36.1".to_owned(),
                kubeconfig: kubeconfig.clone(),
                registries: Default::default(),
            })
            .await
            .unwrap();
        self.b.kube.connect(&topo(name), &kubeconfig).await.unwrap()
    }

    /// `chart.install`: helm template, our chart patches when `patched`, the release namespace, CRDs
    /// first and waited for, then every object once its kind is served.
    #[expect(
        clippy::too_many_arguments,
        reason = "mirrors the chart.install step's inputs one to one"
    )]
    async fn install(
        &self,
        api: &dyn ClusterApi,
        cluster: &str,
        chart: Chart,
        version: &str,
        ns: &str,
        values: Value,
        patched: bool,
    ) -> Result<(), ActionError> {
        let plan = ChartPlan {
            cluster: cluster.to_owned(),
            release: chart.name().to_owned(),
            namespace: ns.to_owned(),
            repo: "https://open-cluster-management.io/helm-charts".to_owned(),
            chart,
            version: version.to_owned(),
            values: values.clone(),
            runtime_values: Vec::new(),
            patches: Vec::new(),
        };
        let mut rendered = self.b.helm.template(&plan, &values).await?;
        if patched {
            let set = PatchSet::embedded().unwrap();
            let patches = set.for_chart(chart.name(), &semver::Version::parse(version).unwrap());
            ocm_lab::patch::apply(&patches, &mut rendered.objects).unwrap();
        }
        api.apply(&namespace(ns)).await?;
        for crd in &rendered.crds {
            api.apply(crd).await?;
        }
        for o in rendered.crds.iter().chain(&rendered.objects) {
            let (av, kind) = kind_of(o);
            api.wait_served(&av, &kind, T)
                .await
                .map_err(|e| ActionError::permanent(e.to_string()))?;
        }
        for o in &rendered.objects {
            api.apply(o).await?;
        }
        Ok(())
    }

    /// A hub: cluster-manager 1.3.1 with the bootstrap ServiceAccount and these registration gates.
    async fn hub(&self, name: &str, hub_gates: &[&str]) -> Arc<dyn ClusterApi> {
        let api = self.cluster(name).await;
        let values = json!({
            "createBootstrapSA": true,
            "clusterManager": {"registrationConfiguration": {"featureGates": gates(hub_gates)}},
        });
        self.install(
            &*api,
            name,
            Chart::ClusterManager,
            "1.3.1",
            "open-cluster-management",
            values,
            false,
        )
        .await
        .unwrap();
        api.wait(
            &r(
                "operator.open-cluster-management.io/v1",
                "ClusterManager",
                None,
                "cluster-manager",
            ),
            &Condition::status_true("Applied"),
            T,
        )
        .await
        .unwrap();
        api
    }

    /// `ocm.join`: a TokenRequest on the hub, the bootstrap kubeconfig to the hub's internal endpoint,
    /// the klusterlet chart. `server`/`token` override the kubeconfig's (for broken joins).
    #[expect(
        clippy::too_many_arguments,
        reason = "each broken-join test overrides a different input"
    )]
    async fn join_with(
        &self,
        hub: &dyn ClusterApi,
        hub_name: &str,
        spoke: &dyn ClusterApi,
        spoke_name: &str,
        spoke_gates: &[&str],
        server: Option<&str>,
        token: Option<&str>,
    ) {
        let minted = hub
            .token_request(
                "open-cluster-management",
                "agent-registration-bootstrap",
                3600,
            )
            .await
            .unwrap();
        let server = server.map_or_else(
            || format!("https://{hub_name}-control-plane:6443"),
            str::to_owned,
        );
        let token = token.unwrap_or(minted.expose());
        // The hub's own CA, from its cluster-info, as the join reads it (each simulated cluster has one).
        let info = hub
            .get(&ObjectRef::new(
                "v1",
                "ConfigMap",
                Some("kube-public"),
                "cluster-info",
            ))
            .await
            .unwrap()
            .expect("the hub's cluster-info");
        let info: serde_json::Value =
            serde_saphyr::from_str(info["data"]["kubeconfig"].as_str().unwrap()).unwrap();
        let ca = info["clusters"][0]["cluster"]["certificate-authority-data"]
            .as_str()
            .unwrap()
            .to_owned();
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: bootstrap\n  user:\n    token: {token}\ncontexts:\n- name: bootstrap\n  context:\n    cluster: hub\n    user: bootstrap\n    namespace: default\ncurrent-context: bootstrap\n"
        );
        let values = json!({
            "bootstrapHubKubeConfig": kubeconfig,
            "klusterlet": {
                "mode": "Default",
                "name": "klusterlet",
                "clusterName": spoke_name,
                "namespace": "open-cluster-management-agent",
                "externalServerURLs": [{"url": format!("https://{spoke_name}-control-plane:6443")}],
                "registrationConfiguration": {"featureGates": gates(spoke_gates)},
            },
        });
        self.install(
            spoke,
            spoke_name,
            Chart::Klusterlet,
            "1.3.1",
            "open-cluster-management",
            values,
            false,
        )
        .await
        .unwrap();
    }

    async fn join(
        &self,
        hub: &dyn ClusterApi,
        hub_name: &str,
        spoke: &dyn ClusterApi,
        spoke_name: &str,
        spoke_gates: &[&str],
    ) {
        self.join_with(hub, hub_name, spoke, spoke_name, spoke_gates, None, None)
            .await;
    }

    /// `ocm.accept`: approve the cluster's CSRs, set hubAcceptsClient, wait for Joined.
    async fn accept(&self, hub: &dyn ClusterApi, name: &str) -> Value {
        hub.wait(&mc(name), &Condition::exists(), T).await.unwrap();
        let csrs = hub
            .list(
                "certificates.k8s.io/v1",
                "CertificateSigningRequest",
                None,
                Some(&format!("open-cluster-management.io/cluster-name={name}")),
            )
            .await
            .unwrap();
        for csr in &csrs {
            hub.approve_csr(csr["metadata"]["name"].as_str().unwrap(), "ocm-lab")
                .await
                .unwrap();
        }
        hub.merge_patch(&mc(name), &json!({"spec": {"hubAcceptsClient": true}}))
            .await
            .unwrap();
        hub.wait(
            &mc(name),
            &Condition::status_true("ManagedClusterJoined"),
            T,
        )
        .await
        .unwrap()
    }

    /// A hub (with the ClusterProfile gate) and one joined spoke with the ClusterProperty gate.
    async fn hub_and_spoke(&self) -> (Arc<dyn ClusterApi>, Arc<dyn ClusterApi>) {
        let hub = self
            .hub("hub", &["DefaultClusterSet", "ClusterProfile"])
            .await;
        let spoke = self.cluster("cluster1").await;
        self.join(&*hub, "hub", &*spoke, "cluster1", &["ClusterProperty"])
            .await;
        self.accept(&*hub, "cluster1").await;
        (hub, spoke)
    }

    /// The lab's set `fleet` (exclusive) with cluster1 in it, bound in each namespace.
    async fn fleet(&self, hub: &dyn ClusterApi, bind_to: &[&str]) {
        hub.apply(&json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": {"name": "fleet"},
            "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}},
        }))
        .await
        .unwrap();
        hub.apply(&json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": {"name": "cluster1", "labels": {CLUSTERSET: "fleet"}},
        }))
        .await
        .unwrap();
        for ns in bind_to {
            hub.apply(&namespace(ns)).await.unwrap();
            hub.apply(&binding(ns, "fleet")).await.unwrap();
        }
    }
}

fn kind_of(o: &Value) -> (String, String) {
    (
        o["apiVersion"].as_str().unwrap().to_owned(),
        o["kind"].as_str().unwrap().to_owned(),
    )
}

fn binding(ns: &str, set: &str) -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": {"name": set, "namespace": ns},
        "spec": {"clusterSet": set},
    })
}

// ---- kind, Docker and the API server --------------------------------------------------------------

#[tokio::test]
async fn kind_clusters_are_containers_on_the_kind_network() {
    let s = Sim::new();
    assert!(s.b.docker.ping().await.unwrap().contains("simulated"));
    assert!(s.b.docker.ensure_network("kind").await.unwrap());
    assert!(!s.b.docker.ensure_network("kind").await.unwrap());
    let api = s.cluster("hub").await;
    assert_eq!(api.version().await.unwrap(), "v1.36.1");
    let nodes = s.b.docker.node_containers("hub").await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].name, "hub-control-plane");
    assert_eq!(nodes[0].role.as_str(), "control-plane");
    assert!(nodes[0].running);
    assert!(nodes[0].ip.as_deref().unwrap().starts_with("172.18.0."));

    // The same name again is what kind refuses.
    let again =
        s.b.kind
            .create(&CreateCluster {
                name: "hub".into(),
                image: "kindest/node:v1.36.1".into(),
                kubeconfig: s.dir.path().join("again"),
                registries: Default::default(),
            })
            .await
            .unwrap_err();
    assert!(
        again
            .to_string()
            .contains("node(s) already exist for a cluster with the name \"hub\""),
        "{again}"
    );

    // Kubeconfigs hold credentials: 0600.
    let path = s.dir.path().join("export/hub.kubeconfig");
    s.b.kind.export_kubeconfig("hub", &path).await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // kubeadm's cluster-info names the internal endpoint (kubernetes-sigs/kind v0.32.0
    // `pkg/cluster/internal/providers/docker/provider.go`, `GetAPIServerInternalEndpoint`).
    let info = api
        .get(&r("v1", "ConfigMap", Some("kube-public"), "cluster-info"))
        .await
        .unwrap()
        .unwrap();
    assert!(
        info["data"]["kubeconfig"]
            .as_str()
            .unwrap()
            .contains("server: https://hub-control-plane:6443")
    );

    // A cluster someone else made shows up in `kind get clusters`; the lab does not own it.
    s.lab.with_world(|w| w.add_foreign_cluster("theirs"));
    assert_eq!(s.b.kind.list().await.unwrap(), ["hub", "theirs"]);

    // A stopped cluster is unreachable; a deleted one is gone.
    s.lab.with_world(|w| w.set_running("hub", false));
    let e = api.get(&mc("x")).await.unwrap_err();
    assert!(
        e.is_transient() && e.to_string().contains("connection refused"),
        "{e}"
    );
    s.b.kind.delete("hub").await.unwrap();
    assert_eq!(s.b.kind.list().await.unwrap(), ["theirs"]);
    let e = s.b.kube.connect(&topo("hub"), &path).await.err().unwrap();
    assert!(e.to_string().contains("connection refused"), "{e}");
}

#[tokio::test]
async fn list_metadata_gives_what_list_gives_but_metadata_only() {
    let s = Sim::new();
    let api = s.cluster("c").await;
    for ns in ["a", "b"] {
        api.apply(&namespace(ns)).await.unwrap();
        for (name, lab) in [("mine", "l1"), ("other", "l2")] {
            api.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": ns, "labels": {"lab": lab}},
                "data": {"big": "x".repeat(1000)}}))
                .await
                .unwrap();
        }
    }
    for (ns, sel) in [(None, Some("lab=l1")), (Some("b"), None), (None, None)] {
        let full = api.list("v1", "ConfigMap", ns, sel).await.unwrap();
        let meta = api.list_metadata("v1", "ConfigMap", ns, sel).await.unwrap();
        assert!(!meta.is_empty());
        assert_eq!(meta.len(), full.len(), "{ns:?} {sel:?}");
        for (m, f) in meta.iter().zip(&full) {
            assert_eq!(m["metadata"], f["metadata"]);
            assert_eq!(
                (&m["apiVersion"], &m["kind"]),
                (&f["apiVersion"], &f["kind"])
            );
            assert_eq!(m.as_object().unwrap().len(), 3, "metadata only: {m}");
        }
    }
    let mine = api
        .list_metadata("v1", "ConfigMap", None, Some("lab=l1"))
        .await
        .unwrap();
    let names: Vec<(&str, &str)> = mine
        .iter()
        .map(|m| {
            (
                m["metadata"]["namespace"].as_str().unwrap(),
                m["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, [("a", "mine"), ("b", "mine")]);
}

#[tokio::test]
async fn the_api_server_validates_merges_and_cascades() {
    let s = Sim::new();
    let api = s.cluster("c").await;
    // A namespaced object in a namespace that does not exist.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "nope"}, "data": {"a": "1"}});
    let e = api.apply(&cm).await.unwrap_err();
    assert!(!e.is_transient());
    assert!(
        e.to_string().contains("namespaces \"nope\" not found"),
        "{e}"
    );
    // A kind nobody serves.
    let e = api
        .apply(
            &json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no matches for kind \"Widget\" in version \"example.com/v1\""),
        "{e}"
    );
    // Server-side apply merges maps, never sets status, and removes what the same field manager applied
    // before and no longer applies (`data.a`), as a real API server does.
    api.apply(&namespace("nope")).await.unwrap();
    api.apply(&cm).await.unwrap();
    api.apply(&json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "nope", "labels": {"k": "v"}},
        "data": {"b": "2"}, "status": {"ignored": true},
    }))
    .await
    .unwrap();
    let got = api
        .get(&r("v1", "ConfigMap", Some("nope"), "x"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["data"], json!({"b": "2"}));
    assert_eq!(got["metadata"]["labels"], json!({"k": "v"}));
    assert!(got.get("status").is_none());
    assert!(got["metadata"]["uid"].is_string() && got["metadata"]["resourceVersion"].is_string());
    // Label selectors.
    let listed = api
        .list("v1", "ConfigMap", None, Some("k=v"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        api.list("v1", "ConfigMap", None, Some("k!=v"))
            .await
            .unwrap()
            .iter()
            .all(|o| o["metadata"]["name"] != "x")
    );
    assert_eq!(
        api.list("v1", "ConfigMap", Some("nope"), Some("k"))
            .await
            .unwrap()
            .len(),
        1
    );
    // Names are RFC 1123 subdomains (a `/` is rejected with 422, as a real API server does).
    let e = api
        .apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a/b", "namespace": "nope"}}))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("HTTP 422") && e.to_string().contains("RFC 1123"),
        "{e}"
    );
    // Deleting a namespace deletes what is in it; deleting what is absent says so.
    assert!(
        api.delete(&r("v1", "Namespace", None, "nope"))
            .await
            .unwrap()
    );
    assert!(
        api.get(&r("v1", "ConfigMap", Some("nope"), "x"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !api.delete(&r("v1", "Namespace", None, "nope"))
            .await
            .unwrap()
    );
    // TokenRequest needs the ServiceAccount.
    let e = api
        .token_request("default", "nobody", 3600)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("serviceaccounts \"nobody\" not found"),
        "{e}"
    );
}

// ---- one test per behaviour -----------------------------------------------------------------------

#[tokio::test]
async fn a_custom_resource_is_rejected_until_its_crd_is_established() {
    let s = Sim::new();
    let api = s.cluster("hub").await;
    let plan_values = json!({"createBootstrapSA": true});
    let plan = ChartPlan {
        cluster: "hub".into(),
        release: "cluster-manager".into(),
        namespace: "open-cluster-management".into(),
        repo: String::new(),
        chart: Chart::ClusterManager,
        version: "1.3.1".into(),
        values: plan_values.clone(),
        runtime_values: Vec::new(),
        patches: Vec::new(),
    };
    let rendered = s.b.helm.template(&plan, &plan_values).await.unwrap();
    let cm = rendered
        .objects
        .iter()
        .find(|o| o["kind"] == "ClusterManager")
        .unwrap()
        .clone();
    // Before the CRD exists.
    let e = api.apply(&cm).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("no matches for kind \"ClusterManager\""),
        "{e}"
    );
    // The CRD exists but the API server has not established it yet.
    s.lab.set_fault(
        Behaviour::CrdEstablish,
        Fault::FailAlways("names not accepted".into()),
    );
    api.apply(&rendered.crds[0]).await.unwrap();
    assert!(
        !api.served("operator.open-cluster-management.io/v1", "ClusterManager")
            .await
            .unwrap()
    );
    let e = api.apply(&cm).await.unwrap_err();
    assert!(e.to_string().contains("no matches for kind"), "{e}");
    assert!(
        s.lab.object("hub", &ObjectRef::of(&cm).unwrap()).is_none(),
        "a rejected object is not stored"
    );
    // Established: accepted.
    s.lab.clear_faults();
    api.wait_served(
        "operator.open-cluster-management.io/v1",
        "ClusterManager",
        T,
    )
    .await
    .unwrap();
    api.apply(&cm).await.unwrap();
    let crd = api
        .get(&r(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "clustermanagers.operator.open-cluster-management.io",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(condition_status(&crd, "Established"), Some("True"));
    assert_eq!(crd["spec"]["scope"], "Cluster");
}

#[tokio::test]
async fn an_undeclared_managed_proxy_configuration_field_is_a_permanent_500_until_patched() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    let values = json!({"enableServiceProxy": true, "userServer": {"enabled": true}});
    // As rendered by chart 0.10.0: server-side apply fails with HTTP 500, permanently, naming the field.
    let e = s
        .install(
            &*hub,
            "hub",
            Chart::ClusterProxy,
            "0.10.0",
            "open-cluster-management-addon",
            values.clone(),
            false,
        )
        .await
        .unwrap_err();
    assert!(!e.is_transient(), "{e}");
    assert!(e.message.contains("HTTP 500"), "{e}");
    assert!(
        e.message.contains("`.spec.proxyAgent.additionalValues`"),
        "{e}"
    );
    assert!(
        e.message.contains("failed to create typed patch object (/cluster-proxy; proxy.open-cluster-management.io/v1alpha1, Kind=ManagedProxyConfiguration): .spec.proxyAgent.additionalValues: field not declared in schema"),
        "{e}"
    );
    let mpc = r(
        "proxy.open-cluster-management.io/v1alpha1",
        "ManagedProxyConfiguration",
        None,
        "cluster-proxy",
    );
    assert!(hub.get(&mpc).await.unwrap().is_none(), "nothing stored");
    // With an entrypoint address both undeclared fields are named.
    let mut both = values.clone();
    both["proxyServer"] = json!({"entrypointAddress": "proxy.example.com"});
    let e = s
        .install(
            &*hub,
            "hub",
            Chart::ClusterProxy,
            "0.10.0",
            "open-cluster-management-addon",
            both.clone(),
            false,
        )
        .await
        .unwrap_err();
    assert!(e.message.contains("fields `.spec.proxyAgent.additionalValues`, `.spec.proxyServer.entrypoint.hostname.port`"), "{e}");
    // Our chart patch (charts-patches/cluster-proxy-0.10.yaml) is what makes it pass.
    s.install(
        &*hub,
        "hub",
        Chart::ClusterProxy,
        "0.10.0",
        "open-cluster-management-addon",
        both,
        true,
    )
    .await
    .unwrap();
    let stored = hub.get(&mpc).await.unwrap().unwrap();
    assert!(
        stored
            .pointer("/spec/proxyAgent/additionalValues")
            .is_none()
    );
    assert_eq!(
        stored["spec"]["proxyServer"]["entrypoint"]["hostname"],
        json!({"value": "proxy.example.com"})
    );
    // 0.11.0 renders neither field.
    let s2 = Sim::new();
    let hub2 = s2.hub("hub", &["DefaultClusterSet"]).await;
    s2.install(
        &*hub2,
        "hub",
        Chart::ClusterProxy,
        "0.11.0",
        "open-cluster-management-addon",
        values,
        false,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn the_cluster_profile_crd_comes_only_with_the_hub_gate() {
    let s = Sim::new();
    let with = s
        .hub("hub-a", &["DefaultClusterSet", "ClusterProfile"])
        .await;
    let without = s.hub("hub-b", &["DefaultClusterSet"]).await;
    assert!(
        with.served("multicluster.x-k8s.io/v1alpha1", "ClusterProfile")
            .await
            .unwrap()
    );
    assert!(
        !without
            .served("multicluster.x-k8s.io/v1alpha1", "ClusterProfile")
            .await
            .unwrap()
    );
    for api in [&with, &without] {
        assert!(
            api.served("cluster.open-cluster-management.io/v1", "ManagedCluster")
                .await
                .unwrap()
        );
        assert!(
            api.served(
                "addon.open-cluster-management.io/v1beta1",
                "ClusterManagementAddOn"
            )
            .await
            .unwrap()
        );
        // DefaultClusterSet: the hub keeps sets `default` and `global`.
        let sets = api
            .list(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                None,
                None,
            )
            .await
            .unwrap();
        let names: Vec<&str> = sets
            .iter()
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["default", "global"]);
        let hub_controller = api
            .get(&r(
                "apps/v1",
                "Deployment",
                Some("open-cluster-management-hub"),
                "cluster-manager-registration-controller",
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(condition_status(&hub_controller, "Available"), Some("True"));
    }
}

#[tokio::test]
async fn the_cluster_property_crd_comes_only_with_the_spoke_gate() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    let on = s.cluster("on").await;
    let off = s.cluster("off").await;
    s.join(&*hub, "hub", &*on, "on", &["ClusterProperty"]).await;
    s.join(&*hub, "hub", &*off, "off", &[]).await;
    assert!(
        on.served("about.k8s.io/v1alpha1", "ClusterProperty")
            .await
            .unwrap()
    );
    assert!(
        !off.served("about.k8s.io/v1alpha1", "ClusterProperty")
            .await
            .unwrap()
    );
    for api in [&on, &off] {
        assert!(
            api.served(
                "cluster.open-cluster-management.io/v1alpha1",
                "ClusterClaim"
            )
            .await
            .unwrap()
        );
    }
    let e = off.apply(&property("region", "x")).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("no matches for kind \"ClusterProperty\""),
        "{e}"
    );
    // Waiting for it says which CRD it looked for.
    let e = off
        .wait_served(
            "about.k8s.io/v1alpha1",
            "ClusterProperty",
            Duration::from_millis(50),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("ClusterProperty in about.k8s.io/v1alpha1"),
        "{e}"
    );
}

#[tokio::test]
async fn a_spoke_registers_then_joins_once_accepted() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet", "ClusterProfile"]).await;
    let spoke = s.cluster("cluster1").await;
    s.join(&*hub, "hub", &*spoke, "cluster1", &["ClusterProperty"])
        .await;

    let m = hub
        .wait(&mc("cluster1"), &Condition::exists(), T)
        .await
        .unwrap();
    assert_eq!(m["spec"]["hubAcceptsClient"], false);
    assert_eq!(
        label(&m, CLUSTERSET),
        Some("default"),
        "the hub webhook's default set label"
    );
    assert_eq!(
        m["spec"]["managedClusterClientConfigs"][0]["url"],
        "https://cluster1-control-plane:6443"
    );
    assert!(cond(&m, "ManagedClusterJoined").is_none());
    let csrs = hub
        .list(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            None,
            Some("open-cluster-management.io/cluster-name=cluster1"),
        )
        .await
        .unwrap();
    assert_eq!(csrs.len(), 1);
    let csr = &csrs[0];
    let name = csr["metadata"]["name"].as_str().unwrap();
    assert!(
        name.starts_with("cluster1-") && name.len() == "cluster1-".len() + 5,
        "{name}"
    );
    assert_eq!(csr["metadata"]["generateName"], "cluster1-");
    assert_eq!(
        csr["spec"]["signerName"],
        "kubernetes.io/kube-apiserver-client"
    );
    assert_eq!(
        csr["spec"]["username"],
        "system:serviceaccount:open-cluster-management:agent-registration-bootstrap"
    );
    assert!(
        csr["spec"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:serviceaccounts:open-cluster-management"))
    );
    let k = spoke.get(&klusterlet()).await.unwrap().unwrap();
    assert_eq!(
        cond(&k, "HubConnectionDegraded").unwrap()["reason"],
        "BootstrapSecretFunctional,HubKubeConfigSecretMissing"
    );

    let m = s.accept(&*hub, "cluster1").await;
    for c in [
        "HubAcceptedManagedCluster",
        "ManagedClusterJoined",
        "ManagedClusterConditionAvailable",
    ] {
        assert_eq!(condition_status(&m, c), Some("True"), "{c}");
    }
    assert_eq!(m["status"]["version"]["kubernetes"], "v1.36.1");
    assert!(
        hub.get(&r("v1", "Namespace", None, "cluster1"))
            .await
            .unwrap()
            .is_some()
    );
    let signed = hub
        .get(&r(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            None,
            name,
        ))
        .await
        .unwrap()
        .unwrap();
    assert!(signed["status"]["certificate"].is_string());
    let k = spoke.get(&klusterlet()).await.unwrap().unwrap();
    assert_eq!(condition_status(&k, "HubConnectionDegraded"), Some("False"));
    assert_eq!(condition_status(&k, "Applied"), Some("True"));
    // Accepting again is harmless (clusteradm's is not: open-cluster-management-io/clusteradm#395).
    hub.approve_csr(name, "ocm-lab").await.unwrap();
}

#[tokio::test]
async fn a_bad_bootstrap_kubeconfig_degrades_the_klusterlet_and_registers_nothing() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    let c1 = s.cluster("cluster1").await;
    let c2 = s.cluster("cluster2").await;
    s.join_with(
        &*hub,
        "hub",
        &*c1,
        "cluster1",
        &[],
        None,
        Some("not-a-token-the-hub-issued"),
    )
    .await;
    // The host's address is not reachable from inside a kind node (open-cluster-management-io/clusteradm#292).
    s.join_with(
        &*hub,
        "hub",
        &*c2,
        "cluster2",
        &[],
        Some("https://127.0.0.1:40123"),
        None,
    )
    .await;
    let degraded = Condition::new("HubConnectionDegraded=True (BootstrapSecretError)", |o| {
        o.and_then(|o| cond(o, "HubConnectionDegraded"))
            .is_some_and(|c| c["status"] == "True" && c["reason"] == "BootstrapSecretError")
    });
    let k1 = c1.wait(&klusterlet(), &degraded, T).await.unwrap();
    assert!(
        cond(&k1, "HubConnectionDegraded").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("Unauthorized")
    );
    let k2 = c2.wait(&klusterlet(), &degraded, T).await.unwrap();
    assert!(
        cond(&k2, "HubConnectionDegraded").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1")
    );
    for name in ["cluster1", "cluster2"] {
        assert!(hub.get(&mc(name)).await.unwrap().is_none(), "{name}");
    }
    assert!(
        hub.list(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            None,
            None
        )
        .await
        .unwrap()
        .is_empty()
    );
}

#[tokio::test]
async fn claims_keep_twenty_skip_spoke_only_and_stop_at_a_value_over_1024() {
    let s = Sim::new();
    let (hub, spoke) = s.hub_and_spoke().await;
    for (n, v) in [
        ("region", "us-east-1"),
        ("tier.lab.example.com", "gold"),
        ("owner.lab.example.com", "platform-team"),
    ] {
        spoke.apply(&property(n, v)).await.unwrap();
    }
    let mut hidden = property("internal.lab.example.com", "do-not-export");
    hidden["metadata"]["labels"] = json!({"open-cluster-management.io/spoke-only": "true"});
    spoke.apply(&hidden).await.unwrap();
    let m = hub.get(&mc("cluster1")).await.unwrap().unwrap();
    assert_eq!(
        claim_names(&m),
        ["owner.lab.example.com", "region", "tier.lab.example.com"]
    );
    assert_eq!(
        m["status"]["clusterClaims"][1],
        json!({"name": "region", "value": "us-east-1"})
    );

    // 22 custom properties: the first 20 by name win (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/spoke/managedcluster/claim_reconcile.go`).
    spoke
        .delete(&r(
            "about.k8s.io/v1alpha1",
            "ClusterProperty",
            None,
            "owner.lab.example.com",
        ))
        .await
        .unwrap();
    for i in 1..=20 {
        spoke
            .apply(&property(
                &format!("custom-{i:02}.lab.example.com"),
                &format!("value-{i:02}"),
            ))
            .await
            .unwrap();
    }
    let m = hub.get(&mc("cluster1")).await.unwrap().unwrap();
    let names = claim_names(&m);
    assert_eq!(names.len(), 20);
    assert_eq!(names[0], "custom-01.lab.example.com");
    assert_eq!(names[19], "custom-20.lab.example.com");
    assert!(
        !names.contains(&"region".to_owned())
            && !names.contains(&"tier.lab.example.com".to_owned())
    );
    for i in 1..=20 {
        spoke
            .delete(&r(
                "about.k8s.io/v1alpha1",
                "ClusterProperty",
                None,
                &format!("custom-{i:02}.lab.example.com"),
            ))
            .await
            .unwrap();
    }
    let before = claim_names(&hub.get(&mc("cluster1")).await.unwrap().unwrap());
    assert_eq!(before, ["region", "tier.lab.example.com"]);

    // 1024 characters pass; 1025 make the hub reject the whole update, and later changes stay stuck.
    spoke
        .apply(&property("long-value.lab.example.com", &"x".repeat(1024)))
        .await
        .unwrap();
    assert_eq!(
        claim_names(&hub.get(&mc("cluster1")).await.unwrap().unwrap()).len(),
        3
    );
    spoke
        .apply(&property("long-value.lab.example.com", &"x".repeat(1025)))
        .await
        .unwrap();
    spoke.apply(&property("region", "us-west-2")).await.unwrap();
    let m = hub.get(&mc("cluster1")).await.unwrap().unwrap();
    assert_eq!(
        m["status"]["clusterClaims"][1],
        json!({"name": "region", "value": "us-east-1"}),
        "blocked"
    );
    assert_eq!(
        m["status"]["clusterClaims"][0]["value"]
            .as_str()
            .unwrap()
            .len(),
        1024
    );
    assert_eq!(
        condition_status(&m, "ManagedClusterConditionAvailable"),
        Some("True"),
        "still Available"
    );
    let why = s
        .lab
        .with_world(|w| w.agent("cluster1").unwrap().claim_error.clone())
        .unwrap();
    assert!(
        why.contains("Too long: may not be more than 1024 bytes"),
        "{why}"
    );
    // Removing the long value lets everything through again.
    spoke
        .delete(&r(
            "about.k8s.io/v1alpha1",
            "ClusterProperty",
            None,
            "long-value.lab.example.com",
        ))
        .await
        .unwrap();
    let m = hub.get(&mc("cluster1")).await.unwrap().unwrap();
    assert_eq!(
        m["status"]["clusterClaims"],
        json!([{"name": "region", "value": "us-west-2"}, {"name": "tier.lab.example.com", "value": "gold"}])
    );
}

#[tokio::test]
async fn profiles_exist_only_where_a_binding_is_bound_and_go_with_it() {
    let s = Sim::new();
    let (hub, spoke) = s.hub_and_spoke().await;
    spoke.apply(&property("region", "eu-west-1")).await.unwrap();
    s.fleet(&*hub, &["cluster-inventory"]).await;
    hub.apply(&namespace("elsewhere")).await.unwrap();
    // A binding to a set that does not exist is not Bound and makes no profiles.
    hub.apply(&namespace("unbound")).await.unwrap();
    hub.apply(&binding("unbound", "missing")).await.unwrap();
    let b = hub
        .get(&r(
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSetBinding",
            Some("unbound"),
            "missing",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(cond(&b, "Bound").unwrap()["reason"], "ClusterSetNotFound");
    // The hub webhook: a binding must be named like its set (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/webhook/v1beta2/managedclustersetbinding_validating.go`).
    let mut alias = binding("cluster-inventory", "fleet");
    alias["metadata"]["name"] = json!("fleet-alias");
    let e = hub.apply(&alias).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("must have the same name as the target ManagedClusterSet"),
        "{e}"
    );

    let p = hub
        .wait(
            &profile("cluster-inventory", "cluster1"),
            &Condition::status_true("Joined"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        label(&p, "x-k8s.io/cluster-manager"),
        Some("open-cluster-management")
    );
    assert_eq!(
        label(&p, "open-cluster-management.io/cluster-name"),
        Some("cluster1")
    );
    assert_eq!(label(&p, "multicluster.x-k8s.io/clusterset"), Some("fleet"));
    assert_eq!(
        p["spec"],
        json!({"displayName": "cluster1", "clusterManager": {"name": "open-cluster-management"}})
    );
    assert_eq!(
        p["status"]["properties"],
        json!([{"name": "region", "value": "eu-west-1"}])
    );
    assert_eq!(p["status"]["version"]["kubernetes"], "v1.36.1");
    assert_eq!(condition_status(&p, "ControlPlaneHealthy"), Some("True"));
    assert_eq!(
        cond(&p, "ControlPlaneHealthy").unwrap()["reason"],
        "ManagedClusterAvailable"
    );
    for ns in ["elsewhere", "unbound", "default"] {
        assert!(
            hub.get(&profile(ns, "cluster1")).await.unwrap().is_none(),
            "{ns}"
        );
    }
    let set = hub
        .get(&r(
            "cluster.open-cluster-management.io/v1beta2",
            "ManagedClusterSet",
            None,
            "fleet",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        cond(&set, "ClusterSetEmpty").unwrap()["message"],
        "1 ManagedClusters selected"
    );
    // The cluster left `default` when it was relabelled; `global` has everyone.
    for (name, message) in [
        ("default", "No ManagedCluster selected"),
        ("global", "1 ManagedClusters selected"),
    ] {
        let set = hub
            .get(&r(
                "cluster.open-cluster-management.io/v1beta2",
                "ManagedClusterSet",
                None,
                name,
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            cond(&set, "ClusterSetEmpty").unwrap()["message"],
            message,
            "{name}"
        );
    }

    // A property change reaches the profile.
    spoke
        .apply(&property("region", "eu-central-1"))
        .await
        .unwrap();
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(p["status"]["properties"][0]["value"], "eu-central-1");

    // The binding goes, the profile goes.
    hub.delete(&r(
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
        Some("cluster-inventory"),
        "fleet",
    ))
    .await
    .unwrap();
    assert!(
        hub.get(&profile("cluster-inventory", "cluster1"))
            .await
            .unwrap()
            .is_none()
    );
}

/// A hub with one joined spoke in set `fleet`, bound in `cluster-inventory` and the addon namespace, the
/// lab's Placement, and cluster-proxy at `version` with `values` (plus service proxy and user server
/// unless given).
async fn proxy_lab(
    version: &str,
    gate: (&str, bool),
    user_server: bool,
) -> (Sim, Arc<dyn ClusterApi>) {
    let s = Sim::new();
    let (hub, _spoke) = s.hub_and_spoke().await;
    let ns = "open-cluster-management-addon";
    s.fleet(&*hub, &["cluster-inventory", ns]).await;
    hub.apply(&json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "cluster-proxy-fleet", "namespace": ns},
        "spec": {"clusterSets": ["fleet"]},
    }))
    .await
    .unwrap();
    let mut values = json!({
        "enableServiceProxy": true,
        "userServer": {"enabled": user_server},
        "installByPlacement": {"placementName": "cluster-proxy-fleet", "placementNamespace": ns},
    });
    values["featureGates"] = json!({gate.0: gate.1});
    s.install(&*hub, "hub", Chart::ClusterProxy, version, ns, values, true)
        .await
        .unwrap();
    (s, hub)
}

#[tokio::test]
async fn access_providers_need_the_gate_and_the_serving_cert() {
    // 0.10.0, gate and user server: the provider exactly as open-cluster-management-io/cluster-proxy v0.10.0
    // `pkg/proxyserver/controllers/clusterprofile_controller.go` writes it.
    let (_s, hub) = proxy_lab("0.10.0", ("clusterProfileAccessProvider", true), true).await;
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    let providers = p["status"]["accessProviders"].as_array().unwrap();
    assert_eq!(providers.len(), 1);
    let c = &providers[0]["cluster"];
    assert_eq!(providers[0]["name"], "open-cluster-management");
    assert_eq!(
        c["server"],
        "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1"
    );
    assert_eq!(
        c["extensions"],
        json!([{"name": "client.authentication.k8s.io/exec", "extension": {"clusterName": "cluster1"}}])
    );
    let ca = base64::engine::general_purpose::STANDARD
        .decode(c["certificate-authority-data"].as_str().unwrap())
        .unwrap();
    let certs = pem::parse_many(&ca).unwrap();
    assert!(
        !certs.is_empty()
            && certs
                .iter()
                .all(|c| c.tag() == "CERTIFICATE" && c.contents()[0] == 0x30)
    );
    // The profile in the addon namespace gets one too (open-cluster-management-io/cluster-proxy v0.10.0
    // `charts/cluster-proxy/templates/clustersetbinding.yaml`); the addon is Available.
    assert!(
        hub.get(&profile("open-cluster-management-addon", "cluster1"))
            .await
            .unwrap()
            .unwrap()["status"]["accessProviders"]
            .is_array()
    );
    let addon = hub
        .get(&r(
            "addon.open-cluster-management.io/v1alpha1",
            "ManagedClusterAddOn",
            Some("cluster1"),
            "cluster-proxy",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(condition_status(&addon, "Available"), Some("True"));
    assert_eq!(
        addon["status"]["namespace"],
        "open-cluster-management-cluster-proxy"
    );
    let user = hub
        .get(&r(
            "apps/v1",
            "Deployment",
            Some("open-cluster-management-addon"),
            "cluster-proxy-addon-user",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(condition_status(&user, "Available"), Some("True"));

    // Without userServer.enabled there is no serving cert: no provider, and the user server never starts.
    let (_s, hub) = proxy_lab("0.10.0", ("clusterProfileAccessProvider", true), false).await;
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    assert!(p["status"].get("accessProviders").is_none(), "{p}");
    assert!(
        hub.get(&secret(
            "open-cluster-management-addon",
            "cluster-proxy-user-serving-cert"
        ))
        .await
        .unwrap()
        .is_none()
    );

    // 0.11.0 given the 0.10.0 key runs with the gate off (open-cluster-management-io/cluster-proxy PR #274) ...
    let (_s, hub) = proxy_lab("0.11.0", ("clusterProfileAccessProvider", true), true).await;
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    assert!(p["status"].get("accessProviders").is_none(), "{p}");
    let manager = hub
        .get(&r(
            "apps/v1",
            "Deployment",
            Some("open-cluster-management-addon"),
            "cluster-proxy-addon-manager",
        ))
        .await
        .unwrap()
        .unwrap();
    let args = manager["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--feature-gates=ClusterProfile=false"),
        "{args}"
    );
    // ... and with its own key it works.
    let (_s, hub) = proxy_lab("0.11.0", ("clusterProfile", true), true).await;
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        p["status"]["accessProviders"][0]["name"],
        "open-cluster-management"
    );
}

#[tokio::test]
async fn a_wait_that_times_out_reports_what_it_last_saw() {
    let (_s, hub) = proxy_lab("0.10.0", ("clusterProfileAccessProvider", true), false).await;
    let user = r(
        "apps/v1",
        "Deployment",
        Some("open-cluster-management-addon"),
        "cluster-proxy-addon-user",
    );
    let e = hub
        .wait(
            &user,
            &Condition::status_true("Available"),
            Duration::from_millis(100),
        )
        .await
        .unwrap_err();
    let WaitError::Timeout {
        last, condition, ..
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!(condition, "condition Available=True");
    let last = last.as_ref().unwrap();
    assert!(
        cond(last, "Available").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("cluster-proxy-user-serving-cert")
    );
    assert!(
        e.to_string()
            .contains("Available=False (MinimumReplicasUnavailable)"),
        "{e}"
    );
    // And an object that never appears.
    let e = hub
        .wait(
            &mc("nobody"),
            &Condition::exists(),
            Duration::from_millis(50),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().ends_with("last seen: it does not exist"),
        "{e}"
    );
}

#[tokio::test]
async fn managed_service_account_tokens_are_synced_next_to_profiles() {
    let s = Sim::new();
    let (hub, spoke) = s.hub_and_spoke().await;
    s.fleet(&*hub, &["cluster-inventory"]).await;
    let ns = "open-cluster-management-addon";
    s.install(
        &*hub,
        "hub",
        Chart::ManagedServiceaccount,
        "0.10.0",
        ns,
        json!({"agentInstallAll": false, "featureGates": {"clusterProfileCredSyncer": true}}),
        true,
    )
    .await
    .unwrap();
    hub.apply(&json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn",
        "metadata": {"name": "managed-serviceaccount", "namespace": "cluster1"},
        "spec": {"installNamespace": "open-cluster-management-agent-addon"},
    }))
    .await
    .unwrap();
    let msa = r(
        "authentication.open-cluster-management.io/v1beta1",
        "ManagedServiceAccount",
        Some("cluster1"),
        "reader",
    );
    hub.apply(&json!({
        "apiVersion": "authentication.open-cluster-management.io/v1beta1", "kind": "ManagedServiceAccount",
        "metadata": {"name": "reader", "namespace": "cluster1", "labels": {"authentication.open-cluster-management.io/sync-to-clusterprofile": "true"}},
        "spec": {"rotation": {"enabled": true, "validity": "8640h0m0s"}},
    }))
    .await
    .unwrap();
    let m = hub
        .wait(&msa, &Condition::status_true("TokenReported"), T)
        .await
        .unwrap();
    assert_eq!(m["status"]["tokenSecretRef"]["name"], "reader");
    assert!(
        spoke
            .get(&r(
                "v1",
                "ServiceAccount",
                Some("open-cluster-management-agent-addon"),
                "reader"
            ))
            .await
            .unwrap()
            .is_some()
    );
    let synced = hub
        .wait(
            &secret("cluster-inventory", "cluster1-reader"),
            &Condition::exists(),
            T,
        )
        .await
        .unwrap();
    assert_eq!(synced["type"], "Opaque");
    assert_eq!(
        label(
            &synced,
            "authentication.open-cluster-management.io/synced-from"
        ),
        Some("cluster1-reader")
    );
    let owner = &synced["metadata"]["ownerReferences"][0];
    assert_eq!(
        (
            owner["kind"].as_str(),
            owner["name"].as_str(),
            owner["controller"].as_bool()
        ),
        (Some("ClusterProfile"), Some("cluster1"), Some(true))
    );
    let source = hub
        .get(&secret("cluster1", "reader"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(synced["data"], source["data"]);
    // Only where a profile named after the cluster is.
    assert!(
        hub.get(&secret(ns, "cluster1-reader"))
            .await
            .unwrap()
            .is_none()
    );
    // Unlabelled: the copy is removed.
    hub.merge_patch(&msa, &json!({"metadata": {"labels": {"authentication.open-cluster-management.io/sync-to-clusterprofile": null}}}))
        .await
        .unwrap();
    assert!(
        hub.get(&secret("cluster-inventory", "cluster1-reader"))
            .await
            .unwrap()
            .is_none()
    );
}

// ---- faults ---------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_delayed_call_takes_that_long_in_virtual_time() {
    let s = Sim::new();
    s.lab
        .set_fault(Behaviour::KindCreate, Fault::Delay(Duration::from_secs(60)));
    let t0 = Instant::now();
    s.cluster("slow").await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(60) && took < Duration::from_secs(61),
        "{took:?}"
    );
    let create = s
        .lab
        .calls()
        .into_iter()
        .find(|c| c.verb == "kind.create")
        .unwrap();
    assert!(create.at >= Duration::from_secs(60), "{create:?}");
    assert_eq!(create.outcome, Ok(()));
}

#[tokio::test(start_paused = true)]
async fn a_delayed_controller_acts_that_long_after_it_first_wanted_to() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    let spoke = s.cluster("cluster1").await;
    s.lab.set_fault(
        Behaviour::Registration,
        Fault::Delay(Duration::from_secs(30)),
    );
    let t0 = Instant::now();
    s.join(&*hub, "hub", &*spoke, "cluster1", &[]).await;
    assert!(hub.get(&mc("cluster1")).await.unwrap().is_none(), "not yet");
    hub.wait(
        &mc("cluster1"),
        &Condition::exists(),
        Duration::from_secs(300),
    )
    .await
    .unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(30) && took < Duration::from_secs(31),
        "{took:?}"
    );
}

#[tokio::test]
async fn a_call_that_fails_once_is_transient_and_then_succeeds() {
    let s = Sim::new();
    let api = s.cluster("c").await;
    s.lab.set_fault(
        Behaviour::Apply,
        Fault::FailOnce("etcdserver: request timed out".into()),
    );
    let e = api.apply(&namespace("x")).await.unwrap_err();
    // As a real API server answers a request it could not serve: 503, retried.
    assert!(e.is_transient());
    assert_eq!(
        e.to_string(),
        "the API server failed (HTTP 503): etcdserver: request timed out"
    );
    api.apply(&namespace("x")).await.unwrap();
    assert!(
        api.get(&r("v1", "Namespace", None, "x"))
            .await
            .unwrap()
            .is_some()
    );
    let outcomes: Vec<bool> = s
        .lab
        .calls()
        .iter()
        .filter(|c| c.verb == "kube.apply")
        .map(|c| c.outcome.is_ok())
        .collect();
    assert_eq!(outcomes, [false, true]);
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_fails_once_shows_it_and_then_recovers() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    let spoke = s.cluster("cluster1").await;
    s.join(&*hub, "hub", &*spoke, "cluster1", &[]).await;
    hub.wait(&mc("cluster1"), &Condition::exists(), T)
        .await
        .unwrap();
    s.lab.set_fault(
        Behaviour::HubAccept,
        Fault::FailOnce("hub controller restarted".into()),
    );
    let csr = hub
        .list(
            "certificates.k8s.io/v1",
            "CertificateSigningRequest",
            None,
            None,
        )
        .await
        .unwrap()[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    hub.approve_csr(&csr, "ocm-lab").await.unwrap();
    hub.merge_patch(
        &mc("cluster1"),
        &json!({"spec": {"hubAcceptsClient": true}}),
    )
    .await
    .unwrap();
    let m = hub.get(&mc("cluster1")).await.unwrap().unwrap();
    let c = cond(&m, "HubAcceptedManagedCluster").unwrap();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("SimulatedFailure"))
    );
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .contains("hub controller restarted")
    );
    // It retries after its requeue and succeeds.
    let m = hub
        .wait(
            &mc("cluster1"),
            &Condition::status_true("ManagedClusterJoined"),
            T,
        )
        .await
        .unwrap();
    assert_eq!(
        condition_status(&m, "HubAcceptedManagedCluster"),
        Some("True")
    );
}

#[tokio::test(start_paused = true)]
async fn a_controller_that_always_fails_shows_it_when_a_wait_times_out() {
    let s = Sim::new();
    let hub = s.hub("hub", &["DefaultClusterSet"]).await;
    s.lab.set_fault(
        Behaviour::SetBinding,
        Fault::FailAlways("informer cache not synced".into()),
    );
    hub.apply(&namespace("cluster-inventory")).await.unwrap();
    hub.apply(&binding("cluster-inventory", "global"))
        .await
        .unwrap();
    let b = r(
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
        Some("cluster-inventory"),
        "global",
    );
    let e = hub
        .wait(
            &b,
            &Condition::status_true("Bound"),
            Duration::from_secs(120),
        )
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.starts_with("timed out after"), "{text}");
    assert!(
        text.contains("last seen: Bound=False (SimulatedFailure)"),
        "{text}"
    );
    // Fixed: it acts (as a real controller retrying would).
    s.lab.clear_faults();
    hub.wait(&b, &Condition::status_true("Bound"), T)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_call_that_always_fails_is_permanent() {
    let s = Sim::new();
    s.lab.set_fault(
        Behaviour::KindCreate,
        Fault::FailAlways("no space left on device".into()),
    );
    for _ in 0..2 {
        let e =
            s.b.kind
                .create(&CreateCluster {
                    name: "c".into(),
                    image: "kindest/node:v1.36.1".into(),
                    kubeconfig: s.dir.path().join("c"),
                    registries: Default::default(),
                })
                .await
                .unwrap_err();
        // As real kind reports it: `kind create cluster` exited 1 with the message on stderr.
        assert!(!e.is_transient());
        assert!(
            matches!(&e, ocm_lab::backend::KindError::Create { failure, .. } if failure.stderr_tail == "ERROR: no space left on device"),
            "{e:?}"
        );
    }
    assert!(s.b.kind.list().await.unwrap().is_empty());
}

// ---- state and bookkeeping ------------------------------------------------------------------------

#[tokio::test]
async fn the_world_survives_a_save_and_a_load() {
    let s = Sim::new();
    let (hub, _spoke) = s.hub_and_spoke().await;
    let path = s.dir.path().join("state/sim-world.json");
    s.lab.save(&path).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let before = hub.get(&mc("cluster1")).await.unwrap().unwrap();

    let loaded = SimLab::load(&path).unwrap();
    let b = loaded.backends();
    assert_eq!(b.kind.list().await.unwrap(), ["cluster1", "hub"]);
    let hub2 = b.kube.connect(&topo("hub"), &path).await.unwrap();
    assert_eq!(hub2.get(&mc("cluster1")).await.unwrap().unwrap(), before);
    // The agents kept their memory: a property still reaches the hub.
    let spoke2 = b.kube.connect(&topo("cluster1"), &path).await.unwrap();
    spoke2
        .apply(&property("region", "ap-south-1"))
        .await
        .unwrap();
    let m = hub2.get(&mc("cluster1")).await.unwrap().unwrap();
    assert_eq!(
        m["status"]["clusterClaims"],
        json!([{"name": "region", "value": "ap-south-1"}])
    );
    // Tokens too: a new spoke can join the loaded hub.
    let s2 = Sim {
        lab: loaded.clone(),
        b: loaded.backends(),
        dir: tempfile::tempdir().unwrap(),
    };
    let c2 = s2.cluster("cluster2").await;
    s2.join(&*hub2, "hub", &*c2, "cluster2", &[]).await;
    s2.accept(&*hub2, "cluster2").await;

    // Nothing saved yet: an empty world.
    let empty = SimLab::load(&s.dir.path().join("missing.json")).unwrap();
    assert!(empty.backends().kind.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn every_mutating_call_counts_even_when_it_changes_nothing() {
    let s = Sim::new();
    assert!(s.b.docker.ensure_network("kind").await.unwrap());
    assert_eq!(s.lab.mutations(), 1);
    assert!(!s.b.docker.ensure_network("kind").await.unwrap());
    assert_eq!(s.lab.mutations(), 1, "an existing network is only observed");
    let api = s.cluster("c").await;
    assert_eq!(s.lab.mutations(), 2);
    api.apply(&namespace("x")).await.unwrap();
    api.apply(&namespace("x")).await.unwrap();
    assert_eq!(
        s.lab.mutations(),
        4,
        "the second apply changed nothing but counts"
    );
    api.get(&r("v1", "Namespace", None, "x")).await.unwrap();
    api.list("v1", "Namespace", None, None).await.unwrap();
    api.served("v1", "Namespace").await.unwrap();
    api.wait(&r("v1", "Namespace", None, "x"), &Condition::exists(), T)
        .await
        .unwrap();
    assert_eq!(s.lab.mutations(), 4, "reads do not count");
    assert!(
        !api.delete(&r("v1", "Namespace", None, "absent"))
            .await
            .unwrap()
    );
    api.merge_patch(&r("v1", "Namespace", None, "absent"), &json!({}))
        .await
        .unwrap_err();
    api.approve_csr("absent", "ocm-lab").await.unwrap_err();
    assert_eq!(
        s.lab.mutations(),
        7,
        "failed and no-op mutating calls count"
    );
    assert_eq!(s.lab.applied("c").len(), 2);
    assert!(
        s.lab
            .calls()
            .iter()
            .any(|c| c.verb == "kube.wait" && c.outcome.is_ok())
    );
}

/// An `up`-like sequence at scale through the traits: every spoke ends with its ClusterProfile (properties,
/// access provider, synced token), and the saved simulated world reloads with every object. It also prints
/// timings, which are not asserted: `SIM_SPOKES=500 cargo test --release --test it sim::scale -- --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale() {
    use futures::StreamExt;
    let n: usize = std::env::var("SIM_SPOKES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let t0 = std::time::Instant::now();
    let s = Arc::new(Sim::new());
    s.b.docker.ensure_network("kind").await.unwrap();
    let hub = s.hub("hub", &["DefaultClusterSet", "ClusterProfile"]).await;
    hub.apply(&json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
        "metadata": {"name": "fleet"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}},
    }))
    .await
    .unwrap();
    for ns in ["cluster-inventory", "open-cluster-management-addon"] {
        hub.apply(&namespace(ns)).await.unwrap();
        hub.apply(&binding(ns, "fleet")).await.unwrap();
    }
    hub.apply(&json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": {"name": "cluster-proxy-fleet", "namespace": "open-cluster-management-addon"},
        "spec": {"clusterSets": ["fleet"]},
    }))
    .await
    .unwrap();
    let proxy = json!({
        "enableServiceProxy": true, "userServer": {"enabled": true},
        "featureGates": {"clusterProfileAccessProvider": true},
        "installByPlacement": {"placementName": "cluster-proxy-fleet", "placementNamespace": "open-cluster-management-addon"},
    });
    s.install(
        &*hub,
        "hub",
        Chart::ClusterProxy,
        "0.10.0",
        "open-cluster-management-addon",
        proxy,
        true,
    )
    .await
    .unwrap();
    s.install(
        &*hub,
        "hub",
        Chart::ManagedServiceaccount,
        "0.10.0",
        "open-cluster-management-addon",
        json!({"agentInstallAll": false, "featureGates": {"clusterProfileCredSyncer": true}}),
        true,
    )
    .await
    .unwrap();
    let setup = t0.elapsed();
    futures::stream::iter(0..n)
        .map(|i| {
            let s = s.clone();
            let hub = hub.clone();
            async move {
                let name = format!("spoke-{i}");
                let spoke = s.cluster(&name).await;
                s.join(&*hub, "hub", &*spoke, &name, &["ClusterProperty"]).await;
                s.accept(&*hub, &name).await;
                hub.apply(&json!({"apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "metadata": {"name": name, "labels": {CLUSTERSET: "fleet"}}})).await.unwrap();
                hub.apply(&json!({"apiVersion": "addon.open-cluster-management.io/v1alpha1", "kind": "ManagedClusterAddOn", "metadata": {"name": "managed-serviceaccount", "namespace": name}, "spec": {"installNamespace": "open-cluster-management-agent-addon"}})).await.unwrap();
                hub.apply(&json!({"apiVersion": "authentication.open-cluster-management.io/v1beta1", "kind": "ManagedServiceAccount", "metadata": {"name": "reader", "namespace": name, "labels": {"authentication.open-cluster-management.io/sync-to-clusterprofile": "true"}}})).await.unwrap();
                spoke.wait_served("about.k8s.io/v1alpha1", "ClusterProperty", T).await.unwrap();
                spoke.apply(&property("region", &format!("r-{}", i % 7))).await.unwrap();
                spoke.apply(&property("tier.lab.example.com", &format!("t-{i}"))).await.unwrap();
                let has = |o: Option<&Value>| o.is_some_and(|p| p["status"]["properties"].as_array().is_some_and(|a| a.len() == 2) && p["status"]["accessProviders"].is_array());
                hub.wait(&profile("cluster-inventory", &name), &Condition::new("properties and access provider", has), T).await.unwrap();
                hub.wait(&secret("cluster-inventory", &format!("{name}-reader")), &Condition::exists(), T).await.unwrap();
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<()>>()
        .await;
    let total = t0.elapsed();
    let path = s.dir.path().join("sim-world.json");
    let t = std::time::Instant::now();
    s.lab.save(&path).unwrap();
    let saved = t.elapsed();
    let t = std::time::Instant::now();
    let loaded = SimLab::load(&path).unwrap();
    let reloaded = t.elapsed();
    let size = std::fs::metadata(&path).unwrap().len();
    eprintln!(
        "simulated lab: saved {:.1} MiB in {saved:?}, loaded (with a full resync) in {reloaded:?}",
        size as f64 / 1048576.0
    );
    let objects = s.lab.with_world(|w| w.object_count("hub"));
    assert_eq!(
        loaded.with_world(|w| w.object_count("hub")),
        objects,
        "the reloaded simulated world lost or gained hub objects"
    );
    drop(loaded);
    let profiles = hub
        .list(
            "multicluster.x-k8s.io/v1alpha1",
            "ClusterProfile",
            Some("cluster-inventory"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(profiles.len(), n, "one ClusterProfile per joined spoke");
    eprintln!(
        "simulated lab: hub setup {setup:?}, {n} spokes joined with properties, access providers and tokens in {:?} ({:?}/spoke); {} calls, {} mutating, {objects} objects on the hub",
        total - setup,
        (total - setup) / n.max(1) as u32,
        s.lab.calls().len(),
        s.lab.mutations(),
    );
}

#[tokio::test]
async fn a_request_through_the_user_server_reaches_the_spoke() {
    let (_s, hub) = proxy_lab("0.10.0", ("clusterProfileAccessProvider", true), true).await;
    let p = hub
        .get(&profile("cluster-inventory", "cluster1"))
        .await
        .unwrap()
        .unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(
            p["status"]["accessProviders"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    // A hub token works through impersonation (open-cluster-management-io/cluster-proxy v0.10.0
    // `pkg/userserver/user_server.go`, `pkg/serviceproxy/service_proxy.go`).
    let token = hub
        .token_request(
            "open-cluster-management",
            "agent-registration-bootstrap",
            600,
        )
        .await
        .unwrap();
    let ns = "open-cluster-management-addon";
    let get = |path: &'static str, ca: Vec<u8>, token: ocm_lab::backend::Secret| {
        let hub = hub.clone();
        async move {
            hub.get_via_service(ns, "cluster-proxy-addon-user", 9092, path, &ca, &token)
                .await
        }
    };
    let (code, body) = get("/cluster1/version", ca.clone(), token.clone())
        .await
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap()["gitVersion"],
        "v1.36.1"
    );
    let (code, _) = get(
        "/cluster1/version",
        ca.clone(),
        ocm_lab::backend::Secret::new("forged"),
    )
    .await
    .unwrap();
    assert_eq!(code, 401);
    let (code, body) = get("/nowhere/version", ca.clone(), token.clone())
        .await
        .unwrap();
    assert_eq!(code, 502, "{body}");
    let e = get("/cluster1/version", b"not a pem".to_vec(), token.clone())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let e = hub
        .get_via_service(
            ns,
            "cluster-proxy-addon-user",
            443,
            "/cluster1/version",
            &ca,
            &token,
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("has no port 443 (it has: 9092)"),
        "{e}"
    );
    // Without the serving cert the user server never runs: nothing to forward to.
    let (_s, hub) = proxy_lab("0.10.0", ("clusterProfileAccessProvider", true), false).await;
    let e = hub
        .get_via_service(
            ns,
            "cluster-proxy-addon-user",
            9092,
            "/cluster1/version",
            &ca,
            &token,
        )
        .await
        .unwrap_err();
    assert!(
        e.is_transient() && e.to_string().contains("no running Pod behind Service"),
        "{e}"
    );
}
