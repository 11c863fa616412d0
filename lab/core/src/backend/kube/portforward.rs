//! Port-forwarding to a Service, the way kubectl does it: the API server forwards only to Pods, so pick a
//! running Pod behind the Service and map the Service's `targetPort` to the Pod's port.

use std::net::{Ipv4Addr, SocketAddr};

use ::kube::Api;
use ::kube::api::ListParams;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use super::KubeError;
use super::classify::chain;
use super::{KubeApi, ns_name};

type Result<T, E = KubeError> = std::result::Result<T, E>;

/// A running port-forward. Dropping it closes the local listener and every forwarded connection.
#[derive(Debug)]
pub struct PortForward {
    local_port: u16,
    /// The Pod the connections go to, as `namespace/name`.
    pod: String,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl PortForward {
    /// The port on 127.0.0.1 that forwards to the Service.
    pub fn local_port(&self) -> u16 {
        self.local_port
    }

    /// The Pod behind the Service the connections go to (`namespace/name`).
    pub fn pod(&self) -> &str {
        &self.pod
    }
}

impl Drop for PortForward {
    fn drop(&mut self) {
        self.cancel.cancel();
        self.task.abort();
    }
}

impl KubeApi {
    /// Forwards `127.0.0.1:<local port>` to port `port` of Service `namespace/service`: reads the Service's
    /// selector and `targetPort`, picks a running (preferably ready) Pod, and opens one API server
    /// port-forward per accepted connection. Returns the local port and the handle that stops it on drop.
    pub async fn port_forward_service(
        &self,
        namespace: &str,
        service: &str,
        port: u16,
    ) -> Result<(u16, PortForward)> {
        let svc_name = ns_name(namespace, service);
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        let svc = services
            .get_opt(service)
            .await
            .map_err(|e| self.err(e))?
            .ok_or_else(|| KubeError::ServiceMissing {
                service: svc_name.clone(),
            })?;
        let spec = svc.spec.unwrap_or_default();
        let selector = spec.selector.unwrap_or_default();
        if selector.is_empty() {
            return Err(KubeError::NoSelector { service: svc_name });
        }
        let ports = spec.ports.unwrap_or_default();
        let svc_port = ports
            .iter()
            .find(|p| p.port == i32::from(port))
            .ok_or_else(|| KubeError::NoServicePort {
                service: svc_name.clone(),
                port,
                have: ports.iter().map(|p| p.port.to_string()).collect(),
            })?;

        let labels = selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let list = pods
            .list(&ListParams::default().labels(&labels))
            .await
            .map_err(|e| self.err(e))?;
        let pod = pick_pod(list.items).ok_or_else(|| KubeError::NoReadyPod {
            service: svc_name.clone(),
            selector: labels.clone(),
        })?;
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let target = target_port(svc_port.target_port.as_ref(), port, &pod).ok_or_else(|| {
            KubeError::UndeclaredTargetPort {
                service: svc_name.clone(),
                port,
                pod: ns_name(namespace, &pod_name),
            }
        })?;

        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .map_err(|e| KubeError::Listen {
                detail: e.to_string(),
            })?;
        let local_port = listener
            .local_addr()
            .map_err(|e| KubeError::Listen {
                detail: e.to_string(),
            })?
            .port();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(serve(
            listener,
            pods,
            pod_name.clone(),
            target,
            cancel.clone(),
        ));
        tracing::debug!(service = %svc_name, pod = %pod_name, target, local_port, "port-forward started");
        Ok((
            local_port,
            PortForward {
                local_port,
                pod: ns_name(namespace, &pod_name),
                cancel,
                task,
            },
        ))
    }
}

/// A Running Pod that is not being deleted, a Ready one first.
fn pick_pod(pods: Vec<Pod>) -> Option<Pod> {
    let running = |p: &Pod| {
        p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    };
    let ready = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
    };
    let mut candidates: Vec<Pod> = pods.into_iter().filter(running).collect();
    // Ready Pods first, then by name so the choice is stable.
    candidates.sort_by_key(|p| (!ready(p), p.metadata.name.clone()));
    candidates.into_iter().next()
}

/// The Pod port a Service port targets: a number, a named container port, or the Service port itself.
fn target_port(target: Option<&IntOrString>, service_port: u16, pod: &Pod) -> Option<u16> {
    match target {
        None => Some(service_port),
        Some(IntOrString::Int(n)) => u16::try_from(*n).ok(),
        Some(IntOrString::String(name)) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// Accepts connections until cancelled; one API server port-forward per connection. The `JoinSet` aborts
/// the open connections when this task ends or is aborted.
async fn serve(
    listener: TcpListener,
    pods: Api<Pod>,
    pod: String,
    port: u16,
    cancel: CancellationToken,
) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((conn, peer)) => {
                    let pods = pods.clone();
                    let pod = pod.clone();
                    conns.spawn(async move {
                        if let Err(e) = forward(conn, &pods, &pod, port).await {
                            tracing::warn!(%peer, pod = %pod, port, "port-forward connection failed: {e}");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("port-forward listener failed: {e}");
                    break;
                }
            },
            // Reap finished connections so the set does not grow.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn forward(
    mut conn: TcpStream,
    pods: &Api<Pod>,
    pod: &str,
    port: u16,
) -> std::result::Result<(), String> {
    let mut pf = pods
        .portforward(pod, &[port])
        .await
        .map_err(|e| chain(&e))?;
    let mut upstream = pf
        .take_stream(port)
        .ok_or_else(|| format!("port {port} missing from the forwarder"))?;
    tokio::io::copy_bidirectional(&mut conn, &mut upstream)
        .await
        .map_err(|e| e.to_string())?;
    drop(upstream);
    pf.join().await.map_err(|e| chain(&e))
}

/// A GET over HTTPS to `127.0.0.1:<port>` as `localhost`, trusting only `ca_pem`, with a bearer token.
/// Blocking (ureq): call it from `spawn_blocking`.
pub fn https_get_localhost(
    port: u16,
    path: &str,
    ca_pem: &[u8],
    token: &crate::backend::Secret,
) -> Result<(u16, String)> {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let certs: Vec<_> = ureq::tls::parse_pem(ca_pem)
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(KubeError::NoCaCertificate);
    }
    let agent = ureq::Agent::config_builder()
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::new_with_certs(&certs))
                .build(),
        )
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(30)))
        .build()
        .new_agent();
    // `localhost` is in the user server certificate's SANs (open-cluster-management-io/cluster-proxy v0.10.0
    // `pkg/proxyserver/controllers/clusterprofile_controller.go`), so verification holds.
    let url = format!("https://localhost:{port}{path}");
    let mut resp = agent
        .get(&url)
        .header("Authorization", &format!("Bearer {}", token.expose()))
        .call()
        .map_err(|e| KubeError::Request {
            url: url.clone(),
            detail: e.to_string(),
        })?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .read_to_string()
        .map_err(|e| KubeError::ReadAnswer {
            url: url.clone(),
            detail: e.to_string(),
        })?;
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("https".into()),
                        container_port: 8443,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn picks_a_ready_running_pod() {
        let p = pick_pod(vec![
            pod("a", "Pending", false),
            pod("b", "Running", false),
            pod("c", "Running", true),
        ])
        .unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("c"));
        assert!(pick_pod(vec![pod("a", "Pending", false)]).is_none());
    }

    #[test]
    fn maps_target_ports() {
        let p = pod("a", "Running", true);
        assert_eq!(target_port(None, 443, &p), Some(443));
        assert_eq!(
            target_port(Some(&IntOrString::Int(9443)), 443, &p),
            Some(9443)
        );
        assert_eq!(
            target_port(Some(&IntOrString::String("https".into())), 443, &p),
            Some(8443)
        );
        assert_eq!(
            target_port(Some(&IntOrString::String("grpc".into())), 443, &p),
            None
        );
    }
}
