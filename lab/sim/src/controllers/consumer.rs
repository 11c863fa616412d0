//! A ClusterProfile consumer in a Pod on the hub: the kubelet runs the `consumer` check's Pod, and the
//! consumer in it does what examples/consumer does (kubernetes-sigs/cluster-inventory-api v0.1.2
//! `pkg/access/config.go` `BuildConfigFromCP`, with the same provider choice: `ocm_lab_consumer::provider`),
//! its exec plugin behaving as managed-serviceaccount v0.10.0's `cp-creds`
//! (`cmd/clusterprofile-credentials-plugin/main.go`: GET Secret `<clusterName>-<msa>` in the Pod's namespace
//! as the Pod's ServiceAccount). Its answer is computed from the simulated objects, RBAC included
//! ([`allowed`]), and left where the kubelet leaves a container's termination message.
//!
//! Only Pods labelled as the check's are run; the simulated lab has no container runtime for others.

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{Controller, Op, Resync, Work};
use crate::apiserver::gk;
use crate::faults::Behaviour;
use crate::util;
use crate::world::{ChangeKind, World};
use ocm_lab_consumer::report::{Failure, PodReport, PodSpoke};
use ocm_lab_consumer::{Hop, ProviderFile};
use ocm_lab_core::verify::consumer::{
    CHECK_LABEL, CLIENT_CONTAINER, PLUGIN_CONTAINER, PROVIDER_FILE,
};

const POD: &str = "Pod";
const ROLE: &str = "Role.rbac.authorization.k8s.io";
const ROLE_BINDING: &str = "RoleBinding.rbac.authorization.k8s.io";
const CLUSTER_ROLE: &str = "ClusterRole.rbac.authorization.k8s.io";
const CLUSTER_ROLE_BINDING: &str = "ClusterRoleBinding.rbac.authorization.k8s.io";

/// Whether ServiceAccount `ns/sa` may `verb` `resource` of `group` (named `name`) in `ns`, by the RBAC
/// authorizer's rules (kubernetes v1.35 `plugin/pkg/auth/authorizer/rbac/rbac.go`, `RuleAllows`): a
/// RoleBinding in `ns` or a ClusterRoleBinding naming the ServiceAccount, to a Role in `ns` or a ClusterRole
/// whose rule lists the group, the resource and the verb (or `*`), and the name when it lists any.
/// Otherwise the API server's Forbidden text.
fn allowed(
    w: &World,
    hub: &str,
    (ns, sa): (&str, &str),
    verb: &str,
    (group, resource): (&str, &str),
    name: Option<&str>,
) -> Result<(), String> {
    let has = |list: &Value, want: &str| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|v| v == want || v == "*"))
    };
    let rule_allows = |r: &Value| {
        has(&r["apiGroups"], group)
            && has(&r["resources"], resource)
            && has(&r["verbs"], verb)
            && match r["resourceNames"].as_array().filter(|n| !n.is_empty()) {
                None => true,
                Some(names) => name.is_some_and(|n| names.iter().any(|x| x == n)),
            }
    };
    // A RoleBinding in `in_ns` (a ClusterRoleBinding with `None`) grants it.
    let grants = |(b, in_ns): (&Value, Option<&str>)| {
        let names_sa = |s: &Value| {
            let subject_ns = s["namespace"].as_str().or(in_ns);
            s["kind"] == "ServiceAccount" && s["name"] == sa && subject_ns == Some(ns)
        };
        if !b["subjects"]
            .as_array()
            .is_some_and(|l| l.iter().any(names_sa))
        {
            return false;
        }
        let target = b["roleRef"]["name"].as_str().unwrap_or_default();
        let role = match (b["roleRef"]["kind"].as_str(), in_ns) {
            (Some("Role"), Some(n)) => w.get(hub, ROLE, n, target),
            (Some("ClusterRole"), _) => w.get(hub, CLUSTER_ROLE, "", target),
            _ => None,
        };
        let rules = role.and_then(|r| r["rules"].as_array());
        rules.is_some_and(|l| l.iter().any(rule_allows))
    };
    let role_bindings = w.list(hub, ROLE_BINDING, Some(ns)).map(|b| (b, Some(ns)));
    let cluster_bindings = w.list(hub, CLUSTER_ROLE_BINDING, None).map(|b| (b, None));
    if role_bindings.chain(cluster_bindings).any(grants) {
        return Ok(());
    }
    let what = format!("{resource}.{group}");
    let what = what.trim_end_matches('.');
    let named = name.map(|n| format!(" \"{n}\"")).unwrap_or_default();
    Err(format!(
        "{what}{named} is forbidden: User \"system:serviceaccount:{ns}:{sa}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" in the namespace \"{ns}\""
    ))
}

fn failure(hop: Hop, status: Option<u16>, detail: String) -> Failure {
    Failure {
        hop,
        status,
        detail,
    }
}

/// The consumer's run in namespace `ns` as ServiceAccount `sa`, with `cp-creds` at `plugin` and the
/// provider file read from the Pod's ConfigMap.
fn consume(
    w: &World,
    hub: &str,
    (ns, sa): (&str, &str),
    plugin: &str,
    file: Option<ProviderFile>,
) -> Result<Vec<PodSpoke>, Failure> {
    let why =
        "the provider file /etc/clusterprofile/clusterprofile-provider-file.json could not be read";
    let file = file.ok_or_else(|| failure(Hop::Hub, None, why.into()))?;
    let profiles = ("multicluster.x-k8s.io", "clusterprofiles");
    if let Err(why) = allowed(w, hub, (ns, sa), "list", profiles, None) {
        let why = format!("failed to list ClusterProfiles in namespace {ns}: {why}");
        return Err(failure(Hop::Hub, Some(403), why));
    }
    let list: Vec<&Value> = w.list(hub, gk::CLUSTER_PROFILE, Some(ns)).collect();
    if list.is_empty() {
        let why = format!("namespace {ns} holds no ClusterProfile");
        return Err(failure(Hop::Hub, None, why));
    }
    let spoke = |p: &Value| {
        let access = ocm_lab_consumer::provider::access(p, &file);
        let outcome = access.as_ref().map_err(Failure::of);
        let outcome = outcome.and_then(|a| reach(w, hub, (ns, sa), plugin, a));
        let access = access.ok();
        PodSpoke {
            profile: util::name(p).to_owned(),
            cluster: access.as_ref().map(|a| a.cluster.clone()),
            server: access.map(|a| a.server),
            version: outcome.as_ref().ok().cloned(),
            failure: outcome.err(),
        }
    };
    Ok(list.into_iter().map(spoke).collect())
}

/// One profile's path: the plugin as `cp-creds`, then the request to the provider's server.
fn reach(
    w: &World,
    hub: &str,
    (ns, sa): (&str, &str),
    plugin: &str,
    a: &ocm_lab_consumer::Access,
) -> Result<String, Failure> {
    let command = a.exec.command.as_str();
    if plugin != command {
        let why = format!("the exec plugin `{command}` was not found");
        return Err(failure(Hop::PluginMissing, None, why));
    }
    let refused = |why: &str| {
        let why = format!("the exec plugin `{command}` refused (exit status 1): {why}");
        failure(Hop::PluginRefused, None, why)
    };
    let mut args = a.exec.args.iter();
    let Some(msa) = args.find_map(|x| x.strip_prefix("--managed-serviceaccount=")) else {
        return Err(refused("Error: --managed-serviceaccount flag is required"));
    };
    if !a.exec.provide_cluster_info {
        return Err(refused(
            "[open-cluster-management] spec.cluster.server is missing in KUBERNETES_EXEC_INFO",
        ));
    }
    let extension = a.exec_extension.as_ref();
    let Some(cluster) = extension.and_then(|e| e["clusterName"].as_str()) else {
        return Err(refused(
            "[open-cluster-management] missing clusterName in ExecCredential.Spec.Cluster.Config",
        ));
    };
    let secret = format!("{cluster}-{msa}");
    let get_failed = |why: String| {
        refused(&format!(
            "[open-cluster-management] failed to get synced credential secret {ns}/{secret}: {why}"
        ))
    };
    allowed(w, hub, (ns, sa), "get", ("", "secrets"), Some(&secret)).map_err(get_failed)?;
    let Some(found) = w.get(hub, gk::SECRET, ns, &secret) else {
        return Err(get_failed(format!("secrets \"{secret}\" not found")));
    };
    let token = util::str_at(found, "/data/token")
        .and_then(util::b64_text)
        .filter(|t| !t.is_empty());
    let Some(token) = token else {
        return Err(refused(&format!(
            "[open-cluster-management] secret {ns}/{secret} missing or empty \"token\" key"
        )));
    };
    // The provider's server, `https://<service>.<namespace>:<port>/<cluster>`, by the hub's cluster DNS.
    let Some((service, svc_ns, port, path)) = split_server(&a.server) else {
        let why = format!("`{}` is not an https URL with a host", a.server);
        return Err(failure(Hop::Spoke, None, why));
    };
    if w.get(hub, "Service", &svc_ns, &service).is_none() {
        let why = format!(
            "{service}.{svc_ns} does not resolve here (failed to lookup address information: Name or service not known)"
        );
        return Err(failure(Hop::Dns, None, why));
    }
    let ca = a.ca_data.as_deref().and_then(util::b64_decode);
    let (ca, path) = (ca.unwrap_or_default(), format!("{path}/version"));
    let answer =
        crate::userserver::get(w, Ok(()), hub, &svc_ns, &service, port, &path, &ca, &token);
    match answer {
        Ok((200, body)) => Ok(serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["gitVersion"].as_str().map(str::to_owned))
            .unwrap_or_default()),
        Ok((code, body)) => {
            let proxy = matches!(code, 400 | 502);
            let hop = if proxy { Hop::Proxy } else { Hop::Spoke };
            let why = format!("GET /version failed: {}", body.trim());
            Err(failure(hop, Some(code), why))
        }
        Err(e) => {
            use ocm_lab_core::backend::KubeError::{NoCaCertificate, Request};
            let tls = matches!(e, Request { .. } | NoCaCertificate);
            let hop = if tls { Hop::Tls } else { Hop::Spoke };
            Err(failure(hop, None, format!("GET /version failed: {e}")))
        }
    }
}

/// `(service, namespace, port, path)` of `https://<service>.<namespace>[.svc…]:<port>/<path>`.
fn split_server(server: &str) -> Option<(String, String, u16, String)> {
    let rest = server.strip_prefix("https://")?;
    let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
    let (host, port) = authority
        .rsplit_once(':')
        .map_or((authority, Some(443)), |(h, p)| (h, p.parse().ok()));
    let (service, ns) = host.split_once('.')?;
    let ns = ns.split('.').next()?;
    let path = format!("/{}", path.trim_end_matches('/'));
    Some((service.to_owned(), ns.to_owned(), port?, path))
}

/// The kubelet runs the check's Pod once: the initContainer copies `/cp-creds` when its image is the one
/// the hub's managed-serviceaccount runs (the image that ships it), then the consumer runs and exits 0 when
/// every spoke answered, 1 otherwise, its report as its termination message.
fn run_pod(w: &World, work: &Work) -> Option<Op> {
    let (hub, [ns, name]) = (work.cluster(), work.key());
    let fresh = |o: &&Value| checks(o) && util::str_at(o, "/status/phase").is_none();
    let obj = w.get(hub, POD, ns, name).filter(fresh)?;
    let pod: Pod = serde_json::from_value(obj.clone()).ok()?;
    let spec = pod.spec.unwrap_or_default();
    let sa = spec.service_account_name.as_deref().unwrap_or("default");
    let mut inits = spec.init_containers.iter().flatten();
    let init = inits.find(|c| c.name == PLUGIN_CONTAINER);
    let msa_image = super::ocm::addon_manager(w, hub, "managed-serviceaccount")
        .and_then(|d| util::str_at(d, "/spec/template/spec/containers/0/image"))
        .map(str::to_owned);
    // `cp /cp-creds <dest>`: the plugin is at `<dest>` when the image ships it.
    let copied = init.and_then(|c| {
        let dest = c.command.as_ref()?.get(2)?.clone();
        (c.image.is_some() && c.image == msa_image).then_some(dest)
    });
    let mut out = obj.clone();
    let terminated = |code: i32, message: &str| json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "message": message}});
    let Some(plugin) = copied else {
        out["status"] = json!({"phase": "Failed", "initContainerStatuses": [{"name": PLUGIN_CONTAINER, "image": init.and_then(|c| c.image.clone()), "imageID": "", "ready": false, "restartCount": 0,
            "state": terminated(1, "cp: cannot stat '/cp-creds': No such file or directory")}]});
        return Some(Op::Put(hub.to_owned(), out));
    };
    let mut volumes = spec.volumes.iter().flatten();
    let file = volumes.find_map(|v| v.config_map.as_ref()).and_then(|cm| {
        let data = w.get(hub, "ConfigMap", ns, &cm.name)?;
        ProviderFile::parse(util::str_at(data, &format!("/data/{PROVIDER_FILE}"))?).ok()
    });
    let outcome = consume(w, hub, (ns, sa), &plugin, file);
    let report = PodReport {
        namespace: ns.to_owned(),
        error: outcome.as_ref().err().cloned(),
        spokes: outcome.unwrap_or_default(),
    };
    let ok = report.error.is_none() && report.spokes.iter().all(|s| s.failure.is_none());
    let code = i32::from(!ok);
    let client = spec.containers.iter().find(|c| c.name == CLIENT_CONTAINER);
    out["status"] = json!({
        "phase": if ok { "Succeeded" } else { "Failed" },
        "initContainerStatuses": [{"name": PLUGIN_CONTAINER, "image": msa_image, "imageID": "", "ready": false, "restartCount": 0, "state": terminated(0, "")}],
        "containerStatuses": [{"name": CLIENT_CONTAINER, "image": client.and_then(|c| c.image.clone()), "imageID": "", "ready": false, "restartCount": 0, "state": terminated(code, &report.to_json())}],
    });
    Some(Op::Put(hub.to_owned(), out))
}

/// A Pod of the `consumer` check.
fn checks(pod: &Value) -> bool {
    util::label(pod, CHECK_LABEL).is_some()
}

static POD_RUN: Controller = Controller {
    name: "kubelet-consumer-pod",
    behaviour: Behaviour::PodRun,
    watches: &[(POD, |w, ch, q| {
        let pod = w.get(&ch.cluster, POD, &ch.ns, &ch.name);
        if ch.kind == ChangeKind::Created && pod.is_some_and(checks) {
            q.add(&ch.cluster, &ch.ns, &ch.name);
        }
    })],
    resync: Resync::Restart(|w, c, q| {
        for p in w.list(c, POD, None).filter(|p| checks(p)) {
            q.add(c, util::namespace(p), util::name(p));
        }
    }),
    run: |w, k| Vec::from_iter(run_pod(w, k)),
    // The Pod never runs: it stays Pending, the failure on its PodScheduled condition.
    fail: |w, k, msg| super::mark_work(w, k, POD, ["PodScheduled", "False"], msg),
};

/// This file's controllers.
pub(super) static CONTROLLERS: &[&Controller] = &[&POD_RUN];
