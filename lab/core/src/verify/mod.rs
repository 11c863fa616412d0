//! Verification: what "the lab works" means, evaluated from what the clusters report.
//!
//! The functions here are pure: they take the objects an action fetched and say which check passed, and
//! when one failed, which hop of the chain broke (spoke ClusterProperty → ManagedCluster claim →
//! ClusterProfile) and what to look at next (docs/verification.md).

pub mod consumer;
pub mod report;

use base64::Engine as _;
use serde::{Deserialize as _, Serialize};

use crate::backend::kinds::{
    ClusterProfile, ClusterProperty, HasConditions, ManagedCluster, Secret, label, name_of,
};
use crate::topology::{Check, Property};

/// The probe property's name: a dotted name (the API server rejects a `/`: an RFC 1123 subdomain).
pub const PROBE_PROPERTY: &str = "probe.ocm-lab.open-cluster-management.io";
/// The provider cluster-proxy writes (open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/proxyserver/controllers/clusterprofile_controller.go`).
pub const PROVIDER: &str = "open-cluster-management";
/// The extension a ClusterProfile consumer passes to its exec plugin (kubernetes-sigs/cluster-inventory-api
/// v0.1.2 `pkg/access/config.go`).
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

/// The result of one check for one spoke (in one namespace).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckResult {
    pub check: Check,
    pub spoke: String,
    pub namespace: String,
    pub ok: bool,
    /// What was found, or what broke.
    pub detail: String,
    /// The broken hop, when a check failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hop: Option<Hop>,
    /// What to run or look at next.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Time until every expected property was seen in the ClusterProfile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// The diagnosis cannot change by waiting (the topology or the lab's setup itself cannot pass), so the
    /// check ended at once instead of waiting out the verify deadline.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub permanent: bool,
}

impl CheckResult {
    /// A failed check at `hop`.
    pub fn failed(
        check: Check,
        spoke: &str,
        namespace: &str,
        hop: Hop,
        detail: String,
        next: Option<String>,
    ) -> Self {
        CheckResult {
            check,
            spoke: spoke.to_owned(),
            namespace: namespace.to_owned(),
            ok: false,
            detail,
            hop: Some(hop),
            next,
            latency_ms: None,
            permanent: false,
        }
    }

    /// Marks the diagnosis as one waiting cannot change.
    pub fn permanent(mut self) -> Self {
        self.permanent = true;
        self
    }
}

/// Where the chain broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Hop {
    /// The ClusterProperty CRD is not served on the spoke: the Klusterlet's `ClusterProperty` gate is off.
    SpokeGateOff,
    /// The property is not on the spoke.
    PropertyMissingOnSpoke,
    /// The spoke has not joined the hub, so its agent syncs nothing.
    NotJoined,
    /// The property is labelled `open-cluster-management.io/spoke-only`.
    SpokeOnly,
    /// The spoke's registration agent stopped renewing its lease: the hub set
    /// `ManagedClusterConditionAvailable` to Unknown (`ManagedClusterLeaseUpdateStopped`,
    /// open-cluster-management-io/ocm v1.3.1 `pkg/registration/hub/lease/controller.go`), so nothing on the
    /// spoke reaches the hub any more.
    AgentStopped,
    /// More than 20 custom properties: OCM dropped it.
    ClaimsTruncated,
    /// A property value over 1024 characters blocks every claim update of the cluster.
    ClaimsBlocked,
    /// On the spoke but not in `ManagedCluster.status.clusterClaims` (agent not syncing).
    NotInClaims,
    /// No ClusterProfile CRD on the hub: the hub gate `ClusterProfile` is off.
    HubGateOff,
    /// No Bound ManagedClusterSetBinding for a set holding the cluster in that namespace.
    NoBoundBinding,
    /// The ClusterProfile does not exist although the gate and binding are there.
    ProfileMissing,
    /// In the claims, not (yet) in the ClusterProfile.
    NotInProfile,
    /// accessProviders: no `open-cluster-management` entry.
    NoAccessProvider,
    /// accessProviders: the entry is malformed (server, CA or extension).
    BadAccessProvider,
    /// reachable: the request through cluster-proxy failed (port-forward, TLS, authentication).
    NotReachable,
    /// reachable: the user server answered 502 "No agent available": the spoke's cluster-proxy agent holds
    /// no tunnel to the hub's proxy server (open-cluster-management-io/cluster-proxy v0.10.0
    /// `pkg/userserver/user_server.go`).
    ProxyAgentNotConnected,
    /// reachable: the user server answered 400: it cannot open its tunnel to the hub's proxy server
    /// (open-cluster-management-io/cluster-proxy v0.10.0 `pkg/userserver/user_server.go`).
    ProxyServerUnreachable,
    /// reachable: something answered, but not that spoke.
    WrongCluster,
    /// credentials: the synced token Secret is missing or empty.
    NoSyncedCredential,
    /// conditions: ControlPlaneHealthy or Joined is not True.
    ConditionFalse,
    /// consumer: the exec plugin (`cp-creds`) could not be had: the initContainer could not copy it out of
    /// the managed-serviceaccount image, or the consumer could not run it.
    PluginMissing,
    /// consumer: `cp-creds` refused: the consumer's ServiceAccount may not get the synced Secret, or there
    /// is no such Secret.
    PluginRefused,
    /// consumer: the plugin answered an unusable or expired credential.
    BadCredential,
    /// consumer: the provider's server does not resolve in the hub.
    Dns,
    /// consumer: the TLS handshake with the provider's server failed under the provider's CA.
    Tls,
    /// consumer: the consumer could not read the hub as its ServiceAccount (listing ClusterProfiles).
    ConsumerHub,
    /// consumer: the consumer Pod did not run to a report (its image, or it never finished).
    ConsumerPod,
}

impl Hop {
    /// The kebab-case name reports and JSON events use (`hub-gate-off`, `agent-stopped`, ...).
    pub fn name(self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// Everything known about one property's path, gathered by the action while it waits.
#[derive(Debug, Clone, Default)]
pub struct PropertyEvidence<'a> {
    /// The spoke's kube context (as the topology names it), for the hints.
    pub spoke_context: &'a str,
    /// The hub's kube context.
    pub hub_context: &'a str,
    /// Whether the ClusterProperty kind is served on the spoke.
    pub spoke_crd_served: bool,
    /// The spoke's ClusterProperty objects.
    pub spoke_properties: &'a [ClusterProperty],
    pub managed_cluster: Option<&'a ManagedCluster>,
    /// Whether the ClusterProfile kind is served on the hub.
    pub hub_crd_served: bool,
    /// Whether a Bound binding for a set holding the cluster exists in the namespace.
    pub bound: bool,
    /// Whether any binding for a set holding the cluster exists in the namespace (Bound or not yet).
    pub binding_exists: bool,
    pub profile: Option<&'a ClusterProfile>,
}

/// The `name → value` pairs a ClusterProfile lists in `status.properties`.
pub fn profile_properties(profile: &ClusterProfile) -> Vec<(String, String)> {
    let properties = profile.status.iter().flat_map(|s| &s.properties);
    properties
        .map(|p| (p.name.clone(), p.value.clone()))
        .collect()
}

/// Whether a profile lists every expected property with its value.
pub fn has_properties(profile: &ClusterProfile, expected: &[Property]) -> bool {
    let have = profile_properties(profile);
    expected
        .iter()
        .all(|p| have.iter().any(|(n, v)| *n == p.name && *v == p.value))
}

/// Whether a ManagedCluster (or a ClusterProfile, which copies its conditions) shows that the registration
/// agent stopped renewing its lease: Available/ControlPlaneHealthy Unknown with reason
/// `ManagedClusterLeaseUpdateStopped` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/clusterprofile/status_controller.go`, `pkg/registration/hub/lease/controller.go`).
pub fn agent_stopped<K: HasConditions>(obj: &K, condition: &str) -> bool {
    obj.condition(condition).is_some_and(|c| {
        c.status == "Unknown" && c.reason == Some("ManagedClusterLeaseUpdateStopped")
    })
}

/// `kubectl --context <context>`, or plain `kubectl` when the context is not known.
pub fn kubectl(context: &str) -> String {
    if context.is_empty() {
        "kubectl".to_owned()
    } else {
        format!("kubectl --context {context}")
    }
}

/// What the registration agent's stop looks like to a user, and where to look.
fn agent_stopped_hint(spoke: &str, spoke_context: &str) -> String {
    format!(
        "is {spoke} up? then start its klusterlet registration agent again: {} -n open-cluster-management-agent get pods",
        kubectl(spoke_context)
    )
}

/// Says where the first missing property got lost. The result is `permanent` when waiting cannot change
/// it: the hub gate off, no binding at all, the spoke gate off, a `spoke-only` property, a value over 1024
/// characters, more than 20 custom properties.
pub fn diagnose_properties(
    spoke: &str,
    namespace: &str,
    expected: &[Property],
    ev: &PropertyEvidence<'_>,
) -> CheckResult {
    let profile = match profile_reached(spoke, namespace, ev) {
        Ok(profile) => profile,
        Err(failed) => return failed,
    };
    let in_profile = profile_properties(profile);
    let claims: Vec<(String, String)> = ev
        .managed_cluster
        .and_then(|mc| mc.status.as_ref())
        .into_iter()
        .flat_map(|s| &s.cluster_claims)
        .map(|c| (c.name.clone(), c.value.clone()))
        .collect();
    for p in expected {
        if in_profile
            .iter()
            .any(|(n, v)| *n == p.name && *v == p.value)
        {
            continue;
        }
        return missing_property(spoke, namespace, p, ev, &claims);
    }
    CheckResult {
        check: Check::Properties,
        spoke: spoke.into(),
        namespace: namespace.into(),
        ok: true,
        detail: crate::text::count(expected.len(), "property", "properties"),
        hop: None,
        next: None,
        latency_ms: None,
        permanent: false,
    }
}

/// The ClusterProfile the properties should reach, or why none can: the hub serves no ClusterProfile kind,
/// no Bound binding in `namespace`, or no profile yet.
fn profile_reached<'a>(
    spoke: &str,
    namespace: &str,
    ev: &PropertyEvidence<'a>,
) -> Result<&'a ClusterProfile, CheckResult> {
    let fail = |hop, detail: String, next: String| {
        CheckResult::failed(Check::Properties, spoke, namespace, hop, detail, Some(next))
    };
    let hub = kubectl(ev.hub_context);
    let profile_name = format!("ClusterProfile {namespace}/{spoke}");
    if !ev.hub_crd_served {
        return Err(fail(Hop::HubGateOff, "the hub serves no ClusterProfile kind".into(), "enable the hub registration gate `ClusterProfile` on the ClusterManager (spec.hub.featureGates)".into()).permanent());
    }
    if !ev.bound {
        let r = fail(
            Hop::NoBoundBinding,
            format!(
                "no Bound ManagedClusterSetBinding in `{namespace}` for a set holding `{spoke}`{}",
                if ev.binding_exists {
                    " (one exists, not Bound yet)"
                } else {
                    ""
                }
            ),
            format!(
                "{hub} get managedclustersetbindings -n {namespace}; bind the spoke's set there"
            ),
        );
        return Err(if ev.binding_exists { r } else { r.permanent() });
    }
    ev.profile.ok_or_else(|| {
        fail(
            Hop::ProfileMissing,
            format!("{profile_name} does not exist"),
            "check the hub's registration-controller logs (ClusterProfileLifecycleController)"
                .into(),
        )
    })
}

/// Where property `p`, missing from the profile, got lost: the first hop on its way that does not hold it.
fn missing_property(
    spoke: &str,
    namespace: &str,
    p: &Property,
    ev: &PropertyEvidence<'_>,
    claims: &[(String, String)],
) -> CheckResult {
    let fail = |hop, detail: String, next: String| {
        CheckResult::failed(Check::Properties, spoke, namespace, hop, detail, Some(next))
    };
    let hub = kubectl(ev.hub_context);
    let on_spoke_cmd = kubectl(ev.spoke_context);
    let profile_name = format!("ClusterProfile {namespace}/{spoke}");
    let what = format!("property `{}={}`", p.name, truncate(&p.value));
    if !ev.spoke_crd_served {
        return fail(
            Hop::SpokeGateOff,
            format!("{what}: the spoke serves no ClusterProperty kind"),
            format!("enable the registration gate `ClusterProperty` on {spoke}'s Klusterlet"),
        )
        .permanent();
    }
    let on_spoke = ev.spoke_properties.iter().find(|o| name_of(*o) == p.name);
    let Some(on_spoke) = on_spoke.filter(|o| o.spec.value == p.value) else {
        return fail(
            Hop::PropertyMissingOnSpoke,
            format!("{what} is not on the spoke"),
            format!("{on_spoke_cmd} get clusterproperties"),
        );
    };
    let joined = ev
        .managed_cluster
        .is_some_and(|mc| mc.condition_true("ManagedClusterJoined"));
    if !joined {
        return fail(
            Hop::NotJoined,
            format!("{what}: ManagedCluster `{spoke}` has not joined"),
            format!("{hub} get managedcluster {spoke} -o yaml; check the klusterlet on the spoke"),
        );
    }
    if label(&on_spoke.metadata, SPOKE_ONLY).is_some() {
        return fail(
            Hop::SpokeOnly,
            format!("{what} is labelled open-cluster-management.io/spoke-only: OCM never syncs it"),
            "remove the label".into(),
        )
        .permanent();
    }
    if claims.iter().any(|(n, v)| *n == p.name && *v == p.value) {
        return fail(
            Hop::NotInProfile,
            format!("{what} is in ManagedCluster.status.clusterClaims but not in {profile_name}"),
            "check the hub's registration-controller (ClusterProfileStatusController)".into(),
        );
    }
    if let Some(blocked) = claims_blocked(spoke, namespace, p, &what, ev) {
        return blocked;
    }
    if ev
        .managed_cluster
        .is_some_and(|mc| agent_stopped(mc, "ManagedClusterConditionAvailable"))
    {
        return fail(
            Hop::AgentStopped,
            format!(
                "{what} is on the spoke, but the registration agent on {spoke} stopped updating its lease (ManagedClusterConditionAvailable is Unknown): it syncs nothing to the hub"
            ),
            agent_stopped_hint(spoke, ev.spoke_context),
        );
    }
    fail(
        Hop::NotInClaims,
        format!("{what} is on the spoke but not in ManagedCluster.status.clusterClaims"),
        format!(
            "check the registration agent on {spoke} (is the ClusterProperty gate on its Klusterlet?): {on_spoke_cmd} -n open-cluster-management-agent logs deploy/klusterlet-registration-agent"
        ),
    )
}

/// Whether the spoke's ClusterProperties keep every claim (a value over 1024 characters) or `p` (past the first
/// 20 custom ones by name) from reaching the hub: waiting does not change either.
fn claims_blocked(
    spoke: &str,
    namespace: &str,
    p: &Property,
    what: &str,
    ev: &PropertyEvidence<'_>,
) -> Option<CheckResult> {
    let fail = |hop, detail: String, next: String| {
        CheckResult::failed(Check::Properties, spoke, namespace, hop, detail, Some(next))
    };
    let too_long = ev
        .spoke_properties
        .iter()
        .find(|o| o.spec.value.chars().count() > 1024);
    if let Some(long) = too_long {
        return Some(fail(
            Hop::ClaimsBlocked,
            format!(
                "{what}: ClusterProperty `{}` has a value over 1024 characters, so the hub rejects every claim update of `{spoke}`",
                Some(name_of(long)).filter(|n| !n.is_empty()).unwrap_or("?")
            ),
            "shorten or delete that ClusterProperty".into(),
        )
        .permanent());
    }
    let custom: Vec<&str> = ev
        .spoke_properties
        .iter()
        .filter(|o| label(&o.metadata, SPOKE_ONLY).is_none())
        .filter_map(|o| o.metadata.name.as_deref())
        .collect();
    if custom.len() > 20 {
        let mut sorted = custom.clone();
        sorted.sort();
        if sorted
            .iter()
            .position(|n| *n == p.name)
            .is_some_and(|i| i >= 20)
        {
            return Some(
                fail(
                    Hop::ClaimsTruncated,
                    format!(
                        "{what}: {} custom properties on the spoke; OCM keeps the first 20 by name",
                        custom.len()
                    ),
                    "remove properties, or raise maxCustomClusterClaims on the Klusterlet".into(),
                )
                .permanent(),
            );
        }
    }
    None
}

/// The label that keeps a ClusterProperty on its spoke (ocm v1.3.1
/// `pkg/registration/spoke/managedcluster/claim_reconcile.go`).
const SPOKE_ONLY: &str = "open-cluster-management.io/spoke-only";

fn truncate(v: &str) -> String {
    if v.chars().count() > 40 {
        format!("{}…", v.chars().take(40).collect::<String>())
    } else {
        v.to_owned()
    }
}

/// The accessProviders check (open-cluster-management-io/cluster-proxy v0.10.0
/// `pkg/proxyserver/controllers/clusterprofile_controller.go`).
pub fn access_provider(
    spoke: &str,
    namespace: &str,
    profile: Option<&ClusterProfile>,
    proxy_namespace: &str,
) -> CheckResult {
    let mut r = CheckResult {
        check: Check::AccessProviders,
        spoke: spoke.into(),
        namespace: namespace.into(),
        ok: false,
        detail: String::new(),
        hop: None,
        next: None,
        latency_ms: None,
        permanent: false,
    };
    let Some(profile) = profile else {
        r.hop = Some(Hop::ProfileMissing);
        r.detail = format!("ClusterProfile {namespace}/{spoke} does not exist");
        return r;
    };
    let provider = profile
        .status
        .as_ref()
        .and_then(|s| s.access_provider(PROVIDER));
    let Some(provider) = provider else {
        r.hop = Some(Hop::NoAccessProvider);
        r.detail = format!("no `{PROVIDER}` access provider");
        r.next = Some("cluster-proxy fills it when its addon manager runs with the ClusterProfile gate (the chart value for that chart version) and Secret cluster-proxy-user-serving-cert exists".into());
        return r;
    };
    let cluster = &provider.cluster;
    let expected = format!("https://cluster-proxy-addon-user.{proxy_namespace}:9092/{spoke}");
    let mut problems = Vec::new();
    if cluster.server.as_deref() != Some(expected.as_str()) {
        // As JSON: a quoted string, or `null` when there is none.
        let server = serde_json::to_string(&cluster.server).unwrap_or_default();
        problems.push(format!("server is {server}, expected {expected}"));
    }
    match cluster
        .certificate_authority_data
        .as_deref()
        .map(ca_certificates)
    {
        Some(Ok(n)) if n > 0 => {}
        Some(Ok(_)) => problems.push("certificate-authority-data holds no certificate".into()),
        Some(Err(e)) => problems.push(format!("certificate-authority-data does not parse: {e}")),
        None => problems.push("no certificate-authority-data".into()),
    }
    let ext = cluster
        .extensions
        .iter()
        .flatten()
        .find(|e| e.name == EXEC_EXTENSION)
        .map(|e| ExecExtension::deserialize(&e.extension).unwrap_or_default());
    match ext {
        Some(e) if e.cluster_name.as_deref() == Some(spoke) => {}
        Some(e) => problems.push(format!(
            "{EXEC_EXTENSION} extension names cluster {}",
            serde_json::to_string(&e.cluster_name).unwrap_or_default()
        )),
        None => problems.push(format!("no {EXEC_EXTENSION} extension")),
    }
    if problems.is_empty() {
        r.ok = true;
        r.detail = expected;
    } else {
        r.hop = Some(Hop::BadAccessProvider);
        r.detail = problems.join("; ");
        r.next =
            Some("check the cluster-proxy version and its chart values (`ocm-lab plan`)".into());
    }
    r
}

/// The exec extension's payload: which cluster the plugin is for (cluster-inventory-api v0.1.2
/// `pkg/credentials/config.go` reads `clusterName` from it).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecExtension {
    #[serde(default)]
    cluster_name: Option<String>,
}

/// Counts the PEM certificates in base64 `certificate-authority-data`.
pub fn ca_certificates(data: &str) -> Result<usize, String> {
    let pem_text = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("not base64: {e}"))?;
    let blocks = pem::parse_many(&pem_text).map_err(|e| format!("not PEM: {e}"))?;
    let certs: Vec<_> = blocks.iter().filter(|b| b.tag() == "CERTIFICATE").collect();
    // A DER certificate is a SEQUENCE: anything else is not a certificate, whatever its PEM label says.
    if let Some(bad) = certs.iter().find(|c| c.contents().first() != Some(&0x30)) {
        return Err(format!(
            "a CERTIFICATE block of {} bytes is not DER",
            bad.contents().len()
        ));
    }
    Ok(certs.len())
}

/// The credentials check: Secret `<spoke>-<msa>` with a non-empty token
/// (open-cluster-management-io/managed-serviceaccount v0.10.0
/// `pkg/addon/manager/controller/clusterprofile_cred_syncer.go`).
pub fn credential(spoke: &str, namespace: &str, msa: &str, secret: Option<&Secret>) -> CheckResult {
    let name = format!("{spoke}-{msa}");
    let token_len = secret.map_or(0, |s| token(s).map_or(0, <[u8]>::len));
    let ok = token_len > 0;
    CheckResult {
        check: Check::Credentials,
        spoke: spoke.into(),
        namespace: namespace.into(),
        ok,
        // Never the token itself: only whether it is there.
        detail: match (secret, ok) {
            (_, true) => format!("Secret {namespace}/{name} holds a token"),
            (Some(_), false) => format!("Secret {namespace}/{name} has no token"),
            (None, false) => format!("no Secret {namespace}/{name}"),
        },
        hop: (!ok).then_some(Hop::NoSyncedCredential),
        next: (!ok).then(|| format!("the managed-serviceaccount credential syncer copies it for MSAs labelled sync-to-clusterprofile; check ManagedServiceAccount {spoke}/{msa} and the addon manager's ClusterProfileCredSyncer gate")),
        latency_ms: None,
        permanent: false,
    }
}

/// The conditions check: `ControlPlaneHealthy` and `Joined` True (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/clusterprofile/`). A `ControlPlaneHealthy` Unknown because the registration agent's
/// lease expired is reported as hop `agent-stopped` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/lease/controller.go`: `Joined` stays True then).
pub fn conditions(
    spoke: &str,
    namespace: &str,
    profile: Option<&ClusterProfile>,
    hub_context: &str,
    spoke_context: &str,
) -> CheckResult {
    let mut bad = Vec::new();
    for c in ["ControlPlaneHealthy", "Joined"] {
        let s = profile.and_then(|p| p.condition_status(c));
        if s != Some("True") {
            bad.push(format!("{c}={}", s.unwrap_or("missing")));
        }
    }
    let ok = bad.is_empty() && profile.is_some();
    let stopped = profile.is_some_and(|p| agent_stopped(p, "ControlPlaneHealthy"));
    CheckResult {
        check: Check::Conditions,
        spoke: spoke.into(),
        namespace: namespace.into(),
        ok,
        detail: if profile.is_none() {
            format!("ClusterProfile {namespace}/{spoke} does not exist")
        } else if ok {
            "ControlPlaneHealthy, Joined".into()
        } else if stopped {
            format!(
                "{} (ManagedClusterLeaseUpdateStopped): the registration agent on {spoke} stopped updating its lease (the agent, or the whole cluster, is down)",
                bad.join(", ")
            )
        } else {
            bad.join(", ")
        },
        hop: (!ok).then_some(if profile.is_none() {
            Hop::ProfileMissing
        } else if stopped {
            Hop::AgentStopped
        } else {
            Hop::ConditionFalse
        }),
        next: (!ok).then(|| {
            if stopped {
                agent_stopped_hint(spoke, spoke_context)
            } else {
                format!(
                    "{} get managedcluster {spoke} -o yaml",
                    kubectl(hub_context)
                )
            }
        }),
        latency_ms: None,
        permanent: false,
    }
}

/// The `token` key of a Secret's data (decoded), if it has one.
pub fn token(secret: &Secret) -> Option<&[u8]> {
    let data = secret.data.as_ref()?;
    data.get("token").map(|t| t.0.as_slice())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kinds::multicluster::ClusterPropertySpec;
    use serde_json::json;

    fn expected() -> Vec<Property> {
        vec![Property {
            name: "region".into(),
            value: "eu-west-1".into(),
        }]
    }

    fn evidence<'a>(
        spoke_properties: &'a [ClusterProperty],
        mc: &'a ManagedCluster,
        profile: &'a ClusterProfile,
    ) -> PropertyEvidence<'a> {
        PropertyEvidence {
            spoke_context: "kind-cluster2",
            hub_context: "kind-hub",
            spoke_crd_served: true,
            spoke_properties,
            managed_cluster: Some(mc),
            hub_crd_served: true,
            bound: true,
            binding_exists: true,
            profile: Some(profile),
        }
    }

    const AT: &str = "2026-01-01T00:00:00Z";

    fn managed_cluster(available: (&str, &str)) -> ManagedCluster {
        serde_json::from_value(json!({"metadata": {"name": "cluster2"}, "spec": {}, "status": {"conditions": [
            {"type": "ManagedClusterJoined", "status": "True", "reason": "ManagedClusterJoined", "lastTransitionTime": AT},
            {"type": "ManagedClusterConditionAvailable", "status": available.0, "reason": available.1, "lastTransitionTime": AT},
        ]}}))
        .unwrap()
    }

    fn region() -> [ClusterProperty; 1] {
        let spec = ClusterPropertySpec {
            value: "eu-west-1".into(),
        };
        [ClusterProperty::new("region", spec)]
    }

    fn empty_profile() -> ClusterProfile {
        serde_json::from_value(json!({"metadata": {"name": "cluster2"}, "spec": {}, "status": {}}))
            .unwrap()
    }

    #[test]
    fn a_binding_not_bound_yet_is_waited_for_but_no_binding_at_all_is_permanent() {
        let props = region();
        let mc = managed_cluster(("True", "ManagedClusterAvailable"));
        let profile = empty_profile();
        let mut ev = evidence(&props, &mc, &profile);
        ev.bound = false;
        let r = diagnose_properties("cluster2", "ns", &expected(), &ev);
        assert_eq!((r.hop, r.permanent), (Some(Hop::NoBoundBinding), false));
        assert!(r.next.unwrap().starts_with("kubectl --context kind-hub "));
        ev.binding_exists = false;
        let r = diagnose_properties("cluster2", "ns", &expected(), &ev);
        assert_eq!((r.hop, r.permanent), (Some(Hop::NoBoundBinding), true));
        ev.hub_crd_served = false;
        let r = diagnose_properties("cluster2", "ns", &expected(), &ev);
        assert_eq!((r.hop, r.permanent), (Some(Hop::HubGateOff), true));
    }

    #[test]
    fn an_expired_agent_lease_is_named_instead_of_a_gate() {
        let props = region();
        let profile = empty_profile();
        let running = managed_cluster(("True", "ManagedClusterAvailable"));
        let r = diagnose_properties(
            "cluster2",
            "ns",
            &expected(),
            &evidence(&props, &running, &profile),
        );
        assert_eq!((r.hop, r.permanent), (Some(Hop::NotInClaims), false));
        let stopped = managed_cluster(("Unknown", "ManagedClusterLeaseUpdateStopped"));
        let r = diagnose_properties(
            "cluster2",
            "ns",
            &expected(),
            &evidence(&props, &stopped, &profile),
        );
        assert_eq!((r.hop, r.permanent), (Some(Hop::AgentStopped), false));
        assert!(!r.detail.contains("gate"), "{}", r.detail);
        assert!(
            r.next
                .unwrap()
                .contains("kubectl --context kind-cluster2 -n open-cluster-management-agent"),
        );
        let missing = diagnose_properties(
            "cluster2",
            "ns",
            &expected(),
            &evidence(&[], &running, &profile),
        );
        assert_eq!(
            missing.next.as_deref(),
            Some("kubectl --context kind-cluster2 get clusterproperties")
        );
    }

    #[test]
    fn hops_have_kebab_case_names() {
        assert_eq!(
            Hop::ProxyAgentNotConnected.name(),
            "proxy-agent-not-connected"
        );
        assert_eq!(Hop::AgentStopped.name(), "agent-stopped");
    }
}
