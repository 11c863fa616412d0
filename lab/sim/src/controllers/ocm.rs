//! The API server's own controllers (CRD establishing, Deployment rollout, CSR signing), OCM's operators,
//! and the registration agent and hub (join, accept, claims).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::addons::{self, SERVING_CERT};
use super::{
    CLUSTER_NAME_LABEL, Controller, Op, Queue, Resync, Work, any_change, available_deployment,
    is_hub, mark, mark_work, named, namespace_obj, queue_if, s, spec_of, whole_cluster,
};
use crate::apiserver::{self, gk};
use crate::charts::{self, deployment};
use crate::faults::Behaviour;
use crate::util::{self, set_condition};
use crate::world::ChangeKind::Deleted;
use crate::world::{Agent, Change, KIND_NETWORK, World, control_plane};

pub(crate) const HUB_NAMESPACE: &str = "open-cluster-management-hub";
const AGENT_NAMESPACE: &str = "open-cluster-management-agent";
const BOOTSTRAP_SA_NS: &str = "open-cluster-management";
const BOOTSTRAP_SA: &str = "agent-registration-bootstrap";
const SPOKE_ONLY_LABEL: &str = "open-cluster-management.io/spoke-only";

/// Reserved claim names (open-cluster-management-io/api v1.3.0 `cluster/v1alpha1/types.go`,
/// `ReservedClusterClaimNames`).
const RESERVED_CLAIMS: &[&str] = &[
    "id.k8s.io",
    "kubeversion.open-cluster-management.io",
    "platform.open-cluster-management.io",
    "product.open-cluster-management.io",
];

/// Sets each condition of a list (`type`, `status`, `reason`, `message`) as [`set_condition`] does.
fn set_conditions(obj: &mut Value, conds: Value) {
    for c in conds.as_array().into_iter().flatten() {
        let f = |k: &str| c[k].as_str().unwrap_or_default();
        set_condition(obj, f("type"), f("status"), f("reason"), f("message"));
    }
}

/// The CRDs named that do not exist yet, to create (built only when missing: the operators run on every
/// change of what they watch).
fn missing_crds(w: &World, c: &str, names: &[&str], gated: Option<&str>) -> Vec<Op> {
    let all = names.iter().copied().chain(gated);
    let missing = all.filter(|n| w.get(c, gk::CRD, "", n).is_none());
    missing.map(|n| Op::Create(s(c), charts::crd(n))).collect()
}

/// The API server establishes a CRD's names (the lab waits for this before applying custom
/// resources, open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/operators/*/controllers/*/*_crd_reconcile.go`).
fn crd_establish(w: &World, k: &Work) -> Option<Vec<Op>> {
    let c = k.cluster();
    let crd = w.get(c, gk::CRD, "", &k.key()[0])?;
    let mut n = crd.clone();
    let conds = json!([
        {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
        {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
    ]);
    set_conditions(&mut n, conds);
    let versions = crd["spec"]["versions"].as_array().into_iter().flatten();
    let stored = versions.filter(|v| v["storage"] == true);
    n["status"]["acceptedNames"] = crd["spec"]["names"].clone();
    n["status"]["storedVersions"] = stored.map(|v| v["name"].clone()).collect();
    Some(vec![Op::Put(s(c), n)])
}

/// The images a Deployment's Pods run (init containers and containers), as written. The simulation's
/// placeholder `simulated` is not an image.
fn pod_images(d: &Value) -> Vec<&str> {
    let spec = &d["spec"]["template"]["spec"];
    let lists = ["initContainers", "containers"].map(|k| spec[k].as_array());
    let containers = lists.into_iter().flatten().flatten();
    let images = containers.filter_map(|c| c["image"].as_str());
    images.filter(|i| *i != "simulated").collect()
}

/// The first image a Deployment of cluster `c` runs that the cluster's node lacks, and the Deployments
/// that wait for it (`[namespace, name]`).
fn missing_image<'a>(w: &'a World, c: &str) -> Option<(&'a str, Vec<[&'a str; 2]>)> {
    let all: Vec<&Value> = w.list(c, gk::DEPLOYMENT, None).collect();
    let mut images = all.iter().flat_map(|&d| pod_images(d));
    let image = images.find(|i| !w.node_has_image(c, i))?;
    let waiting = all.iter().filter(|d| pod_images(d).contains(&image));
    let waiting = waiting.map(|d| [util::namespace(d), util::name(d)]);
    Some((image, waiting.collect()))
}

/// The kubelet pulls what a cluster's Pods run and its node lacks, one image at a time (the kubelet's
/// default `serializeImagePulls: true`), each pull a [`Behaviour::ImagePull`]; the Deployments that waited
/// for the image roll out after it. An image the `node-images` step pre-pulled or loaded from a bundle is
/// there already and costs nothing. (Addon availability does not wait for its agent's image yet: the
/// ManagedClusterAddOn's lease is modelled on the hub alone.)
fn image_pull(w: &World, c: &str) -> Option<Vec<Op>> {
    let node = w.image_node(c)?.name.clone();
    let (image, waiting) = missing_image(w, c)?;
    let image = s(image);
    let mut ops = vec![Op::Pull { node, image }];
    ops.push(Op::Enqueue(Work::new(&IMAGE_PULL, c, ["", ""])));
    for key in waiting {
        ops.push(Op::Enqueue(Work::new(&ROLLOUT, c, key)));
    }
    Some(ops)
}

/// The Deployment controller: every Deployment becomes Available, except the two cluster-proxy ones whose
/// pods cannot start (open-cluster-management-io/cluster-proxy v0.10.0 `cmd/addon-manager/main.go`: the manager
/// exits without ManagedProxyConfiguration `cluster-proxy`; its `charts/cluster-proxy/README.md`: the user
/// server stays Pending without its serving cert Secret).
fn rollout(w: &World, k: &Work) -> Option<Vec<Op>> {
    let (c, [ns, name]) = (k.cluster(), k.key());
    // Pods wait (ContainerCreating) while their node pulls an image: the pull re-queues this rollout.
    let pulling = |d: &Value| pod_images(d).iter().any(|i| !w.node_has_image(c, i));
    let d = w.get(c, gk::DEPLOYMENT, ns, name).filter(|d| !pulling(d))?;
    let cert = w.get(c, gk::SECRET, ns, SERVING_CERT);
    let mpc = addons::mpc(w, c);
    let blocker = match name.as_str() {
        "cluster-proxy-addon-user" if cert.is_none() => Some(
            "pods are Pending: MountVolume.SetUp failed for volume \"server-cert\": secret \"cluster-proxy-user-serving-cert\" not found",
        ),
        "cluster-proxy-addon-manager" if mpc.is_none() => Some(
            "pods are in CrashLoopBackOff: the addon manager exits because ManagedProxyConfiguration cluster-proxy does not exist",
        ),
        _ => None,
    };
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    // `null` removes the field (JSON merge patch).
    let count = |yes: bool| if yes { json!(replicas) } else { Value::Null };
    let up = blocker.is_none();
    let mut n = d.clone();
    let status = json!({
        "observedGeneration": d.pointer("/metadata/generation").cloned().unwrap_or(json!(1)),
        "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": count(up), "availableReplicas": count(up), "unavailableReplicas": count(!up),
    });
    util::merge(&mut n["status"], &status);
    let available = match blocker {
        None => {
            json!({"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability."})
        }
        Some(why) => {
            let msg = format!("Deployment does not have minimum availability: {why}");
            json!({"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": msg})
        }
    };
    let progressing = format!("ReplicaSet \"{name}-5d8f7c9b6\" has successfully progressed.");
    let conds = json!([
        available,
        {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable", "message": progressing},
    ]);
    set_conditions(&mut n, conds);
    Some(vec![Op::Put(s(c), n)])
}

/// The six hub Deployments the cluster-manager operator runs in `open-cluster-management-hub` with the
/// chart's values (open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/.../clustermanager_runtime_reconcile.go`): name and the ClusterManager's image field
/// (`<component>ImagePullSpec`). A controller's label `app` is its name spelled `clustermanager-`, a
/// webhook's its name.
const HUB_DEPLOYMENTS: &[(&str, &str)] = &[
    ("cluster-manager-registration-controller", "registration"),
    ("cluster-manager-registration-webhook", "registration"),
    ("cluster-manager-work-webhook", "work"),
    ("cluster-manager-placement-controller", "placement"),
    ("cluster-manager-addon-manager-controller", "addOnManager"),
    ("cluster-manager-addon-webhook", "addOnManager"),
];

/// The cluster-manager operator (open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/operators/clustermanager/`): with ClusterManager `cluster-manager` and its own Deployment, it
/// installs the hub CRDs (the ClusterProfile CRD only with the gate), the hub controllers, and, with
/// `DefaultClusterSet`, the sets `default` and `global` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/managedclusterset/`).
fn hub_operator(w: &World, c: &str) -> Option<Vec<Op>> {
    let cm = w.get(c, gk::CLUSTER_MANAGER, "", "cluster-manager")?;
    w.find_named(c, gk::DEPLOYMENT, "cluster-manager")?; // the operator runs
    let mut ops = vec![Op::Create(s(c), namespace_obj(HUB_NAMESPACE))];
    let profile =
        apiserver::hub_gate(w, c, "ClusterProfile").then_some(charts::CLUSTER_PROFILE_CRD);
    ops.extend(missing_crds(w, c, charts::HUB_CRDS, profile));
    for (name, component) in HUB_DEPLOYMENTS {
        let app = match name.strip_suffix("-controller") {
            Some(_) => name.replacen("cluster-manager", "clustermanager", 1),
            None => s(name),
        };
        let image = util::str_at(cm, &format!("/spec/{component}ImagePullSpec"))
            .unwrap_or("quay.io/open-cluster-management/registration:v1.3.1");
        let containers =
            json!([{"name": "hub", "image": image, "args": ["/registration", "controller"]}]);
        let d = deployment(HUB_NAMESPACE, name, &app, 1, containers);
        ops.push(Op::Create(s(c), d));
    }
    if apiserver::hub_gate(w, c, "DefaultClusterSet") && w.served(c, gk::CLUSTER_SET) {
        let set = |name: &str, selector: Value| {
            let set = json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
                "metadata": {"name": name}, "spec": {"clusterSelector": selector},
            });
            Op::Create(s(c), set)
        };
        let exclusive = json!({"selectorType": "ExclusiveClusterSetLabel"});
        let all = json!({"selectorType": "LabelSelector", "labelSelector": {}});
        ops.extend([set("default", exclusive), set("global", all)]);
    }
    ops.extend(cluster_manager_status(w, c, cm));
    Some(ops)
}

/// The ClusterManager's status (open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/.../clustermanager_webhook_reconcile.go`, `pkg/operator/.../clustermanager_controller.go`):
/// `Applied` comes with the first pass; `Progressing` stays True until every Deployment is ready, and only
/// then are the webhook configurations registered.
fn cluster_manager_status(w: &World, c: &str, cm: &Value) -> Vec<Op> {
    let ready = |name: &str| {
        w.get(c, gk::DEPLOYMENT, HUB_NAMESPACE, name)
            .is_some_and(super::available)
    };
    // The Deployments of `component` (all with `None`) that are not ready, comma-separated.
    let down = |component: Option<&str>| {
        let mut down = HUB_DEPLOYMENTS.to_vec();
        down.retain(|(name, comp)| component.is_none_or(|c| c == *comp) && !ready(name));
        let names: Vec<&str> = down.iter().map(|(name, _)| *name).collect();
        names.join(", ")
    };
    // `Hub<What>Degraded`, about the Deployments of component `what`.
    let health = |what: &str, fine: &str| {
        let kind = format!("Hub{what}Degraded");
        let down = down(Some(&what.to_lowercase()));
        if down.is_empty() {
            json!({"type": kind, "status": "False", "reason": format!("{what}Functional"), "message": fine})
        } else {
            let msg = format!("{what} pods are unavailable: {down}");
            json!({"type": kind, "status": "True", "reason": format!("Unavailable{what}Pod"), "message": msg})
        }
    };
    let rolling = down(None);
    let mut ops = Vec::new();
    let progressing = if rolling.is_empty() {
        for (key, hook) in apiserver::HUB_ADMISSION_WEBHOOKS {
            ops.push(Op::Create(s(c), webhook_configuration(key, hook)));
        }
        json!({"type": "Progressing", "status": "False", "reason": "ClusterManagerUpToDate", "message": "Components of cluster manager are up to date"})
    } else {
        let msg = format!("Deployments {rolling} is still rolling");
        json!({"type": "Progressing", "status": "True", "reason": "ClusterManagerDeploymentRolling", "message": msg})
    };
    let mut n = cm.clone();
    n["status"]["observedGeneration"] = cm["metadata"]["generation"].clone();
    let conds = json!([
        {"type": "Applied", "status": "True", "reason": "ClusterManagerApplied", "message": "Components of cluster manager are applied"},
        {"type": "ValidFeatureGates", "status": "True", "reason": "FeatureGatesAllValid", "message": "Feature gates are all valid"},
        health("Registration", "Registration is managing credentials"),
        health("Placement", "Placement is scheduling placement decisions"),
        progressing,
    ]);
    set_conditions(&mut n, conds);
    ops.push(Op::Put(s(c), n));
    ops
}

/// A webhook configuration as the operator registers it (`failurePolicy: Fail`, port 9443).
fn webhook_configuration(key: &str, hook: &apiserver::HubWebhook) -> Value {
    let kind = key.split_once('.').map_or(key, |(k, _)| k);
    let service =
        json!({"namespace": HUB_NAMESPACE, "name": hook.service, "path": hook.path, "port": 9443});
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": hook.name},
        "webhooks": [{
            "name": hook.name, "failurePolicy": "Fail", "timeoutSeconds": 10, "sideEffects": "None",
            "admissionReviewVersions": ["v1beta1", "v1"], "clientConfig": {"service": service},
        }],
    })
}

/// The first Klusterlet on a cluster (the chart names it `klusterlet`).
fn klusterlet<'a>(w: &'a World, c: &str) -> Option<&'a Value> {
    w.list(c, gk::KLUSTERLET, None).next()
}

fn agent_namespace(k: &Value) -> String {
    let ns = util::str_at(k, "/spec/namespace").filter(|n| !n.is_empty());
    s(ns.unwrap_or(AGENT_NAMESPACE))
}

fn spoke_gate(k: &Value, gate: &str, default: bool) -> bool {
    let gates = k.pointer("/spec/registrationConfiguration/featureGates");
    apiserver::gate_on(gates, gate, default)
}

/// The klusterlet operator (open-cluster-management-io/ocm v1.3.1 `pkg/operator/operators/klusterlet/`):
/// installs the agents and the spoke CRDs — ClusterClaim always, ClusterProperty (about.k8s.io/v1alpha1,
/// cluster-scoped) only with the `ClusterProperty` gate.
fn klusterlet_operator(w: &World, c: &str) -> Option<Vec<Op>> {
    // The operator runs while its Deployment has a replica: scaled to 0, nothing reconciles the agents.
    let running = |d: &Value| d["spec"]["replicas"].as_i64() != Some(0);
    let operator = w.find_named(c, gk::DEPLOYMENT, "klusterlet");
    let k = klusterlet(w, c).filter(|_| operator.is_some_and(running))?;
    let ns = agent_namespace(k);
    let property = spoke_gate(k, "ClusterProperty", false).then_some(charts::CLUSTER_PROPERTY_CRD);
    let crds = [charts::CLUSTER_CLAIM_CRD, charts::APPLIED_WORK_CRD];
    let mut ops = missing_crds(w, c, &crds, property);
    ops.push(Op::Create(s(c), namespace_obj(&ns)));
    for (name, image) in [
        (REGISTRATION_APP, "registrationImagePullSpec"),
        ("klusterlet-work-agent", "workImagePullSpec"),
    ] {
        let image = util::str_at(k, &format!("/spec/{image}"))
            .unwrap_or("quay.io/open-cluster-management/registration:v1.3.1");
        let containers = json!([{"name": "agent", "image": image, "args": ["agent"]}]);
        let existing = w.get(c, gk::DEPLOYMENT, &ns, name).cloned();
        let mut d = existing.unwrap_or_else(|| deployment(&ns, name, name, 1, containers));
        // Applied with the operator's replica count on every reconcile, 1 on a one-node cluster: a
        // scaled agent is scaled back (ocm manifests/klusterlet/management/klusterlet-registration-deployment.yaml
        // `replicas: {{ .Replica }}`, pkg/operator/helpers `DetermineReplica`).
        d["spec"]["replicas"] = json!(1);
        ops.push(Op::Put(s(c), d));
    }
    // The registration Deployment's ReplicaSet starts its Pod: with the bootstrap Secret there the kubelet
    // mounts it at once, else the Pod waits (see [`Behaviour::BootstrapMount`]).
    let agent = w.get(c, gk::DEPLOYMENT, &ns, REGISTRATION_APP);
    let scaled_down = agent.is_some_and(|d| !running(d));
    if registration_pods(w, c, Some(&ns)).is_empty() && !scaled_down {
        let mounted = w.get(c, gk::SECRET, &ns, BOOTSTRAP_SECRET).is_some();
        ops.push(Op::Create(s(c), registration_pod(&ns, mounted)));
    }
    let mut n = k.clone();
    n["status"]["observedGeneration"] = k["metadata"]["generation"].clone();
    let conds = json!([
        {"type": "Applied", "status": "True", "reason": "KlusterletApplied", "message": "Klusterlet Component Applied"},
        {"type": "RegistrationDesiredDegraded", "status": "False", "reason": "DeploymentsFunctional", "message": "deployments are ready"},
        {"type": "WorkDesiredDegraded", "status": "False", "reason": "DeploymentsFunctional", "message": "deployments are ready"},
    ]);
    set_conditions(&mut n, conds);
    ops.push(Op::Put(s(c), n));
    Some(ops)
}

/// What the registration agent makes of the bootstrap kubeconfig: the hub lab cluster, or why it cannot
/// use it (kubernetes-sigs/kind v0.32.0 `pkg/cluster/internal/providers/docker/provider.go`,
/// `GetAPIServerInternalEndpoint`; open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/join/exec.go`;
/// open-cluster-management-io/clusteradm#292).
fn bootstrap_hub(w: &World, spoke: &str, secret: &Value) -> Result<String, String> {
    let data = util::str_at(secret, "/data/kubeconfig").ok_or("secret has no key `kubeconfig`")?;
    let (url, token, ca) = parse_bootstrap(data)?;
    let server = url.trim_end_matches('/');
    let dial = |why: &str| {
        format!(
            "Get \"{url}/apis/cluster.open-cluster-management.io/v1/managedclusters\": dial tcp: {why}"
        )
    };
    // A cluster's own endpoint (an existing cluster's address) is reached from anywhere while it runs.
    let mut clusters = w.clusters.values();
    let by_endpoint = clusters.find(|c| c.endpoint.as_deref() == Some(server));
    let hub = match by_endpoint.map(|c| c.name.as_str()) {
        Some(hub) if !w.reachable(hub) => return Err(dial("connect: connection refused")),
        Some(hub) => hub,
        None => {
            let host = server
                .strip_prefix("https://")
                .and_then(|h| h.strip_suffix(":6443"))
                .and_then(|h| h.strip_suffix("-control-plane"));
            let Some(hub) = host else {
                return Err(dial(
                    "connect: connection refused (from inside a kind node only https://<hub>-control-plane:6443 reaches the hub)",
                ));
            };
            let on_kind = |c: &str| {
                w.containers
                    .get(&control_plane(c))
                    .is_some_and(|ct| ct.running && ct.networks.contains_key(KIND_NETWORK))
            };
            if !w.reachable(hub) || !on_kind(hub) || !on_kind(spoke) {
                return Err(dial(&format!(
                    "lookup {hub}-control-plane on 127.0.0.11:53: no such host"
                )));
            }
            hub
        }
    };
    // TLS first: the agent verifies the hub's serving certificate with the kubeconfig's CA.
    if ca.is_some_and(|ca| !trusts(&ca, w.ca_pem(hub))) {
        return Err(format!(
            "Post \"{url}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews\": tls: failed to verify certificate: x509: certificate signed by unknown authority (the bootstrap kubeconfig's certificate-authority-data is not cluster {hub}'s CA)"
        ));
    }
    let minted = w.tokens.get(&token).is_some_and(|t| {
        t.cluster == hub && t.namespace == BOOTSTRAP_SA_NS && t.service_account == BOOTSTRAP_SA
    });
    if !minted {
        return Err("Unauthorized: the bootstrap token was not issued by the hub for open-cluster-management/agent-registration-bootstrap".to_owned());
    }
    if !is_hub(w, hub) || !w.served(hub, gk::MANAGED_CLUSTER) {
        return Err(format!(
            "the server could not find the requested resource (post managedclusters.cluster.open-cluster-management.io on {hub}): is the cluster manager installed?"
        ));
    }
    Ok(hub.to_owned())
}

/// Whether a PEM CA bundle holds the CA certificate `ca_pem` (compared as DER).
fn trusts(bundle: &str, ca_pem: &str) -> bool {
    let certs = pem::parse_many(bundle).unwrap_or_default();
    pem::parse(ca_pem).is_ok_and(|ca| certs.iter().any(|c| c.contents() == ca.contents()))
}

/// What the registration agent reads from its base64-encoded bootstrap kubeconfig: the hub server, the
/// token, and the CA (`certificate-authority-data`, decoded PEM; `None` with `insecure-skip-tls-verify`).
fn parse_bootstrap(data: &str) -> Result<(String, String, Option<String>), String> {
    let text = util::b64_text(data).ok_or("key `kubeconfig` is not base64-encoded UTF-8")?;
    let cfg: Value = serde_saphyr::from_str(&text)
        .map_err(|e| format!("the bootstrap kubeconfig is not valid YAML: {e}"))?;
    let cluster = &cfg["clusters"][0]["cluster"];
    let field = |v: &Value, path: &str| {
        let missing = || format!("the bootstrap kubeconfig has no {path}");
        v.as_str().map(str::to_owned).ok_or_else(missing)
    };
    let ca = match cluster["certificate-authority-data"].as_str() {
        Some(b64) => Some(
            util::b64_text(b64).ok_or("certificate-authority-data is not base64-encoded PEM")?,
        ),
        // Neither a CA nor insecure: the system roots, which do not hold a kind cluster's CA.
        None if cluster["insecure-skip-tls-verify"] != true => Some(String::new()),
        None => None,
    };
    let server = field(&cluster["server"], "clusters[0].cluster.server")?;
    let token = field(&cfg["users"][0]["user"]["token"], "users[0].user.token")?;
    Ok((server, token, ca))
}

/// The registration agent's Pods carry `app=klusterlet-registration-agent` (ocm v1.3.1
/// `manifests/klusterlet/management/klusterlet-registration-deployment.yaml`).
const REGISTRATION_APP: &str = "klusterlet-registration-agent";
const POD: &str = "Pod";
const BOOTSTRAP_SECRET: &str = "bootstrap-hub-kubeconfig";
const HUB_SECRET: &str = "hub-kubeconfig-secret";

/// The registration agent's Pods on `spoke`, in namespace `ns` or all.
fn registration_pods<'a>(w: &'a World, spoke: &'a str, ns: Option<&'a str>) -> Vec<&'a Value> {
    let ours = |p: &&Value| util::label(p, "app") == Some(REGISTRATION_APP);
    w.list(spoke, POD, ns).filter(ours).collect()
}

/// A registration agent Pod as its ReplicaSet starts it: `Running` when its bootstrap Secret volume can
/// be mounted, else `Pending` (ContainerCreating: `MountVolume.SetUp failed … secret
/// "bootstrap-hub-kubeconfig" not found`).
fn registration_pod(ns: &str, mounted: bool) -> Value {
    let (suffix, phase) = if mounted {
        ("mounted", "Running")
    } else {
        ("waiting", "Pending")
    };
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{REGISTRATION_APP}-{suffix}"), "namespace": ns, "labels": {"app": REGISTRATION_APP}},
        "status": {"phase": phase}})
}

/// Queues every Pending registration Pod on `c` whose bootstrap Secret now exists: the kubelet mounts it
/// at its next retry ([`Behaviour::BootstrapMount`]).
fn queue_waiting_mounts(w: &World, c: &str, q: &mut Queue<'_>) {
    for p in registration_pods(w, c, None) {
        if mountable(w, c, p) {
            q.add(c, util::namespace(p), util::name(p));
        }
    }
}

/// A Pending Pod whose bootstrap Secret exists.
fn mountable(w: &World, c: &str, p: &Value) -> bool {
    let secret = w.get(c, gk::SECRET, util::namespace(p), BOOTSTRAP_SECRET);
    p["status"]["phase"] == "Pending" && secret.is_some()
}

/// The kubelet's mount retry succeeds: the waiting Pod starts.
fn mount_bootstrap(w: &World, k: &Work) -> Option<Vec<Op>> {
    let (c, [ns, name]) = (k.cluster(), k.key());
    let p = w.get(c, POD, ns, name).filter(|p| mountable(w, c, p))?;
    let mut n = p.clone();
    n["status"]["phase"] = json!("Running");
    Some(vec![Op::Put(s(c), n)])
}

/// The Klusterlet `k` of cluster `c` with its `HubConnectionDegraded` condition (`True`: why the agent
/// cannot reach the hub).
fn hub_connection(k: &Value, c: &str, degraded: &str, reason: &str, msg: &str) -> Vec<Op> {
    let mut n = k.clone();
    set_condition(&mut n, "HubConnectionDegraded", degraded, reason, msg);
    vec![Op::Put(s(c), n)]
}

/// The registration agent (open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/`): with a usable
/// bootstrap kubeconfig it registers (see [`register`]); otherwise the Klusterlet says why
/// (`HubConnectionDegraded`).
fn registration(w: &World, spoke: &str) -> Vec<Op> {
    // A stopped agent does nothing (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/hub/lease/controller.go`).
    let stopped = w.agent(spoke).is_some_and(|a| a.stopped.is_some());
    let deployed = w.find_named(spoke, gk::DEPLOYMENT, REGISTRATION_APP);
    let (Some(k), Some(_), false) = (klusterlet(w, spoke), deployed, stopped) else {
        return Vec::new();
    };
    let ns = agent_namespace(k);
    let cluster_name = util::str_at(k, "/spec/clusterName").unwrap_or("");
    if cluster_name.is_empty() {
        let why = "spec.clusterName is empty";
        return hub_connection(k, spoke, "True", "BootstrapSecretError", why);
    }
    let secret = w.get(spoke, gk::SECRET, &ns, BOOTSTRAP_SECRET);
    let pods = registration_pods(w, spoke, Some(&ns));
    let running = pods.iter().any(|p| p["status"]["phase"] == "Running");
    if secret.is_some() && !pods.is_empty() && !running {
        // Waiting for the kubelet's next mount retry.
        return Vec::new();
    }
    let Some(secret) = secret else {
        let msg = format!(
            "Failed to get bootstrap secret \"{ns}/{BOOTSTRAP_SECRET}\": secrets \"{BOOTSTRAP_SECRET}\" not found"
        );
        return hub_connection(k, spoke, "True", "BootstrapSecretMissing", &msg);
    };
    match bootstrap_hub(w, spoke, secret) {
        Ok(hub) => register(w, spoke, k, &hub, cluster_name),
        Err(why) => {
            let msg = format!(
                "Failed to create SelfSubjectAccessReview with bootstrap secret \"{ns}/{BOOTSTRAP_SECRET}\": {why}"
            );
            hub_connection(k, spoke, "True", "BootstrapSecretError", &msg)
        }
    }
}

/// The agent registers with `hub`: it creates its ManagedCluster (again when deleted on the hub) and a
/// CSR labelled with the cluster name until it has joined.
fn register(w: &World, spoke: &str, k: &Value, hub: &str, cluster_name: &str) -> Vec<Op> {
    let mut agent = match w.agent(spoke) {
        Some(a) if a.hub == hub && a.cluster_name == cluster_name => a.clone(),
        _ => Agent {
            hub: s(hub),
            cluster_name: s(cluster_name),
            ..Agent::default()
        },
    };
    let mut ops = vec![Op::AgentIndex(format!("{hub}/{cluster_name}"), s(spoke))];
    if w.get(hub, gk::MANAGED_CLUSTER, "", cluster_name).is_none() {
        // Deleted on the hub: the agent registers again.
        agent.joined = false;
        agent.csr = None;
        let mc = managed_cluster(w, k, hub, spoke, cluster_name);
        ops.push(Op::Create(s(hub), mc));
    }
    let pending = agent.csr.as_ref().and_then(|n| w.get(hub, gk::CSR, "", n));
    if !agent.joined && pending.is_none() {
        let name = csr_name(w, hub, cluster_name, spoke);
        ops.push(Op::Create(s(hub), csr(cluster_name, &name, spoke)));
        agent.csr = Some(name);
    }
    if !agent.joined {
        let ns = agent_namespace(k);
        let reason = "BootstrapSecretFunctional,HubKubeConfigSecretMissing";
        let msg = format!(
            "Failed to get hub kubeconfig secret \"{ns}\" \"{HUB_SECRET}\": secrets \"{HUB_SECRET}\" not found"
        );
        ops.extend(hub_connection(k, spoke, "True", reason, &msg));
    }
    ops.push(Op::Agent(s(spoke), Some(agent)));
    ops
}

/// The agent's ManagedCluster (`hubAcceptsClient: false`), as the hub's mutating webhook admits it (it adds
/// the `default` set label; open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/webhook/v1/managedcluster_mutating.go`: no error path for this object).
fn managed_cluster(w: &World, k: &Value, hub: &str, spoke: &str, name: &str) -> Value {
    // The spoke's own API server, so the spoke's CA.
    let ca = util::b64_encode(w.ca_pem(spoke).as_bytes());
    let urls = k["spec"]["externalServerURLs"].as_array().into_iter();
    let urls = urls.flatten().filter_map(|u| u["url"].as_str());
    let urls: Vec<Value> = urls.map(|u| json!({"url": u, "caBundle": ca})).collect();
    let mut mc = json!({
        "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster", "metadata": {"name": name},
        "spec": {"hubAcceptsClient": false, "leaseDurationSeconds": 60},
    });
    if !urls.is_empty() {
        mc["spec"]["managedClusterClientConfigs"] = json!(urls);
    }
    let _ = apiserver::admit(w, hub, gk::MANAGED_CLUSTER, &mut mc);
    mc
}

/// `generateName: <cluster>-` with a 5-character suffix, unique on the hub.
fn csr_name(w: &World, hub: &str, cluster: &str, spoke: &str) -> String {
    let rv = w.clusters.get(hub).map_or(0, |c| c.api.rv);
    let mut seed = util::fnv1a(&format!("{spoke}/{cluster}/{rv}"));
    loop {
        let name = format!("{cluster}-{}", util::name_suffix(seed));
        if w.get(hub, gk::CSR, "", &name).is_none() {
            return name;
        }
        seed = util::splitmix64(&mut seed);
    }
}

/// A PEM block of `kind` holding `text`, base64-encoded (as a CSR's request and certificate are).
fn pem_b64(kind: &str, text: &str) -> String {
    let body = util::b64_encode(text.as_bytes());
    util::b64_encode(format!("-----BEGIN {kind}-----\n{body}\n-----END {kind}-----\n").as_bytes())
}

/// The agent's CSR, shaped like `fixtures/recorded/5-csr/`.
fn csr(cluster: &str, name: &str, spoke: &str) -> Value {
    let agent_id = format!("{:016x}", util::fnv1a(spoke));
    let subject = format!(
        "simulated certificate request: CN=system:open-cluster-management:{cluster}:{agent_id}, O=system:open-cluster-management:{cluster}, O=system:open-cluster-management:managed-clusters"
    );
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name, "generateName": format!("{cluster}-"), "labels": {CLUSTER_NAME_LABEL: cluster}},
        "spec": {
            "groups": ["system:serviceaccounts", "system:serviceaccounts:open-cluster-management", "system:authenticated"],
            "request": pem_b64("CERTIFICATE REQUEST", &subject),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["digital signature", "key encipherment", "client auth"],
            "username": format!("system:serviceaccount:{BOOTSTRAP_SA_NS}:{BOOTSTRAP_SA}"),
            // What the API server adds from the requester's identity: the bootstrap ServiceAccount's uid
            // and its token's credential id (fixtures/recorded/5-csr/).
            "uid": uuid_like(&format!("{BOOTSTRAP_SA_NS}/{BOOTSTRAP_SA}")),
            "extra": {"authentication.kubernetes.io/credential-id": [format!("JTI={}", uuid_like(spoke))]},
        },
    })
}

/// A stable UUID-shaped id derived from `seed` (simulated uids and credential ids).
fn uuid_like(seed: &str) -> String {
    let (a, b) = (util::fnv1a(seed), util::fnv1a(&format!("{seed}#")));
    let (time_low, time_mid, time_hi) = (a >> 32, (a >> 16) & 0xffff, a & 0xfff);
    let (clock_seq, node) = (b >> 52, b & 0xffff_ffff_ffff);
    format!("{time_low:08x}-{time_mid:04x}-4{time_hi:03x}-8{clock_seq:03x}-{node:012x}")
}

/// The CSR signer (kube-controller-manager): an approved CSR gets its certificate
/// (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/accept/exec.go`; approved and signed within ~35 ms on
/// a real rig).
fn csr_sign(w: &World, k: &Work) -> Option<Vec<Op>> {
    let hub = k.cluster();
    let signable = |c: &&Value| util::condition_is(c, "Approved", "True") && !signed(c);
    let csr = w.get(hub, gk::CSR, "", &k.key()[0]).filter(signable)?;
    let user = util::str_at(csr, "/spec/username").unwrap_or("");
    let cert = format!("simulated client certificate for {user}");
    let mut n = csr.clone();
    n["status"]["certificate"] = json!(pem_b64("CERTIFICATE", &cert));
    Some(vec![Op::Put(s(hub), n)])
}

/// Accept and join (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/accept/exec.go`):
/// `hubAcceptsClient: true` makes the hub accept the cluster and create its namespace; with the agent's CSR
/// approved and signed, the agent joins (see [`join`]).
fn hub_accept(w: &World, hub: &str, mc: &str) -> Vec<Op> {
    let (Some(m), true) = (w.get(hub, gk::MANAGED_CLUSTER, "", mc), is_hub(w, hub)) else {
        return Vec::new();
    };
    let accepted = m.pointer("/spec/hubAcceptsClient") == Some(&json!(true));
    let mut n = m.clone();
    let mut ops = Vec::new();
    if accepted {
        let cond = json!([{"type": "HubAcceptedManagedCluster", "status": "True", "reason": "HubClusterAdminAccepted", "message": "Accepted by hub cluster admin"}]);
        set_conditions(&mut n, cond);
        let fins = n["metadata"]["finalizers"].as_array();
        let mut fins = fins.cloned().unwrap_or_default();
        for f in ["resource-cleanup", "api-resource-cleanup"] {
            let f = json!(format!("cluster.open-cluster-management.io/{f}"));
            if !fins.contains(&f) {
                fins.push(f);
            }
        }
        n["metadata"]["finalizers"] = json!(fins);
        ops.push(Op::Create(s(hub), namespace_obj(mc)));
    }
    let spoke = w.spoke_of(hub, mc).filter(|s| w.reachable(s));
    let ours = |a: &&Agent| a.hub == hub && a.cluster_name == mc;
    let agent = spoke.and_then(|sp| w.agent(sp)).filter(ours);
    let csr = |a: &Agent| a.csr.as_ref().and_then(|c| w.get(hub, gk::CSR, "", c));
    if let (Some(spoke), Some(agent)) = (spoke, agent)
        && accepted
        && (agent.joined || csr(agent).is_some_and(signed))
    {
        // The agent writes Joined and Available; stopped, it writes nothing, and once its lease is
        // past the grace period the hub's lease controller sets Available Unknown. Joined stays
        // True: no hub code sets it False (open-cluster-management-io/ocm v1.3.1
        // `pkg/registration/spoke/managedcluster/joining_reconcile.go`,
        // `pkg/registration/hub/lease/controller.go`).
        if agent.stopped.is_none() {
            ops.extend(join(w, hub, spoke, agent, &mut n));
        } else if agent.lease_expired {
            let cond = json!([{"type": "ManagedClusterConditionAvailable", "status": "Unknown", "reason": "ManagedClusterLeaseUpdateStopped", "message": "Registration agent stopped updating its lease."}]);
            set_conditions(&mut n, cond);
        }
    }
    ops.push(Op::Put(s(hub), n));
    ops
}

/// A CSR has its certificate.
fn signed(csr: &Value) -> bool {
    csr.pointer("/status/certificate").is_some()
}

/// The agent joins: ManagedCluster `n` gets `ManagedClusterJoined`, `ManagedClusterConditionAvailable` and
/// `status.version`; the Klusterlet is healthy and the agent writes its hub kubeconfig Secret.
fn join(w: &World, hub: &str, spoke: &str, agent: &Agent, n: &mut Value) -> Vec<Op> {
    let conds = json!([
        {"type": "ManagedClusterConditionClockSynced", "status": "True", "reason": "ManagedClusterClockSynced", "message": "The clock of the managed cluster is synced with the hub."},
        {"type": "ManagedClusterJoined", "status": "True", "reason": "ManagedClusterJoined", "message": "Managed cluster joined"},
        {"type": "ManagedClusterConditionAvailable", "status": "True", "reason": "ManagedClusterAvailable", "message": "Managed cluster is available"},
    ]);
    set_conditions(n, conds);
    n["status"]["version"] = json!({"kubernetes": w.clusters[spoke].version()});
    let mut ops = Vec::new();
    if let Some(k) = klusterlet(w, spoke) {
        let (reason, fine) = ("HubConnectionFunctional", "Hub connection is functional");
        ops.extend(hub_connection(k, spoke, "False", reason, fine));
        let secret = hub_kubeconfig_secret(hub, &agent.cluster_name, &agent_namespace(k));
        ops.push(Op::Create(s(spoke), secret));
    }
    if !agent.joined {
        let mut joined = agent.clone();
        joined.joined = true;
        ops.push(Op::Agent(s(spoke), Some(joined)));
        ops.push(Op::Enqueue(Work::new(&CLAIM_SYNC, spoke, ["", ""])));
    }
    ops
}

/// The Secret the joined agent keeps its hub kubeconfig in.
fn hub_kubeconfig_secret(hub: &str, mc: &str, ns: &str) -> Value {
    let kubeconfig = format!(
        "# simulated hub kubeconfig of the registration agent\napiVersion: v1\nkind: Config\nclusters:\n- name: hub\n  cluster:\n    server: https://{hub}-control-plane:6443\ncontexts:\n- name: default-context\n  context:\n    cluster: hub\n    user: default-auth\ncurrent-context: default-context\nusers:\n- name: default-auth\n  user:\n    client-certificate: tls.crt\n    client-key: tls.key\n"
    );
    let b64 = |s: &str| util::b64_encode(s.as_bytes());
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": HUB_SECRET, "namespace": ns},
        "data": {"cluster-name": b64(mc), "kubeconfig": b64(&kubeconfig)},
    })
}

/// The registration agent's claim sync (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/spoke/managedcluster/claim_reconcile.go`; recorded from kube-apiserver v1.36.2 and
/// open-cluster-management-io/ocm 00f84c32): after Joined, ClusterClaims and (with the gate) ClusterProperties
/// not labelled spoke-only, a property winning over a claim of the same name; reserved claims first, then
/// custom ones sorted by name and cut after the maximum (default 20). The hub rejects the whole update when a
/// value is longer than 1024 characters, so nothing changes until it is removed.
fn claim_sync(w: &World, spoke: &str) -> Option<Vec<Op>> {
    let syncing = |a: &&Agent| a.joined && a.stopped.is_none() && w.reachable(&a.hub);
    let agent = w.agent(spoke).filter(syncing)?;
    let mc = w.get(&agent.hub, gk::MANAGED_CLUSTER, "", &agent.cluster_name)?;
    let k = klusterlet(w, spoke)?;
    let mut by_name: BTreeMap<&str, &str> = BTreeMap::new();
    for (kind, gate, default) in [
        (gk::CLUSTER_CLAIM, "ClusterClaim", true),
        (gk::CLUSTER_PROPERTY, "ClusterProperty", false),
    ] {
        if !spoke_gate(k, gate, default) || !w.served(spoke, kind) {
            continue;
        }
        let synced = |o: &&Value| util::label(o, SPOKE_ONLY_LABEL).is_none();
        for o in w.list(spoke, kind, None).filter(synced) {
            by_name.insert(util::name(o), util::str_at(o, "/spec/value").unwrap_or(""));
        }
    }
    let cfg = &k["spec"]["registrationConfiguration"]["clusterClaimConfiguration"];
    let max = cfg["maxCustomClusterClaims"].as_u64().unwrap_or(20) as usize;
    let suffixes = cfg["reservedClusterClaimSuffixes"].as_array().into_iter();
    let suffixes: Vec<&str> = suffixes.flatten().filter_map(Value::as_str).collect();
    let reserved =
        |n: &str| RESERVED_CLAIMS.contains(&n) || suffixes.iter().any(|s| n.ends_with(s));
    let (mut claims, custom): (Vec<_>, Vec<_>) = by_name.iter().partition(|(n, _)| reserved(n));
    claims.extend(custom.into_iter().take(max));
    let mut a = agent.clone();
    if let Some(i) = claims.iter().position(|(_, v)| v.chars().count() > 1024) {
        let mc = &agent.cluster_name;
        a.claim_error = Some(format!(
            "ManagedCluster.cluster.open-cluster-management.io \"{mc}\" is invalid: status.clusterClaims[{i}].value: Too long: may not be more than 1024 bytes"
        ));
        return Some(vec![Op::Agent(s(spoke), Some(a))]);
    }
    a.claim_error = None;
    let mut n = mc.clone();
    util::remove_condition(&mut n, "ClusterClaimsSynced");
    if !claims.is_empty() {
        let claims = claims.iter().map(|(n, v)| json!({"name": n, "value": v}));
        n["status"]["clusterClaims"] = claims.collect();
    } else if let Some(st) = n.pointer_mut("/status").and_then(Value::as_object_mut) {
        st.remove("clusterClaims");
    }
    let put = Op::Put(agent.hub.clone(), n);
    Some(vec![Op::Agent(s(spoke), Some(a)), put])
}

/// The addon manager Deployment of an addon, when Available.
pub(super) fn addon_manager<'a>(w: &'a World, hub: &str, addon: &str) -> Option<&'a Value> {
    available_deployment(w, hub, &format!("{addon}-addon-manager"))
}

// ---- the controllers: what each watches, and how it fails ----------------------------------------

/// This file's controllers, in the order a reconcile runs their work.
pub(super) static CONTROLLERS: &[&Controller] = &[
    &CRD_ESTABLISH,
    &IMAGE_PULL,
    &ROLLOUT,
    &HUB_OPERATOR,
    &KLUSTERLET_OPERATOR,
    &KUBELET_MOUNT,
    &REGISTRATION,
    &CSR_SIGN,
    &HUB_ACCEPT,
    &CLAIM_SYNC,
];

/// A watch: a ManagedCluster's change queues the work on the spoke that registered it.
fn queue_spoke(w: &World, ch: &Change, q: &mut Queue<'_>) {
    if let Some(spoke) = w.spoke_of(&ch.cluster, &ch.name) {
        q.add(spoke, "", "");
    }
}

/// [`mark`]s the Klusterlet of cluster `c`.
fn mark_klusterlet(w: &World, c: &str, cond: [&str; 2], msg: &str) -> Vec<Op> {
    let mark_one = |k| mark(w, c, [gk::KLUSTERLET, "", util::name(k)], cond, msg);
    klusterlet(w, c).map_or_else(Vec::new, mark_one)
}

static CRD_ESTABLISH: Controller = Controller {
    name: "crd-establish",
    behaviour: Behaviour::CrdEstablish,
    watches: &[(gk::CRD, spec_of)],
    resync: Resync::Restart(|w, c, q| q.every(w, c, gk::CRD)),
    run: |w, k| crd_establish(w, k).unwrap_or_default(),
    fail: |w, k, msg| mark_work(w, k, gk::CRD, ["Established", "False"], msg),
};

static IMAGE_PULL: Controller = Controller {
    name: "kubelet-image-pull",
    behaviour: Behaviour::ImagePull,
    watches: &[(gk::DEPLOYMENT, |_, ch, q| {
        queue_if(!ch.kind.status_only(), ch, q);
    })],
    resync: Resync::Restart(whole_cluster),
    run: |w, k| image_pull(w, k.cluster()).unwrap_or_default(),
    fail: |w, k, msg| {
        // Every Deployment waiting for the image shows the failed pull.
        let c = k.cluster();
        let (image, waiting) = missing_image(w, c).unwrap_or_default();
        let msg = format!("pods are Pending: ErrImagePull: {image}: {msg}");
        let cond = ["Available", "False"];
        waiting
            .iter()
            .flat_map(|[ns, name]| mark(w, c, [gk::DEPLOYMENT, ns, name], cond, &msg))
            .collect()
    },
};

static ROLLOUT: Controller = Controller {
    name: "deployment-rollout",
    behaviour: Behaviour::DeploymentRollout,
    watches: &[
        (gk::DEPLOYMENT, spec_of),
        // The user server restarts on a new serving certificate (open-cluster-management-io/cluster-proxy
        // v0.10.0 `cmd/addon-agent/main.go`).
        (gk::SECRET, |_, ch, q| {
            if ch.name == SERVING_CERT {
                q.add(&ch.cluster, &ch.ns, "cluster-proxy-addon-user");
            }
        }),
        (gk::MPC, |w, ch, q| {
            for d in ["cluster-proxy-addon-manager", "cluster-proxy-addon-user"] {
                if let Some(o) = w.find_named(&ch.cluster, gk::DEPLOYMENT, d) {
                    q.add(&ch.cluster, util::namespace(o), d);
                }
            }
        }),
    ],
    resync: Resync::Restart(|w, c, q| q.every(w, c, gk::DEPLOYMENT)),
    run: |w, k| rollout(w, k).unwrap_or_default(),
    fail: |w, k, msg| mark_work(w, k, gk::DEPLOYMENT, ["Available", "False"], msg),
};

static HUB_OPERATOR: Controller = Controller {
    name: "cluster-manager-operator",
    behaviour: Behaviour::HubOperator,
    watches: &[
        (gk::CRD, any_change),
        // The operator watches its Deployments' rollout (open-cluster-management-io/ocm v1.3.1
        // `pkg/operator/.../clustermanager_controller.go`).
        (gk::DEPLOYMENT, |_, ch, q| {
            let ours = ch.ns == HUB_NAMESPACE || ch.name == "cluster-manager";
            queue_if(ours, ch, q);
        }),
        (gk::CLUSTER_MANAGER, any_change),
    ],
    resync: Resync::Restart(whole_cluster),
    run: |w, k| hub_operator(w, k.cluster()).unwrap_or_default(),
    fail: |w, k, msg| {
        let cm = [gk::CLUSTER_MANAGER, "", "cluster-manager"];
        mark(w, k.cluster(), cm, ["HubRegistrationDegraded", "True"], msg)
    },
};

static KLUSTERLET_OPERATOR: Controller = Controller {
    name: "klusterlet-operator",
    behaviour: Behaviour::KlusterletOperator,
    watches: &[
        // Its own Deployment, and the agents' it applies (scaled by hand, they are scaled back).
        (gk::DEPLOYMENT, |_, ch, q| {
            let ours = ch.name == "klusterlet" || ch.name.starts_with("klusterlet-");
            queue_if(ours, ch, q);
        }),
        (gk::KLUSTERLET, any_change),
        // A registration agent Pod deleted: its ReplicaSet starts another.
        (POD, |_, ch, q| queue_if(ch.kind == Deleted, ch, q)),
    ],
    resync: Resync::Restart(whole_cluster),
    run: |w, k| klusterlet_operator(w, k.cluster()).unwrap_or_default(),
    fail: |w, k, msg| mark_klusterlet(w, k.cluster(), ["Applied", "False"], msg),
};

static REGISTRATION: Controller = Controller {
    name: "registration-agent",
    behaviour: Behaviour::Registration,
    watches: &[
        (gk::DEPLOYMENT, |_, ch, q| named(ch, q, REGISTRATION_APP)),
        (gk::KLUSTERLET, any_change),
        (gk::SECRET, |_, ch, q| named(ch, q, BOOTSTRAP_SECRET)),
        // The agent's Pods: started, deleted, running.
        (POD, any_change),
        // A deleted ManagedCluster: the agent registers again.
        (gk::MANAGED_CLUSTER, |w, ch, q| {
            if ch.kind == Deleted {
                queue_spoke(w, ch, q);
            }
        }),
    ],
    resync: Resync::Restart(whole_cluster),
    run: |w, k| registration(w, k.cluster()),
    fail: |w, k, msg| mark_klusterlet(w, k.cluster(), ["HubConnectionDegraded", "True"], msg),
};

/// The kubelet retries a Pending Pod's mount when a Pod or the bootstrap Secret is written.
fn mount_watch(w: &World, ch: &Change, q: &mut Queue<'_>) {
    if ch.kind != Deleted && (ch.gk == POD || ch.name == BOOTSTRAP_SECRET) {
        queue_waiting_mounts(w, &ch.cluster, q);
    }
}

static KUBELET_MOUNT: Controller = Controller {
    name: "kubelet-secret-mount",
    behaviour: Behaviour::BootstrapMount,
    watches: &[(gk::SECRET, mount_watch), (POD, mount_watch)],
    resync: Resync::Restart(queue_waiting_mounts),
    run: |w, k| mount_bootstrap(w, k).unwrap_or_default(),
    fail: |_, _, _| Vec::new(),
};

static CSR_SIGN: Controller = Controller {
    name: "csr-signer",
    behaviour: Behaviour::CsrSign,
    watches: &[(gk::CSR, |_, ch, q| q.add(&ch.cluster, &ch.name, ""))],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::CSR)),
    run: |w, k| csr_sign(w, k).unwrap_or_default(),
    fail: |w, k, msg| mark_work(w, k, gk::CSR, ["Failed", "True"], msg),
};

pub(crate) static HUB_ACCEPT: Controller = Controller {
    name: "hub-accept",
    behaviour: Behaviour::HubAccept,
    watches: &[
        // Accepting reads the spec, the agent and its CSR (whose changes queue it), not the status.
        (gk::MANAGED_CLUSTER, spec_of),
        (gk::CSR, |w, ch, q| {
            let csr = w.get(&ch.cluster, gk::CSR, "", &ch.name);
            if let Some(mc) = csr.and_then(|o| util::label(o, CLUSTER_NAME_LABEL)) {
                q.add(&ch.cluster, mc, "");
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::MANAGED_CLUSTER)),
    run: |w, k| hub_accept(w, k.cluster(), &k.key()[0]),
    fail: |w, k, msg| {
        let cond = "HubAcceptedManagedCluster";
        mark_work(w, k, gk::MANAGED_CLUSTER, [cond, "False"], msg)
    },
};

static CLAIM_SYNC: Controller = Controller {
    name: "claim-sync",
    behaviour: Behaviour::ClaimSync,
    watches: &[
        (gk::CRD, any_change),
        (gk::KLUSTERLET, any_change),
        (gk::SECRET, |_, ch, q| named(ch, q, HUB_SECRET)),
        (gk::MANAGED_CLUSTER, queue_spoke),
        (gk::CLUSTER_PROPERTY, any_change),
        (gk::CLUSTER_CLAIM, any_change),
    ],
    resync: Resync::Restart(whole_cluster),
    run: |w, k| claim_sync(w, k.cluster()).unwrap_or_default(),
    fail: |w, k, msg| {
        let cond = ["ClusterClaimsSynced", "False"];
        w.agent(k.cluster()).map_or_else(Vec::new, |a| {
            let mc = [gk::MANAGED_CLUSTER, "", &a.cluster_name];
            mark(w, &a.hub, mc, cond, msg)
        })
    },
};
