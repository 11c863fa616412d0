//! The simulated components' behaviours, as controllers over the world: each work item reads the world
//! and returns the writes it wants ([`Op`]); the engine (`super::engine`) decides, with the faults a test
//! set, whether they happen now, later, or fail. Work is queued from object changes, like informers.

mod addons;
mod ocm;
mod sets;

pub(crate) use ocm::Bootstrap;

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::apiserver::{self, gk};
use super::faults::{Behaviour, SIMULATED_FAILURE};
use super::util;
use super::world::{Agent, Change, ChangeKind, TokenInfo, World};

/// One unit of controller work (a queue key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Work {
    CrdEstablish {
        cluster: String,
        name: String,
    },
    Rollout {
        cluster: String,
        ns: String,
        name: String,
    },
    HubOperator {
        cluster: String,
    },
    KlusterletOperator {
        cluster: String,
    },
    Registration {
        spoke: String,
    },
    CsrSign {
        hub: String,
        name: String,
    },
    HubAccept {
        hub: String,
        mc: String,
    },
    ClaimSync {
        spoke: String,
    },
    SetStatus {
        hub: String,
        set: String,
    },
    SetMember {
        hub: String,
        set: String,
        mc: String,
    },
    Binding {
        hub: String,
        ns: String,
        name: String,
    },
    LifecycleNs {
        hub: String,
        ns: String,
    },
    LifecycleCluster {
        hub: String,
        mc: String,
    },
    ProfileStatus {
        hub: String,
        mc: String,
    },
    Placement {
        hub: String,
        ns: String,
        name: String,
    },
    AddonInstall {
        hub: String,
        addon: String,
    },
    AddonCluster {
        hub: String,
        mc: String,
    },
    AddonStatus {
        hub: String,
        mc: String,
        addon: String,
    },
    ProxyCert {
        hub: String,
    },
    ProxyProfile {
        hub: String,
        ns: String,
        name: String,
    },
    ProxyAll {
        hub: String,
    },
    MsaToken {
        hub: String,
        ns: String,
        name: String,
    },
    MsaSync {
        hub: String,
        ns: String,
        name: String,
    },
    ProxyTunnel {
        hub: String,
        mc: String,
    },
}

impl Work {
    pub fn behaviour(&self) -> Behaviour {
        match self {
            Work::CrdEstablish { .. } => Behaviour::CrdEstablish,
            Work::Rollout { .. } => Behaviour::DeploymentRollout,
            Work::HubOperator { .. } => Behaviour::HubOperator,
            Work::KlusterletOperator { .. } => Behaviour::KlusterletOperator,
            Work::Registration { .. } => Behaviour::Registration,
            Work::CsrSign { .. } => Behaviour::CsrSign,
            Work::HubAccept { .. } => Behaviour::HubAccept,
            Work::ClaimSync { .. } => Behaviour::ClaimSync,
            Work::SetStatus { .. } | Work::SetMember { .. } | Work::Binding { .. } => {
                Behaviour::SetBinding
            }
            Work::LifecycleNs { .. } | Work::LifecycleCluster { .. } => Behaviour::ProfileLifecycle,
            Work::ProfileStatus { .. } => Behaviour::ProfileStatus,
            Work::Placement { .. } => Behaviour::Placement,
            Work::AddonInstall { .. } | Work::AddonCluster { .. } | Work::AddonStatus { .. } => {
                Behaviour::AddonInstall
            }
            Work::ProxyCert { .. } => Behaviour::ProxyServingCert,
            Work::ProxyProfile { .. } | Work::ProxyAll { .. } => Behaviour::ProxyAccessProvider,
            Work::MsaToken { .. } => Behaviour::MsaToken,
            Work::MsaSync { .. } => Behaviour::MsaCredSync,
            Work::ProxyTunnel { .. } => Behaviour::ProxyTunnel,
        }
    }

    /// The cluster whose controller does the work.
    pub fn cluster(&self) -> &str {
        match self {
            Work::CrdEstablish { cluster, .. }
            | Work::Rollout { cluster, .. }
            | Work::HubOperator { cluster }
            | Work::KlusterletOperator { cluster } => cluster,
            Work::Registration { spoke } | Work::ClaimSync { spoke } => spoke,
            Work::CsrSign { hub, .. }
            | Work::HubAccept { hub, .. }
            | Work::SetStatus { hub, .. }
            | Work::SetMember { hub, .. }
            | Work::Binding { hub, .. }
            | Work::LifecycleNs { hub, .. }
            | Work::LifecycleCluster { hub, .. }
            | Work::ProfileStatus { hub, .. }
            | Work::Placement { hub, .. }
            | Work::AddonInstall { hub, .. }
            | Work::AddonCluster { hub, .. }
            | Work::AddonStatus { hub, .. }
            | Work::ProxyCert { hub }
            | Work::ProxyProfile { hub, .. }
            | Work::ProxyAll { hub }
            | Work::MsaToken { hub, .. }
            | Work::MsaSync { hub, .. }
            | Work::ProxyTunnel { hub, .. } => hub,
        }
    }
}

/// A write a controller wants.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Create the object unless it exists.
    Create(String, Value),
    /// Create or replace the object (nothing when equal).
    Put(String, Value),
    Delete {
        cluster: String,
        gk: String,
        ns: String,
        name: String,
    },
    /// Set a cluster's agent state.
    Agent(String, Option<Agent>),
    /// Remember which lab cluster registered `<hub>/<managed cluster>`.
    AgentIndex(String, String),
    /// Remember a minted token.
    Token(String, TokenInfo),
    /// The simulation's member index of a set (`<hub>/<set>`): all members, or forget it.
    SetIndex(String, Option<BTreeSet<String>>),
    /// One cluster in or out of a set's member index.
    SetMember {
        key: String,
        mc: String,
        member: bool,
    },
    /// A cluster-proxy tunnel (`<hub>/<managed cluster>`) connected or not.
    Tunnel(String, bool),
    /// Queue more work (not a change by itself).
    Enqueue(Work),
}

impl Op {
    /// Whether applying the op would change the world.
    pub fn effective(&self, w: &World) -> bool {
        match self {
            Op::Create(c, v) => w
                .get(c, &gk::of_obj(v), util::namespace(v), util::name(v))
                .is_none(),
            Op::Put(c, v) => match w.get(c, &gk::of_obj(v), util::namespace(v), util::name(v)) {
                None => true,
                Some(old) => !super::world::same_ignoring_server_fields(old, v),
            },
            Op::Delete {
                cluster,
                gk,
                ns,
                name,
            } => w.get(cluster, gk, ns, name).is_some(),
            Op::Agent(c, a) => w.clusters.get(c).is_some_and(|c| &c.agent != a),
            Op::AgentIndex(k, v) => w.agents.get(k) != Some(v),
            Op::Token(t, _) => !w.tokens.contains_key(t),
            Op::SetIndex(k, v) => w.set_index.get(k) != v.as_ref(),
            Op::SetMember { key, mc, member } => w
                .set_index
                .get(key)
                .is_some_and(|i| i.contains(mc) != *member),
            Op::Tunnel(k, up) => w.tunnels.contains(k) != *up,
            Op::Enqueue(_) => false,
        }
    }

    /// Applies the op; work it queues goes to `queue`.
    pub fn commit(self, w: &mut World, queue: &mut BTreeSet<Work>) {
        match self {
            Op::Create(c, v) => {
                if w.get(&c, &gk::of_obj(&v), util::namespace(&v), util::name(&v))
                    .is_none()
                {
                    w.put(&c, v);
                }
            }
            Op::Put(c, v) => {
                w.put(&c, v);
            }
            Op::Delete {
                cluster,
                gk,
                ns,
                name,
            } => {
                w.remove(&cluster, &gk, &ns, &name);
            }
            Op::Agent(c, a) => {
                if let Some(cl) = w.clusters.get_mut(&c) {
                    cl.agent = a;
                }
            }
            Op::AgentIndex(k, v) => {
                w.agents.insert(k, v);
            }
            Op::Token(t, info) => {
                w.tokens.insert(t, info);
            }
            Op::SetIndex(k, v) => match v {
                Some(v) => {
                    w.set_index.insert(k, v);
                }
                None => {
                    w.set_index.remove(&k);
                }
            },
            Op::SetMember { key, mc, member } => {
                if let Some(i) = w.set_index.get_mut(&key) {
                    if member {
                        i.insert(mc);
                    } else {
                        i.remove(&mc);
                    }
                }
            }
            Op::Tunnel(k, up) => {
                // Nothing in the API changes (no status reports a tunnel): the hub's waiters are woken
                // so a request that retries sees it.
                let hub = k.split_once('/').map_or(k.as_str(), |(h, _)| h).to_owned();
                let changed = if up {
                    w.tunnels.insert(k)
                } else {
                    w.tunnels.remove(&k)
                };
                if changed {
                    w.touched.insert(hub);
                }
            }
            Op::Enqueue(work) => {
                queue.insert(work);
            }
        }
    }
}

/// Runs one work item: the writes it wants (empty when it has nothing to do).
pub(crate) fn run(w: &World, work: &Work) -> Vec<Op> {
    if !w.reachable(work.cluster()) {
        return Vec::new();
    }
    match work {
        Work::CrdEstablish { cluster, name } => ocm::crd_establish(w, cluster, name),
        Work::Rollout { cluster, ns, name } => ocm::rollout(w, cluster, ns, name),
        Work::HubOperator { cluster } => ocm::hub_operator(w, cluster),
        Work::KlusterletOperator { cluster } => ocm::klusterlet_operator(w, cluster),
        Work::Registration { spoke } => ocm::registration(w, spoke),
        Work::CsrSign { hub, name } => ocm::csr_sign(w, hub, name),
        Work::HubAccept { hub, mc } => ocm::hub_accept(w, hub, mc),
        Work::ClaimSync { spoke } => ocm::claim_sync(w, spoke),
        Work::SetStatus { hub, set } => sets::set_status(w, hub, set),
        Work::SetMember { hub, set, mc } => sets::set_member(w, hub, set, mc),
        Work::Binding { hub, ns, name } => sets::binding(w, hub, ns, name),
        Work::LifecycleNs { hub, ns } => sets::lifecycle_ns(w, hub, ns),
        Work::LifecycleCluster { hub, mc } => sets::lifecycle_cluster(w, hub, mc),
        Work::ProfileStatus { hub, mc } => sets::profile_status(w, hub, mc),
        Work::Placement { hub, ns, name } => sets::placement(w, hub, ns, name),
        Work::AddonInstall { hub, addon } => addons::addon_install(w, hub, addon),
        Work::AddonCluster { hub, mc } => addons::addon_cluster(w, hub, mc),
        Work::AddonStatus { hub, mc, addon } => addons::addon_status(w, hub, mc, addon),
        Work::ProxyCert { hub } => addons::proxy_cert(w, hub),
        Work::ProxyProfile { hub, ns, name } => addons::proxy_profiles(w, hub, Some((ns, name))),
        Work::ProxyAll { hub } => addons::proxy_profiles(w, hub, None),
        Work::MsaToken { hub, ns, name } => addons::msa_token(w, hub, ns, name),
        Work::MsaSync { hub, ns, name } => addons::msa_sync(w, hub, ns, name),
        Work::ProxyTunnel { hub, mc } => addons::proxy_tunnel(w, hub, mc),
    }
}

/// What a failing controller leaves behind: the failure on the object it would have touched, as a
/// condition with reason `SimulatedFailure`, so a wait that times out shows it.
pub(crate) fn fail(w: &World, work: &Work, msg: &str) -> Vec<Op> {
    let msg = format!("simulated failure: {msg}");
    match work {
        Work::CrdEstablish { cluster, name } => {
            mark(w, cluster, gk::CRD, "", name, "Established", "False", &msg)
        }
        Work::Rollout { cluster, ns, name } => mark(
            w,
            cluster,
            gk::DEPLOYMENT,
            ns,
            name,
            "Available",
            "False",
            &msg,
        ),
        Work::HubOperator { cluster } => mark(
            w,
            cluster,
            gk::CLUSTER_MANAGER,
            "",
            "cluster-manager",
            "HubRegistrationDegraded",
            "True",
            &msg,
        ),
        Work::KlusterletOperator { cluster } => {
            let name = ocm::klusterlet(w, cluster).map(|k| util::name(k).to_owned());
            name.map_or_else(Vec::new, |n| {
                mark(w, cluster, gk::KLUSTERLET, "", &n, "Applied", "False", &msg)
            })
        }
        Work::Registration { spoke } => {
            let name = ocm::klusterlet(w, spoke).map(|k| util::name(k).to_owned());
            name.map_or_else(Vec::new, |n| {
                mark(
                    w,
                    spoke,
                    gk::KLUSTERLET,
                    "",
                    &n,
                    "HubConnectionDegraded",
                    "True",
                    &msg,
                )
            })
        }
        Work::CsrSign { hub, name } => mark(w, hub, gk::CSR, "", name, "Failed", "True", &msg),
        Work::HubAccept { hub, mc } => mark(
            w,
            hub,
            gk::MANAGED_CLUSTER,
            "",
            mc,
            "HubAcceptedManagedCluster",
            "False",
            &msg,
        ),
        Work::ClaimSync { spoke } => match w.agent(spoke) {
            Some(a) => mark(
                w,
                &a.hub,
                gk::MANAGED_CLUSTER,
                "",
                &a.cluster_name,
                "ClusterClaimsSynced",
                "False",
                &msg,
            ),
            None => Vec::new(),
        },
        Work::SetStatus { hub, set } | Work::SetMember { hub, set, .. } => mark(
            w,
            hub,
            gk::CLUSTER_SET,
            "",
            set,
            "ClusterSetEmpty",
            "Unknown",
            &msg,
        ),
        Work::Binding { hub, ns, name } => {
            mark(w, hub, gk::SET_BINDING, ns, name, "Bound", "False", &msg)
        }
        Work::LifecycleNs { hub, ns } => w
            .list(hub, gk::SET_BINDING, Some(ns))
            .flat_map(|b| {
                mark(
                    w,
                    hub,
                    gk::SET_BINDING,
                    ns,
                    util::name(b),
                    "ClusterProfilesSynced",
                    "False",
                    &msg,
                )
            })
            .collect(),
        Work::LifecycleCluster { hub, mc } => mark(
            w,
            hub,
            gk::MANAGED_CLUSTER,
            "",
            mc,
            "ClusterProfilesSynced",
            "False",
            &msg,
        ),
        Work::ProfileStatus { hub, mc } => profiles_named(w, hub, mc)
            .into_iter()
            .flat_map(|ns| {
                mark(
                    w,
                    hub,
                    gk::CLUSTER_PROFILE,
                    &ns,
                    mc,
                    "ControlPlaneHealthy",
                    "Unknown",
                    &msg,
                )
            })
            .collect(),
        Work::Placement { hub, ns, name } => mark(
            w,
            hub,
            gk::PLACEMENT,
            ns,
            name,
            "PlacementSatisfied",
            "False",
            &msg,
        ),
        Work::AddonCluster { hub, mc } => mark(
            w,
            hub,
            gk::MANAGED_CLUSTER,
            "",
            mc,
            "AddonInstallDegraded",
            "True",
            &msg,
        ),
        Work::AddonInstall { hub, addon } => mark(
            w,
            hub,
            gk::CMA,
            "",
            addon,
            "AddonInstallDegraded",
            "True",
            &msg,
        ),
        Work::AddonStatus { hub, mc, addon } => {
            mark(w, hub, gk::MCA, mc, addon, "Available", "False", &msg)
        }
        Work::ProxyCert { hub } => mark(
            w,
            hub,
            gk::MPC,
            "",
            "cluster-proxy",
            "UserServerSecretSigned",
            "False",
            &msg,
        ),
        Work::ProxyProfile { hub, ns, name } => mark(
            w,
            hub,
            gk::CLUSTER_PROFILE,
            ns,
            name,
            "AccessProviderDegraded",
            "True",
            &msg,
        ),
        Work::ProxyAll { hub } => w
            .list(hub, gk::CLUSTER_PROFILE, None)
            .flat_map(|p| {
                mark(
                    w,
                    hub,
                    gk::CLUSTER_PROFILE,
                    util::namespace(p),
                    util::name(p),
                    "AccessProviderDegraded",
                    "True",
                    &msg,
                )
            })
            .collect(),
        Work::MsaToken { hub, ns, name } => {
            mark(w, hub, gk::MSA, ns, name, "TokenReported", "False", &msg)
        }
        Work::MsaSync { hub, ns, name } => mark(
            w,
            hub,
            gk::MSA,
            ns,
            name,
            "ClusterProfileCredentialsSynced",
            "False",
            &msg,
        ),
        // No status reports a tunnel (FACTS-OCM-ROUND2 §4.3): only the user server's answers show it.
        Work::ProxyTunnel { .. } => Vec::new(),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "the object's coordinates and the condition set on it, each written into the object as it is"
)]
fn mark(
    w: &World,
    cluster: &str,
    key: &str,
    ns: &str,
    name: &str,
    kind: &str,
    status: &str,
    msg: &str,
) -> Vec<Op> {
    match w.get(cluster, key, ns, name) {
        Some(o) => {
            let mut o = o.clone();
            util::set_condition(&mut o, kind, status, SIMULATED_FAILURE, msg);
            vec![Op::Put(cluster.to_owned(), o)]
        }
        None => Vec::new(),
    }
}

// ---- what the controllers share ------------------------------------------------------------------

/// The cluster runs an OCM hub: a ClusterManager and the registration controller the operator deployed.
pub(crate) fn is_hub(w: &World, c: &str) -> bool {
    w.get(c, gk::CLUSTER_MANAGER, "", "cluster-manager")
        .is_some()
        && w.get(
            c,
            gk::DEPLOYMENT,
            ocm::HUB_NAMESPACE,
            "cluster-manager-registration-controller",
        )
        .is_some()
}

pub(crate) fn available(d: &Value) -> bool {
    util::condition_is(d, "Available", "True")
}

/// The Deployment named `name` in any namespace, when it is Available.
pub(crate) fn available_deployment<'a>(w: &'a World, c: &str, name: &str) -> Option<&'a Value> {
    w.find_named(c, gk::DEPLOYMENT, name)
        .filter(|d| available(d))
}

pub(crate) fn namespace_obj(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}, "status": {"phase": "Active"}})
}

pub(crate) fn namespace_exists(w: &World, c: &str, ns: &str) -> bool {
    w.get(c, gk::NAMESPACE, "", ns)
        .is_some_and(|n| n["status"]["phase"] != "Terminating")
}

/// Namespaces holding a ClusterProfile named `name`.
fn profiles_named(w: &World, hub: &str, name: &str) -> Vec<String> {
    w.namespaces_with(hub, gk::CLUSTER_PROFILE)
        .into_iter()
        .filter(|ns| w.get(hub, gk::CLUSTER_PROFILE, ns, name).is_some())
        .collect()
}

fn owner_ref(owner: &Value, controller: bool) -> Value {
    let mut r = json!({
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": util::name(owner),
        "uid": util::uid(owner),
    });
    if controller {
        r["controller"] = json!(true);
        r["blockOwnerDeletion"] = json!(true);
    }
    r
}

// ---- informers: which changes queue which work ----------------------------------------------------

fn s(x: &str) -> String {
    x.to_owned()
}

/// Queues the work a change makes necessary.
///
/// A status-only change is mostly a controller's own status write. The controller that wrote it is not
/// queued again for it: what it computes never depends on that status (CRD establishment, rollouts,
/// addon status, hub accept, the ClusterProfile controllers). Controllers that do read another's status
/// (a ManagedCluster's conditions and claims, a CRD's Established) still are.
pub(crate) fn dispatch(w: &World, ch: &Change, out: &mut BTreeSet<Work>) {
    let c = ch.cluster.as_str();
    if !w.clusters.contains_key(c) {
        return;
    }
    let hub = || s(c);
    match ch.gk.as_str() {
        gk::CRD => {
            if !ch.kind.status_only() {
                out.insert(Work::CrdEstablish {
                    cluster: hub(),
                    name: ch.name.clone(),
                });
            }
            out.insert(Work::HubOperator { cluster: hub() });
            out.insert(Work::ClaimSync { spoke: hub() });
            if ch.name == super::charts::CLUSTER_PROFILE_CRD {
                resync_hub(w, c, out);
            }
            if ch.name.ends_with(".cluster.open-cluster-management.io") {
                out.insert(Work::HubOperator { cluster: hub() });
            }
        }
        gk::DEPLOYMENT => {
            if !ch.kind.status_only() {
                out.insert(Work::Rollout {
                    cluster: hub(),
                    ns: ch.ns.clone(),
                    name: ch.name.clone(),
                });
            }
            if ch.ns == ocm::HUB_NAMESPACE {
                // The operator watches its Deployments' rollout (FACTS-OCM-ROUND2 §1.5).
                out.insert(Work::HubOperator { cluster: hub() });
            }
            match ch.name.as_str() {
                "cluster-manager" => {
                    out.insert(Work::HubOperator { cluster: hub() });
                }
                "klusterlet" => {
                    out.insert(Work::KlusterletOperator { cluster: hub() });
                }
                "klusterlet-registration-agent" => {
                    out.insert(Work::Registration { spoke: hub() });
                }
                "cluster-manager-registration-controller" => resync_hub(w, c, out),
                "cluster-proxy-addon-manager" => {
                    out.insert(Work::ProxyCert { hub: hub() });
                    out.insert(Work::ProxyAll { hub: hub() });
                    addon_statuses(w, c, "cluster-proxy", out);
                }
                "managed-serviceaccount-addon-manager" => {
                    addon_statuses(w, c, "managed-serviceaccount", out);
                    all_msas(w, c, None, out);
                }
                _ => {}
            }
        }
        gk::CLUSTER_MANAGER => {
            out.insert(Work::HubOperator { cluster: hub() });
            resync_hub(w, c, out);
        }
        gk::KLUSTERLET => {
            out.insert(Work::KlusterletOperator { cluster: hub() });
            out.insert(Work::Registration { spoke: hub() });
            out.insert(Work::ClaimSync { spoke: hub() });
        }
        gk::SECRET => {
            match ch.name.as_str() {
                "bootstrap-hub-kubeconfig" => {
                    out.insert(Work::Registration { spoke: hub() });
                }
                "hub-kubeconfig-secret" => {
                    out.insert(Work::ClaimSync { spoke: hub() });
                }
                "cluster-proxy-user-serving-cert" => {
                    out.insert(Work::ProxyCert { hub: hub() });
                    out.insert(Work::ProxyAll { hub: hub() });
                    out.insert(Work::Rollout {
                        cluster: hub(),
                        ns: ch.ns.clone(),
                        name: s("cluster-proxy-addon-user"),
                    });
                }
                _ => {}
            }
            if w.get(c, gk::MSA, &ch.ns, &ch.name).is_some() {
                out.insert(Work::MsaToken {
                    hub: hub(),
                    ns: ch.ns.clone(),
                    name: ch.name.clone(),
                });
                out.insert(Work::MsaSync {
                    hub: hub(),
                    ns: ch.ns.clone(),
                    name: ch.name.clone(),
                });
            }
            if ch.kind == ChangeKind::Deleted
                && w.list(c, gk::CLUSTER_PROFILE, Some(&ch.ns))
                    .next()
                    .is_some()
            {
                for m in w.list(c, gk::MSA, None) {
                    if format!("{}-{}", util::namespace(m), util::name(m)) == ch.name {
                        out.insert(Work::MsaSync {
                            hub: hub(),
                            ns: s(util::namespace(m)),
                            name: s(util::name(m)),
                        });
                    }
                }
            }
        }
        gk::NAMESPACE => {
            out.insert(Work::LifecycleNs {
                hub: hub(),
                ns: ch.name.clone(),
            });
            out.insert(Work::ProxyCert { hub: hub() });
            if ch.kind == ChangeKind::Created {
                out.insert(Work::AddonCluster {
                    hub: hub(),
                    mc: ch.name.clone(),
                });
            }
        }
        gk::MANAGED_CLUSTER => {
            let mc = ch.name.clone();
            // Accepting reads the spec, the agent and its CSR (whose changes queue it), not the status.
            if !ch.kind.status_only() {
                out.insert(Work::HubAccept {
                    hub: hub(),
                    mc: mc.clone(),
                });
            }
            out.insert(Work::ProfileStatus {
                hub: hub(),
                mc: mc.clone(),
            });
            for a in w.list(c, gk::MCA, Some(&mc)) {
                out.insert(Work::AddonStatus {
                    hub: hub(),
                    mc: mc.clone(),
                    addon: s(util::name(a)),
                });
            }
            if ch.kind.membership() {
                out.insert(Work::LifecycleCluster {
                    hub: hub(),
                    mc: mc.clone(),
                });
                membership_changed(w, c, ch, out);
            }
            if let Some(spoke) = w.spoke_of(c, &mc) {
                out.insert(Work::ClaimSync { spoke: s(spoke) });
                if ch.kind == ChangeKind::Deleted {
                    out.insert(Work::Registration { spoke: s(spoke) });
                }
            }
        }
        gk::CSR => {
            out.insert(Work::CsrSign {
                hub: hub(),
                name: ch.name.clone(),
            });
            if let Some(mc) = w
                .get(c, gk::CSR, "", &ch.name)
                .and_then(|o| util::label(o, "open-cluster-management.io/cluster-name"))
            {
                out.insert(Work::HubAccept {
                    hub: hub(),
                    mc: s(mc),
                });
            }
        }
        // A set's or placement's own status write changes nothing its controllers read (and recomputing
        // them is O(clusters)).
        gk::CLUSTER_SET | gk::PLACEMENT if ch.kind.status_only() => {}
        gk::CLUSTER_SET => {
            out.insert(Work::SetStatus {
                hub: hub(),
                set: ch.name.clone(),
            });
            for b in w.list(c, gk::SET_BINDING, None) {
                out.insert(Work::Binding {
                    hub: hub(),
                    ns: s(util::namespace(b)),
                    name: s(util::name(b)),
                });
            }
            if ch.kind.membership() || matches!(ch.kind, ChangeKind::Updated { spec: true, .. }) {
                for ns in w.namespaces_with(c, gk::SET_BINDING) {
                    out.insert(Work::LifecycleNs { hub: hub(), ns });
                }
                all_placements(w, c, None, out);
            }
        }
        gk::SET_BINDING => {
            out.insert(Work::Binding {
                hub: hub(),
                ns: ch.ns.clone(),
                name: ch.name.clone(),
            });
            out.insert(Work::LifecycleNs {
                hub: hub(),
                ns: ch.ns.clone(),
            });
            all_placements(w, c, Some(&ch.ns), out);
        }
        // The profile controllers read a ClusterProfile's labels, spec and uid, never its status.
        gk::CLUSTER_PROFILE if ch.kind.status_only() => {}
        gk::CLUSTER_PROFILE => {
            out.insert(Work::ProfileStatus {
                hub: hub(),
                mc: ch.name.clone(),
            });
            out.insert(Work::ProxyProfile {
                hub: hub(),
                ns: ch.ns.clone(),
                name: ch.name.clone(),
            });
            all_msas(w, c, Some(&ch.name), out);
            if ch.kind == ChangeKind::Deleted {
                out.insert(Work::LifecycleNs {
                    hub: hub(),
                    ns: ch.ns.clone(),
                });
            }
        }
        gk::PLACEMENT => {
            out.insert(Work::Placement {
                hub: hub(),
                ns: ch.ns.clone(),
                name: ch.name.clone(),
            });
        }
        gk::CMA => {
            out.insert(Work::AddonInstall {
                hub: hub(),
                addon: ch.name.clone(),
            });
            addon_statuses(w, c, &ch.name, out);
        }
        gk::MCA => {
            if !ch.kind.status_only() {
                out.insert(Work::AddonStatus {
                    hub: hub(),
                    mc: ch.ns.clone(),
                    addon: ch.name.clone(),
                });
            }
            if ch.name == "managed-serviceaccount" {
                all_msas(w, c, Some(&ch.ns), out);
            }
            if ch.name == "cluster-proxy" {
                out.insert(Work::ProxyTunnel {
                    hub: hub(),
                    mc: ch.ns.clone(),
                });
            }
            if ch.kind == ChangeKind::Deleted {
                out.insert(Work::AddonInstall {
                    hub: hub(),
                    addon: ch.name.clone(),
                });
            }
        }
        gk::MPC => {
            out.insert(Work::ProxyCert { hub: hub() });
            out.insert(Work::ProxyAll { hub: hub() });
            for d in ["cluster-proxy-addon-manager", "cluster-proxy-addon-user"] {
                if let Some(o) = w.find_named(c, gk::DEPLOYMENT, d) {
                    out.insert(Work::Rollout {
                        cluster: hub(),
                        ns: s(util::namespace(o)),
                        name: s(d),
                    });
                }
            }
        }
        gk::MSA => {
            out.insert(Work::MsaToken {
                hub: hub(),
                ns: ch.ns.clone(),
                name: ch.name.clone(),
            });
            out.insert(Work::MsaSync {
                hub: hub(),
                ns: ch.ns.clone(),
                name: ch.name.clone(),
            });
        }
        gk::CLUSTER_PROPERTY | gk::CLUSTER_CLAIM => {
            out.insert(Work::ClaimSync { spoke: hub() });
        }
        _ => {}
    }
}

/// Sets whose membership a ManagedCluster change altered get their status recomputed, and placements
/// that use them decide again (only those: each is O(clusters)).
fn membership_changed(w: &World, c: &str, ch: &Change, out: &mut BTreeSet<Work>) {
    let now = w.get(c, gk::MANAGED_CLUSTER, "", &ch.name);
    let before = ch
        .prev_labels
        .as_ref()
        .map(|l| json!({"metadata": {"name": ch.name, "labels": l}}));
    let mut changed: BTreeSet<&str> = BTreeSet::new();
    for set in w.list(c, gk::CLUSTER_SET, None) {
        let was = match ch.kind {
            ChangeKind::Created => false,
            ChangeKind::Deleted => true,
            ChangeKind::Updated { .. } => before.as_ref().is_some_and(|b| sets::is_member(set, b)),
        };
        let is = now.is_some_and(|m| sets::is_member(set, m));
        if was != is || ch.kind == ChangeKind::Deleted {
            changed.insert(util::name(set));
            out.insert(Work::SetMember {
                hub: s(c),
                set: s(util::name(set)),
                mc: ch.name.clone(),
            });
        }
    }
    if changed.is_empty() {
        return;
    }
    for p in w.list(c, gk::PLACEMENT, None) {
        let uses_changed = match p["spec"]["clusterSets"].as_array() {
            Some(list) if !list.is_empty() => list
                .iter()
                .filter_map(Value::as_str)
                .any(|x| changed.contains(x)),
            _ => true,
        };
        if uses_changed {
            out.insert(Work::Placement {
                hub: s(c),
                ns: s(util::namespace(p)),
                name: s(util::name(p)),
            });
        }
    }
}

fn addon_statuses(w: &World, c: &str, addon: &str, out: &mut BTreeSet<Work>) {
    for ns in w.namespaces_with(c, gk::MCA) {
        if w.get(c, gk::MCA, &ns, addon).is_some() {
            out.insert(Work::AddonStatus {
                hub: s(c),
                mc: ns,
                addon: s(addon),
            });
        }
    }
}

fn all_msas(w: &World, c: &str, ns: Option<&str>, out: &mut BTreeSet<Work>) {
    for m in w.list(c, gk::MSA, ns) {
        out.insert(Work::MsaToken {
            hub: s(c),
            ns: s(util::namespace(m)),
            name: s(util::name(m)),
        });
        out.insert(Work::MsaSync {
            hub: s(c),
            ns: s(util::namespace(m)),
            name: s(util::name(m)),
        });
    }
}

fn all_placements(w: &World, c: &str, ns: Option<&str>, out: &mut BTreeSet<Work>) {
    for p in w.list(c, gk::PLACEMENT, ns) {
        out.insert(Work::Placement {
            hub: s(c),
            ns: s(util::namespace(p)),
            name: s(util::name(p)),
        });
    }
}

fn all_addons(w: &World, c: &str, out: &mut BTreeSet<Work>) {
    for a in w.list(c, gk::CMA, None) {
        out.insert(Work::AddonInstall {
            hub: s(c),
            addon: s(util::name(a)),
        });
    }
}

/// Everything a hub's controllers would look at when they (re)start.
fn resync_hub(w: &World, c: &str, out: &mut BTreeSet<Work>) {
    for set in w.list(c, gk::CLUSTER_SET, None) {
        out.insert(Work::SetStatus {
            hub: s(c),
            set: s(util::name(set)),
        });
    }
    for b in w.list(c, gk::SET_BINDING, None) {
        out.insert(Work::Binding {
            hub: s(c),
            ns: s(util::namespace(b)),
            name: s(util::name(b)),
        });
    }
    for ns in w.namespaces_with(c, gk::SET_BINDING) {
        out.insert(Work::LifecycleNs { hub: s(c), ns });
    }
    for m in w.list(c, gk::MANAGED_CLUSTER, None) {
        out.insert(Work::HubAccept {
            hub: s(c),
            mc: s(util::name(m)),
        });
        out.insert(Work::ProfileStatus {
            hub: s(c),
            mc: s(util::name(m)),
        });
    }
    for csr in w.list(c, gk::CSR, None) {
        out.insert(Work::CsrSign {
            hub: s(c),
            name: s(util::name(csr)),
        });
    }
    all_placements(w, c, None, out);
    all_addons(w, c, out);
    for a in w.list(c, gk::MCA, None) {
        if util::name(a) == "cluster-proxy" {
            out.insert(Work::ProxyTunnel {
                hub: s(c),
                mc: s(util::namespace(a)),
            });
        }
        out.insert(Work::AddonStatus {
            hub: s(c),
            mc: s(util::namespace(a)),
            addon: s(util::name(a)),
        });
    }
    out.insert(Work::ProxyCert { hub: s(c) });
    out.insert(Work::ProxyAll { hub: s(c) });
    all_msas(w, c, None, out);
}

/// Every work item for every cluster: what controllers do after a restart (and after a test changed
/// the world behind the API's back).
pub(crate) fn resync_all(w: &World) -> BTreeSet<Work> {
    let mut out = BTreeSet::new();
    for c in w.clusters.keys() {
        for crd in w.list(c, gk::CRD, None) {
            out.insert(Work::CrdEstablish {
                cluster: c.clone(),
                name: s(util::name(crd)),
            });
        }
        for d in w.list(c, gk::DEPLOYMENT, None) {
            out.insert(Work::Rollout {
                cluster: c.clone(),
                ns: s(util::namespace(d)),
                name: s(util::name(d)),
            });
        }
        out.insert(Work::HubOperator { cluster: c.clone() });
        out.insert(Work::KlusterletOperator { cluster: c.clone() });
        out.insert(Work::Registration { spoke: c.clone() });
        out.insert(Work::ClaimSync { spoke: c.clone() });
        resync_hub(w, c, &mut out);
    }
    out
}

/// The hub gate check shared by the profile controllers (OCM-FACTS §4.1: started only with the gate).
pub(crate) fn profiles_enabled(w: &World, hub: &str) -> bool {
    is_hub(w, hub)
        && apiserver::hub_gate(w, hub, "ClusterProfile")
        && w.served(hub, gk::CLUSTER_PROFILE)
}
