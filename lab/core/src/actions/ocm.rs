//! OCM registration: the hub becoming ready, spokes joining natively (no clusteradm), acceptance, addons.

use std::time::Duration;

use kube::config::Kubeconfig;
use serde::Deserialize;
use serde_json::json;

use super::ActionError;
use super::kube::{ensure_kind_served, install_chart, wait_all, wait_error};
use super::{ActionResult, StepCtx, outputs};
use crate::backend::api::Wait;
use crate::backend::kinds::{
    CertificateSigningRequest, ClusterManager, ClusterProfile, ConfigMap, Deployment,
    HasConditions, Klusterlet, ManagedCluster, ManagedClusterAddOn, ManagedProxyConfiguration,
    Namespace, Pod, Secret, ServiceAccount, ValidatingWebhookConfiguration, name_of,
};
use crate::backend::{Api, ClusterApi, Condition, NodeRole};
use crate::step::retry::Backoff;
use crate::topology::{Addon, Lab, Provider};

const BOOTSTRAP_NS: &str = "open-cluster-management";
/// The bootstrap identity the cluster-manager chart creates with `createBootstrapSA`
/// (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/init/exec.go`).
const BOOTSTRAP_SA: &str = "agent-registration-bootstrap";
/// The bootstrap token's lifetime, as clusteradm asks for (open-cluster-management-io/clusteradm v1.3.1
/// `pkg/helpers/client.go`).
const BOOTSTRAP_TOKEN_SECONDS: i64 = 3600;
const CLUSTER_NAME_LABEL: &str = "open-cluster-management.io/cluster-name";

fn joined(mc: &ManagedCluster) -> bool {
    mc.spec.hub_accepts_client
        && mc.condition_true("ManagedClusterJoined")
        && mc.condition_true("ManagedClusterConditionAvailable")
}

/// The hub Deployments the cluster-manager operator runs with the chart's values, webhooks included
/// (open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_runtime_reconcile.go`).
pub const HUB_DEPLOYMENTS: &[&str] = &[
    "cluster-manager-registration-controller",
    "cluster-manager-registration-webhook",
    "cluster-manager-work-webhook",
    "cluster-manager-placement-controller",
    "cluster-manager-addon-manager-controller",
    "cluster-manager-addon-webhook",
];
const HUB_NAMESPACE: &str = "open-cluster-management-hub";
/// The validating webhook every ManagedClusterSetBinding goes through (open-cluster-management-io/ocm v1.3.1
/// `manifests/cluster-manager/hub/`).
const BINDING_WEBHOOK: &str =
    "managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io";

/// Whether a ClusterManager says the hub is fully ready for bindings and addon objects
/// (open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_runtime_reconcile.go`,
/// `clustermanager_webhook_reconcile.go`): `observedGeneration` current, `Applied=True`, `Progressing=False`
/// with reason `ClusterManagerUpToDate`, `HubRegistrationDegraded=False`, `HubPlacementDegraded=False`.
/// `Applied=True` alone comes before the webhooks exist (open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/.../clustermanager_controller.go`). `ValidFeatureGates=False` is caught by
/// [`invalid_feature_gates`] instead.
pub fn cluster_manager_ready(cm: &ClusterManager) -> bool {
    let observed = cm.status.as_ref().and_then(|s| s.observed_generation);
    let is = |kind: &str, status: &str| cm.condition_status(kind) == Some(status);
    cm.metadata.generation.is_none_or(|g| observed == Some(g))
        && is("Applied", "True")
        && cm
            .condition("Progressing")
            .is_some_and(|c| c.status == "False" && c.reason == Some("ClusterManagerUpToDate"))
        && is("HubRegistrationDegraded", "False")
        && is("HubPlacementDegraded", "False")
}

/// The message of `ValidFeatureGates=False`: a gate the operator does not know (open-cluster-management-io/ocm
/// v1.3.1 `pkg/operator/.../clustermanager_controller.go`). Waiting cannot fix it. An operator that does not
/// set the condition is not held against the hub.
pub fn invalid_feature_gates(cm: &ClusterManager) -> Option<String> {
    cm.condition("ValidFeatureGates")
        .filter(|c| c.status == "False")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default()
            )
        })
}

/// `ocm.hub-ready`: the hub takes ManagedClusterSetBindings, ManagedClusters and addon objects. That is
/// open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_runtime_reconcile.go`,
/// `clustermanager_webhook_reconcile.go`: the ClusterManager reports every hub Deployment ready and its
/// webhooks registered, then (the direct equivalents, so a stale status cannot pass) the six Deployments are
/// Available, among them `cluster-manager-registration-webhook` and the addon conversion webhook
/// `cluster-manager-addon-webhook` that v1beta1 addon objects go through, and the binding webhook is
/// registered. Also the bootstrap identity exists and, with the gate on, the ClusterProfile CRD is served (the
/// operator installs it only then: open-cluster-management-io/ocm v1.3.1
/// `pkg/operator/.../clustermanager_crd_reconcile.go`).
pub async fn hub_ready(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let inputs: super::OnCluster = ctx.inputs()?;
    let api = ctx.run.api(&inputs.cluster).await?;
    let cm_condition = Condition::<ClusterManager>::new(
        "observedGeneration current, Applied=True, Progressing=False (ClusterManagerUpToDate), \
         HubRegistrationDegraded=False, HubPlacementDegraded=False",
        |o| o.is_some_and(|cm| cluster_manager_ready(cm) || invalid_feature_gates(cm).is_some()),
    );
    let rollout_hint = "the cluster-manager operator reports its progress on ClusterManager \
                        cluster-manager: Progressing=True names the hub Deployments still rolling \
                        (`kubectl -n open-cluster-management-hub get deploy,pods`)";
    let cm = Wait::on(None, "cluster-manager", cm_condition);
    wait_all(ctx, api.as_ref(), &[(cm, Some(rollout_hint))]).await?;
    if let Some(cm) = Api::<ClusterManager>::all(api.as_ref())
        .get("cluster-manager")
        .await?
        && let Some(why) = invalid_feature_gates(&cm)
    {
        return Err(ActionError::permanent(format!(
            "the cluster-manager operator rejects the hub's feature gates (ValidFeatureGates=False, {why})"
        ))
        .with_help("fix the gate names in the topology's `hub.featureGates`; waiting cannot help"));
    }
    let mut waits: Vec<(Wait, Option<&str>)> = HUB_DEPLOYMENTS
        .iter()
        .map(|name| {
            let available = Condition::<Deployment>::status_true("Available");
            (
                Wait::on(Some(HUB_NAMESPACE), name, available),
                Some(rollout_hint),
            )
        })
        .collect();
    waits.push((
        Wait::on::<ValidatingWebhookConfiguration>(None, BINDING_WEBHOOK, Condition::exists()),
        Some("the cluster-manager operator registers the hub webhooks once every hub Deployment is ready"),
    ));
    waits.push((
        Wait::on::<ServiceAccount>(Some(BOOTSTRAP_NS), BOOTSTRAP_SA, Condition::exists()),
        Some("the cluster-manager chart creates it with `createBootstrapSA: true`"),
    ));
    wait_all(ctx, api.as_ref(), &waits).await?;
    ensure_kind_served::<ManagedCluster>(ctx, api.as_ref(), None).await?;
    if lab.hub.has_gate("ClusterProfile") {
        ensure_kind_served::<ClusterProfile>(
            ctx,
            api.as_ref(),
            Some("the cluster-manager operator installs the ClusterProfile CRD only with the hub gate `ClusterProfile`"),
        )
        .await?;
    }
    Ok((false, outputs([])))
}

/// The hub's API server address as other clusters' pods reach it, and its CA (the bootstrap kubeconfig's
/// server). A kind hub: `kube-public/cluster-info` (what `clusteradm join --force-internal-endpoint-lookup`
/// reads, kubernetes-sigs/kind v0.32.0 `pkg/cluster/internal/providers/docker/provider.go`,
/// `GetAPIServerInternalEndpoint`), else kind's `<hub>-control-plane:6443`. An existing hub: its
/// `existing.joinEndpoint`; without one, the server of its context in its kubeconfig (the address the lab
/// itself reaches it at), else its cluster-info (only kubeadm-made clusters have a cluster-info). A context
/// server on a loopback address (a kind hub's `https://127.0.0.1:<port>`) is this machine's port forward, which
/// no spoke pod reaches: then cluster-info's server, as OCM's own recipe for kind hubs reads it
/// (`clusteradm join --force-internal-endpoint-lookup`), or, without a usable one, an error naming
/// `joinEndpoint` ([`loopback_join_error`]).
async fn hub_endpoint(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
) -> Result<(String, Option<String>), ActionError> {
    let lab = &ctx.run.lab;
    let from_info = cluster_info(hub).await?.and_then(|text| {
        let kc = Kubeconfig::from_yaml(&text).ok()?;
        let cluster = first_cluster(&kc)?;
        Some((
            cluster.server.clone()?,
            cluster.certificate_authority_data.clone(),
        ))
    });
    if matches!(lab.hub.cluster.provider, Provider::Existing { .. }) {
        let own = hub_context_server(ctx).await;
        let info_ca = from_info.as_ref().and_then(|(_, ca)| ca.clone());
        if let Some(url) = &lab.hub.cluster.internal_endpoint {
            let ca = own.and_then(|(_, ca)| ca).or(info_ca);
            return Ok((url.clone(), ca));
        }
        if let Some((server, ca)) = own {
            if !is_loopback_url(&server) {
                return Ok((server, ca.or(info_ca)));
            }
            return match from_info {
                Some((info, info_ca)) if !is_loopback_url(&info) => {
                    ctx.progress(format!(
                        "the existing hub's context server {server} is a loopback address its spokes cannot reach: they join at its cluster-info's {info}"
                    ));
                    Ok((info, info_ca.or(ca)))
                }
                _ => Err(loopback_join_error(&lab.hub.cluster.name, &server)),
            };
        }
        return from_info.ok_or_else(|| {
            ActionError::permanent(
                "the existing hub's kubeconfig context names no server and it has no kube-public/cluster-info",
            )
            .with_help("set `spec.hub.existing.joinEndpoint` to the hub API server URL its spokes reach")
        });
    }
    if let Some((server, ca)) = from_info {
        if let Some(expected) = &lab.hub.cluster.internal_endpoint
            && &server != expected
        {
            ctx.progress(format!("warning: the hub's cluster-info says {server}, kind's internal endpoint is {expected}"));
        }
        return Ok((server, ca));
    }
    let server = lab.hub.cluster.internal_endpoint.clone().ok_or_else(|| {
        ActionError::permanent(
            "the hub has no kube-public/cluster-info and no known internal endpoint",
        )
        .with_help("set `spec.hub.existing.joinEndpoint`, or publish kube-public/cluster-info")
    })?;
    Ok((server, hub_ca(ctx).await))
}

/// Whether `url`'s host is a loopback address (`127.0.0.0/8`, `::1`, `localhost`): on this machine only.
pub fn is_loopback_url(url: &str) -> bool {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An existing hub whose only known address is a loopback one: the spokes would time out joining it.
fn loopback_join_error(hub: &str, server: &str) -> ActionError {
    ActionError::permanent(format!(
        "the existing hub `{hub}` is reached at {server}, a loopback address no spoke pod reaches, and it has no kube-public/cluster-info naming another"
    ))
    .with_help("set `spec.hub.existing.joinEndpoint` to the hub API server URL its spokes reach (for a kind hub: `https://<name>-control-plane:6443`)")
}

/// `lab.preflight`'s check of the join endpoint: an existing hub without `joinEndpoint` whose kubeconfig
/// context server is a loopback address and whose cluster-info names none other is refused before
/// anything is created, instead of its spokes timing out.
pub async fn check_join_endpoint(ctx: &StepCtx<'_>) -> Result<(), ActionError> {
    let lab = &ctx.run.lab;
    let hub = &lab.hub.cluster;
    if !matches!(hub.provider, Provider::Existing { .. }) || hub.internal_endpoint.is_some() {
        return Ok(());
    }
    let Some((server, _)) = hub_context_server(ctx).await else {
        return Ok(());
    };
    if !is_loopback_url(&server) {
        return Ok(());
    }
    let api = ctx.run.api(&hub.name).await?;
    hub_endpoint(ctx, api.as_ref()).await.map(|_| ())
}

/// The hub CA from the lab's own kubeconfig for a kind hub (kind embeds it). Read per spoke join, so not
/// on the async threads.
async fn hub_ca(ctx: &StepCtx<'_>) -> Option<String> {
    let path = ctx.run.state.kubeconfig(&ctx.run.lab.hub.cluster.name);
    let kc = Kubeconfig::from_yaml(&tokio::fs::read_to_string(path).await.ok()?).ok()?;
    first_cluster(&kc)?.certificate_authority_data.clone()
}

/// The first cluster of a kubeconfig (kind's and kube-public/cluster-info's hold one).
fn first_cluster(kc: &Kubeconfig) -> Option<&kube::config::Cluster> {
    kc.clusters.first()?.cluster.as_ref()
}

/// The kubeconfig text kube-public/cluster-info publishes, if the cluster has one (kubeadm clusters do).
async fn cluster_info(api: &dyn ClusterApi) -> Result<Option<String>, ActionError> {
    let cm = Api::<ConfigMap>::namespaced(api, "kube-public")
        .get("cluster-info")
        .await?;
    Ok(cm
        .and_then(|cm| cm.data)
        .and_then(|mut data| data.remove("kubeconfig")))
}

/// The server and CA (base64) of an existing hub's context in its kubeconfig: where the lab itself
/// reaches it. `None` when the kubeconfig cannot be read or the context names no server.
async fn hub_context_server(ctx: &StepCtx<'_>) -> Option<(String, Option<String>)> {
    let hub = &ctx.run.lab.hub.cluster;
    let Provider::Existing {
        kubeconfig,
        context,
    } = &hub.provider
    else {
        return None;
    };
    let path = ctx
        .run
        .state
        .existing_kubeconfig(&hub.name, kubeconfig)
        .ok()?;
    let kc = kube::config::Kubeconfig::read_from(path).ok()?;
    let cluster_name = kc
        .contexts
        .iter()
        .find(|c| &c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    let cluster = kc
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)?
        .cluster
        .as_ref()?;
    Some((
        cluster.server.clone()?,
        cluster.certificate_authority_data.clone(),
    ))
}

/// On kind, the hub's control-plane container must be on the `kind` network, or spokes cannot reach it.
async fn check_hub_container(ctx: &StepCtx<'_>, lab: &Lab) -> Result<(), ActionError> {
    if lab.hub.cluster.provider != Provider::Kind {
        return Ok(());
    }
    let nodes = ctx
        .run
        .backends
        .docker
        .node_containers(&lab.hub.cluster.name)
        .await?;
    let cp = nodes.iter().find(|n| n.role == NodeRole::ControlPlane);
    match cp {
        Some(n) if n.ip.is_some() => Ok(()),
        Some(n) => Err(ActionError::permanent(format!("the hub's node container {} has no address on the `kind` network", n.name))
            .with_help("spokes reach the hub at https://<hub>-control-plane:6443 over the `kind` Docker network")),
        None => Err(ActionError::transient(format!("no control-plane container found for kind cluster {}", lab.hub.cluster.name))),
    }
}

/// The bootstrap kubeconfig a klusterlet registers with (open-cluster-management-io/clusteradm v1.3.1
/// `pkg/cmd/join/exec.go`). Holds the token.
fn bootstrap_kubeconfig(server: &str, ca: Option<&str>, token: &str) -> String {
    use kube::config::{AuthInfo, Cluster, Context, NamedAuthInfo, NamedCluster, NamedContext};
    let cluster = Cluster {
        server: Some(server.to_owned()),
        certificate_authority_data: ca.map(str::to_owned),
        insecure_skip_tls_verify: ca.is_none().then_some(true),
        ..Cluster::default()
    };
    let kc = Kubeconfig {
        api_version: Some("v1".to_owned()),
        kind: Some("Config".to_owned()),
        clusters: vec![NamedCluster {
            name: "hub".to_owned(),
            cluster: Some(cluster),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "bootstrap".to_owned(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_owned().into()),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: "bootstrap".to_owned(),
            context: Some(Context {
                cluster: "hub".to_owned(),
                user: Some("bootstrap".to_owned()),
                namespace: Some("default".to_owned()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some("bootstrap".to_owned()),
        ..Kubeconfig::default()
    };
    serde_saphyr::to_string(&kc).expect("kubeconfigs serialize")
}

/// The Klusterlet's agent namespace (the chart's `klusterlet.namespace`).
const AGENT_NS: &str = "open-cluster-management-agent";
/// The Secret the registration agent reads its bootstrap kubeconfig from (open-cluster-management-io/ocm v1.3.1
/// `manifests/klusterlet/management/klusterlet-registration-deployment.yaml`).
const BOOTSTRAP_SECRET: &str = "bootstrap-hub-kubeconfig";

/// `ocm.klusterlet`: the klusterlet chart on its cluster, without a bootstrap kubeconfig, as soon as that
/// cluster exists: the operator's image pull and rollout overlap the hub's. Then wait for what the operator
/// makes of it: the agent namespace and the registration agent's Deployment.
///
/// Safe before the hub is ready (open-cluster-management-io/ocm v1.3.1 `deploy/klusterlet/chart/`,
/// `pkg/registration/spoke/spokeagent.go`):
/// - without `bootstrapHubKubeConfig` the chart renders no bootstrap Secret and no agent Namespace
///   (helm-charts charts/klusterlet templates/bootstrap_kubeconfig_secret.yaml `{{- else if .Values.bootstrapHubKubeConfig }}`,
///   templates/agent-namespace.yaml), so `ocm.join` is the Secret's only writer (open-cluster-management-io/ocm
///   v1.3.1 `pkg/registration/spoke/event_handler.go`: a second writer restarts the agent);
/// - the operator creates the agent namespace itself and applies `klusterlet-registration-agent` regardless
///   of the Secret (ocm pkg/operator/operators/klusterlet/controllers/klusterletcontroller/klusterlet_management_recocile.go
///   `ensureNamespace`), with the work agent at 0 replicas until the hub kubeconfig exists
///   (klusterlet_runtime_reconcile.go `workConfig.Replica = 0`);
/// - the registration agent mounts the Secret as a non-optional volume, so its pod waits in ContainerCreating
///   until the Secret exists (manifests/klusterlet/management/klusterlet-registration-deployment.yaml), and the
///   operator watches the Secret (ssarcontroller/klusterlet_ssar_controller.go informers, `SSARReSyncTime = 30s`).
///
/// The simulated lab models the same: its klusterlet chart renders no Secret without the value, and its
/// registration agent reports `BootstrapSecretMissing` until the Secret appears, then registers.
pub async fn klusterlet(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: JoinInputs = ctx.inputs()?;
    let cluster = inputs.cluster.as_str();
    let chart = ctx.step.chart.as_ref().ok_or_else(|| {
        ActionError::permanent(format!(
            "step {} has no klusterlet chart in its plan",
            ctx.step.id
        ))
    })?;
    let spoke = ctx.run.api(cluster).await?;
    let mut extra = json!({});
    if chart
        .values
        .pointer("/klusterlet/externalServerURLs")
        .is_none()
    {
        // An existing spoke: its own cluster-info says how the hub reaches it.
        if let Some(url) = own_server(spoke.as_ref()).await? {
            extra["klusterlet.externalServerURLs"] = json!([{"url": url}]);
        }
    }
    let adopted =
        super::adopt::leave_release(ctx, cluster, &chart.release, &chart.namespace).await?;
    let applied = if adopted {
        ctx.progress(format!(
            "{cluster} is adopted: using the klusterlet someone else installed there, not installing over it"
        ));
        Default::default()
    } else {
        install_chart(ctx, chart, Some(extra)).await?
    };
    let hint = "the klusterlet operator (Deployment open-cluster-management/klusterlet) creates them from the Klusterlet; check its logs and the Klusterlet's conditions";
    let agent = "klusterlet-registration-agent";
    wait_all(
        ctx,
        spoke.as_ref(),
        &[
            (
                Wait::on::<Namespace>(None, AGENT_NS, Condition::exists()),
                Some(hint),
            ),
            (
                Wait::on::<Deployment>(Some(AGENT_NS), agent, Condition::exists()),
                Some(hint),
            ),
        ],
    )
    .await?;
    Ok((applied.created + applied.updated > 0, outputs([])))
}

/// `ocm.join`: once the hub is ready and the spoke's klusterlet installed (`ocm.klusterlet`), a TokenRequest
/// for the bootstrap ServiceAccount and a bootstrap kubeconfig pointing at the hub's internal endpoint,
/// written as the agent's bootstrap Secret; then wait for the ManagedCluster to appear on the hub.
pub async fn join(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let inputs: JoinInputs = ctx.inputs()?;
    let (name, cluster) = (inputs.managed_cluster.as_str(), inputs.cluster.as_str());
    let hub = ctx.run.api(&lab.hub.cluster.name).await?;
    let spoke = ctx.run.api(cluster).await?;

    let managed_clusters = Api::<ManagedCluster>::all(hub.as_ref());
    let mc = managed_clusters.get(name).await?;
    let klusterlet = Api::<Klusterlet>::all(spoke.as_ref())
        .get("klusterlet")
        .await
        .unwrap_or(None);
    if mc.as_ref().is_some_and(joined) && klusterlet.is_some() {
        return Ok((false, outputs([("managedCluster", json!(name))])));
    }

    if super::adopt::leave_release(ctx, cluster, "klusterlet", BOOTSTRAP_NS).await? {
        // An adopted klusterlet keeps its own bootstrap Secret: it must already be registered with the
        // lab's hub.
        ctx.progress(format!(
            "{cluster} is adopted: waiting for its own klusterlet's ManagedCluster {name} on the hub"
        ));
        let hint = format!(
            "`{cluster}` is adopted (`existing.adopt: true`), so the lab writes no bootstrap Secret there: its klusterlet must already be registered with the lab's hub as ManagedCluster {name}; check the Klusterlet's `clusterName` and its bootstrap-hub-kubeconfig on {cluster}"
        );
        managed_clusters
            .wait(name, &Condition::exists(), ctx.timeout())
            .await
            .map_err(|e| wait_error(e, Some(&hint)))?;
        return Ok((false, outputs([("managedCluster", json!(name))])));
    }
    check_hub_container(ctx, lab).await?;
    // A join must never start before the hub's bootstrap identity exists (open-cluster-management-io/clusteradm
    // v1.3.1 `pkg/cmd/init/exec.go`).
    Api::<ServiceAccount>::namespaced(hub.as_ref(), BOOTSTRAP_NS)
        .wait(BOOTSTRAP_SA, &Condition::exists(), ctx.timeout())
        .await
        .map_err(|e| {
            wait_error(
                e,
                Some("the cluster-manager chart creates it with `createBootstrapSA: true`"),
            )
        })?;
    let (server, ca) = hub_endpoint(ctx, hub.as_ref()).await?;
    let secrets = Api::<Secret>::namespaced(spoke.as_ref(), AGENT_NS);
    // Every change of the Secret's data restarts the agent, which bootstraps again
    // (open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/event_handler.go`): a Secret that already
    // registered this cluster is left alone.
    let mut changed = false;
    if mc.is_none() || secrets.get(BOOTSTRAP_SECRET).await?.is_none() {
        ctx.progress(format!(
            "bootstrap token for {BOOTSTRAP_NS}/{BOOTSTRAP_SA}, hub at {server}"
        ));
        let token = hub
            .token_request(BOOTSTRAP_NS, BOOTSTRAP_SA, BOOTSTRAP_TOKEN_SECONDS)
            .await?;
        let kubeconfig = bootstrap_kubeconfig(&server, ca.as_deref(), token.expose());
        let secret = Secret {
            metadata: crate::backend::kinds::ObjectMeta {
                name: Some(BOOTSTRAP_SECRET.to_owned()),
                namespace: Some(AGENT_NS.to_owned()),
                ..Default::default()
            },
            type_: Some("Opaque".to_owned()),
            data: Some(
                [(
                    "kubeconfig".to_owned(),
                    k8s_openapi::ByteString(kubeconfig.into_bytes()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        // The operator created the namespace (`ocm.klusterlet` waited for it); the object holds a token and is
        // never logged: errors name the object only.
        secrets.apply(&secret).await.map_err(|e| {
            ActionError::from(e)
                .context(format_args!("writing Secret {AGENT_NS}/{BOOTSTRAP_SECRET}"))
        })?;
        changed = true;
        restart_waiting_agent(ctx, spoke.as_ref()).await?;
    }

    ctx.progress(format!("waiting for ManagedCluster {name} on the hub"));
    let hint = "the klusterlet's registration agent creates it; check `kubectl -n open-cluster-management-agent logs deploy/klusterlet-registration-agent` on the spoke and the Klusterlet's conditions";
    managed_clusters
        .wait(name, &Condition::exists(), ctx.timeout())
        .await
        .map_err(|e| wait_error(e, Some(hint)))?;
    Ok((
        changed,
        outputs([
            ("managedCluster", json!(name)),
            ("hubServer", json!(server)),
        ]),
    ))
}

/// The label of the registration agent's pods (ocm `manifests/klusterlet/management/
/// klusterlet-registration-deployment.yaml`: `app: klusterlet-registration-agent`).
const REGISTRATION_AGENT_PODS: &str = "app=klusterlet-registration-agent";

/// Restarts the registration agent's pods still waiting for the bootstrap Secret. `ocm.klusterlet` installs
/// the agent before `ocm.join` can write its Secret (which needs the hub), and the pod mounts the Secret as a
/// non-optional volume: it waits in Pending while the kubelet retries the mount with a backoff that doubles
/// from 500 ms to 2 min 2 s (kubernetes/kubernetes
/// `pkg/util/goroutinemap/exponentialbackoff/exponential_backoff.go`), so the join could start up to two
/// minutes after the Secret. A Pending pod is deleted once the Secret is in place: its ReplicaSet starts
/// one that mounts the Secret at once. A running pod is left alone (it reads a changed Secret itself).
async fn restart_waiting_agent(
    ctx: &StepCtx<'_>,
    spoke: &dyn ClusterApi,
) -> Result<(), ActionError> {
    let pods = Api::<Pod>::namespaced(spoke, AGENT_NS);
    for pod in pods.list(Some(REGISTRATION_AGENT_PODS)).await? {
        let pending = pod.status.and_then(|s| s.phase).as_deref() == Some("Pending");
        let Some(name) = pod.metadata.name.filter(|_| pending) else {
            continue;
        };
        ctx.progress(format!(
            "restarting pod {AGENT_NS}/{name}, which waited for the bootstrap Secret"
        ));
        pods.delete(&name).await?;
    }
    Ok(())
}

async fn own_server(api: &dyn ClusterApi) -> Result<Option<String>, ActionError> {
    let Some(text) = cluster_info(api).await? else {
        return Ok(None);
    };
    let kc = Kubeconfig::from_yaml(&text).map_err(|e| {
        ActionError::permanent(format!("kube-public/cluster-info holds no kubeconfig: {e}"))
    })?;
    Ok(first_cluster(&kc).and_then(|c| c.server.clone()))
}

/// Whether a CSR comes from the bootstrap identity of a registering agent
/// (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/accept/exec.go`).
fn from_bootstrap(csr: &CertificateSigningRequest) -> bool {
    let user = csr.spec.username.as_deref().unwrap_or_default();
    let groups: Vec<&str> = csr
        .spec
        .groups
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let user_ok = user.starts_with("system:bootstrap:")
        || user == format!("system:serviceaccount:{BOOTSTRAP_NS}:{BOOTSTRAP_SA}");
    let group_ok = groups.iter().any(|g| {
        matches!(
            *g,
            "system:bootstrappers:managedcluster"
                | "system:serviceaccounts:open-cluster-management"
                | "system:serviceaccounts:open-cluster-management-hub"
        )
    });
    user_ok && group_ok
}

fn decided(csr: &CertificateSigningRequest) -> bool {
    let conditions = csr.conditions();
    conditions
        .iter()
        .any(|c| c.type_ == "Approved" || c.type_ == "Denied")
}

/// `ocm.accept`: approve the cluster's bootstrap CSRs through `/approval`, set `hubAcceptsClient`, wait for
/// Joined and Available. Already accepted is done (clusteradm accept is not idempotent:
/// open-cluster-management-io/clusteradm#395).
pub async fn accept(ctx: &StepCtx<'_>) -> ActionResult {
    let inputs: AcceptInputs = ctx.inputs()?;
    let name = inputs.managed_cluster.as_str();
    let hub = ctx.run.api(&ctx.run.lab.hub.cluster.name).await?;
    let managed_clusters = Api::<ManagedCluster>::all(hub.as_ref());
    let namespaces = Api::<Namespace>::all(hub.as_ref());
    let deadline = tokio::time::Instant::now() + ctx.timeout();
    let mut changed = false;
    // On an `existing:` hub the cluster namespace the hub makes when it accepts the cluster is the
    // lab's doing: recorded (with its uid) when it was not there before the lab's accept, so that `down`
    // removes it once the ManagedCluster is gone (OCM's gc removes what is in it and leaves the
    // namespace: ocm `pkg/registration/hub/gc/controller.go`, v1.3.1).
    let existing_hub = matches!(
        ctx.run.lab.hub.cluster.provider,
        crate::topology::Provider::Existing { .. }
    );
    let mut record_namespace = false;
    // The agent may file its CSR after the ManagedCluster: watch the ManagedCluster, and look for new CSRs
    // at least every few seconds (clusteradm accept re-lists every second).
    let mut relook = Backoff::constant(Duration::from_secs(5)).until(deadline);
    loop {
        let mc = managed_clusters.get(name).await?.ok_or_else(|| {
            ActionError::transient(format!("ManagedCluster {name} does not exist yet"))
        })?;
        if joined(&mc) {
            if record_namespace {
                record_cluster_namespace(ctx, &namespaces, name).await?;
            }
            return Ok((changed, outputs([("managedCluster", json!(name))])));
        }
        let selector = format!("{CLUSTER_NAME_LABEL}={name}");
        let csrs = Api::<CertificateSigningRequest>::all(hub.as_ref())
            .list(Some(&selector))
            .await?;
        for csr in csrs.iter().filter(|c| from_bootstrap(c) && !decided(c)) {
            let csr_name = name_of(csr);
            ctx.progress(format!("approving CSR {csr_name}"));
            hub.approve_csr(csr_name, "ocm-lab Approve").await?;
            changed = true;
        }
        if !mc.spec.hub_accepts_client {
            record_namespace |= existing_hub && namespaces.get(name).await?.is_none();
            managed_clusters
                .merge_patch(name, &json!({"spec": {"hubAcceptsClient": true}}))
                .await?;
            changed = true;
        }
        let Some(slice) = relook.pause_within() else {
            return Err(ActionError::permanent(format!(
                "timed out waiting for ManagedCluster {name} to join; last seen: {}",
                crate::backend::last_seen(Some(&mc))
            ))
            .with_help("check the spoke's klusterlet agents and that its CSR was approved (`kubectl get csr` on the hub)"));
        };
        let cond = Condition::<ManagedCluster>::new(
            "ManagedClusterJoined and ManagedClusterConditionAvailable True",
            |o| o.is_some_and(joined),
        );
        match managed_clusters.wait(name, &cond, slice).await {
            Ok(_) => {
                if record_namespace {
                    record_cluster_namespace(ctx, &namespaces, name).await?;
                }
                return Ok((true, outputs([("managedCluster", json!(name))])));
            }
            Err(crate::backend::WaitError::Timeout { .. }) => continue,
            Err(crate::backend::WaitError::Backend(e)) => return Err(e.into()),
        }
    }
}

/// Records the cluster namespace the hub made on the lab's accept (see [`accept`]) with its uid.
async fn record_cluster_namespace(
    ctx: &StepCtx<'_>,
    namespaces: &Api<'_, Namespace>,
    name: &str,
) -> Result<(), ActionError> {
    if let Some(ns) = namespaces.get(name).await?
        && let Some(uid) = ns.metadata.uid
    {
        ctx.run
            .state
            .own_namespace(&ctx.run.lab.hub.cluster.name, name, &uid)
            .map_err(super::state_error)?;
    }
    Ok(())
}

/// The inputs of `ocm.klusterlet` and `ocm.join`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JoinInputs {
    /// The ManagedCluster's name.
    pub managed_cluster: String,
    /// The lab cluster its klusterlet runs on.
    pub cluster: String,
}

/// The inputs of `ocm.accept`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AcceptInputs {
    pub managed_cluster: String,
}

/// The inputs of `addon.ready`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddonInputs {
    pub addon: Addon,
    /// The addon's namespace on the hub.
    pub namespace: String,
}

/// `addon.ready`: an addon's hub parts and every cluster's ManagedClusterAddOn are Available.
pub async fn addon_ready(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let inputs: AddonInputs = ctx.inputs()?;
    let (addon, ns) = (inputs.addon, inputs.namespace.as_str());
    let hub = ctx.run.api(&lab.hub.cluster.name).await?;
    let mut waits = Vec::new();
    let clusters: Vec<String> = match addon {
        Addon::ClusterProxy => {
            let cp = lab
                .addons
                .cluster_proxy
                .as_ref()
                .ok_or_else(|| ActionError::permanent("cluster-proxy is not enabled"))?;
            waits.push((
                Wait::on::<ManagedProxyConfiguration>(None, "cluster-proxy", Condition::exists()),
                None,
            ));
            waits.push((available(ns, "cluster-proxy-addon-manager"), Some("the addon manager exits when ManagedProxyConfiguration cluster-proxy is missing")));
            if cp.user_server {
                let cert = "cluster-proxy-user-serving-cert";
                waits.push((
                    Wait::on::<Secret>(Some(ns), cert, Condition::exists()),
                    Some("the controller creates it when the ManagedProxyConfiguration has `spec.userServer` (chart value userServer.enabled)"),
                ));
                waits.push((
                    available(ns, "cluster-proxy-addon-user"),
                    Some("the user server stays Pending without its serving cert"),
                ));
            }
            cp.clusters.clone()
        }
        Addon::ManagedServiceaccount => {
            let m =
                lab.addons.managed_serviceaccount.as_ref().ok_or_else(|| {
                    ActionError::permanent("managed-serviceaccount is not enabled")
                })?;
            waits.push((available(ns, "managed-serviceaccount-addon-manager"), None));
            m.clusters.clone()
        }
    };
    for c in &clusters {
        let available = Condition::<ManagedClusterAddOn>::status_true("Available");
        waits.push((
            Wait::on(Some(c), addon.as_str(), available),
            Some(
                "addon health is lease-based: the agent on the spoke must run and renew its lease",
            ),
        ));
    }
    wait_all(ctx, hub.as_ref(), &waits).await?;
    Ok((false, outputs([("clusters", json!(clusters))])))
}

/// Deployment `namespace/name` `Available=True`.
fn available(namespace: &str, name: &str) -> Wait {
    Wait::on::<Deployment>(Some(namespace), name, Condition::status_true("Available"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClusterManager status as the v1.3.1 operator writes it (open-cluster-management-io/ocm v1.3.1
    /// `pkg/operator/.../clustermanager_controller.go`).
    fn cm(generation: i64, observed: i64, conditions: &[(&str, &str, &str)]) -> ClusterManager {
        let conditions: Vec<serde_json::Value> = conditions
            .iter()
            .map(|(t, s, r)| {
                json!({"type": t, "status": s, "reason": r, "message": "",
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
            })
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": "cluster-manager", "generation": generation},
            "spec": {},
            "status": {"observedGeneration": observed, "conditions": conditions},
        }))
        .unwrap()
    }

    const READY: &[(&str, &str, &str)] = &[
        ("Applied", "True", "ClusterManagerApplied"),
        ("Progressing", "False", "ClusterManagerUpToDate"),
        ("HubRegistrationDegraded", "False", "RegistrationFunctional"),
        ("HubPlacementDegraded", "False", "PlacementFunctional"),
        ("ValidFeatureGates", "True", "FeatureGatesAllValid"),
    ];

    #[test]
    fn the_hub_is_ready_only_with_every_condition_of_section_1_6() {
        assert!(cluster_manager_ready(&cm(2, 2, READY)));
        // Applied=True alone comes before the webhooks exist (open-cluster-management-io/ocm v1.3.1
        // `pkg/operator/.../clustermanager_controller.go`).
        assert!(!cluster_manager_ready(&cm(
            1,
            1,
            &[
                ("Applied", "True", "ClusterManagerApplied"),
                ("Progressing", "True", "ClusterManagerDeploymentRolling"),
            ]
        )));
        // A status written for an older generation says nothing about the current spec.
        assert!(!cluster_manager_ready(&cm(3, 2, READY)));
        for (i, (kind, _, _)) in READY.iter().enumerate().take(4) {
            let mut without: Vec<(&str, &str, &str)> = READY.to_vec();
            without.remove(i);
            assert!(!cluster_manager_ready(&cm(1, 1, &without)), "{kind}");
        }
        let mut degraded = READY.to_vec();
        degraded[2] = (
            "HubRegistrationDegraded",
            "True",
            "UnavailableRegistrationPod",
        );
        assert!(!cluster_manager_ready(&cm(1, 1, &degraded)));
        let mut other_reason = READY.to_vec();
        other_reason[1] = ("Progressing", "False", "SomethingElse");
        assert!(!cluster_manager_ready(&cm(1, 1, &other_reason)));
    }

    #[test]
    fn the_bootstrap_kubeconfig_points_at_the_hub_with_the_token() {
        let text = bootstrap_kubeconfig("https://hub:6443", Some("Q0E="), "t0k");
        let kc = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("bootstrap"));
        let cluster = first_cluster(&kc).unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://hub:6443"));
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("Q0E="));
        assert_eq!(cluster.insecure_skip_tls_verify, None);
        assert_eq!(kc.auth_infos[0].name, "bootstrap");
        let raw: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
        assert_eq!(raw["users"][0]["user"]["token"], "t0k");
        let context = kc.contexts[0].context.as_ref().unwrap();
        assert_eq!(
            (context.cluster.as_str(), context.user.as_deref()),
            ("hub", Some("bootstrap"))
        );
        // Without a CA the agent is told to skip verification, as clusteradm's bootstrap config does.
        let insecure =
            Kubeconfig::from_yaml(&bootstrap_kubeconfig("https://hub:6443", None, "t")).unwrap();
        assert_eq!(
            first_cluster(&insecure).unwrap().insecure_skip_tls_verify,
            Some(true)
        );
    }

    #[test]
    fn invalid_feature_gates_are_reported_not_waited_for() {
        assert_eq!(invalid_feature_gates(&cm(1, 1, READY)), None);
        let mut bad = READY.to_vec();
        bad[4] = ("ValidFeatureGates", "False", "InvalidFeatureGatesExisting");
        assert_eq!(
            invalid_feature_gates(&cm(1, 1, &bad)).as_deref(),
            Some("InvalidFeatureGatesExisting: ")
        );
    }
}
