//! A request through a Service, the way `ClusterApi::get_via_service` sends it (port-forward to
//! `localhost`, CA pinned, bearer token), answered by a model of the one HTTPS server the lab talks to:
//! the cluster-proxy user server (open-cluster-management-io/cluster-proxy v0.10.0
//! `pkg/proxyserver/controllers/clusterprofile_controller.go`, `pkg/userserver/user_server.go`,
//! `pkg/serviceproxy/service_proxy.go`).

use serde_json::{Value, json};

use super::apiserver::gk;
use super::controllers;
use super::util;
use super::world::World;
use ocm_lab_core::backend::KubeError;

const USER_SERVER: &str = "cluster-proxy-addon-user";
const SERVING_CERT: &str = "cluster-proxy-user-serving-cert";

/// The DER contents of the CERTIFICATE blocks of a PEM text (the `pem` crate, as the OCM controllers'
/// simulation reads bundles); nothing when the text is not PEM.
fn pem_certs(pem: &[u8]) -> Vec<Vec<u8>> {
    let blocks = pem::parse_many(pem).unwrap_or_default().into_iter();
    blocks
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect()
}

fn status(code: u16, reason: &str, message: &str) -> (u16, String) {
    (
        code,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
            .to_string(),
    )
}

/// The port-forward and the GET. `Err` where the real backend fails before an HTTP answer.
#[expect(
    clippy::too_many_arguments,
    reason = "the parts of the request, each checked where the real port-forward and GET check it"
)]
pub(crate) fn get(
    w: &World,
    proxy_server: Result<(), String>,
    hub: &str,
    namespace: &str,
    service: &str,
    port: u16,
    path: &str,
    ca_pem: &[u8],
    token: &str,
) -> Result<(u16, String), KubeError> {
    let svc_name = format!("{namespace}/{service}");
    // The port-forward: Service, selector, port, a running Pod (an Available Deployment here).
    let Some(svc) = w.get(hub, "Service", namespace, service) else {
        return Err(KubeError::ServiceMissing { service: svc_name });
    };
    let Some(selector) = svc["spec"]["selector"]
        .as_object()
        .filter(|s| !s.is_empty())
    else {
        return Err(KubeError::NoSelector { service: svc_name });
    };
    let ports: Vec<i64> = svc["spec"]["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    if !ports.contains(&i64::from(port)) {
        return Err(KubeError::NoServicePort {
            service: svc_name,
            port,
            have: ports.iter().map(ToString::to_string).collect(),
        });
    }
    // A port-forward needs a running Pod behind the selector (ocm-lab's adapter lists the Pods and picks a
    // Running one): a Deployment scaled to 0 is still `Available` (0 of 0 replicas, kubernetes
    // pkg/controller/deployment/sync.go `calculateStatus`: available >= replicas - maxUnavailable), but has
    // no Pod to forward to.
    let backend = w.list(hub, gk::DEPLOYMENT, Some(namespace)).find(|d| {
        controllers::available(d)
            && d.pointer("/status/availableReplicas")
                .and_then(Value::as_i64)
                .is_some_and(|n| n > 0)
            && selector.iter().all(|(k, v)| {
                d.pointer("/spec/template/metadata/labels")
                    .and_then(|l| l.get(k))
                    == Some(v)
            })
    });
    let Some(backend) = backend else {
        let labels = selector
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")));
        return Err(KubeError::NoReadyPod {
            service: svc_name,
            selector: labels.collect::<Vec<_>>().join(","),
        });
    };
    if util::name(backend) != USER_SERVER {
        return Ok(status(
            404,
            "NotFound",
            &format!(
                "the simulated lab models no HTTP server behind Service {svc_name} (only {USER_SERVER})"
            ),
        ));
    }
    // TLS: the server presents its serving certificate; the client trusts only `ca_pem`.
    let url = format!("https://localhost:{port}{path}");
    let trusted = pem_certs(ca_pem);
    if trusted.is_empty() {
        return Err(KubeError::NoCaCertificate);
    }
    let presented = w
        .get(hub, gk::SECRET, namespace, SERVING_CERT)
        .and_then(|s| util::str_at(s, "/data/tls.crt"))
        .and_then(util::b64_decode)
        .map(|b| pem_certs(&b))
        .unwrap_or_default();
    // Verified like a TLS client does with a pinned bundle: the presented chain (leaf, then its CA)
    // must reach a certificate the bundle holds.
    if !presented.iter().any(|c| trusted.contains(c)) {
        return Err(KubeError::Request {
            url,
            detail: "io: invalid peer certificate: UnknownIssuer".to_owned(),
        });
    }
    user_server(w, proxy_server, hub, path, token)
}

/// The user server: `/<cluster>/<path>` goes through the proxy to the managed cluster's service-proxy,
/// which authenticates the bearer token on the managed cluster or, failing that, on the hub
/// (impersonation); `GET /version` is allowed to anyone authenticated (open-cluster-management-io/cluster-proxy
/// v0.10.0 `pkg/userserver/user_server.go`, `pkg/serviceproxy/service_proxy.go`).
fn user_server(
    w: &World,
    proxy_server: Result<(), String>,
    hub: &str,
    path: &str,
    token: &str,
) -> Result<(u16, String), KubeError> {
    let trimmed = path.trim_start_matches('/');
    let (cluster, rest) = trimmed.split_once('/').unwrap_or((trimmed, ""));
    if cluster.is_empty() {
        // A malformed path is a 400 upstream (open-cluster-management-io/cluster-proxy v0.10.0
        // `pkg/userserver/user_server.go`).
        return Ok((400, "the path names no cluster".to_owned()));
    }
    // cluster-proxy runs the proxy server as a Deployment of `spec.proxyServer.replicas` of its
    // ManagedProxyConfiguration (cluster-proxy pkg/proxyserver/controllers/manifests.go
    // `newProxyServerDeployment`, reconciled by managedproxyconfiguration_controller.go): at 0 no proxy
    // server runs, and the user server's dial of its entrypoint Service is refused.
    let scaled_down = w
        .get(hub, gk::MPC, "", "cluster-proxy")
        .and_then(|m| m.pointer("/spec/proxyServer/replicas"))
        .and_then(Value::as_i64)
        == Some(0);
    let proxy_server = match proxy_server {
        Ok(()) if scaled_down => Err("dial tcp proxy-entrypoint:8090: connect: connection refused (ManagedProxyConfiguration cluster-proxy runs 0 proxy-server replicas)".to_owned()),
        other => other,
    };
    // The user server opens a gRPC tunnel to the hub's proxy server first: failing, 400 with the gRPC
    // error text (open-cluster-management-io/cluster-proxy v0.10.0 `pkg/userserver/user_server.go`,
    // `http.Error(wr, err.Error(), http.StatusBadRequest)`).
    if let Err(why) = proxy_server {
        return Ok((
            400,
            format!(
                "rpc error: code = Unavailable desc = connection error: desc = \"transport: Error while dialing: simulated: {why}\"\n"
            ),
        ));
    }
    let addon = w.get(hub, gk::MCA, cluster, "cluster-proxy");
    let service_proxy = controllers::available_deployment(w, hub, "cluster-proxy-addon-manager")
        .and_then(|d| d.pointer("/spec/template/spec/containers/0/args"))
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == "--enable-service-proxy=true"));
    let spoke = w.spoke_of(hub, cluster).filter(|s| w.reachable(s));
    // The proxy server has no agent for the cluster until its proxy-agent's tunnel is up: the dial fails
    // with ANP's `No agent available`, which the user server returns as 502
    // (open-cluster-management-io/cluster-proxy v0.10.0 `pkg/userserver/user_server.go`).
    let connected = addon.is_some() && w.tunnels.contains(&format!("{hub}/{cluster}"));
    let (Some(spoke), true, true) = (spoke, connected, service_proxy) else {
        let why = "proxy to anp-proxy-server failed because No agent available\n";
        return Ok((502, why.to_owned()));
    };
    let token = w.tokens.get(token);
    if !token.is_some_and(|t| t.cluster == spoke || t.cluster == hub) {
        return Ok(status(401, "Unauthorized", "Unauthorized"));
    }
    match rest.trim_end_matches('/') {
        "version" => {
            let v = w.clusters[spoke].version();
            let minor = v.split('.').nth(1).unwrap_or("0").to_owned();
            Ok((
                200,
                json!({
                    "major": "1",
                    "minor": minor,
                    "gitVersion": v,
                    "gitCommit": "simulated",
                    "gitTreeState": "clean",
                    "goVersion": "simulated",
                    "compiler": "gc",
                    "platform": "linux/amd64",
                })
                .to_string(),
            ))
        }
        "healthz" | "readyz" | "livez" => Ok((200, "ok".to_owned())),
        other => Ok(status(
            404,
            "NotFound",
            &format!(
                "the simulated lab models only /version and the health endpoints, not /{other}"
            ),
        )),
    }
}
