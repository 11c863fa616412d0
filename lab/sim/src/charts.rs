//! Models of the four charts the lab installs, rendered like `helm template` from the chart, its
//! version, the release namespace and the values (open-cluster-management-io/ocm v1.3.1
//! `deploy/*/chart/*/values.yaml`; open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`;
//! open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/managed-serviceaccount/`). Only what the
//! lab and the simulated controllers depend on is rendered, with the same names, value keys and version
//! differences as upstream.

use serde_json::{Value, json};

use super::util::{self, helm_text, truthy};
use ocm_lab_core::backend::{HelmError, Rendered};
use ocm_lab_core::charts::ChartPlan;
use ocm_lab_core::topology::catalog::Chart;

/// The CRDs the simulation knows, one a line: `<group> <Kind> <scope> <versions>`, the storage version
/// marked `*` (served versions and scopes as in `fixtures/crds/`, the upstream CRDs). The plural is the
/// lowercased kind + `s` (`y` → `ies`), as upstream names them.
const CRDS: &str = "
    operator.open-cluster-management.io ClusterManager Cluster v1*
    operator.open-cluster-management.io Klusterlet Cluster v1*
    cluster.open-cluster-management.io ManagedCluster Cluster v1*
    cluster.open-cluster-management.io ManagedClusterSet Cluster v1beta2*
    cluster.open-cluster-management.io ManagedClusterSetBinding Namespaced v1beta2*
    cluster.open-cluster-management.io Placement Namespaced v1beta1*
    cluster.open-cluster-management.io PlacementDecision Namespaced v1beta1*
    cluster.open-cluster-management.io ClusterClaim Cluster v1alpha1*
    addon.open-cluster-management.io ManagedClusterAddOn Namespaced v1alpha1* v1beta1
    addon.open-cluster-management.io ClusterManagementAddOn Cluster v1alpha1* v1beta1
    addon.open-cluster-management.io AddOnDeploymentConfig Namespaced v1alpha1* v1beta1
    work.open-cluster-management.io ManifestWork Namespaced v1*
    work.open-cluster-management.io AppliedManifestWork Cluster v1*
    multicluster.x-k8s.io ClusterProfile Namespaced v1alpha1*
    about.k8s.io ClusterProperty Cluster v1alpha1*
    proxy.open-cluster-management.io ManagedProxyConfiguration Cluster v1alpha1*
    proxy.open-cluster-management.io ManagedProxyServiceResolver Cluster v1alpha1*
    authentication.open-cluster-management.io ManagedServiceAccount Namespaced v1alpha1 v1beta1*
";

/// The simulated CRD's schema: keeps unknown fields, except where the real CRD's declared fields matter
/// to the lab: the ManagedProxyConfiguration's `spec.proxyAgent` and `spec.proxyServer.entrypoint.hostname`
/// list their properties as cluster-proxy v0.10.0's CRD does (open-cluster-management-io/cluster-proxy v0.10.0
/// `charts/cluster-proxy/crds/managedproxyconfigurations.yaml`: proxyAgent has additionalArgs,
/// additionalServiceCAConfigMap, image, imagePullSecrets, replicas; hostname has only value), so the
/// install action's undeclared-field check and the simulated API server's refusal of such fields see
/// what they would on a real cluster.
fn schema_for(name: &str) -> Value {
    let open = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    if name != "managedproxyconfigurations.proxy.open-cluster-management.io" {
        return open;
    }
    let with = |properties: Value| {
        let mut o = open.clone();
        o["properties"] = properties;
        o
    };
    let strings = json!({"type": "array", "items": {"type": "string"}});
    let hostname = json!({"type": "object", "properties": {"value": {"type": "string"}}});
    let proxy_agent = json!({"type": "object", "properties": {
        "additionalArgs": strings,
        "additionalServiceCAConfigMap": {"x-kubernetes-preserve-unknown-fields": true},
        "image": {"type": "string"},
        "imagePullSecrets": strings,
        "replicas": {"type": "integer"},
    }});
    let entrypoint = with(json!({"hostname": hostname}));
    let spec =
        json!({"proxyAgent": proxy_agent, "proxyServer": with(json!({"entrypoint": entrypoint}))});
    with(json!({"spec": with(spec)}))
}

/// A real `apiextensions.k8s.io/v1` CustomResourceDefinition for `<plural>.<group>`, with a minimal
/// schema that keeps unknown fields except where [`schema_for`] says (the simulated API server checks
/// the fields that matter itself).
pub(crate) fn crd(name: &str) -> Value {
    let plural = |kind: &str| match kind.to_lowercase().strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{}s", kind.to_lowercase()),
    };
    let (group, kind, scope, versions) = CRDS
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find_map(|w| match &w[..] {
            [group, kind, scope, versions @ ..] if format!("{}.{group}", plural(kind)) == name => {
                Some((*group, *kind, *scope, versions.to_vec()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("the simulation knows no CRD {name}"));
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            json!({
                "name": v.trim_end_matches('*'),
                "served": true,
                "storage": v.ends_with('*'),
                "schema": {"openAPIV3Schema": schema_for(name)},
                "subresources": {"status": {}},
            })
        })
        .collect();
    let mut crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group,
            "names": {
                "kind": kind,
                "listKind": format!("{kind}List"),
                "plural": plural(kind),
                "singular": kind.to_lowercase(),
            },
            "scope": scope,
            "versions": versions,
        },
    });
    if matches!(kind, "ManagedClusterAddOn" | "ClusterManagementAddOn") {
        // v1alpha1 stored, v1beta1 converted by the hub's `cluster-manager-addon-webhook`
        // (ocm@v1.3.1 manifests/cluster-manager/hub/crds/0000_01_addon…crd.yaml `strategy: Webhook`).
        crd["spec"]["conversion"] = json!({
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"service": {
                    "name": super::apiserver::ADDON_WEBHOOK_SERVICE,
                    "namespace": super::apiserver::HUB_NS,
                    "path": "/convert",
                    "port": 9443,
                }},
                "conversionReviewVersions": ["v1", "v1beta1"],
            },
        });
    }
    crd
}

/// The hub CRDs the cluster-manager operator installs (open-cluster-management-io/ocm v1.3.1
/// `manifests/cluster-manager/hub/crds/`; the ClusterProfile CRD is added only with the gate).
pub(crate) const HUB_CRDS: &[&str] = &[
    "managedclusters.cluster.open-cluster-management.io",
    "managedclustersets.cluster.open-cluster-management.io",
    "managedclustersetbindings.cluster.open-cluster-management.io",
    "placements.cluster.open-cluster-management.io",
    "placementdecisions.cluster.open-cluster-management.io",
    "managedclusteraddons.addon.open-cluster-management.io",
    "clustermanagementaddons.addon.open-cluster-management.io",
    "addondeploymentconfigs.addon.open-cluster-management.io",
    "manifestworks.work.open-cluster-management.io",
];
pub(crate) const CLUSTER_PROFILE_CRD: &str = "clusterprofiles.multicluster.x-k8s.io";
pub(crate) const CLUSTER_CLAIM_CRD: &str = "clusterclaims.cluster.open-cluster-management.io";
pub(crate) const CLUSTER_PROPERTY_CRD: &str = "clusterproperties.about.k8s.io";
pub(crate) const APPLIED_WORK_CRD: &str = "appliedmanifestworks.work.open-cluster-management.io";

/// A Deployment as the charts and operators render them (label `app`, one container).
pub(crate) fn deployment(
    ns: &str,
    name: &str,
    app: &str,
    replicas: i64,
    containers: Value,
) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"serviceAccountName": name, "containers": containers},
            },
        },
    })
}

fn service_account(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": ns}})
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name}, "rules": rules})
}

fn cluster_role_binding(name: &str, role: &str, sa_ns: &str, sa: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    })
}

/// A chart's operator or addon manager: the Deployment `name`, run as ServiceAccount `sa`, bound to the
/// ClusterRole `role` that allows everything.
fn manager(
    ns: &str,
    name: &str,
    sa: &str,
    role: &str,
    replicas: i64,
    containers: Value,
) -> [Value; 4] {
    let mut d = deployment(ns, name, name, replicas, containers);
    d["spec"]["template"]["spec"]["serviceAccountName"] = json!(sa);
    let all = json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]);
    [
        service_account(ns, sa),
        cluster_role(role, all),
        cluster_role_binding(role, role, ns, sa),
        d,
    ]
}

/// The ManagedClusterSetBinding of the `global` set into `ns`, as the addon charts render it.
fn global_binding(ns: &str) -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": {"name": "global", "namespace": ns},
        "spec": {"clusterSet": "global"},
    })
}

/// An addon chart's ClusterManagementAddOn (managed by the addon manager), with `spec` added.
fn addon(api_version: &str, name: &str, mut spec: Value) -> Value {
    spec["addOnMeta"] = json!({"displayName": name, "description": name});
    json!({
        "apiVersion": api_version,
        "kind": "ClusterManagementAddOn",
        "metadata": {"name": name, "annotations": {"addon.open-cluster-management.io/lifecycle": "addon-manager"}},
        "spec": spec,
    })
}

/// The values after Helm merges the given ones over the chart's defaults (upstream `values.yaml`; only the
/// defaults the chart functions' read sites do not supply themselves).
fn values_over(defaults: Value, given: &Value) -> Value {
    let mut v = defaults;
    if given.is_object() {
        util::merge(&mut v, given);
    }
    v
}

fn at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    v.pointer(&format!("/{}", path.replace('.', "/")))
}

fn text(v: &Value, path: &str, default: &str) -> String {
    helm_text(at(v, path), default)
}

fn int(v: &Value, path: &str, default: i64) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(default)
}

/// The value at `path`, or `default` when absent (a `null` given value removes a default).
fn value(v: &Value, path: &str, default: Value) -> Value {
    at(v, path).cloned().unwrap_or(default)
}

/// Helm's install order, which `helm template` also uses for its output.
const INSTALL_ORDER: &str = "PriorityClass Namespace NetworkPolicy ResourceQuota LimitRange
    PodSecurityPolicy PodDisruptionBudget ServiceAccount Secret SecretList ConfigMap StorageClass
    PersistentVolume PersistentVolumeClaim CustomResourceDefinition ClusterRole ClusterRoleList
    ClusterRoleBinding ClusterRoleBindingList Role RoleList RoleBinding RoleBindingList Service DaemonSet
    Pod ReplicationController ReplicaSet Deployment HorizontalPodAutoscaler StatefulSet Job CronJob
    IngressClass Ingress APIService";

fn sorted(mut objects: Vec<Value>) -> Vec<Value> {
    let rank = |o: &Value| {
        let k = o["kind"].as_str().unwrap_or("");
        INSTALL_ORDER
            .split_whitespace()
            .position(|x| x == k)
            .unwrap_or(usize::MAX)
    };
    objects.sort_by_key(rank);
    objects
}

/// Renders a chart like `helm template`.
pub(crate) fn render(chart: &ChartPlan, values: &Value) -> Result<Rendered, HelmError> {
    let ns = chart.namespace.as_str();
    let rendered = match (chart.chart, chart.version.as_str()) {
        (Chart::ClusterManager, "1.3.1") => cluster_manager(ns, values),
        (Chart::Klusterlet, "1.3.1") => klusterlet(ns, values),
        (Chart::ClusterProxy, v @ ("0.10.0" | "0.11.0")) => cluster_proxy(ns, v, values),
        (Chart::ManagedServiceaccount, "0.10.0") => managed_serviceaccount(ns, values),
        _ => return Err(crate::fail::chart_not_found(chart)),
    };
    Ok(Rendered {
        crds: rendered.crds,
        objects: sorted(rendered.objects),
    })
}

// ---- cluster-manager 1.3.1 (open-cluster-management-io/ocm v1.3.1 `deploy/cluster-manager/chart/`) -----

fn cluster_manager(ns: &str, given: &Value) -> Rendered {
    let v = values_over(
        json!({"clusterManager": {
            "registrationConfiguration": {
                "featureGates": [{"feature": "DefaultClusterSet", "mode": "Enable"}],
                "registrationDrivers": [{"authType": "csr"}],
            },
            "workConfiguration": {"workDriver": "kube"},
            "placementConfiguration": {"featureGates": [{"feature": "PlacementDebugServer", "mode": "Enable"}]},
        }}),
        given,
    );
    let registry = text(&v, "images.registry", "quay.io/open-cluster-management");
    let tag = text(&v, "images.tag", "v1.3.1");
    let image = |name: &str| format!("{registry}/{name}:{tag}");
    let containers = json!([{
        "name": "registration-operator",
        "image": image("registration-operator"),
        "args": ["/registration-operator", "hub"],
    }]);
    let cm = "cluster-manager";
    let replicas = int(&v, "replicaCount", 3);
    let mut objects = manager(ns, cm, cm, cm, replicas, containers).to_vec();
    let bootstrap_sa = truthy(at(&v, "createBootstrapSA"));
    if bootstrap_sa {
        objects.push(service_account(ns, "agent-registration-bootstrap"));
        objects.push(cluster_role(
            "open-cluster-management:bootstrap",
            json!([
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
                {"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"], "verbs": ["create", "get", "list", "watch"]},
                {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"], "verbs": ["get", "create", "list", "watch"]},
                {"apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclustersets/join"], "verbs": ["create"]},
            ]),
        ));
        objects.push(cluster_role_binding(
            "open-cluster-management:bootstrap:agent-registration",
            "open-cluster-management:bootstrap",
            ns,
            "agent-registration-bootstrap",
        ));
    }
    let mut registration = value(&v, "clusterManager.registrationConfiguration", json!({}));
    if bootstrap_sa {
        registration["autoApproveUsers"] = json!([format!(
            "system:serviceaccount:{ns}:agent-registration-bootstrap"
        )]);
    }
    let config = |key: &str| value(&v, &format!("clusterManager.{key}"), json!({}));
    objects.push(json!({
        "apiVersion": "operator.open-cluster-management.io/v1",
        "kind": "ClusterManager",
        "metadata": {"name": "cluster-manager"},
        "spec": {
            "registrationImagePullSpec": image("registration"),
            "workImagePullSpec": image("work"),
            "placementImagePullSpec": image("placement"),
            "addOnManagerImagePullSpec": image("addon-manager"),
            "deployOption": {"mode": text(&v, "clusterManager.mode", "Default")},
            "resourceRequirement": value(&v, "clusterManager.resourceRequirement", json!({"type": "Default"})),
            "registrationConfiguration": registration,
            "workConfiguration": config("workConfiguration"),
            "addOnManagerConfiguration": config("addOnManagerConfiguration"),
            "placementConfiguration": config("placementConfiguration"),
        },
    }));
    Rendered {
        crds: vec![crd("clustermanagers.operator.open-cluster-management.io")],
        objects,
    }
}

// ---- klusterlet 1.3.1 (open-cluster-management-io/ocm v1.3.1 `deploy/klusterlet/chart/`) --------------------

fn klusterlet(ns: &str, given: &Value) -> Rendered {
    let v = values_over(json!({}), given);
    let registry = text(&v, "images.registry", "quay.io/open-cluster-management");
    let tag = text(&v, "images.tag", "v1.3.1");
    let image = |name: &str| format!("{registry}/{name}:{tag}");
    let agent_ns = text(&v, "klusterlet.namespace", "open-cluster-management-agent");
    let bootstrap = text(&v, "bootstrapHubKubeConfig", "");
    let containers = json!([{
        "name": "klusterlet",
        "image": image("registration-operator"),
        "args": ["/registration-operator", "klusterlet", "--disable-leader-election"],
    }]);
    let k = "klusterlet";
    let mut objects = manager(ns, k, k, k, int(&v, "replicaCount", 1), containers).to_vec();
    if agent_ns != ns && !bootstrap.is_empty() {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": agent_ns, "annotations": {"workload.openshift.io/allowed": "management"}},
        }));
    }
    if !bootstrap.is_empty() {
        objects.push(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "bootstrap-hub-kubeconfig", "namespace": agent_ns},
            "data": {"kubeconfig": util::b64_encode(bootstrap.as_bytes())},
        }));
    }
    let config = |key: &str| value(&v, &format!("klusterlet.{key}"), json!({}));
    let mut spec = json!({
        "clusterName": text(&v, "klusterlet.clusterName", "cluster1"),
        "namespace": agent_ns,
        "deployOption": {"mode": text(&v, "klusterlet.mode", "Singleton")},
        "registrationImagePullSpec": image("registration"),
        "workImagePullSpec": image("work"),
        "imagePullSpec": image("registration-operator"),
        "resourceRequirement": value(&v, "klusterlet.resourceRequirement", json!({"type": "Default"})),
        "registrationConfiguration": config("registrationConfiguration"),
        "workConfiguration": config("workConfiguration"),
    });
    for key in ["externalServerURLs", "nodePlacement"] {
        let given = config(key);
        if truthy(Some(&given)) {
            spec[key] = given;
        }
    }
    objects.push(json!({
        "apiVersion": "operator.open-cluster-management.io/v1",
        "kind": "Klusterlet",
        "metadata": {"name": text(&v, "klusterlet.name", "klusterlet")},
        "spec": spec,
    }));
    Rendered {
        crds: vec![crd("klusterlets.operator.open-cluster-management.io")],
        objects,
    }
}

// ---- cluster-proxy 0.10.0 / 0.11.0 (open-cluster-management-io/cluster-proxy `charts/cluster-proxy/`)
// --------------

fn cluster_proxy(ns: &str, version: &str, given: &Value) -> Rendered {
    let v010 = version == "0.10.0";
    // The addon manager's gate: renamed in 0.11.0, and the old key is silently ignored
    // (open-cluster-management-io/cluster-proxy PR #274).
    let gate = if v010 {
        "ClusterProfileAccessProvider"
    } else {
        "ClusterProfile"
    };
    let gate_value = gate[..1].to_lowercase() + &gate[1..];
    let v = values_over(
        json!({"enableKubeApiProxy": true, "enableImpersonation": true}),
        given,
    );
    let tag = text(&v, "tag", &format!("v{version}"));
    let registry = text(&v, "registry", "quay.io/open-cluster-management");
    let manager_image = format!("{registry}/{}:{tag}", text(&v, "image", "cluster-proxy"));
    let upstream = "quay.io/open-cluster-management/cluster-proxy";
    let server_image = format!("{}:{tag}", text(&v, "proxyServerImage", upstream));
    let agent_image = format!("{}:{tag}", text(&v, "proxyAgentImage", upstream));
    let replicas = int(&v, "replicas", 1);
    let service_proxy = truthy(at(&v, "enableServiceProxy"));

    let mut args = vec![
        json!("/manager"),
        json!("--leader-elect=true"),
        json!(format!("--signer-secret-namespace={ns}")),
        json!(format!("--agent-image-name={agent_image}")),
        json!(format!(
            "--enable-kube-api-proxy={}",
            text(&v, "enableKubeApiProxy", "false")
        )),
    ];
    if service_proxy {
        args.push(json!("--enable-service-proxy=true"));
    }
    args.push(json!(format!(
        "--feature-gates={gate}={}",
        text(&v, &format!("featureGates.{gate_value}"), "false")
    )));
    let containers = json!([{"name": "manager", "image": manager_image, "args": args}]);
    let sa = "cluster-proxy";
    let role = "open-cluster-management:cluster-proxy:addon-manager";
    let name = "cluster-proxy-addon-manager";
    let mut objects = manager(ns, name, sa, role, replicas, containers).to_vec();

    // templates/managedproxyconfiguration.yaml (fixtures/charts/cluster-proxy-0.10.0).
    let address = text(&v, "proxyServer.entrypointAddress", "");
    let port = value(&v, "proxyServer.port", json!(8091));
    let entrypoint = if !address.is_empty() {
        let mut hostname = json!({"value": address});
        if v010 {
            // Not declared by the v0.10.0 CRD; removed by PR #272 in 0.11.0.
            hostname["port"] = port.clone();
        }
        json!({"type": "Hostname", "hostname": hostname, "port": port})
    } else {
        json!({"type": "PortForward", "port": port})
    };
    let mut mpc = json!({
        "apiVersion": "proxy.open-cluster-management.io/v1alpha1",
        "kind": "ManagedProxyConfiguration",
        "metadata": {"name": "cluster-proxy"},
        "spec": {
            "authentication": {"dump": {"secrets": {}}, "signer": {"type": "SelfSigned"}},
            "proxyServer": {"image": server_image, "replicas": replicas, "namespace": ns, "entrypoint": entrypoint},
            "proxyAgent": {"image": agent_image, "replicas": replicas},
        },
    });
    if v010 {
        // Not declared by the v0.10.0 CRD (PR #250); the template kept it until PR #272
        // (open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`;
        // open-cluster-management-io/cluster-proxy PR #272).
        mpc["spec"]["proxyAgent"]["additionalValues"] = json!({
            "enableImpersonation": text(&v, "enableImpersonation", "false"),
        });
    }
    if truthy(at(&v, "userServer.enabled")) {
        mpc["spec"]["userServer"] = json!({});
    }
    objects.push(mpc);

    let placement_name = text(&v, "installByPlacement.placementName", "");
    let (p_name, p_ns) = if placement_name.is_empty() {
        objects.push(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "cluster-proxy-placement", "namespace": ns},
            "spec": {"clusterSets": ["global"]},
        }));
        objects.push(global_binding(ns));
        ("cluster-proxy-placement".to_owned(), ns.to_owned())
    } else {
        let p_ns = text(&v, "installByPlacement.placementNamespace", ns);
        (placement_name, p_ns)
    };
    let addon_api = if v010 { "v1alpha1" } else { "v1beta1" };
    objects.push(addon(
        &format!("addon.open-cluster-management.io/{addon_api}"),
        "cluster-proxy",
        json!({
            "supportedConfigs": [
                {"group": "proxy.open-cluster-management.io", "resource": "managedproxyconfigurations", "defaultConfig": {"name": "cluster-proxy"}},
                {"group": "addon.open-cluster-management.io", "resource": "addondeploymentconfigs"},
            ],
            "installStrategy": {"type": "Placements", "placements": [{"name": p_name, "namespace": p_ns, "rolloutStrategy": {"type": "All"}}]},
        }),
    ));

    // Rendered only with enableServiceProxy, not userServer.enabled (open-cluster-management-io/cluster-proxy
    // v0.10.0 `charts/cluster-proxy/templates/user-deployment.yaml`).
    if service_proxy {
        objects.extend(user_server(ns, &manager_image, replicas));
    }
    let mut crds = vec![crd(
        "managedproxyconfigurations.proxy.open-cluster-management.io",
    )];
    if v010 {
        // Removed in 0.11.0 (PR #270).
        crds.push(crd(
            "managedproxyserviceresolvers.proxy.open-cluster-management.io",
        ));
    }
    Rendered { crds, objects }
}

/// cluster-proxy's user server: its Deployment and Service.
fn user_server(ns: &str, image: &str, replicas: i64) -> [Value; 2] {
    let name = "cluster-proxy-addon-user";
    let mut user = deployment(
        ns,
        name,
        name,
        replicas,
        json!([
            {"name": "controllers", "image": image, "args": ["/manager", "--leader-elect=true"]},
            {"name": "user-server", "image": image, "args": [
                "/user-server", "--server-port=9092",
                format!("--host=proxy-entrypoint.{ns}.svc"), "--port=8090",
                "--server-cert=/server-cert/tls.crt", "--server-key=/server-cert/tls.key",
            ]},
        ]),
    );
    let pod = &mut user["spec"]["template"]["spec"];
    pod["serviceAccountName"] = json!("cluster-proxy");
    pod["volumes"] = json!([
        {"name": "server-cert", "secret": {"secretName": "cluster-proxy-user-serving-cert"}},
        {"name": "proxy-server-ca", "secret": {"secretName": "proxy-server-ca"}},
        {"name": "proxy-client", "secret": {"secretName": "proxy-client"}},
    ]);
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ClusterIP", "selector": {"app": name}, "ports": [{"name": "https", "protocol": "TCP", "port": 9092, "targetPort": 9092}]},
    });
    [user, service]
}

// ---- managed-serviceaccount 0.10.0 (open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/`)
// --------

fn managed_serviceaccount(ns: &str, given: &Value) -> Rendered {
    let v = values_over(json!({"agentInstallAll": true}), given);
    let repository = text(
        &v,
        "image",
        "quay.io/open-cluster-management/managed-serviceaccount",
    );
    let image = format!("{repository}:{}", text(&v, "tag", "v0.10.0"));
    let cred_syncer = text(&v, "featureGates.clusterProfileCredSyncer", "false");
    let ephemeral = text(&v, "featureGates.ephemeralIdentity", "false");
    let containers = json!([{
        "name": "manager",
        "image": image,
        "args": [
            "./msa", "manager", "--leader-elect=true",
            format!("--agent-image-name={image}"),
            "--deploy-mode=Deployment",
            format!("--feature-gates=EphemeralIdentity={ephemeral},ClusterProfileCredSyncer={cred_syncer}"),
        ],
    }]);
    let sa = "managed-serviceaccount";
    let role = "open-cluster-management:managed-serviceaccount:addon-manager";
    let name = "managed-serviceaccount-addon-manager";
    let mut objects = manager(ns, name, sa, role, int(&v, "replicas", 1), containers).to_vec();
    if cred_syncer == "true" {
        let role = format!("{role}-clusterprofile");
        objects.push(cluster_role(
            &role,
            json!([
                {"apiGroups": ["authentication.open-cluster-management.io"], "resources": ["managedserviceaccounts"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["multicluster.x-k8s.io"], "resources": ["clusterprofiles"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            ]),
        ));
        objects.push(cluster_role_binding(&role, &role, ns, sa));
    }
    let install_all = truthy(at(&v, "agentInstallAll"));
    let strategy = if install_all {
        json!({"type": "Placements", "placements": [{"name": "global", "namespace": ns, "rolloutStrategy": {"type": "All"}}]})
    } else {
        json!({"type": "Manual"})
    };
    objects.push(addon(
        "addon.open-cluster-management.io/v1alpha1",
        "managed-serviceaccount",
        json!({"installStrategy": strategy}),
    ));
    if install_all {
        objects.push(global_binding(ns));
        objects.push(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": {"name": "global", "namespace": ns},
            "spec": {
                "clusterSets": ["global"],
                "tolerations": [
                    {"key": "cluster.open-cluster-management.io/unreachable", "operator": "Exists"},
                    {"key": "cluster.open-cluster-management.io/unavailable", "operator": "Exists"},
                ],
            },
        }));
    }
    Rendered {
        crds: vec![crd(
            "managedserviceaccounts.authentication.open-cluster-management.io",
        )],
        objects,
    }
}
