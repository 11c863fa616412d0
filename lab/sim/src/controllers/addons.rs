//! The addon framework, cluster-proxy and managed-serviceaccount on the hub
//! (open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`,
//! `pkg/proxyserver/controllers/clusterprofile_controller.go`, `charts/cluster-proxy/README.md`;
//! open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/managed-serviceaccount/`;
//! open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/addon/lease_controller.go`).

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::ocm::addon_manager;
use super::sets::{PLACEMENT_LABEL, decided, is_ocm_profile};
use super::{
    CLUSTER_NAME_LABEL, Controller, OCM, Op, Queue, Resync, WatchFn, any_change, is_hub, mark,
    mark_work, named, namespace_exists, namespace_obj, owner_ref, s, spec_of, whole_cluster,
};
use crate::apiserver::gk;
use crate::charts::deployment;
use crate::faults::Behaviour;
use crate::util::{self, set_condition};
use crate::world::{ChangeKind, TokenInfo, World};

const PROXY_ADDON: &str = "cluster-proxy";
const MSA_ADDON: &str = "managed-serviceaccount";
pub(super) const SERVING_CERT: &str = "cluster-proxy-user-serving-cert";
const SYNC_LABEL: &str = "authentication.open-cluster-management.io/sync-to-clusterprofile";
const SYNCED_FROM_LABEL: &str = "authentication.open-cluster-management.io/synced-from";

/// An addon's agent on a managed cluster: where it runs when the ManagedClusterAddOn does not say
/// (managed-serviceaccount → `open-cluster-management-agent-addon`,
/// open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/agent/agent.go`; cluster-proxy →
/// `open-cluster-management-cluster-proxy`, open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/config/agent.go`), and its Deployment.
fn agent_of(addon: &str) -> (&'static str, String) {
    let ns = "open-cluster-management-agent-addon";
    match addon {
        PROXY_ADDON => (
            "open-cluster-management-cluster-proxy",
            s("cluster-proxy-proxy-agent"),
        ),
        MSA_ADDON => (ns, s("managed-serviceaccount-addon-agent")),
        other => (ns, format!("{other}-agent")),
    }
}

/// The `(namespace, name)` of a ClusterManagementAddOn's placements; `None` when its install strategy is
/// not `Placements`.
fn placements(cma: &Value) -> Option<Vec<(&str, &str)>> {
    let strategy = &cma["spec"]["installStrategy"];
    (strategy["type"] == "Placements").then(|| {
        let list = strategy["placements"].as_array().into_iter().flatten();
        list.filter_map(|p| Some((p["namespace"].as_str()?, p["name"].as_str()?)))
            .collect()
    })
}

/// The ManagedClusterAddOn the install strategy creates in cluster namespace `mc`, owned by `cma`.
fn new_mca(hub: &str, cma: &Value, mc: &str) -> Op {
    Op::Create(
        s(hub),
        json!({
            "apiVersion": "addon.open-cluster-management.io/v1alpha1",
            "kind": "ManagedClusterAddOn",
            "metadata": {"name": util::name(cma), "namespace": mc, "ownerReferences": [owner_ref(cma, false)]},
            "spec": {},
        }),
    )
}

/// Install strategy `Placements` (open-cluster-management-io/ocm v1.3.1
/// `pkg/addon/controllers/addonmanagement/addon_install_reconciler.go`): a ManagedClusterAddOn in the namespace
/// of every cluster the placements decided on, owned by the ClusterManagementAddOn; ones it owns for clusters
/// no longer selected are removed.
pub(super) fn addon_install(w: &World, hub: &str, addon: &str) -> Vec<Op> {
    let Some(cma) = w.get(hub, gk::CMA, "", addon) else {
        return Vec::new();
    };
    let Some(placements) = placements(cma).filter(|_| is_hub(w, hub) && w.served(hub, gk::MCA))
    else {
        return Vec::new();
    };
    // A Placement that is gone decides nothing (ocm v1.3.1
    // `pkg/addon/controllers/addonmanagement/addon_install_reconciler.go` `getAllDecisions`).
    let selected: BTreeSet<String> = placements
        .into_iter()
        .filter(|(ns, name)| w.get(hub, gk::PLACEMENT, ns, name).is_some())
        .flat_map(|(ns, name)| decided(w, hub, ns, name))
        .collect();
    let uid = util::uid(cma);
    let owned = |a: &Value| {
        let refs = a["metadata"]["ownerReferences"].as_array();
        refs.is_some_and(|r| r.iter().any(|r| r["uid"] == uid))
    };
    let create = selected
        .iter()
        .filter(|c| namespace_exists(w, hub, c) && w.get(hub, gk::MCA, c, addon).is_none())
        .map(|c| new_mca(hub, cma, c));
    let delete = w
        .namespaces_with(hub, gk::MCA)
        .into_iter()
        .filter(|ns| !selected.contains(ns) && w.get(hub, gk::MCA, ns, addon).is_some_and(owned))
        .map(|ns| Op::delete(hub, [gk::MCA, &ns, addon]));
    create.chain(delete).collect()
}

/// Addon health (open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/addon/lease_controller.go`,
/// lease-based in reality): a ManagedClusterAddOn whose cluster has joined, whose ClusterManagementAddOn exists
/// and whose addon manager runs is `Available=True` with `status.namespace`; its agent namespace and Deployment
/// appear on the managed cluster. Without the manager it is `Available=Unknown`
/// (ManagedClusterAddOnLeaseNotFound).
pub(super) fn addon_status(w: &World, hub: &str, mc: &str, addon: &str) -> Vec<Op> {
    let Some(a) = w.get(hub, gk::MCA, mc, addon) else {
        return agent_removed(w, hub, mc, addon);
    };
    let cluster = w.get(hub, gk::MANAGED_CLUSTER, "", mc);
    let joined = cluster.is_some_and(|m| util::condition_is(m, "ManagedClusterJoined", "True"));
    if w.get(hub, gk::CMA, "", addon).is_none() || !joined {
        return Vec::new();
    }
    let manager_ok =
        ![PROXY_ADDON, MSA_ADDON].contains(&addon) || addon_manager(w, hub, addon).is_some();
    let install_ns = util::str_at(a, "/spec/installNamespace")
        .filter(|n| !n.is_empty())
        .unwrap_or(agent_of(addon).0)
        .to_owned();
    // The hub's ManagedClusterAddonHealthCheckController: once the cluster's lease expired, every addon
    // of it is Unknown too (fixtures/recorded/8-access-providers-and-agent-loss).
    let stopped =
        cluster.is_some_and(|m| lease_update_stopped(m, "ManagedClusterConditionAvailable"));
    let (status, reason, msg) = if stopped {
        let msg = s("Registration agent stopped updating its lease.");
        ("Unknown", "ManagedClusterLeaseUpdateStopped", msg)
    } else if manager_ok {
        let msg = format!("{addon} add-on is available.");
        ("True", "ManagedClusterAddOnLeaseUpdated", msg)
    } else {
        let msg = format!("The status of {addon} add-on is unknown.");
        ("Unknown", "ManagedClusterAddOnLeaseNotFound", msg)
    };
    let mut n = a.clone();
    set_condition(&mut n, "Available", status, reason, &msg);
    let mut ops = Vec::new();
    if status == "True" {
        n["status"]["namespace"] = json!(install_ns);
        if let Some(spoke) = w.spoke_of(hub, mc).filter(|s| w.reachable(s)) {
            ops = agent_installed(w, hub, spoke, addon, &install_ns);
        }
    }
    ops.push(Op::Put(s(hub), n));
    ops
}

/// What the addon's ManifestWork applies on the managed cluster: the install namespace, the agent's
/// Deployment and, for cluster-proxy, a cluster-scoped ClusterRole (what only the work agent removes).
fn agent_installed(w: &World, hub: &str, spoke: &str, addon: &str, ns: &str) -> Vec<Op> {
    let agent = agent_of(addon).1;
    let image = agent_image(w, hub, addon).unwrap_or_else(|| "simulated".to_owned());
    let container = json!([{"name": "agent", "image": image, "args": ["agent"]}]);
    let mut ops = vec![Op::Create(s(spoke), namespace_obj(ns))];
    if addon == PROXY_ADDON {
        ops.push(Op::Create(
            s(spoke),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": PROXY_AGENT_ROLE}, "rules": []}),
        ));
    }
    let agent = deployment(ns, &agent, &agent, 1, container);
    ops.push(Op::Create(s(spoke), agent));
    ops
}

/// The klusterlet's work agent Deployment (what applies and removes ManifestWorks on a spoke).
const WORK_AGENT: &str = "klusterlet-work-agent";

/// A ManagedClusterAddOn that is gone: its manager deletes the addon's ManifestWork (addon-framework
/// v1.2.0 `pkg/addonmanager/controllers/agentdeploy`), and the spoke's work agent, while it runs, deletes
/// what the work applied (ocm v1.3.1 `pkg/work/spoke/controllers/finalizercontroller`): the agent's
/// Deployment goes. The install namespace stays: cluster-proxy v0.10.0 marks it
/// `addon.open-cluster-management.io/deletion-orphan` (`addon-agent/templates/namespace.yaml`), which the
/// framework turns into a `SelectivelyOrphan` rule. Without a work agent (klusterlet gone first) nothing
/// is deleted: the klusterlet's cleanup only removes the AppliedManifestWorks' finalizers (ocm v1.3.1
/// `klusterlet_managed_reconcile.go` `cleanUpAppliedManifestWorks`). Only the default install namespace
/// is looked at (the gone addon's `spec.installNamespace` is not known any more).
fn agent_removed(w: &World, hub: &str, mc: &str, addon: &str) -> Vec<Op> {
    let work_agent = |s: &&str| w.find_named(s, gk::DEPLOYMENT, WORK_AGENT).is_some();
    let spoke = w.spoke_of(hub, mc);
    let Some(spoke) = spoke.filter(|s| w.reachable(s) && work_agent(s)) else {
        return Vec::new();
    };
    let (ns, name) = agent_of(addon);
    let mut gone = vec![[gk::DEPLOYMENT, ns, &name]];
    if addon == PROXY_ADDON {
        gone.push([CLUSTER_ROLE_GK, "", PROXY_AGENT_ROLE]);
    }
    let exists = |[kind, ns, name]: &[&str; 3]| w.get(spoke, kind, ns, name).is_some();
    gone.into_iter()
        .filter(exists)
        .map(|k| Op::delete(spoke, k))
        .collect()
}

/// The ClusterRole cluster-proxy's agent work applies on the spoke (cluster-proxy v0.10.0
/// `addon-agent/templates/addon-agent-clusterrole.yaml`).
pub const PROXY_AGENT_ROLE: &str = "cluster-proxy-addon-agent-impersonator";
const CLUSTER_ROLE_GK: &str = "ClusterRole.rbac.authorization.k8s.io";

/// The MPC controller in the cluster-proxy addon manager (open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/proxyserver/controllers/managedproxyconfiguration_controller.go`): with `spec.userServer` it creates
/// the user server's serving certificate Secret in `spec.proxyServer.namespace` (a PEM that parses as
/// X.509: simulation test data).
pub(super) fn proxy_cert(w: &World, hub: &str) -> Vec<Op> {
    let mpc = mpc(w, hub).filter(|m| m["spec"]["userServer"].is_object());
    let Some(ns) = mpc.and_then(|m| util::str_at(m, "/spec/proxyServer/namespace")) else {
        return Vec::new();
    };
    // Made once (a new key per reconcile would be wasted work): the Secret is only ever created.
    if addon_manager(w, hub, PROXY_ADDON).is_none()
        || !namespace_exists(w, hub, ns)
        || w.get(hub, gk::SECRET, ns, SERVING_CERT).is_some()
    {
        return Vec::new();
    }
    // Issued by a CA of this hub's cluster-proxy (`open-cluster-management:cluster-proxy`, as in
    // fixtures/recorded/8-access-providers-and-agent-loss/); `tls.crt` is the leaf followed by that CA,
    // and the access providers carry it as their CA bundle (open-cluster-management-io/cluster-proxy v0.10.0
    // `pkg/proxyserver/controllers/clusterprofile_controller.go`): this hub's, no other cluster's.
    let ca = crate::certs::ClusterCa::authority(hub, "open-cluster-management:cluster-proxy");
    let user = "cluster-proxy-addon-user";
    let dns = [
        s("localhost"),
        s(user),
        format!("{user}.{ns}"),
        format!("{user}.{ns}.svc"),
    ];
    let cert = ca.issue(user, &dns, &[[127, 0, 0, 1]]);
    vec![Op::Create(
        s(hub),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": SERVING_CERT, "namespace": ns},
            "data": {
                "tls.crt": util::b64_encode(cert.cert_pem.as_bytes()),
                "tls.key": util::b64_encode(cert.key_pem.as_bytes()),
            },
        }),
    )]
}

/// The hub's ManagedProxyConfiguration `cluster-proxy`.
pub(super) fn mpc<'w>(w: &'w World, hub: &str) -> Option<&'w Value> {
    w.get(hub, gk::MPC, "", PROXY_ADDON)
}

/// A Deployment's containers.
fn containers(d: &Value) -> impl Iterator<Item = &Value> {
    let list = d["spec"]["template"]["spec"]["containers"].as_array();
    list.into_iter().flatten()
}

/// A container's args.
fn args(container: &Value) -> impl Iterator<Item = &str> {
    let args = container["args"].as_array().into_iter().flatten();
    args.filter_map(Value::as_str)
}

/// The image an addon's agent runs, as its manager deploys it: cluster-proxy's from the
/// ManagedProxyConfiguration's `proxyAgent.image`, managed-serviceaccount's from the manager's
/// `--agent-image-name=` (open-cluster-management-io/cluster-proxy v0.10.0
/// `charts/cluster-proxy/templates/manager-deployment.yaml`, `pkg/proxyagent/agent/agent.go`;
/// open-cluster-management-io/managed-serviceaccount v0.10.0
/// `charts/managed-serviceaccount/templates/manager-deployment.yaml`). `None` for another addon (the
/// simulation's placeholder image then).
fn agent_image(w: &World, hub: &str, addon: &str) -> Option<String> {
    let image = match addon {
        PROXY_ADDON => mpc(w, hub).and_then(|m| util::str_at(m, "/spec/proxyAgent/image")),
        MSA_ADDON => {
            let d = w.find_named(hub, gk::DEPLOYMENT, "managed-serviceaccount-addon-manager")?;
            let mut args = containers(d).flat_map(args);
            args.find_map(|a| a.strip_prefix("--agent-image-name="))
        }
        _ => None,
    };
    image.map(str::to_owned)
}

/// Whether the addon manager Deployment has its ClusterProfile gate on, read from its args the way its
/// binary would: `ClusterProfileAccessProvider` up to v0.10.x, `ClusterProfile` from v0.11.0
/// (open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/proxyserver/controllers/clusterprofile_controller.go`; open-cluster-management-io/cluster-proxy
/// PR #274).
fn proxy_gate_on(d: &Value) -> bool {
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    let image = container["image"].as_str().and_then(|i| i.rsplit_once(':'));
    let tag = image.map_or("", |(_, t)| t);
    let old = tag.starts_with("v0.8.") || tag.starts_with("v0.9.") || tag.starts_with("v0.10.");
    let gate = if old {
        "ClusterProfileAccessProvider"
    } else {
        "ClusterProfile"
    };
    args_gate(container, gate)
}

/// `--feature-gates=A=true,B=false` in a container's args.
fn args_gate(container: &Value, gate: &str) -> bool {
    let lists = args(container).filter_map(|a| a.strip_prefix("--feature-gates="));
    lists
        .flat_map(|l| l.split(','))
        .any(|kv| kv == format!("{gate}=true"))
}

/// A ClusterProfile OCM manages: labelled `x-k8s.io/cluster-manager=open-cluster-management`, with a
/// cluster-name label.
fn ocm_profile(p: &&Value) -> bool {
    is_ocm_profile(p) && util::label(p, CLUSTER_NAME_LABEL).is_some()
}

/// The `clusterProfileReconciler` of the cluster-proxy addon manager (open-cluster-management-io/cluster-proxy
/// v0.10.0 `pkg/proxyserver/controllers/clusterprofile_controller.go`): with its gate on, MPC `cluster-proxy`
/// and the serving cert Secret in `spec.proxyServer.namespace`, every ClusterProfile labelled
/// `x-k8s.io/cluster-manager=open-cluster-management` with a cluster-name label gets the
/// `open-cluster-management` access provider (only that entry is replaced).
pub(super) fn proxy_profiles(w: &World, hub: &str, one: Option<&[String; 2]>) -> Vec<Op> {
    let on = addon_manager(w, hub, PROXY_ADDON).is_some_and(proxy_gate_on);
    let ns = mpc(w, hub).and_then(|m| util::str_at(m, "/spec/proxyServer/namespace"));
    let secret = ns.and_then(|ns| w.get(hub, gk::SECRET, ns, SERVING_CERT));
    let ca = secret.and_then(|s| util::str_at(s, "/data/tls.crt"));
    let (true, Some(ns), Some(ca)) = (on && w.served(hub, gk::CLUSTER_PROFILE), ns, ca) else {
        return Vec::new();
    };
    let targets: Vec<&Value> = match one {
        Some([pns, name]) => Vec::from_iter(w.get(hub, gk::CLUSTER_PROFILE, pns, name)),
        None => Vec::from_iter(w.list(hub, gk::CLUSTER_PROFILE, None)),
    };
    targets
        .into_iter()
        .filter(ocm_profile)
        .map(|p| {
            let name = util::name(p);
            let entry = json!({
                "name": OCM,
                "cluster": {
                    "server": format!("https://cluster-proxy-addon-user.{ns}:9092/{name}"),
                    // data["tls.crt"] is already base64 of the PEM bundle.
                    "certificate-authority-data": ca,
                    "extensions": [{
                        "name": "client.authentication.k8s.io/exec",
                        "extension": {"clusterName": name},
                    }],
                },
            });
            let mut list = p["status"]["accessProviders"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            match list.iter_mut().find(|e| e["name"] == OCM) {
                Some(e) => *e = entry,
                None => list.push(entry),
            }
            let mut n = p.clone();
            let status = util::obj_at(&mut n, &["status"]);
            status.entry("conditions").or_insert_with(|| json!([]));
            status.insert("accessProviders".into(), Value::Array(list));
            Op::Put(s(hub), n)
        })
        .collect()
}

/// How long a simulated ManagedServiceAccount token is valid: 8640h (360 days).
const TOKEN_SECONDS: u64 = 8640 * 3600;

/// managed-serviceaccount (open-cluster-management-io/managed-serviceaccount v0.10.0
/// `charts/managed-serviceaccount/`): a ManagedServiceAccount in cluster namespace C, once C's
/// `managed-serviceaccount` addon is Available, gets its ServiceAccount on the managed cluster (in the agent's
/// install namespace, no RBAC), a token Secret `<msa>` in C, and `status.tokenSecretRef` with
/// `TokenReported=True`.
pub(super) fn msa_token(w: &World, hub: &str, ns: &str, name: &str) -> Vec<Op> {
    let mca = w.get(hub, gk::MCA, ns, MSA_ADDON);
    let mca = mca.filter(|a| util::condition_is(a, "Available", "True"));
    let spoke = w.spoke_of(hub, ns).filter(|s| w.reachable(s));
    let (Some(msa), Some(mca), Some(spoke)) = (w.get(hub, gk::MSA, ns, name), mca, spoke) else {
        return Vec::new();
    };
    let install_ns = util::str_at(mca, "/status/namespace")
        .or_else(|| util::str_at(mca, "/spec/installNamespace"))
        .filter(|n| !n.is_empty())
        .unwrap_or(agent_of(MSA_ADDON).0);
    let mut ops = vec![
        Op::Create(s(spoke), namespace_obj(install_ns)),
        Op::Create(
            s(spoke),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": install_ns}}),
        ),
    ];
    if w.get(hub, gk::SECRET, ns, name).is_none() {
        let rv = w.clusters.get(hub).map_or(0, |c| c.api.rv);
        let token = format!(
            "sim-msa-token-{spoke}-{name}-{:08x}",
            util::fnv1a(&format!("{hub}/{ns}/{name}/{rv}")) as u32
        );
        ops.push(Op::Token(
            token.clone(),
            TokenInfo {
                cluster: s(spoke),
                namespace: s(install_ns),
                service_account: s(name),
                expiration_seconds: TOKEN_SECONDS as i64,
            },
        ));
        ops.push(Op::Create(
            s(hub),
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {
                    "name": name, "namespace": ns,
                    "labels": {"authentication.open-cluster-management.io/is-managed-serviceaccount": "true"},
                    "ownerReferences": [owner_ref(msa, true)],
                },
                "data": {
                    "token": util::b64_encode(token.as_bytes()),
                    // The token is for the managed cluster's API server: its CA.
                    "ca.crt": util::b64_encode(w.ca_pem(spoke).as_bytes()),
                },
            }),
        ));
    }
    let mut n = msa.clone();
    if util::str_at(msa, "/status/tokenSecretRef/name") != Some(name) {
        let expires = std::time::SystemTime::now() + Duration::from_secs(TOKEN_SECONDS);
        let expires = humantime::format_rfc3339_seconds(expires).to_string();
        n["status"]["tokenSecretRef"] =
            json!({"name": name, "lastRefreshTimestamp": util::now_rfc3339()});
        n["status"]["expirationTimestamp"] = json!(expires);
    }
    for (kind, msg) in [
        ("SecretCreated", "The token secret has been created"),
        ("TokenReported", "ServiceAccount token was reported"),
    ] {
        set_condition(&mut n, kind, "True", kind, msg);
    }
    ops.push(Op::Put(s(hub), n));
    ops
}

/// `ClusterProfileCredSyncer` (open-cluster-management-io/managed-serviceaccount v0.10.0
/// `pkg/addon/manager/controller/clusterprofile_cred_syncer.go`): with the manager's
/// `ClusterProfileCredSyncer=true` and the MSA labelled `sync-to-clusterprofile: "true"`, its token Secret is
/// copied into every namespace holding a labelled ClusterProfile named like the MSA's namespace, as Opaque
/// `<cluster>-<msa>` labelled `synced-from` and owned by the profile; copies no longer wanted are deleted.
pub(super) fn msa_sync(w: &World, hub: &str, ns: &str, name: &str) -> Vec<Op> {
    let on = addon_manager(w, hub, MSA_ADDON)
        .is_some_and(|d| containers(d).any(|c| args_gate(c, "ClusterProfileCredSyncer")));
    let msa = w.get(hub, gk::MSA, ns, name);
    let source = msa
        .filter(|m| util::label(m, SYNC_LABEL) == Some("true"))
        .and_then(|m| util::str_at(m, "/status/tokenSecretRef/name"))
        .and_then(|secret| w.get(hub, gk::SECRET, ns, secret));
    let target = format!("{ns}-{name}");
    let mut ops = Vec::new();
    for pns in w.namespaces_with(hub, gk::CLUSTER_PROFILE) {
        let profile = w.get(hub, gk::CLUSTER_PROFILE, &pns, ns);
        let profile = profile.filter(ocm_profile);
        let existing = w
            .get(hub, gk::SECRET, &pns, &target)
            .filter(|s| util::label(s, SYNCED_FROM_LABEL).is_some());
        if let (true, Some(src), Some(p)) = (on, source, profile) {
            let mut secret = existing.cloned().unwrap_or_else(|| {
                    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": target, "namespace": pns}})
                });
            secret["type"] = json!("Opaque");
            util::set_label(&mut secret, SYNCED_FROM_LABEL, &target);
            secret["metadata"]["ownerReferences"] = json!([owner_ref(p, true)]);
            let data = ["token", "ca.crt"]
                .into_iter()
                .filter_map(|k| Some((k.to_owned(), src["data"].get(k)?.clone())));
            secret["data"] = Value::Object(data.collect());
            ops.push(Op::Put(s(hub), secret));
        } else if existing.is_some() {
            ops.push(Op::delete(hub, [gk::SECRET, &pns, &target]));
        }
    }
    ops
}

/// The spoke's cluster-proxy `proxy-agent` dials the hub's proxy server and holds a tunnel while the addon
/// runs there (open-cluster-management-io/cluster-proxy v0.10.0 `cmd/addon-agent/main.go`): connected when the
/// cluster-proxy ManagedClusterAddOn is `Available` and the spoke runs. `Available` alone does not mean
/// connected in reality (the lease is renewed by another container), which a delay on
/// [`crate::Behaviour::ProxyTunnel`] models.
///
/// A stopped registration agent does not stop the proxy agent: a tunnel that is up stays up while the
/// addon is Unknown only because the cluster's lease expired.
pub(super) fn proxy_tunnel(w: &World, hub: &str, mc: &str) -> Vec<Op> {
    let key = format!("{hub}/{mc}");
    let addon = w.get(hub, gk::MCA, mc, PROXY_ADDON);
    let available = addon.is_some_and(|a| util::condition_is(a, "Available", "True"));
    let stays =
        w.tunnels.contains(&key) && addon.is_some_and(|a| lease_update_stopped(a, "Available"));
    let spoke_runs = w.spoke_of(hub, mc).is_some_and(|s| w.reachable(s));
    // The proxy agent Deployment on each spoke runs `spec.proxyAgent.replicas` of ManagedProxyConfiguration
    // `cluster-proxy` (cluster-proxy pkg/proxyagent/agent/agent.go, `"replicas":
    // proxyConfig.Spec.ProxyAgent.Replicas`, into manifests/charts/addon-agent/templates/addon-agent-deployment.yaml):
    // at 0 no proxy agent dials the hub. (Its lease, renewed by the same Pod, would expire too and the
    // addon turn unavailable after the grace period: not modelled.)
    let agents = !mpc(w, hub).is_some_and(|m| m["spec"]["proxyAgent"]["replicas"] == 0);
    let up = (available || stays) && spoke_runs && agents;
    vec![Op::Tunnel(key, up)]
}

/// `condition` is Unknown because the cluster's lease expired (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/lease/controller.go`).
fn lease_update_stopped(o: &Value, condition: &str) -> bool {
    util::condition(o, condition).is_some_and(|c| {
        c["status"] == "Unknown" && c["reason"] == "ManagedClusterLeaseUpdateStopped"
    })
}

// ---- the controllers: what each watches, and how it fails ----------------------------------------

/// This file's controllers, in the order a reconcile runs their work.
pub(super) static CONTROLLERS: &[&Controller] = &[
    &ADDON_INSTALL,
    &ADDON_STATUS,
    &PROXY_CERT,
    &PROXY_PROFILE,
    &PROXY_ALL,
    &MSA_TOKEN,
    &MSA_SYNC,
    &PROXY_TUNNEL,
];

/// The work about every ManagedClusterAddOn of `addon`, keyed `[cluster namespace, addon]`.
fn addon_statuses(w: &World, c: &str, addon: &str, q: &mut Queue<'_>) {
    for a in w.list(c, gk::MCA, None).filter(|a| util::name(a) == addon) {
        q.add(c, util::namespace(a), addon);
    }
}

/// The work of every ManagedServiceAccount in cluster namespace `ns`.
fn msas_in(w: &World, c: &str, ns: &str, q: &mut Queue<'_>) {
    for m in w.list(c, gk::MSA, Some(ns)) {
        q.add(c, util::namespace(m), util::name(m));
    }
}

/// What wakes both managed-serviceaccount controllers (token and credential sync): their addon manager
/// rolling out, the ManagedServiceAccount, its token Secret, the cluster's ClusterProfile, its addon, and
/// a synced copy of the token deleted.
const MSA_WATCHES: &[(&str, WatchFn)] = &[
    (gk::DEPLOYMENT, |w, ch, q| {
        if ch.name == "managed-serviceaccount-addon-manager" {
            q.every(w, &ch.cluster, gk::MSA);
        }
    }),
    (gk::SECRET, |w, ch, q| {
        if w.get(&ch.cluster, gk::MSA, &ch.ns, &ch.name).is_some() {
            q.add(&ch.cluster, &ch.ns, &ch.name);
        }
    }),
    (gk::CLUSTER_PROFILE, |w, ch, q| {
        if !ch.kind.status_only() {
            msas_in(w, &ch.cluster, &ch.name, q);
        }
    }),
    (gk::MCA, |w, ch, q| {
        if ch.name == MSA_ADDON {
            msas_in(w, &ch.cluster, &ch.ns, q);
        }
    }),
    (gk::MSA, |_, ch, q| q.add(&ch.cluster, &ch.ns, &ch.name)),
    // A synced token Secret next to a ClusterProfile was deleted: copy it again.
    (gk::SECRET, |w, ch, q| {
        let c = ch.cluster.as_str();
        let profiles = w
            .list(c, gk::CLUSTER_PROFILE, Some(&ch.ns))
            .next()
            .is_some();
        if ch.kind != ChangeKind::Deleted || !profiles {
            return;
        }
        for m in w.list(c, gk::MSA, None) {
            if format!("{}-{}", util::namespace(m), util::name(m)) == ch.name {
                q.add(c, util::namespace(m), util::name(m));
            }
        }
    }),
];

static ADDON_INSTALL: Controller = Controller {
    name: "addon-install",
    behaviour: Behaviour::AddonPlacement,
    watches: &[
        (gk::CMA, |_, ch, q| q.add(&ch.cluster, &ch.name, "")),
        (gk::MCA, |_, ch, q| {
            if ch.kind == ChangeKind::Deleted {
                q.add(&ch.cluster, &ch.name, "");
            }
        }),
        // A Placement deleted: the addons it installed are removed.
        (gk::PLACEMENT, |w, ch, q| {
            if ch.kind == ChangeKind::Deleted {
                q.every(w, &ch.cluster, gk::CMA);
            }
        }),
        // A Placement's decisions changed: the addons installed by it (all, when the decision is gone).
        (gk::PLACEMENT_DECISION, |w, ch, q| {
            let d = w.get(&ch.cluster, gk::PLACEMENT_DECISION, &ch.ns, &ch.name);
            let placement = d.and_then(|d| util::label(d, PLACEMENT_LABEL));
            let by = |(ns, name): (&str, &str)| ns == ch.ns && placement.is_none_or(|p| p == name);
            for cma in w.list(&ch.cluster, gk::CMA, None) {
                if placements(cma).is_some_and(|ps| ps.into_iter().any(by)) {
                    q.add(&ch.cluster, util::name(cma), "");
                }
            }
        }),
        // A cluster's namespace appeared on the hub: its addons can be created there.
        (gk::NAMESPACE, |w, ch, q| {
            let cluster = w.get(&ch.cluster, gk::MANAGED_CLUSTER, "", &ch.name);
            if ch.kind == ChangeKind::Created && cluster.is_some() {
                q.every(w, &ch.cluster, gk::CMA);
            }
        }),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::CMA)),
    run: |w, k| addon_install(w, k.cluster(), &k.key()[0]),
    fail: |w, k, msg| mark_work(w, k, gk::CMA, ["AddonInstallDegraded", "True"], msg),
};

static ADDON_STATUS: Controller = Controller {
    name: "addon-status",
    behaviour: Behaviour::AddonInstall,
    watches: &[
        (gk::DEPLOYMENT, |w, ch, q| {
            let addon = ch.name.strip_suffix("-addon-manager");
            if let Some(addon) = addon.filter(|a| [PROXY_ADDON, MSA_ADDON].contains(a)) {
                addon_statuses(w, &ch.cluster, addon, q);
            }
        }),
        (gk::MANAGED_CLUSTER, |w, ch, q| {
            for a in w.list(&ch.cluster, gk::MCA, Some(&ch.name)) {
                q.add(&ch.cluster, &ch.name, util::name(a));
            }
        }),
        (gk::CMA, |w, ch, q| {
            addon_statuses(w, &ch.cluster, &ch.name, q)
        }),
        (gk::MCA, spec_of),
    ],
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::MCA)),
    run: |w, k| addon_status(w, k.cluster(), &k.key()[0], &k.key()[1]),
    fail: |w, k, msg| mark_work(w, k, gk::MCA, ["Available", "False"], msg),
};

/// What wakes both cluster-proxy hub controllers (serving cert and access providers): the addon manager
/// rolling out, the serving cert Secret, the ManagedProxyConfiguration.
const PROXY_WATCHES: &[(&str, WatchFn)] = &[
    (gk::DEPLOYMENT, |_, ch, q| {
        named(ch, q, "cluster-proxy-addon-manager")
    }),
    (gk::SECRET, |_, ch, q| named(ch, q, SERVING_CERT)),
    (gk::MPC, any_change),
];

static PROXY_CERT: Controller = Controller {
    name: "cluster-proxy-serving-cert",
    behaviour: Behaviour::ProxyServingCert,
    watches: &[
        PROXY_WATCHES[0],
        PROXY_WATCHES[1],
        PROXY_WATCHES[2],
        (gk::NAMESPACE, any_change),
    ],
    resync: Resync::Hub(whole_cluster),
    run: |w, k| proxy_cert(w, k.cluster()),
    fail: |w, k, msg| {
        let cond = ["UserServerSecretSigned", "False"];
        mark(w, k.cluster(), [gk::MPC, "", PROXY_ADDON], cond, msg)
    },
};

const PROVIDER_DEGRADED: [&str; 2] = ["AccessProviderDegraded", "True"];

static PROXY_PROFILE: Controller = Controller {
    name: "cluster-proxy-access-provider",
    behaviour: Behaviour::ProxyAccessProvider,
    watches: &[(gk::CLUSTER_PROFILE, spec_of)],
    resync: Resync::Never,
    run: |w, k| proxy_profiles(w, k.cluster(), Some(k.key())),
    fail: |w, k, msg| mark_work(w, k, gk::CLUSTER_PROFILE, PROVIDER_DEGRADED, msg),
};

static PROXY_ALL: Controller = Controller {
    name: "cluster-proxy-access-providers",
    behaviour: Behaviour::ProxyAccessProvider,
    watches: PROXY_WATCHES,
    resync: Resync::Hub(whole_cluster),
    run: |w, k| proxy_profiles(w, k.cluster(), None),
    fail: |w, k, msg| {
        let hub = k.cluster();
        w.list(hub, gk::CLUSTER_PROFILE, None)
            .flat_map(|p| {
                let key = [gk::CLUSTER_PROFILE, util::namespace(p), util::name(p)];
                mark(w, hub, key, PROVIDER_DEGRADED, msg)
            })
            .collect()
    },
};

static MSA_TOKEN: Controller = Controller {
    name: "managed-serviceaccount-token",
    behaviour: Behaviour::MsaToken,
    watches: MSA_WATCHES,
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::MSA)),
    run: |w, k| msa_token(w, k.cluster(), &k.key()[0], &k.key()[1]),
    fail: |w, k, msg| mark_work(w, k, gk::MSA, ["TokenReported", "False"], msg),
};

static MSA_SYNC: Controller = Controller {
    name: "managed-serviceaccount-credential-sync",
    behaviour: Behaviour::MsaCredSync,
    watches: MSA_WATCHES,
    resync: Resync::Hub(|w, c, q| q.every(w, c, gk::MSA)),
    run: |w, k| msa_sync(w, k.cluster(), &k.key()[0], &k.key()[1]),
    fail: |w, k, msg| {
        let cond = ["ClusterProfileCredentialsSynced", "False"];
        mark_work(w, k, gk::MSA, cond, msg)
    },
};

static PROXY_TUNNEL: Controller = Controller {
    name: "cluster-proxy-tunnel",
    behaviour: Behaviour::ProxyTunnel,
    watches: &[
        (gk::MCA, |_, ch, q| {
            if ch.name == PROXY_ADDON {
                q.add(&ch.cluster, &ch.ns, PROXY_ADDON);
            }
        }),
        // The agents' replicas come from the ManagedProxyConfiguration: every cluster's tunnel may change.
        (gk::MPC, |w, ch, q| {
            addon_statuses(w, &ch.cluster, PROXY_ADDON, q)
        }),
    ],
    resync: Resync::Hub(|w, c, q| addon_statuses(w, c, PROXY_ADDON, q)),
    run: |w, k| proxy_tunnel(w, k.cluster(), &k.key()[0]),
    // No status reports a tunnel (open-cluster-management-io/cluster-proxy v0.10.0 `cmd/addon-agent/main.go`):
    // only the user server's answers show it.
    fail: |_, _, _| Vec::new(),
};
