//! `verify.lab`: gathers what the clusters report and evaluates it with [`crate::verify`].

use std::time::Duration;

use serde_json::{Value, json};

use super::{ActionResult, StepCtx, outputs};
use crate::backend::{BackendError, ClusterApi, Condition, ObjectRef, condition_status};
use crate::engine::events::{Event, ResultStatus};
use crate::topology::{Check, LAB_LABEL, Lab, Property};
use crate::verify::{self, CheckResult, PROBE_PROPERTY, PropertyEvidence};

const CLUSTER_PROPERTY: (&str, &str) = ("about.k8s.io/v1alpha1", "ClusterProperty");
const CLUSTER_PROFILE: (&str, &str) = ("multicluster.x-k8s.io/v1alpha1", "ClusterProfile");

/// The (spoke, namespace) pairs verification expects a ClusterProfile for: spokes that are members of a
/// set bound in a verified namespace.
pub fn expected_profiles(lab: &Lab) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ns in &lab.verify.namespaces {
        for s in &lab.spokes {
            let member = lab.bindings.iter().filter(|b| &b.namespace == ns).any(|b| {
                lab.cluster_sets
                    .iter()
                    .any(|set| set.name == b.cluster_set && set.members.contains(&s.cluster.name))
            });
            if member {
                out.push((s.cluster.name.clone(), ns.clone()));
            }
        }
    }
    out
}

fn profile_ref(ns: &str, spoke: &str) -> ObjectRef {
    ObjectRef::new(CLUSTER_PROFILE.0, CLUSTER_PROFILE.1, Some(ns), spoke)
}

/// Runs the lab's checks. With input `probe: "false"` no probe property is written (`up` uses that: its own
/// ClusterProperty objects were just written, and a second `up` must change nothing).
pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let probe = ctx
        .step
        .with
        .get("probe")
        .and_then(Value::as_str)
        .is_none_or(|p| p != "false");
    let checks: Vec<Check> = match ctx
        .step
        .with
        .get("checks")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        Some(list) => list
            .split(',')
            .filter_map(|c| Check::ALL.into_iter().find(|k| k.as_str() == c.trim()))
            .collect(),
        None => lab.verify.checks.clone(),
    };
    let hub = ctx.run.api(&lab.hub.cluster.name).await?;
    let deadline = tokio::time::Instant::now() + lab.verify.timeout.min(ctx.timeout());
    let pairs = expected_profiles(lab);
    let mut results: Vec<CheckResult> = Vec::new();
    let probe_value = format!("run-{}", ctx.run.run_id);

    if checks.contains(&Check::Properties) {
        let mut probed = Vec::new();
        if probe {
            for s in &lab.spokes {
                let api = ctx.run.api(&s.cluster.name).await?;
                if api.served(CLUSTER_PROPERTY.0, CLUSTER_PROPERTY.1).await? {
                    api.apply(&probe_object(&lab.name, &probe_value)).await?;
                    probed.push(s.cluster.name.clone());
                }
            }
        }
        let started = tokio::time::Instant::now();
        for (spoke, ns) in &pairs {
            let mut expected: Vec<Property> = lab
                .spoke(spoke)
                .map(|s| s.properties.clone())
                .unwrap_or_default();
            if probed.contains(spoke) {
                expected.push(Property {
                    name: PROBE_PROPERTY.into(),
                    value: probe_value.clone(),
                });
            }
            let r = properties(
                ctx,
                hub.as_ref(),
                spoke,
                ns,
                &expected,
                deadline,
                started,
                probe,
            )
            .await?;
            emit(ctx, &r);
            results.push(r);
        }
        for spoke in &probed {
            let api = ctx.run.api(spoke).await?;
            api.delete(&ObjectRef::new(
                CLUSTER_PROPERTY.0,
                CLUSTER_PROPERTY.1,
                None,
                PROBE_PROPERTY,
            ))
            .await?;
        }
    }
    let hub_served = hub.served(CLUSTER_PROFILE.0, CLUSTER_PROFILE.1).await?;
    for (spoke, ns) in &pairs {
        let profile = if hub_served {
            hub.get(&profile_ref(ns, spoke)).await?
        } else {
            None
        };
        if checks.contains(&Check::AccessProviders) {
            // cluster-proxy requeues every minute while its serving cert is missing (OCM-FACTS §6.1): wait.
            let profile = match &profile {
                Some(_) => wait_quietly(
                    hub.as_ref(),
                    &profile_ref(ns, spoke),
                    has_provider(),
                    deadline,
                )
                .await?
                .or(profile.clone()),
                None => None,
            };
            let proxy_ns = lab
                .addons
                .cluster_proxy
                .as_ref()
                .map_or("", |p| p.namespace.as_str());
            let r = verify::access_provider(spoke, ns, profile.as_ref(), proxy_ns);
            emit(ctx, &r);
            results.push(r);
        }
        if checks.contains(&Check::Reachable) {
            let r = reachable(ctx, hub.as_ref(), spoke, ns, profile.as_ref()).await?;
            emit(ctx, &r);
            results.push(r);
        }
        if checks.contains(&Check::Credentials) {
            for sa in lab
                .service_accounts
                .iter()
                .filter(|a| a.cluster == *spoke && a.sync_to_cluster_profile)
            {
                let secret =
                    ObjectRef::new("v1", "Secret", Some(ns), &format!("{spoke}-{}", sa.name));
                let token = Condition::new("a Secret with a token", |o| {
                    o.is_some_and(|s| s["data"]["token"].as_str().is_some_and(|t| !t.is_empty()))
                });
                let found = wait_quietly(hub.as_ref(), &secret, token, deadline).await?;
                let r = verify::credential(spoke, ns, &sa.name, found.as_ref());
                emit(ctx, &r);
                results.push(r);
            }
        }
        if checks.contains(&Check::Conditions) {
            let healthy = Condition::new("ControlPlaneHealthy and Joined True", |o| {
                o.is_some_and(|p| {
                    condition_status(p, "ControlPlaneHealthy") == Some("True")
                        && condition_status(p, "Joined") == Some("True")
                })
            });
            let profile = match &profile {
                Some(_) => wait_quietly(hub.as_ref(), &profile_ref(ns, spoke), healthy, deadline)
                    .await?
                    .or(profile.clone()),
                None => None,
            };
            let r = verify::conditions(spoke, ns, profile.as_ref());
            emit(ctx, &r);
            results.push(r);
        }
    }
    save_report(ctx, &results);
    let failed: Vec<&CheckResult> = results.iter().filter(|r| !r.ok).collect();
    if let Some(first) = failed.first() {
        let mut err = BackendError::permanent(format!(
            "{} of {} checks failed; first: {} for {} in {}: {}",
            failed.len(),
            results.len(),
            first.check,
            first.spoke,
            first.namespace,
            first.detail
        ));
        if let Some(next) = &first.next {
            err = err.with_help(next.clone());
        }
        return Err(err);
    }
    Ok((false, outputs([("checks", json!(results.len()))])))
}

fn probe_object(lab: &str, value: &str) -> Value {
    json!({
        "apiVersion": CLUSTER_PROPERTY.0, "kind": CLUSTER_PROPERTY.1,
        "metadata": {"name": PROBE_PROPERTY, "labels": {LAB_LABEL: lab}},
        "spec": {"value": value},
    })
}

fn has_provider() -> Condition {
    Condition::new("an open-cluster-management access provider", |o| {
        o.is_some_and(|p| {
            p["status"]["accessProviders"]
                .as_array()
                .is_some_and(|a| a.iter().any(|e| e["name"] == verify::PROVIDER))
        })
    })
}

/// Waits until `cond` or the deadline, returning what it last saw instead of failing: the evaluation says
/// what is wrong.
async fn wait_quietly(
    api: &dyn ClusterApi,
    r: &ObjectRef,
    cond: Condition,
    deadline: tokio::time::Instant,
) -> Result<Option<Value>, BackendError> {
    let left = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_millis(1));
    match api.wait(r, &cond, left).await {
        Ok(v) => Ok(Some(v)),
        Err(crate::backend::WaitError::Timeout { last, .. }) => Ok(last),
        Err(crate::backend::WaitError::Backend(e)) => Err(e),
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "one check, its inputs and its clock"
)]
async fn properties(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    spoke: &str,
    ns: &str,
    expected: &[Property],
    deadline: tokio::time::Instant,
    started: tokio::time::Instant,
    probe: bool,
) -> Result<CheckResult, BackendError> {
    let lab = &ctx.run.lab;
    let hub_served = hub.served(CLUSTER_PROFILE.0, CLUSTER_PROFILE.1).await?;
    if hub_served {
        let want = expected.to_vec();
        let cond = Condition::new(
            format!("{} properties in status.properties", want.len()),
            move |o| o.is_some_and(|p| verify::has_properties(p, &want)),
        );
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if hub.wait(&profile_ref(ns, spoke), &cond, left).await.is_ok() {
            let latency = started.elapsed().as_millis() as u64;
            let detail = format!(
                "{} properties{}",
                expected.len(),
                if probe { ", probe included" } else { "" }
            );
            return Ok(CheckResult {
                check: Check::Properties,
                spoke: spoke.into(),
                namespace: ns.into(),
                ok: true,
                detail,
                hop: None,
                next: None,
                latency_ms: Some(latency),
            });
        }
    }
    // Gather the evidence along the chain to say which hop broke.
    let spoke_api = ctx.run.api(spoke).await?;
    let spoke_served = spoke_api
        .served(CLUSTER_PROPERTY.0, CLUSTER_PROPERTY.1)
        .await?;
    let spoke_props = if spoke_served {
        spoke_api
            .list(CLUSTER_PROPERTY.0, CLUSTER_PROPERTY.1, None, None)
            .await?
    } else {
        Vec::new()
    };
    let mc = hub
        .get(&ObjectRef::new(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            spoke,
        ))
        .await?;
    let bound = bound_for(hub, lab, spoke, ns).await?;
    let profile = if hub_served {
        hub.get(&profile_ref(ns, spoke)).await?
    } else {
        None
    };
    let ev = PropertyEvidence {
        spoke_crd_served: spoke_served,
        spoke_properties: &spoke_props,
        managed_cluster: mc.as_ref(),
        hub_crd_served: hub_served,
        bound,
        profile: profile.as_ref(),
    };
    Ok(verify::diagnose_properties(spoke, ns, expected, &ev))
}

/// Whether a Bound binding for a set holding `spoke` exists in `ns` (read from the hub, not the topology).
async fn bound_for(
    hub: &dyn ClusterApi,
    lab: &Lab,
    spoke: &str,
    ns: &str,
) -> Result<bool, BackendError> {
    let api = "cluster.open-cluster-management.io/v1beta2";
    if !hub.served(api, "ManagedClusterSetBinding").await? {
        return Ok(false);
    }
    let bindings = hub
        .list(api, "ManagedClusterSetBinding", Some(ns), None)
        .await?;
    let sets_of_spoke: Vec<&str> = lab
        .cluster_sets
        .iter()
        .filter(|s| s.members.iter().any(|m| m == spoke))
        .map(|s| s.name.as_str())
        .collect();
    Ok(bindings.iter().any(|b| {
        condition_status(b, "Bound") == Some("True")
            && b["spec"]["clusterSet"]
                .as_str()
                .is_some_and(|s| sets_of_spoke.contains(&s) || s == "global")
    }))
}

fn emit(ctx: &StepCtx<'_>, r: &CheckResult) {
    let latency = r
        .latency_ms
        .map(|l| format!(" in {l}ms"))
        .unwrap_or_default();
    let detail = match (&r.hop, &r.next) {
        (Some(_), Some(next)) => format!("{} → {next}", r.detail),
        _ => format!("{}{latency}", r.detail),
    };
    ctx.run.events.emit(Event::Result {
        check: r.check.to_string(),
        subject: format!("{} in {}", r.spoke, r.namespace),
        status: if r.ok {
            ResultStatus::Pass
        } else {
            ResultStatus::Fail
        },
        detail,
    });
}

/// The last verification, kept for `status`.
fn save_report(ctx: &StepCtx<'_>, results: &[CheckResult]) {
    let report = json!({
        "run": ctx.run.run_id,
        "at": humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        "simulated": ctx.run.backends.simulated,
        "ok": results.iter().all(|r| r.ok),
        "results": results,
    });
    let path = ctx.run.state.path.join("last-verification.json");
    if let Err(e) = std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).expect("serializes"),
    ) {
        tracing::warn!("failed to save {}: {e}", path.display());
    }
}

/// The reachable check: a request through the access provider really reaches the spoke. The provider's
/// server resolves only inside the hub, so its Service is port-forwarded and the request goes to
/// `localhost` (a SAN of the serving certificate), verified with the provider's CA, authenticated with the
/// spoke's synced ManagedServiceAccount token; `GET /<spoke>/version` must answer what the spoke's own
/// `/version` answers (OCM-FACTS §6.1, §6.2).
async fn reachable(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    spoke: &str,
    ns: &str,
    profile: Option<&Value>,
) -> Result<CheckResult, BackendError> {
    use base64::Engine as _;
    let lab = &ctx.run.lab;
    let mut r = CheckResult {
        check: Check::Reachable,
        spoke: spoke.into(),
        namespace: ns.into(),
        ok: false,
        detail: String::new(),
        hop: None,
        next: None,
        latency_ms: None,
    };
    let provider = profile
        .and_then(|p| p["status"]["accessProviders"].as_array())
        .and_then(|a| a.iter().find(|e| e["name"] == verify::PROVIDER))
        .map(|e| &e["cluster"]);
    let Some(provider) = provider else {
        r.hop = Some(verify::Hop::NoAccessProvider);
        r.detail = "no access provider to go through".into();
        return Ok(r);
    };
    let server = provider["server"].as_str().unwrap_or_default();
    // https://cluster-proxy-addon-user.<namespace>:9092/<spoke>
    let Some((service, namespace, port, prefix)) = parse_user_server(server) else {
        r.hop = Some(verify::Hop::BadAccessProvider);
        r.detail = format!("cannot read the user server's Service from {server}");
        return Ok(r);
    };
    let ca = provider["certificate-authority-data"]
        .as_str()
        .and_then(|d| {
            base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .ok()
        })
        .unwrap_or_default();
    let account = lab
        .service_accounts
        .iter()
        .find(|a| a.cluster == spoke && a.sync_to_cluster_profile);
    let secret = match account {
        Some(a) => {
            hub.get(&ObjectRef::new(
                "v1",
                "Secret",
                Some(ns),
                &format!("{spoke}-{}", a.name),
            ))
            .await?
        }
        None => None,
    };
    let token = secret
        .as_ref()
        .and_then(|s| s["data"]["token"].as_str())
        .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
        .and_then(|t| String::from_utf8(t).ok())
        .filter(|t| !t.is_empty())
        .map(crate::backend::Secret::new);
    let Some(token) = token else {
        r.hop = Some(verify::Hop::NoSyncedCredential);
        r.detail = format!("no synced token in `{ns}` to authenticate with");
        r.next = Some("the credentials check says why".into());
        return Ok(r);
    };
    let started = tokio::time::Instant::now();
    let path = format!("{prefix}/version");
    let answer = hub
        .get_via_service(&namespace, &service, port, &path, &ca, &token)
        .await;
    let latency = started.elapsed().as_millis() as u64;
    let expected = ctx.run.api(spoke).await?.version().await?;
    match answer {
        Ok((200, body)) => {
            let got = serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v["gitVersion"].as_str().map(str::to_owned));
            if got.as_deref() == Some(expected.as_str()) {
                r.ok = true;
                r.latency_ms = Some(latency);
                r.detail = format!(
                    "GET {path} through cluster-proxy answered {expected}, as {spoke} does"
                );
            } else {
                r.hop = Some(verify::Hop::WrongCluster);
                r.detail = format!(
                    "GET {path} answered {}, but {spoke} is {expected}",
                    got.unwrap_or_else(|| "something that is not a version".into())
                );
                r.next = Some(
                    "check the ManagedProxyServiceResolver and cluster names on the hub".into(),
                );
            }
        }
        Ok((401, _)) | Ok((403, _)) => {
            r.hop = Some(verify::Hop::NotReachable);
            r.detail = format!(
                "GET {path} was refused (unauthorized) with the synced ManagedServiceAccount token"
            );
            r.next = Some(format!(
                "check that the token in Secret {ns}/{spoke}-<msa> is current and the service proxy on {spoke} runs"
            ));
        }
        Ok((status, body)) => {
            r.hop = Some(verify::Hop::NotReachable);
            let body: String = body.chars().take(200).collect();
            r.detail = format!("GET {path} answered HTTP {status}: {body}");
            r.next = Some(format!(
                "check the cluster-proxy agent on {spoke} (namespace open-cluster-management-cluster-proxy) and the proxy server on the hub"
            ));
        }
        Err(e) => {
            r.hop = Some(verify::Hop::NotReachable);
            r.detail = format!("the request did not get through: {}", e.message);
            r.next = Some(format!(
                "kubectl -n {namespace} get pods,svc; the user server needs its serving cert and enableServiceProxy"
            ));
        }
    }
    Ok(r)
}

/// `(service, namespace, port, path prefix)` from a user server URL.
fn parse_user_server(server: &str) -> Option<(String, String, u16, String)> {
    let rest = server.strip_prefix("https://")?;
    let (hostport, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let (host, port) = hostport
        .rsplit_once(':')
        .map_or((hostport, 443), |(h, p)| (h, p.parse().unwrap_or(443)));
    let (service, namespace) = host.split_once('.')?;
    let namespace = namespace
        .trim_end_matches(".svc")
        .trim_end_matches(".svc.cluster.local");
    Some((
        service.to_owned(),
        namespace.to_owned(),
        port,
        format!("/{}", path.trim_end_matches('/')),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_server_url_names_service_namespace_port_and_cluster() {
        assert_eq!(
            super::parse_user_server(
                "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1"
            ),
            Some((
                "cluster-proxy-addon-user".into(),
                "open-cluster-management-addon".into(),
                9092,
                "/cluster1".into()
            ))
        );
        assert_eq!(super::parse_user_server("http://x"), None);
    }
}
