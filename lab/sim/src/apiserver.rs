//! A small model of a kube-apiserver: storage by (group/kind, namespace, name), discovery of built-in
//! kinds and of custom kinds whose CRD is Established, server-side apply, JSON merge patch, delete with
//! cascades, label selectors, and the errors a real server gives where the lab depends on them
//! (open-cluster-management-io/ocm v1.3.1 `pkg/operator/operators/*/controllers/*/*_crd_reconcile.go`; recorded
//! from kube-apiserver v1.36.2 and open-cluster-management-io/ocm 00f84c32).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::util;
use super::world::World;
use ocm_lab_core::backend::kube::ForbiddenCause;
use ocm_lab_core::backend::undeclared::{schema_of, undeclared_fields};
use ocm_lab_core::backend::{KubeError, ObjectRef};

/// Group/kind keys (`Kind.group`, or `Kind` for the core group): how objects are stored, whatever
/// version they were written at.
pub mod gk {
    use serde_json::Value;

    use ocm_lab_core::backend::ObjectRef;

    pub const NAMESPACE: &str = "Namespace";
    pub const SERVICE_ACCOUNT: &str = "ServiceAccount";
    pub const SECRET: &str = "Secret";
    pub const DEPLOYMENT: &str = "Deployment.apps";
    pub const CRD: &str = "CustomResourceDefinition.apiextensions.k8s.io";
    pub const CSR: &str = "CertificateSigningRequest.certificates.k8s.io";
    pub const CLUSTER_MANAGER: &str = "ClusterManager.operator.open-cluster-management.io";
    pub const KLUSTERLET: &str = "Klusterlet.operator.open-cluster-management.io";
    pub const MANAGED_CLUSTER: &str = "ManagedCluster.cluster.open-cluster-management.io";
    pub const CLUSTER_SET: &str = "ManagedClusterSet.cluster.open-cluster-management.io";
    pub const SET_BINDING: &str = "ManagedClusterSetBinding.cluster.open-cluster-management.io";
    pub const PLACEMENT: &str = "Placement.cluster.open-cluster-management.io";
    pub const PLACEMENT_DECISION: &str = "PlacementDecision.cluster.open-cluster-management.io";
    pub const CLUSTER_CLAIM: &str = "ClusterClaim.cluster.open-cluster-management.io";
    pub const CLUSTER_PROPERTY: &str = "ClusterProperty.about.k8s.io";
    pub const CLUSTER_PROFILE: &str = "ClusterProfile.multicluster.x-k8s.io";
    pub const CMA: &str = "ClusterManagementAddOn.addon.open-cluster-management.io";
    pub const MCA: &str = "ManagedClusterAddOn.addon.open-cluster-management.io";
    pub const MPC: &str = "ManagedProxyConfiguration.proxy.open-cluster-management.io";
    pub const MSA: &str = "ManagedServiceAccount.authentication.open-cluster-management.io";
    pub const VALIDATING_WEBHOOK: &str =
        "ValidatingWebhookConfiguration.admissionregistration.k8s.io";
    pub const MUTATING_WEBHOOK: &str = "MutatingWebhookConfiguration.admissionregistration.k8s.io";

    pub fn make(group: &str, kind: &str) -> String {
        if group.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind}.{group}")
        }
    }

    pub fn group_of(api_version: &str) -> &str {
        api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    pub fn of_ref(r: &ObjectRef) -> String {
        make(r.group(), &r.kind)
    }

    pub fn of_obj(obj: &Value) -> String {
        make(
            group_of(obj["apiVersion"].as_str().unwrap_or("")),
            obj["kind"].as_str().unwrap_or(""),
        )
    }

    /// The group/kind a CRD object defines.
    pub fn of_crd(crd: &Value) -> Option<String> {
        Some(make(
            crd.pointer("/spec/group")?.as_str()?,
            crd.pointer("/spec/names/kind")?.as_str()?,
        ))
    }

    /// Whether the API server keeps `metadata.generation` for the kind (custom resources, Deployments
    /// and CRDs do; core objects, RBAC and CSRs do not).
    pub fn tracks_generation(gk: &str) -> bool {
        const UNTRACKED: &[&str] = &[
            "rbac.authorization.k8s.io",
            "coordination.k8s.io",
            "certificates.k8s.io",
        ];
        gk.split_once('.')
            .is_some_and(|(_, g)| !UNTRACKED.contains(&g))
    }
}

/// Kinds every cluster serves, all at `v1`: (group/kind, namespaced); the plural is the kind in lower
/// case plus `s`.
const BUILTIN: &[(&str, bool)] = &[
    (gk::NAMESPACE, false),
    (gk::SERVICE_ACCOUNT, true),
    (gk::SECRET, true),
    ("ConfigMap", true),
    ("Service", true),
    ("Pod", true),
    ("Event", true),
    (gk::DEPLOYMENT, true),
    ("ClusterRole.rbac.authorization.k8s.io", false),
    ("ClusterRoleBinding.rbac.authorization.k8s.io", false),
    ("Role.rbac.authorization.k8s.io", true),
    ("RoleBinding.rbac.authorization.k8s.io", true),
    (gk::CSR, false),
    (gk::CRD, false),
    ("Lease.coordination.k8s.io", true),
    (gk::VALIDATING_WEBHOOK, false),
    (gk::MUTATING_WEBHOOK, false),
];

pub(crate) fn builtin_gk(key: &str) -> bool {
    BUILTIN.iter().any(|(k, _)| *k == key)
}

/// A served kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KindInfo {
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Served versions.
    pub versions: Vec<String>,
}

impl KindInfo {
    fn key(&self) -> String {
        gk::make(&self.group, &self.kind)
    }

    /// The namespace a request for `r` addresses (`""` for a cluster-scoped kind).
    fn ns<'a>(&self, r: &'a ObjectRef) -> &'a str {
        match self.namespaced {
            true => r.namespace.as_deref().unwrap_or("default"),
            false => "",
        }
    }

    /// The resource as the API server names it in errors (`plural.group`).
    fn resource(&self) -> String {
        gk::make(&self.group, &self.plural)
    }
}

/// A store's objects: gk → namespace (`""` for cluster-scoped kinds) → name → object. Saved as it is.
type Objects = BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>>;

/// One cluster's objects.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Store {
    objects: Objects,
    /// Last resourceVersion handed out.
    pub rv: u64,
}

impl Store {
    pub fn get(&self, gk: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(gk)?.get(ns)?.get(name)
    }

    /// The objects of `gk`: in `ns`, or in every namespace (`None`).
    pub fn list<'a>(
        &'a self,
        gk: &str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Value> + use<'a> {
        let by_ns = self.objects.get(gk).into_iter().flatten();
        let in_ns = by_ns.filter(move |(n, _)| ns.is_none_or(|ns| ns == n.as_str()));
        in_ns.flat_map(|(_, by_name)| by_name.values())
    }

    /// The namespaces that hold objects of `gk`.
    pub fn namespaces_with(&self, gk: &str) -> Vec<String> {
        self.objects
            .get(gk)
            .map(|by_ns| by_ns.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The first object of `gk` named `name`, in any namespace.
    pub fn find_named(&self, gk: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(gk)?
            .values()
            .find_map(|by_name| by_name.get(name))
    }

    /// Every object, as (gk, namespace, name, object).
    fn entries(&self) -> impl Iterator<Item = (&String, &String, &String, &Value)> {
        self.objects.iter().flat_map(|(gk, by_ns)| {
            by_ns
                .iter()
                .flat_map(move |(ns, by_name)| by_name.iter().map(move |(n, o)| (gk, ns, n, o)))
        })
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.entries().count()
    }

    pub fn insert(&mut self, gk: &str, ns: &str, name: &str, obj: Value) {
        self.objects
            .entry(gk.to_owned())
            .or_default()
            .entry(ns.to_owned())
            .or_default()
            .insert(name.to_owned(), obj);
    }

    /// Removes an object; a namespace or kind left empty goes too (so `namespaces_with` lists only
    /// namespaces that hold something).
    pub fn remove(&mut self, gk: &str, ns: &str, name: &str) -> Option<Value> {
        let by_ns = self.objects.get_mut(gk)?;
        let by_name = by_ns.get_mut(ns)?;
        let old = by_name.remove(name)?;
        if by_name.is_empty() {
            by_ns.remove(ns);
            if by_ns.is_empty() {
                self.objects.remove(gk);
            }
        }
        Some(old)
    }

    /// Every object in a namespace, as (gk, ns, name).
    pub fn all_in_namespace(&self, ns: &str) -> Vec<(String, String, String)> {
        self.keys_where(|n, _| n == ns)
    }

    /// Objects whose ownerReferences name `uid`: in `ns` for a namespaced owner, anywhere for a
    /// cluster-scoped one.
    pub fn dependents(&self, uid: &str, ns: Option<&str>) -> Vec<(String, String, String)> {
        self.keys_where(|n, o| {
            ns.is_none_or(|ns| ns == n)
                && o.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        })
    }

    /// The (gk, ns, name) of the objects that pass `keep(namespace, object)`.
    fn keys_where(&self, keep: impl Fn(&str, &Value) -> bool) -> Vec<(String, String, String)> {
        self.entries()
            .filter(|(_, ns, _, o)| keep(ns, o))
            .map(|(gk, ns, n, _)| (gk.clone(), ns.clone(), n.clone()))
            .collect()
    }

    /// The CRD that defines custom kind `gk` (Established or not).
    fn crd_of(&self, gk: &str) -> Option<&Value> {
        self.list(self::gk::CRD, None)
            .find(|crd| self::gk::of_crd(crd).as_deref() == Some(gk))
    }

    /// The custom kind `gk` while its CRD is Established (served), with its served versions.
    fn custom_kind(&self, gk: &str) -> Option<KindInfo> {
        let crd = self
            .crd_of(gk)
            .filter(|crd| util::condition_is(crd, "Established", "True"))?;
        let text = |p: &str| util::str_at(crd, p).unwrap_or("").to_owned();
        Some(KindInfo {
            group: text("/spec/group"),
            kind: text("/spec/names/kind"),
            plural: text("/spec/names/plural"),
            namespaced: crd["spec"]["scope"] == "Namespaced",
            versions: crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["served"] == true)
                .filter_map(|v| v["name"].as_str().map(str::to_owned))
                .collect(),
        })
    }

    pub fn crd_served(&self, gk: &str) -> bool {
        self.custom_kind(gk).is_some()
    }
}

// ---- discovery ---------------------------------------------------------------------------------

/// The served kind for `apiVersion`/`kind`, or `None` (discovery has no match).
pub(crate) fn resolve(w: &World, cluster: &str, api_version: &str, kind: &str) -> Option<KindInfo> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let key = gk::make(group, kind);
    if let Some((_, namespaced)) = BUILTIN.iter().find(|(k, _)| *k == key && version == "v1") {
        return Some(KindInfo {
            group: group.to_owned(),
            kind: kind.to_owned(),
            plural: format!("{}s", kind.to_lowercase()),
            namespaced: *namespaced,
            versions: vec![version.to_owned()],
        });
    }
    let info = w.clusters.get(cluster)?.api.custom_kind(&key)?;
    info.versions.iter().any(|v| v == version).then_some(info)
}

// Errors are worded and classified like the real backend's (`backend::kube`, `backend::kube::classify`):
// the simulation replaces the API server *and* the client.

/// The served kind a write or list addresses on a reachable cluster; a discovery miss is permanent, in
/// kubectl's wording, like the real backend's.
fn served(w: &World, cluster: &str, api_version: &str, kind: &str) -> Result<KindInfo, KubeError> {
    check_reachable(w, cluster)?;
    resolve(w, cluster, api_version, kind).ok_or_else(|| KubeError::NotServed {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
    })
}

fn not_found(resource: &str, name: &str) -> KubeError {
    KubeError::NotFound {
        message: format!("{resource} \"{name}\" not found"),
    }
}

/// A request the API server refused (HTTP 4xx other than 404).
fn rejected(code: u16, message: String) -> KubeError {
    KubeError::Rejected { code, message }
}

pub(crate) fn unreachable(cluster: &str) -> KubeError {
    // The kubelet's view of a stopped node's API server; the advice is the simulated lab's own.
    KubeError::Hinted {
        source: Box::new(KubeError::Unreachable {
            server: format!("https://{cluster}-control-plane:6443"),
            detail: "dial tcp: connect: connection refused".to_owned(),
        }),
        help: "this simulated cluster is stopped or gone in the simulated world (there is no container to \
               inspect: it is a simulation); rebuild the simulated lab with `ocm-lab down --simulate`, then \
               `ocm-lab up --simulate` (with the same `-t` as this command)"
            .to_owned(),
    }
}

pub(crate) fn check_reachable(w: &World, cluster: &str) -> Result<(), KubeError> {
    if w.reachable(cluster) {
        Ok(())
    } else {
        Err(unreachable(cluster))
    }
}

// ---- reads -------------------------------------------------------------------------------------

/// An object as a client reads it: at the requested version.
fn at_version(obj: &Value, api_version: &str) -> Value {
    let mut o = obj.clone();
    o["apiVersion"] = json!(api_version);
    o
}

pub(crate) fn get(w: &World, cluster: &str, r: &ObjectRef) -> Result<Option<Value>, KubeError> {
    check_reachable(w, cluster)?;
    // A kind that is not served reads as absent (a 404, like `get_opt`).
    let Some(info) = resolve(w, cluster, &r.api_version, &r.kind) else {
        return Ok(None);
    };
    Ok(w.get(cluster, &gk::of_ref(r), info.ns(r), &r.name)
        .map(|o| at_version(o, &r.api_version)))
}

/// A parsed label selector: every requirement `(key, value, holds)` must hold, that is the label equals
/// `value` (without one: exists) exactly when `holds`.
type Selector = Vec<(String, Option<String>, bool)>;

/// Parses a label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated.
fn parse_selector(s: &str) -> Result<Selector, KubeError> {
    let term = |part: &str| {
        let (k, v, holds) = if let Some((k, v)) = part.split_once("!=") {
            (k, Some(v), false)
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            (k, Some(v), true)
        } else if let Some(k) = part.strip_prefix('!') {
            (k, None, false)
        } else {
            (part, None, true)
        };
        let k = k.trim();
        if k.is_empty() || k.contains(' ') {
            return Err(KubeError::BadSelector {
                selector: s.to_owned(),
            });
        }
        Ok((k.to_owned(), v.map(|v| v.trim().to_owned()), holds))
    };
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(term)
        .collect()
}

fn selector_matches(sel: &Selector, obj: &Value) -> bool {
    sel.iter().all(|(k, v, holds)| {
        let label = util::label(obj, k);
        *holds == v.as_deref().map_or(label.is_some(), |v| label == Some(v))
    })
}

pub(crate) fn list(
    w: &World,
    cluster: &str,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Value>, KubeError> {
    let info = served(w, cluster, api_version, kind)?;
    let sel = parse_selector(labels.unwrap_or(""))?;
    // A cluster-scoped kind ignores the namespace asked for.
    let ns = if info.namespaced { namespace } else { None };
    Ok(w.list(cluster, &info.key(), ns)
        .filter(|o| selector_matches(&sel, o))
        .map(|o| at_version(o, api_version))
        .collect())
}

// ---- writes ------------------------------------------------------------------------------------

/// RFC 1123 subdomain, what most kinds require of names (a `/` in a ClusterProperty name
/// is rejected with 422).
fn valid_subdomain(name: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    name.len() <= 253
        && name.chars().all(|c| alnum(c) || c == '-' || c == '.')
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.starts_with(alnum) && l.ends_with(alnum))
}

fn validate_name(info: &KindInfo, name: &str) -> Result<(), KubeError> {
    let ok = if info.group == "rbac.authorization.k8s.io" {
        // RBAC names are path segments (`open-cluster-management:bootstrap` is fine).
        !matches!(name, "" | "." | "..") && !name.contains(['\0', '/', '%'])
    } else {
        valid_subdomain(name)
    };
    if ok {
        return Ok(());
    }
    let what = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    Err(rejected(
        422,
        format!(
            "{}.{} \"{name}\" is invalid: metadata.name: Invalid value: \"{name}\": {what}",
            info.kind, info.group
        ),
    )
    .with_help("use a DNS-style name such as `tier.lab.example.com`"))
}

/// The HTTP 500 a server-side apply gets, whatever the field validation, for fields the schema of the
/// kind's CRD at `api_version` does not declare (kubernetes/kubernetes#122480;
/// open-cluster-management-io/cluster-proxy PR #272).
fn check_declared(
    w: &World,
    cluster: &str,
    info: &KindInfo,
    api_version: &str,
    obj: &Value,
) -> Result<(), KubeError> {
    let crd = w
        .clusters
        .get(cluster)
        .and_then(|c| c.api.crd_of(&info.key()));
    let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
    let schema = crd.and_then(|crd| schema_of(crd, version));
    let found = schema.map_or_else(Vec::new, |s| undeclared_fields(obj, &s));
    if found.is_empty() {
        return Ok(());
    }
    let ns = util::namespace(obj);
    let name = util::name(obj);
    let head = format!(
        "failed to create typed patch object ({ns}/{name}; {api_version}, Kind={})",
        info.kind
    );
    // What the server says (fixtures/recorded/6-ssa-field-validation/) ...
    let server = if found.len() == 1 {
        format!("{head}: {}: field not declared in schema", found[0])
    } else {
        let lines = found
            .iter()
            .map(|f| format!("  {f}: field not declared in schema"));
        format!("{head}: errors:\n{}", lines.collect::<Vec<_>>().join("\n"))
    };
    // ... as the real backend reports it: permanent, naming the fields (kubernetes#122480).
    Err(KubeError::UndeclaredFields {
        code: 500,
        fields: found,
        message: server,
    })
}

/// A hub webhook a request goes through, as the cluster-manager operator sets them up
/// (open-cluster-management-io/ocm v1.3.1 `manifests/cluster-manager/hub/`): admission webhooks served by
/// `cluster-manager-registration-webhook`, registered only once every hub Deployment is ready
/// (open-cluster-management-io/ocm v1.3.1 `pkg/operator/.../clustermanager_webhook_reconcile.go`), and the
/// addon CRDs' conversion webhook served by `cluster-manager-addon-webhook`, which v1beta1 addon requests need
/// from the moment the CRDs exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HubWebhook {
    /// The webhook's name (as in its configuration), or the CRD for a conversion webhook.
    pub name: &'static str,
    /// The Service and Deployment in `open-cluster-management-hub` that serve it.
    pub service: &'static str,
    pub path: &'static str,
    pub conversion: bool,
}

pub(crate) const HUB_NS: &str = "open-cluster-management-hub";

/// The ManagedCluster mutating webhook: registered means it defaults the cluster set label.
pub(crate) const MC_MUTATOR: HubWebhook = HubWebhook {
    name: "managedclustermutators.admission.cluster.open-cluster-management.io",
    service: "cluster-manager-registration-webhook",
    path: "/mutate-cluster-open-cluster-management-io-v1-managedcluster",
    conversion: false,
};
pub(crate) const MC_VALIDATOR: HubWebhook = HubWebhook {
    name: "managedclustervalidators.admission.cluster.open-cluster-management.io",
    service: "cluster-manager-registration-webhook",
    path: "/validate-cluster-open-cluster-management-io-v1-managedcluster",
    conversion: false,
};
pub(crate) const BINDING_VALIDATOR: HubWebhook = HubWebhook {
    name: "managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io",
    service: "cluster-manager-registration-webhook",
    path: "/validate-cluster-open-cluster-management-io-v1beta2-managedclustersetbinding",
    conversion: false,
};
pub(crate) const WORK_VALIDATOR: HubWebhook = HubWebhook {
    name: "manifestworkvalidators.admission.work.open-cluster-management.io",
    service: "cluster-manager-work-webhook",
    path: "/validate-work-open-cluster-management-io-v1-manifestwork",
    conversion: false,
};
/// The admission webhook configurations the operator registers: (kind gk, webhook).
pub(crate) const HUB_ADMISSION_WEBHOOKS: &[(&str, HubWebhook)] = &[
    (gk::MUTATING_WEBHOOK, MC_MUTATOR),
    (gk::VALIDATING_WEBHOOK, MC_VALIDATOR),
    (gk::VALIDATING_WEBHOOK, BINDING_VALIDATOR),
    (gk::VALIDATING_WEBHOOK, WORK_VALIDATOR),
];
/// The service of the addon CRDs' conversion webhook (`strategy: Webhook`, `path: /convert`).
pub(crate) const ADDON_WEBHOOK_SERVICE: &str = "cluster-manager-addon-webhook";

impl HubWebhook {
    fn url(&self) -> String {
        format!(
            "https://{}.{HUB_NS}.svc:9443{}?timeout={}s",
            self.service,
            self.path,
            if self.conversion { 30 } else { 10 }
        )
    }

    /// What the API server answers while the webhook cannot be called (`failurePolicy: Fail`): HTTP 500,
    /// worded and classified (transient) like the real backend's `classify_status`.
    pub(crate) fn failure(&self, api_version: &str, kind: &str, why: &str) -> KubeError {
        let (url, name) = (self.url(), self.name);
        let message = if self.conversion {
            format!(
                "conversion webhook for {api_version}, Kind={kind} failed: Post \"{url}\": {why}"
            )
        } else {
            format!(
                "Internal error occurred: failed calling webhook \"{name}\": failed to call webhook: Post \"{url}\": {why}"
            )
        };
        KubeError::ServerFailed { code: 500, message }
    }
}

fn webhook_registered(w: &World, cluster: &str, hook: &HubWebhook) -> bool {
    HUB_ADMISSION_WEBHOOKS
        .iter()
        .filter(|(_, h)| h == hook)
        .any(|(key, h)| w.get(cluster, key, "", h.name).is_some())
}

/// The hub webhooks a write of `key` at `api_version` goes through on `cluster`: registered admission
/// webhooks, and the conversion webhook of an addon CRD for a version other than its storage version.
pub(crate) fn hub_webhooks_for(
    w: &World,
    cluster: &str,
    key: &str,
    api_version: &str,
) -> Vec<HubWebhook> {
    let mut out: Vec<HubWebhook> = match key {
        gk::MANAGED_CLUSTER => vec![MC_MUTATOR, MC_VALIDATOR],
        gk::SET_BINDING => vec![BINDING_VALIDATOR],
        _ => Vec::new(),
    };
    out.retain(|h| webhook_registered(w, cluster, h));
    if let Some(hook) = conversion_webhook(w, cluster, key, api_version) {
        out.push(hook);
    }
    out
}

/// The conversion webhook a request at `api_version` needs: the kind's CRD converts by webhook
/// (`spec.conversion.strategy: Webhook`) through the addon webhook's Service and `api_version` is not its
/// storage version.
fn conversion_webhook(
    w: &World,
    cluster: &str,
    key: &str,
    api_version: &str,
) -> Option<HubWebhook> {
    let crd = w.clusters.get(cluster)?.api.crd_of(key)?;
    let stored = crd_version(crd, api_version).is_some_and(|v| v["storage"] == true);
    let service = crd.pointer("/spec/conversion/webhook/clientConfig/service/name");
    let service = service.and_then(Value::as_str);
    (crd["spec"]["conversion"]["strategy"] == "Webhook"
        && !stored
        && service == Some(ADDON_WEBHOOK_SERVICE))
    .then_some(HubWebhook {
        name: "conversion",
        service: ADDON_WEBHOOK_SERVICE,
        path: "/convert",
        conversion: true,
    })
}

/// The entry of a CRD's `spec.versions` for the version of `api_version`.
fn crd_version<'a>(crd: &'a Value, api_version: &str) -> Option<&'a Value> {
    let version = api_version.rsplit_once('/').map_or(api_version, |(_, v)| v);
    let versions = crd["spec"]["versions"].as_array()?;
    versions.iter().find(|v| v["name"] == version)
}

/// Calls the hub webhooks a write goes through: each must have a ready Pod behind it (an Available
/// Deployment in `open-cluster-management-hub`).
fn call_hub_webhooks(w: &World, cluster: &str, key: &str, obj: &Value) -> Result<(), KubeError> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let ready = |h: &HubWebhook| {
        w.get(cluster, gk::DEPLOYMENT, HUB_NS, h.service)
            .is_some_and(|d| util::condition_is(d, "Available", "True"))
    };
    let hooks = hub_webhooks_for(w, cluster, key, api_version);
    let Some(hook) = hooks.iter().find(|h| !ready(h)) else {
        return Ok(());
    };
    let why = format!(
        "dial tcp 10.96.0.{}:9443: connect: connection refused (simulated: Deployment {HUB_NS}/{} is not ready)",
        if hook.conversion { 41 } else { 40 },
        hook.service
    );
    Err(hook.failure(api_version, obj["kind"].as_str().unwrap_or_default(), &why))
}

/// Whether a hub registration feature gate is on: listed with mode Enable, or on by default
/// (`DefaultClusterSet`) and not disabled (open-cluster-management-io/api v1.3.0 `feature/feature.go`).
pub(crate) fn hub_gate(w: &World, cluster: &str, gate: &str) -> bool {
    let cm = w.get(cluster, gk::CLUSTER_MANAGER, "", "cluster-manager");
    cm.is_some_and(|cm| {
        let gates = cm.pointer("/spec/registrationConfiguration/featureGates");
        gate_on(gates, gate, gate == "DefaultClusterSet")
    })
}

/// Feature gate lookup in a `[{feature, mode}]` list.
pub(crate) fn gate_on(list: Option<&Value>, gate: &str, default: bool) -> bool {
    list.and_then(Value::as_array)
        .and_then(|l| l.iter().find(|g| g["feature"] == gate))
        .map_or(default, |g| g["mode"] == "Enable")
}

/// OCM's hub webhooks where they matter (open-cluster-management-io/ocm v1.3.1 `pkg/registration/webhook/`):
/// each must answer (a ready Pod behind it, open-cluster-management-io/ocm v1.3.1
/// `manifests/cluster-manager/hub/`, `pkg/operator/.../clustermanager_webhook_reconcile.go`), then the
/// ManagedCluster default cluster set label, and a binding's name equal to its set. Before the operator
/// registers the admission webhooks nothing is validated.
pub(crate) fn admit(w: &World, cluster: &str, key: &str, obj: &mut Value) -> Result<(), KubeError> {
    call_hub_webhooks(w, cluster, key, obj)?;
    if key == gk::MANAGED_CLUSTER
        && webhook_registered(w, cluster, &MC_MUTATOR)
        && hub_gate(w, cluster, "DefaultClusterSet")
        && util::label(obj, ocm_lab_core::topology::CLUSTERSET_LABEL).is_none()
    {
        util::set_label(obj, ocm_lab_core::topology::CLUSTERSET_LABEL, "default");
    }
    // The ManagedCluster validating webhook denies an accept while the cluster's namespace on the hub is
    // still Terminating, after a `reset` or `down` (open-cluster-management-io/ocm v1.3.1
    // `pkg/registration/webhook/v1/managedcluster_validating.go`): a 403 that passes once the namespace is
    // gone, which the real backend classifies as transient.
    if key == gk::MANAGED_CLUSTER && webhook_registered(w, cluster, &MC_VALIDATOR) {
        let name = util::name(obj);
        let accepts = |mc: &Value| mc["spec"]["hubAcceptsClient"] == true;
        let accepting = accepts(obj)
            && w.get(cluster, key, "", name)
                .is_none_or(|old| !accepts(old));
        let terminating = w
            .get(cluster, gk::NAMESPACE, "", name)
            .is_some_and(|ns| ns["status"]["phase"] == "Terminating");
        if accepting && terminating {
            return Err(KubeError::Forbidden {
                message: format!(
                    "admission webhook \"{}\" denied the request: cluster namespace \"{name}\" is terminating",
                    MC_VALIDATOR.name
                ),
                cause: ForbiddenCause::ClusterNamespaceTerminating,
            });
        }
    }
    if key == gk::SET_BINDING && webhook_registered(w, cluster, &BINDING_VALIDATOR) {
        let set = obj.pointer("/spec/clusterSet").and_then(Value::as_str);
        if set != Some(util::name(obj)) {
            return Err(rejected(
                400,
                "admission webhook \"managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io\" denied the request: The ManagedClusterSetBinding must have the same name as the target ManagedClusterSet".to_owned(),
            )
            .with_help(format!(
                "name the binding like its set: `{}`",
                set.unwrap_or("")
            )));
        }
    }
    Ok(())
}

/// What clients may not set: server-owned metadata; `stringData` becomes `data`.
fn normalize(obj: &mut Value, key: &str) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let server_set = ["managedFields", "deletionTimestamp"];
        for k in super::world::SERVER_FIELDS.iter().chain(&server_set) {
            m.remove(*k);
        }
    }
    if key == gk::SECRET
        && let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        let data = util::obj_at(obj, &["data"]);
        for (k, v) in sd {
            let text = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
            data.insert(k, json!(util::b64_encode(text.as_bytes())));
        }
    }
}

/// Server-side apply (field manager `ocm-lab`, force, Strict validation): see [`apply_as`].
pub(crate) fn apply(w: &mut World, cluster: &str, obj: &Value) -> Result<Value, KubeError> {
    apply_as(w, cluster, obj, ocm_lab_core::backend::kube::FIELD_MANAGER)
}

/// Server-side apply by `manager`, forced, with Strict validation. As a real API server does, it records
/// per manager the fields it applied (`metadata.managedFields`, `operation: Apply`, FieldsV1), removes the
/// fields the manager applied before and no longer applies (unless another manager holds them), and takes
/// the applied fields from other managers. Maps merge recursively, lists keyed by `name` merge item by
/// item, other lists are atomic; `status` is never set by an apply. Returns the stored object.
pub(crate) fn apply_as(
    w: &mut World,
    cluster: &str,
    obj: &Value,
    manager: &str,
) -> Result<Value, KubeError> {
    let r = ObjectRef::of(obj).ok_or(KubeError::NoIdentity)?;
    let info = served(w, cluster, &r.api_version, &r.kind)?;
    validate_name(&info, &r.name)?;
    let key = info.key();
    let mut obj = obj.clone();
    let ns = info.ns(&r);
    if info.namespaced && w.get(cluster, gk::NAMESPACE, "", ns).is_none() {
        let help = format!("create namespace {ns} first");
        return Err(not_found("namespaces", ns).with_help(help));
    }
    let meta = util::obj_at(&mut obj, &["metadata"]);
    if info.namespaced {
        meta.insert("namespace".to_owned(), json!(ns));
    } else {
        meta.remove("namespace");
    }
    check_declared(w, cluster, &info, &r.api_version, &obj)?;
    normalize(&mut obj, &key);
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    let mut merged = ssa_merge(
        w.get(cluster, &key, ns, &r.name),
        obj,
        manager,
        &r.api_version,
    );
    admit(w, cluster, &key, &mut merged)?;
    w.put(cluster, merged);
    Ok(w.get(cluster, &key, ns, &r.name)
        .cloned()
        .expect("just stored"))
}

/// The stored object after `manager` applied `config` to `existing` (see [`apply_as`]).
fn ssa_merge(existing: Option<&Value>, config: Value, manager: &str, api_version: &str) -> Value {
    use ocm_lab_core::backend::fieldset;
    let applied = fieldset::of_config(&config);
    let entry = |fields: Value| {
        json!({
            "manager": manager,
            "operation": "Apply",
            "apiVersion": api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        })
    };
    let Some(existing) = existing else {
        let mut obj = config;
        obj["metadata"]["managedFields"] = json!([entry(applied)]);
        return obj;
    };
    let mut obj = existing.clone();
    let entries: Vec<Value> =
        serde_json::from_value(obj["metadata"]["managedFields"].take()).unwrap_or_default();
    let mine = |e: &Value| e["manager"] == manager && e["operation"] == "Apply";
    let others: Vec<&Value> = entries
        .iter()
        .filter(|e| !mine(e))
        .map(|e| &e["fieldsV1"])
        .collect();
    if let Some(prev) = entries.iter().find(|e| mine(e)) {
        fieldset::remove_dropped(&mut obj, &prev["fieldsV1"], &applied, &others);
    }
    fieldset::merge(&mut obj, &config);
    // Forced: other managers give up the fields this apply sets; a manager left with none is dropped.
    let at = entries.iter().position(&mine);
    let mut kept: Vec<Value> = Vec::with_capacity(entries.len() + 1);
    for mut e in entries {
        if mine(&e) {
            continue;
        }
        let rest = fieldset::subtract(&e["fieldsV1"], &applied);
        if rest.as_object().is_some_and(|m| !m.is_empty()) {
            e["fieldsV1"] = rest;
            kept.push(e);
        }
    }
    // The manager's entry keeps its place among the others (a real server appends a new manager).
    kept.insert(at.unwrap_or(kept.len()).min(kept.len()), entry(applied));
    obj["metadata"]["managedFields"] = Value::Array(kept);
    obj
}

/// JSON merge patch (RFC 7386) on the main resource: `status` in the patch is ignored, as for every
/// kind with a status subresource.
pub(crate) fn merge_patch(
    w: &mut World,
    cluster: &str,
    r: &ObjectRef,
    patch: &Value,
) -> Result<(), KubeError> {
    let info = served(w, cluster, &r.api_version, &r.kind)?;
    let key = info.key();
    let Some(existing) = w.get(cluster, &key, info.ns(r), &r.name) else {
        return Err(not_found(&info.resource(), &r.name));
    };
    let mut patch = patch.clone();
    if let Some(m) = patch.as_object_mut() {
        m.remove("status");
        m.remove("apiVersion");
        m.remove("kind");
    }
    normalize(&mut patch, &key);
    let mut new = existing.clone();
    util::merge(&mut new, &patch);
    admit(w, cluster, &key, &mut new)?;
    w.put(cluster, new);
    Ok(())
}

pub(crate) fn delete(w: &mut World, cluster: &str, r: &ObjectRef) -> Result<bool, KubeError> {
    check_reachable(w, cluster)?;
    let Some(info) = resolve(w, cluster, &r.api_version, &r.kind) else {
        return Ok(false);
    };
    Ok(w.remove(cluster, &info.key(), info.ns(r), &r.name)
        .is_some())
}

/// TokenRequest: the ServiceAccount must exist; the token is remembered so the simulated hub can tell
/// its own tokens from others (open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/init/exec.go`).
pub(crate) fn token_request(
    w: &mut World,
    cluster: &str,
    namespace: &str,
    sa: &str,
    seconds: i64,
) -> Result<String, KubeError> {
    check_reachable(w, cluster)?;
    if w.get(cluster, gk::SERVICE_ACCOUNT, namespace, sa).is_none() {
        return Err(not_found("serviceaccounts", sa).with_help(format!(
            "the ServiceAccount {namespace}/{sa} must exist before a token can be requested"
        )));
    }
    let n = w.next_seq();
    let token = format!("sim-token-{cluster}-{n}");
    w.tokens.insert(
        token.clone(),
        super::world::TokenInfo {
            cluster: cluster.to_owned(),
            namespace: namespace.to_owned(),
            service_account: sa.to_owned(),
            expiration_seconds: seconds,
        },
    );
    w.touched.insert(cluster.to_owned());
    Ok(token)
}

/// CSR `/approval`: appends condition Approved (as `clusteradm accept` does,
/// open-cluster-management-io/clusteradm v1.3.1 `pkg/cmd/accept/exec.go`); the signer then issues the
/// certificate.
pub(crate) fn approve_csr(
    w: &mut World,
    cluster: &str,
    name: &str,
    reason: &str,
) -> Result<(), KubeError> {
    check_reachable(w, cluster)?;
    let Some(csr) = w.get(cluster, gk::CSR, "", name) else {
        return Err(KubeError::CsrMissing {
            name: name.to_owned(),
        });
    };
    if util::condition_is(csr, "Approved", "True") {
        return Ok(());
    }
    if util::condition_is(csr, "Denied", "True") {
        return Err(KubeError::CsrDenied {
            name: name.to_owned(),
        });
    }
    let mut csr = csr.clone();
    let now = util::now_rfc3339();
    let conds = util::obj_at(&mut csr, &["status"])
        .entry("conditions")
        .or_insert_with(|| json!([]));
    if let Some(list) = conds.as_array_mut() {
        list.push(json!({
            "type": "Approved",
            "status": "True",
            "reason": reason,
            "message": "This CSR was approved by ocm-lab.",
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }));
    }
    w.put(cluster, csr);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse() {
        let s = parse_selector("a=b, c!=d,e,!f").unwrap();
        let o = json!({"metadata": {"labels": {"a": "b", "e": ""}}});
        assert!(selector_matches(&s, &o));
        assert!(!selector_matches(&parse_selector("a=x").unwrap(), &o));
    }

    const US: &str = ocm_lab_core::backend::kube::FIELD_MANAGER;

    /// Applies ConfigMap `default/c` to cluster `c1` as `manager` (as `ocm-lab` through [`apply`]);
    /// returns the stored object.
    fn ap(w: &mut World, manager: &str, labels: Value, data: Value) -> Value {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default", "labels": labels}, "data": data});
        match manager {
            US => apply(w, "c1", &cm),
            _ => apply_as(w, "c1", &cm, manager),
        }
        .unwrap()
    }

    fn world() -> World {
        let mut w = World::default();
        w.create_cluster("c1", "kindest/node:v1.36.1", false);
        w
    }

    #[test]
    fn an_apply_removes_what_the_same_manager_no_longer_applies() {
        let mut w = world();
        ap(
            &mut w,
            US,
            json!({"a": "1", "b": "2"}),
            json!({"x": "1", "y": "2"}),
        );
        let o = ap(&mut w, US, json!({"a": "1"}), json!({"x": "1"}));
        assert_eq!(o["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(o["data"], json!({"x": "1"}));
        let fields = json!({"f:metadata": {"f:labels": {"f:a": {}}}, "f:data": {"f:x": {}}});
        let entry = json!({"manager": "ocm-lab", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields});
        assert_eq!(o["metadata"]["managedFields"], json!([entry]));
    }

    #[test]
    fn fields_another_manager_holds_survive_and_unowned_fields_are_never_removed() {
        let mut w = world();
        ap(&mut w, US, json!({"a": "1", "shared": "s"}), json!({}));
        let mut o = ap(
            &mut w,
            "someone",
            json!({"shared": "s", "theirs": "t"}),
            json!({}),
        );
        // A controller's write: no manager recorded.
        o["metadata"]["labels"]["controller"] = json!("c");
        w.put("c1", o);
        let o = ap(&mut w, US, json!({"a": "1"}), json!({}));
        let all = json!({"a": "1", "shared": "s", "theirs": "t", "controller": "c"});
        assert_eq!(o["metadata"]["labels"], all);
        // The other manager drops `shared` too: now nobody holds it.
        let o = ap(&mut w, "someone", json!({"theirs": "t"}), json!({}));
        let left = json!({"a": "1", "theirs": "t", "controller": "c"});
        assert_eq!(o["metadata"]["labels"], left);
    }

    #[test]
    fn a_forced_apply_takes_fields_from_other_managers() {
        let mut w = world();
        ap(
            &mut w,
            "someone",
            json!({"a": "theirs", "b": "b"}),
            json!({}),
        );
        ap(&mut w, US, json!({"a": "ours"}), json!({}));
        // `a` became ours and went when we dropped it; `b` stays theirs.
        let o = ap(&mut w, US, json!({}), json!({}));
        assert_eq!(o["metadata"]["labels"], json!({"b": "b"}));
    }

    #[test]
    fn list_items_keyed_by_name_are_merged_and_removed_one_by_one() {
        let mut w = world();
        let data = |c: Value| json!({"containers": c, "args": ["a", "b"]});
        let (x, y, z) = (
            json!({"name": "x"}),
            json!({"name": "y"}),
            json!({"name": "z"}),
        );
        ap(&mut w, US, json!({}), data(json!([x, y])));
        ap(&mut w, "someone", json!({}), data(json!([z])));
        let o = ap(&mut w, US, json!({}), data(json!([x])));
        assert_eq!(o["data"], data(json!([x, z])));
    }

    #[test]
    fn subdomains() {
        assert!(valid_subdomain("tier.lab.example.com"));
        assert!(!valid_subdomain("lab.example.com/region"));
        assert!(!valid_subdomain("-a"));
        assert!(!valid_subdomain("A"));
    }
}
