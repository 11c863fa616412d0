//! The `consumer` check, and what a ClusterProfile consumer needs from a lab (`ocm-lab consumer` prints the
//! same kit).
//!
//! A consumer reaches a spoke the way the Cluster Inventory API's access helper says
//! (kubernetes-sigs/cluster-inventory-api v0.1.2 `pkg/access/config.go` `BuildConfigFromCP`): it takes the
//! `open-cluster-management` provider from `ClusterProfile.status.accessProviders` (server, CA, and the exec
//! extension `{clusterName}`), runs the exec plugin a provider file names (managed-serviceaccount's
//! `cp-creds`, which GETs Secret `<clusterName>-<msa>` in its own namespace:
//! open-cluster-management-io/managed-serviceaccount v0.10.0 `cmd/clusterprofile-credentials-plugin/main.go`),
//! and sends the token to the provider's server, an in-hub Service address. The check runs that consumer
//! (examples/consumer) in a short-lived Pod on the hub under a ServiceAccount of its own, reads the report the
//! consumer leaves in its termination message, and names for each spoke the hop that broke.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use serde_json::{Value, json};
use std::collections::BTreeMap;

pub use ocm_lab_consumer::Hop as ConsumerHop;
pub use ocm_lab_consumer::report::{Failure, PodReport, PodSpoke};

use super::{CheckResult, Hop, kubectl};
use crate::topology::catalog::{Chart, chart_images};
use crate::topology::{Check, Lab};

/// Where the initContainer puts `cp-creds`, and the provider file's `command`.
pub const PLUGIN_DIR: &str = "/plugins";
/// Where the provider file's ConfigMap is mounted.
pub const PROVIDER_FILE_DIR: &str = "/etc/clusterprofile";
/// The provider file's name: the Go helper's default for `-clusterprofile-provider-file`.
pub const PROVIDER_FILE: &str = "clusterprofile-provider-file.json";
/// The access provider cluster-proxy writes and `cp-creds` serves.
pub const PROVIDER: &str = "open-cluster-management";
/// The ServiceAccount (and the prefix of every object) the check creates in a namespace.
pub const CHECK_SA: &str = "ocm-lab-verify-consumer";
/// The label, besides the lab's, on everything the check creates: what `reset` and `down` remove.
pub const CHECK_LABEL: &str = "ocm-lab.open-cluster-management.io/verify";
/// The consumer container's name in the check's Pod.
pub const CLIENT_CONTAINER: &str = "consumer";
/// The initContainer's name: it copies `cp-creds` out of the managed-serviceaccount image.
pub const PLUGIN_CONTAINER: &str = "cp-creds";

/// The ManagedServiceAccount the topology syncs to ClusterProfiles of `namespace`, and the image that ships
/// `cp-creds`; or why the lab gives a consumer in `namespace` nothing (`(why, what to do)`).
pub fn plan(
    lab: &Lab,
    namespace: &str,
    msa: Option<&str>,
) -> Result<(String, String), (String, String)> {
    let bound_sets: Vec<&str> = lab
        .bindings
        .iter()
        .filter(|b| b.namespace == namespace)
        .map(|b| b.cluster_set.as_str())
        .collect();
    if bound_sets.is_empty() {
        let bound: std::collections::BTreeSet<&str> =
            lab.bindings.iter().map(|b| b.namespace.as_str()).collect();
        return Err((
            format!(
                "no ManagedClusterSet of lab `{}` is bound to it, so it holds no ClusterProfile",
                lab.name
            ),
            format!(
                "name a bound namespace ({}), or add it to a cluster set's `bindTo`",
                bound.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    let Some(addon) = &lab.addons.managed_serviceaccount else {
        return Err((
            "the lab runs no managed-serviceaccount, whose `cp-creds` gives consumers credentials"
                .into(),
            "add `addons.managed-serviceaccount` with `credentialSync: true` to the topology"
                .into(),
        ));
    };
    let name = match (msa, synced_accounts(lab, namespace).as_slice()) {
        (Some(m), _) => m.to_owned(),
        (None, [one]) => (*one).to_owned(),
        (None, []) => {
            return Err((
                "no ManagedServiceAccount of the topology is synced to its ClusterProfiles".into(),
                "add a `serviceAccounts` entry with `syncToClusterProfile: true` for the clusters bound here (and `credentialSync: true` on managed-serviceaccount), or give --msa".into(),
            ));
        }
        (None, many) => {
            return Err((
                format!(
                    "several ManagedServiceAccounts are synced to it: {}",
                    many.join(", ")
                ),
                "choose one with --msa".into(),
            ));
        }
    };
    if !addon.credential_sync {
        return Err((
            "managed-serviceaccount runs without its ClusterProfileCredSyncer, so no token is synced next to the ClusterProfiles".into(),
            "set `credentialSync: true` on `addons.managed-serviceaccount`".into(),
        ));
    }
    let image = chart_images(Chart::ManagedServiceaccount, addon.release.version)
        .and_then(|images| images.first())
        .map(|i| i.reference(addon.release.version))
        .ok_or_else(|| {
            (
                format!(
                    "the version catalog names no image for managed-serviceaccount {}",
                    addon.release.version
                ),
                "use a managed-serviceaccount version the catalog pins (`ocm-lab images list`)"
                    .into(),
            )
        })?;
    Ok((name, image))
}

/// The ManagedServiceAccounts synced to ClusterProfiles of members of sets bound in `namespace`, sorted.
pub fn synced_accounts<'a>(lab: &'a Lab, namespace: &str) -> Vec<&'a str> {
    let bound_sets: Vec<&str> = lab
        .bindings
        .iter()
        .filter(|b| b.namespace == namespace)
        .map(|b| b.cluster_set.as_str())
        .collect();
    let member = |cluster: &str| {
        lab.cluster_sets.iter().any(|s| {
            bound_sets.contains(&s.name.as_str()) && s.members.iter().any(|m| m == cluster)
        })
    };
    let mut synced: Vec<&str> = lab
        .service_accounts
        .iter()
        .filter(|sa| sa.sync_to_cluster_profile && member(&sa.cluster))
        .map(|sa| sa.name.as_str())
        .collect();
    synced.sort_unstable();
    synced.dedup();
    synced
}

/// The provider file for `msa`, with `cp-creds` where the initContainer puts it.
pub fn provider_file(msa: &str) -> Value {
    json!({"providers": [{"name": PROVIDER, "execConfig": {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": format!("{PLUGIN_DIR}/cp-creds"),
        "args": [format!("--managed-serviceaccount={msa}")],
        "provideClusterInfo": true,
        "interactiveMode": "Never",
    }}]})
}

/// The objects to apply for ServiceAccount `sa` in `namespace`: the ServiceAccount, a Role and RoleBinding to
/// read ClusterProfiles, one with `get` on Secrets for `cp-creds` (its `Secrets(namespace).Get`; the plugin's
/// README asks for "list secrets", the code only gets), and the provider file's ConfigMap.
pub fn objects(
    namespace: &str,
    sa: &str,
    provider_file: &Value,
    labels: &BTreeMap<String, String>,
) -> Vec<Value> {
    let metadata = |name: &str| match labels.is_empty() {
        true => json!({"name": name, "namespace": namespace}),
        false => json!({"name": name, "namespace": namespace, "labels": labels}),
    };
    let role = |name: String, rule: Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": metadata(&name), "rules": [rule]})
    };
    let binding = |name: String| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": metadata(&name),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}]})
    };
    let profiles = format!("{sa}-clusterprofiles");
    let creds = cp_creds_role(sa);
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(sa)}),
        role(
            profiles.clone(),
            json!({"apiGroups": ["multicluster.x-k8s.io"], "resources": ["clusterprofiles"],
                   "verbs": ["get", "list", "watch"]}),
        ),
        binding(profiles),
        role(
            creds.clone(),
            json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}),
        ),
        binding(creds),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": metadata(&format!("{sa}-provider-file")),
               "data": {PROVIDER_FILE: serde_json::to_string_pretty(provider_file).expect("JSON values serialize")}}),
    ]
}

/// The name of the Role (and RoleBinding) that lets `sa` run `cp-creds`.
pub fn cp_creds_role(sa: &str) -> String {
    format!("{sa}-cp-creds")
}

/// The consumer Pod's spec: its ServiceAccount, the initContainer that copies `cp-creds`, and the mounts.
pub fn pod_spec(sa: &str, image: &str) -> Value {
    json!({
        "serviceAccountName": sa,
        "volumes": [
            {"name": "plugins", "emptyDir": {}},
            {"name": "provider-file", "configMap": {"name": format!("{sa}-provider-file")}}
        ],
        "initContainers": [{
            "name": PLUGIN_CONTAINER,
            "image": image,
            "command": ["cp", "/cp-creds", format!("{PLUGIN_DIR}/cp-creds")],
            "volumeMounts": [{"name": "plugins", "mountPath": PLUGIN_DIR}]
        }],
        "containers": [{
            "name": CLIENT_CONTAINER,
            "image": "YOUR-CONSUMER-IMAGE",
            "args": [format!("--clusterprofile-provider-file={PROVIDER_FILE_DIR}/{PROVIDER_FILE}")],
            "volumeMounts": [
                {"name": "plugins", "mountPath": PLUGIN_DIR},
                {"name": "provider-file", "mountPath": PROVIDER_FILE_DIR, "readOnly": true}
            ]
        }]
    })
}

/// The labels on everything the check creates: the lab's (what `reset` and `down` remove) and its own.
pub fn check_labels(lab: &str) -> BTreeMap<String, String> {
    [
        (crate::topology::LAB_LABEL.to_owned(), lab.to_owned()),
        (CHECK_LABEL.to_owned(), Check::Consumer.as_str().to_owned()),
    ]
    .into()
}

/// The check's objects in `namespace`: the kit of [`objects`] for ServiceAccount [`CHECK_SA`], labelled.
pub fn check_objects(lab: &str, namespace: &str, msa: &str) -> Vec<Value> {
    objects(namespace, CHECK_SA, &provider_file(msa), &check_labels(lab))
}

/// The check's Pod in `namespace`: [`pod_spec`] with `client_image` running the consumer once
/// (`restartPolicy: Never`) and writing its report to the termination message.
pub fn check_pod(lab: &str, namespace: &str, msa_image: &str, client_image: &str) -> Pod {
    let mut spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(pod_spec(CHECK_SA, msa_image))
            .expect("the kit's Pod spec is a PodSpec");
    spec.restart_policy = Some("Never".into());
    if let Some(client) = spec.containers.first_mut() {
        client.image = Some(client_image.to_owned());
        client.image_pull_policy = Some("IfNotPresent".into());
        client.args = Some(vec![
            "--namespace".into(),
            namespace.to_owned(),
            "--provider-file".into(),
            format!("{PROVIDER_FILE_DIR}/{PROVIDER_FILE}"),
            "--report".into(),
            "/dev/termination-log".into(),
        ]);
    }
    Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(CHECK_SA.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(check_labels(lab)),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// Waiting reasons of a container whose image cannot be had (kubernetes v1.35 `pkg/kubelet/images/types.go`).
const IMAGE_ERRORS: [&str; 5] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "ImageInspectError",
];

fn status_of<'a>(
    statuses: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses.into_iter().flatten().find(|s| s.name == name)
}

/// Whether the check's Pod has an outcome: it ended, or one of its images cannot be had, or the
/// initContainer failed (with `restartPolicy: Never` the Pod fails then).
pub fn pod_done(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return true;
    }
    status
        .init_container_statuses
        .iter()
        .chain(status.container_statuses.iter())
        .flatten()
        .any(|s| {
            s.state
                .as_ref()
                .and_then(|st| st.waiting.as_ref())
                .and_then(|w| w.reason.as_deref())
                .is_some_and(|r| IMAGE_ERRORS.contains(&r))
        })
}

/// What broke before the consumer could report: the initContainer (no `cp-creds`), the consumer's image,
/// or the Pod never finishing. `None` when the consumer ran and left a report.
fn pod_failure(pod: &Pod, finished: bool) -> Result<PodReport, (Hop, String, String)> {
    let status = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let image_of = |containers: &[k8s_openapi::api::core::v1::Container], name: &str| {
        containers
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.image.clone())
            .unwrap_or_default()
    };
    let waiting = |s: Option<&ContainerStatus>| {
        s.and_then(|s| s.state.as_ref()?.waiting.clone())
            .filter(|w| {
                w.reason
                    .as_deref()
                    .is_some_and(|r| IMAGE_ERRORS.contains(&r))
            })
            .map(|w| {
                format!(
                    "{}: {}",
                    w.reason.unwrap_or_default(),
                    w.message.unwrap_or_default()
                )
            })
    };
    let plugin = status_of(status.init_container_statuses.as_ref(), PLUGIN_CONTAINER);
    let msa_image = image_of(
        spec.init_containers.as_deref().unwrap_or_default(),
        PLUGIN_CONTAINER,
    );
    if let Some(why) = waiting(plugin) {
        return Err((
            Hop::PluginMissing,
            format!(
                "the initContainer cannot have the managed-serviceaccount image {msa_image}: {why}"
            ),
            "the image managed-serviceaccount runs must be in the hub's nodes: `ocm-lab status`"
                .into(),
        ));
    }
    if let Some(t) = plugin.and_then(|s| s.state.as_ref()?.terminated.as_ref())
        && t.exit_code != 0
    {
        return Err((
            Hop::PluginMissing,
            format!(
                "the initContainer could not copy /cp-creds out of {msa_image} (exit {}): {}",
                t.exit_code,
                t.message.as_deref().or(t.reason.as_deref()).unwrap_or_default()
            ),
            "managed-serviceaccount ships cp-creds from v0.9 on: check the addon's version in the topology".into(),
        ));
    }
    let client = status_of(status.container_statuses.as_ref(), CLIENT_CONTAINER);
    let client_image = image_of(&spec.containers, CLIENT_CONTAINER);
    if let Some(why) = waiting(client) {
        return Err((
            Hop::ConsumerPod,
            format!("the consumer image {client_image} cannot be had: {why}"),
            "build examples/consumer into that image and load it into the hub's nodes (docs/consumer.md)".into(),
        ));
    }
    let terminated = client.and_then(|s| s.state.as_ref()?.terminated.clone());
    let Some(t) = terminated.filter(|_| finished) else {
        return Err((
            Hop::ConsumerPod,
            format!(
                "the consumer Pod did not finish in time (phase {})",
                status.phase.as_deref().unwrap_or("unknown")
            ),
            format!(
                "look at its events while verify runs: kubectl -n {} describe pod {CHECK_SA}",
                pod.metadata.namespace.as_deref().unwrap_or_default()
            ),
        ));
    };
    let message = t.message.unwrap_or_default();
    serde_json::from_str::<PodReport>(&message).map_err(|e| {
        (
            Hop::ConsumerPod,
            format!(
                "the consumer exited {} without a report it could read ({e}): {}",
                t.exit_code,
                message.chars().take(200).collect::<String>()
            ),
            format!(
                "is {client_image} examples/consumer, with `ocm-lab-consumer` as its entrypoint?"
            ),
        )
    })
}

/// The verify hop of a consumer's failure.
pub fn hop(f: &Failure) -> Hop {
    match f.hop {
        ConsumerHop::Provider => Hop::NoAccessProvider,
        ConsumerHop::PluginMissing => Hop::PluginMissing,
        ConsumerHop::PluginRefused => Hop::PluginRefused,
        ConsumerHop::Credential => Hop::BadCredential,
        ConsumerHop::Dns => Hop::Dns,
        ConsumerHop::Tls => Hop::Tls,
        ConsumerHop::Proxy if f.status == Some(400) => Hop::ProxyServerUnreachable,
        ConsumerHop::Proxy => Hop::ProxyAgentNotConnected,
        ConsumerHop::Spoke => Hop::NotReachable,
        ConsumerHop::Hub => Hop::ConsumerHub,
    }
}

/// What to look at for a hop of the consumer's path, in namespace `ns` of the hub.
fn next(hop: Hop, ns: &str, spoke: &str, msa: &str, hub_context: &str) -> String {
    let hub = kubectl(hub_context);
    match hop {
        Hop::NoAccessProvider => "the access-providers check says why".into(),
        Hop::PluginRefused => format!(
            "cp-creds GETs Secret {ns}/{spoke}-{msa} as the consumer's ServiceAccount: does it exist ({hub} -n {ns} get secret {spoke}-{msa}), and may the ServiceAccount get it (the Role `ocm-lab consumer {ns}` prints)?"
        ),
        Hop::PluginMissing => "the initContainer copies /cp-creds out of the managed-serviceaccount image".into(),
        Hop::BadCredential => format!("the token synced into Secret {ns}/{spoke}-{msa} is not usable: the credentials check says more"),
        Hop::Dns => "the provider's server is a Service on the hub: does it exist (cluster-proxy's user server)?".into(),
        Hop::Tls => "the user server's certificate is not signed by the provider's CA: check Secret cluster-proxy-user-serving-cert".into(),
        Hop::ProxyAgentNotConnected | Hop::ProxyServerUnreachable => "the reachable check says more about cluster-proxy".into(),
        Hop::ConsumerHub => format!("the consumer could not read the hub as its ServiceAccount: {hub} -n {ns} get roles,rolebindings"),
        _ => format!("{hub} -n {ns} get clusterprofile {spoke} -o yaml"),
    }
}

/// The `consumer` check's results in `namespace`, one per expected spoke, from the check's Pod as it was
/// last seen (`finished`: it ended, or an image cannot be had).
pub fn evaluate(
    namespace: &str,
    spokes: &[&str],
    msa: &str,
    pod: &Pod,
    finished: bool,
    hub_context: &str,
) -> Vec<CheckResult> {
    let fail = |spoke: &str, hop: Hop, detail: String, next: String| {
        CheckResult::failed(Check::Consumer, spoke, namespace, hop, detail, Some(next))
    };
    let report = match pod_failure(pod, finished) {
        Ok(r) => r,
        Err((hop, detail, next)) => {
            return spokes
                .iter()
                .map(|s| fail(s, hop, detail.clone(), next.clone()))
                .collect();
        }
    };
    spokes
        .iter()
        .map(|spoke| {
            if let Some(f) = &report.error {
                let hop = hop(f);
                return fail(spoke, hop, f.detail.clone(), next(hop, namespace, spoke, msa, hub_context));
            }
            let line = report.spokes.iter().find(|s| {
                s.cluster.as_deref() == Some(spoke) || (s.cluster.is_none() && s.profile == *spoke)
            });
            match line {
                None => fail(
                    spoke,
                    Hop::ProfileMissing,
                    format!("the consumer found no ClusterProfile {namespace}/{spoke}"),
                    "the properties check says why".into(),
                ),
                Some(PodSpoke { failure: Some(f), .. }) => {
                    let hop = hop(f);
                    fail(spoke, hop, f.detail.clone(), next(hop, namespace, spoke, msa, hub_context))
                }
                Some(s) => CheckResult {
                    check: Check::Consumer,
                    spoke: (*spoke).to_owned(),
                    namespace: namespace.to_owned(),
                    ok: true,
                    detail: format!(
                        "a Pod on the hub as ServiceAccount {namespace}/{CHECK_SA}, through cp-creds and {}, got {}",
                        s.server.as_deref().unwrap_or("the provider's server"),
                        s.version.as_deref().unwrap_or("an answer")
                    ),
                    hop: None,
                    next: None,
                    latency_ms: None,
                    permanent: false,
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: Value) -> Pod {
        let mut p = check_pod("lab", "ns", "quay.io/msa:v0.10.0", "consumer:test");
        p.status = Some(serde_json::from_value(status).unwrap());
        p
    }

    fn terminated(code: i32, message: &str) -> Value {
        json!({"terminated": {"exitCode": code, "message": message}})
    }

    #[test]
    fn the_checks_pod_runs_the_consumer_once_with_the_kit_and_the_lab_labels() {
        let p = serde_json::to_value(check_pod(
            "lab",
            "ns",
            "quay.io/msa:v0.10.0",
            "consumer:test",
        ))
        .unwrap();
        assert_eq!(p["kind"], "Pod");
        assert_eq!(p["metadata"]["labels"][crate::topology::LAB_LABEL], "lab");
        assert_eq!(p["spec"]["restartPolicy"], "Never");
        assert_eq!(p["spec"]["serviceAccountName"], CHECK_SA);
        assert_eq!(
            p["spec"]["initContainers"][0]["command"],
            json!(["cp", "/cp-creds", "/plugins/cp-creds"])
        );
        assert_eq!(
            p["spec"]["containers"][0]["args"],
            json!([
                "--namespace",
                "ns",
                "--provider-file",
                "/etc/clusterprofile/clusterprofile-provider-file.json",
                "--report",
                "/dev/termination-log"
            ])
        );
    }

    #[test]
    fn each_spoke_gets_the_hop_its_line_of_the_report_names() {
        let report = json!({"namespace": "ns", "spokes": [
            {"profile": "c1", "cluster": "c1", "server": "https://u.ns:9092/c1", "version": "v1.36.1"},
            {"profile": "c2", "cluster": "c2", "failure": {"hop": "proxy", "status": 400, "detail": "rpc error"}},
            {"profile": "c3", "cluster": "c3", "failure": {"hop": "proxy", "status": 502, "detail": "No agent available"}},
            {"profile": "c4", "cluster": "c4", "failure": {"hop": "dns", "detail": "does not resolve"}}
        ]});
        let p = pod(json!({"phase": "Failed",
            "initContainerStatuses": [{"name": PLUGIN_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": terminated(0, "")}],
            "containerStatuses": [{"name": CLIENT_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": terminated(1, &report.to_string())}]}));
        let rs = evaluate(
            "ns",
            &["c1", "c2", "c3", "c4", "c5"],
            "msa",
            &p,
            true,
            "kind-hub",
        );
        let hops: Vec<Option<Hop>> = rs.iter().map(|r| r.hop).collect();
        assert_eq!(
            hops,
            [
                None,
                Some(Hop::ProxyServerUnreachable),
                Some(Hop::ProxyAgentNotConnected),
                Some(Hop::Dns),
                Some(Hop::ProfileMissing)
            ]
        );
        assert!(
            rs[0].detail.ends_with("https://u.ns:9092/c1, got v1.36.1"),
            "{}",
            rs[0].detail
        );
    }

    #[test]
    fn a_pod_that_could_not_get_cp_creds_or_left_no_report_fails_every_spoke_saying_so() {
        let no_plugin = pod(json!({"phase": "Failed",
            "initContainerStatuses": [{"name": PLUGIN_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0,
              "state": terminated(1, "cp: cannot stat '/cp-creds': No such file or directory")}]}));
        assert!(pod_done(&no_plugin));
        let rs = evaluate("ns", &["c1", "c2"], "msa", &no_plugin, true, "");
        assert!(rs.iter().all(|r| r.hop == Some(Hop::PluginMissing)));
        assert!(
            rs[0]
                .detail
                .contains("could not copy /cp-creds out of quay.io/msa:v0.10.0 (exit 1)"),
            "{}",
            rs[0].detail
        );

        let no_image = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": CLIENT_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0,
              "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}}]}),
        );
        assert!(
            pod_done(&no_image),
            "an image that cannot be had is an outcome: no waiting for the deadline"
        );
        let r = &evaluate("ns", &["c1"], "msa", &no_image, true, "")[0];
        assert_eq!(r.hop, Some(Hop::ConsumerPod));
        assert!(
            r.detail
                .contains("the consumer image consumer:test cannot be had: ErrImageNeverPull"),
            "{}",
            r.detail
        );

        let pending = pod(json!({"phase": "Pending"}));
        assert!(!pod_done(&pending));
        let r = &evaluate("ns", &["c1"], "msa", &pending, false, "")[0];
        assert!(
            r.detail.contains("did not finish in time (phase Pending)"),
            "{}",
            r.detail
        );

        let garbled = pod(json!({"phase": "Failed",
            "containerStatuses": [{"name": CLIENT_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": terminated(2, "panic: oops")}]}));
        let r = &evaluate("ns", &["c1"], "msa", &garbled, true, "")[0];
        assert_eq!(r.hop, Some(Hop::ConsumerPod));
        assert!(
            r.detail.contains("exited 2 without a report it could read"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn a_report_that_failed_before_any_spoke_fails_each_at_that_hop() {
        let report = json!({"namespace": "ns", "error": {"hop": "hub", "status": 403, "detail": "forbidden"}});
        let p = pod(json!({"phase": "Failed",
            "containerStatuses": [{"name": CLIENT_CONTAINER, "image": "", "imageID": "", "ready": false, "restartCount": 0, "state": terminated(1, &report.to_string())}]}));
        let rs = evaluate("ns", &["c1", "c2"], "msa", &p, true, "kind-hub");
        assert!(
            rs.iter()
                .all(|r| r.hop == Some(Hop::ConsumerHub) && r.detail == "forbidden")
        );
        assert!(
            rs[0]
                .next
                .as_deref()
                .unwrap()
                .contains("kubectl --context kind-hub -n ns get roles,rolebindings")
        );
    }
}
