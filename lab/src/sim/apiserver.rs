//! A small model of a kube-apiserver: storage by (group/kind, namespace, name), discovery of built-in
//! kinds and of custom kinds whose CRD is Established, server-side apply, JSON merge patch, delete with
//! cascades, label selectors, and the errors a real server gives where the lab depends on them
//! (OCM-FACTS §9.3, §10).

use super::util::At as _;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::util;
use super::world::World;
use crate::backend::{BackendError, ObjectRef};

/// Group/kind keys (`Kind.group`, or `Kind` for the core group): how objects are stored, whatever
/// version they were written at.
pub mod gk {
    use serde_json::Value;

    use crate::sim::util::At as _;

    use crate::backend::ObjectRef;

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
            crd.at("/spec/group")?.as_str()?,
            crd.at("/spec/names/kind")?.as_str()?,
        ))
    }

    /// Whether the API server keeps `metadata.generation` for the kind (custom resources, Deployments
    /// and CRDs do; core objects, RBAC and CSRs do not).
    pub fn tracks_generation(gk: &str) -> bool {
        match gk.split_once('.') {
            None => false,
            Some((_, g)) => !matches!(
                g,
                "rbac.authorization.k8s.io" | "coordination.k8s.io" | "certificates.k8s.io"
            ),
        }
    }
}

/// Kinds every cluster serves: (group, version, kind, plural, namespaced).
const BUILTIN: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "ServiceAccount", "serviceaccounts", true),
    ("", "v1", "Secret", "secrets", true),
    ("", "v1", "ConfigMap", "configmaps", true),
    ("", "v1", "Service", "services", true),
    ("", "v1", "Pod", "pods", true),
    ("", "v1", "Event", "events", true),
    ("apps", "v1", "Deployment", "deployments", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
    ("coordination.k8s.io", "v1", "Lease", "leases", true),
];

pub(crate) fn builtin_gk(key: &str) -> bool {
    let (kind, group) = key.split_once('.').unwrap_or((key, ""));
    BUILTIN
        .iter()
        .any(|(g, _, k, _, _)| *g == group && *k == kind)
}

/// Fields that the real CRDs do not declare although charts render them: server-side apply rejects
/// them with HTTP 500 "field not declared in schema" whatever the field validation (OCM-FACTS §6, §10).
const UNDECLARED: &[(&str, &[&str])] = &[(
    gk::MPC,
    &[
        "/spec/proxyAgent/additionalValues",
        "/spec/proxyServer/entrypoint/hostname/port",
    ],
)];

/// A served kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct KindInfo {
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub namespaced: bool,
    /// Served versions.
    pub versions: Vec<String>,
}

impl KindInfo {
    fn resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// One cluster's objects.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Store {
    /// gk → namespace ("" when cluster-scoped) → name → object.
    objects: BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>>,
    /// Last resourceVersion handed out.
    pub rv: u64,
    /// Custom kinds served now (their CRD is Established), by gk.
    #[serde(skip)]
    crds: BTreeMap<String, KindInfo>,
}

impl Store {
    pub fn get(&self, gk: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(gk)?.get(ns)?.get(name)
    }

    pub fn list<'a>(
        &'a self,
        gk: &str,
        ns: Option<&str>,
    ) -> Box<dyn Iterator<Item = &'a Value> + 'a> {
        let Some(by_ns) = self.objects.get(gk) else {
            return Box::new(std::iter::empty());
        };
        match ns {
            Some(ns) => match by_ns.get(ns) {
                Some(m) => Box::new(m.values()),
                None => Box::new(std::iter::empty()),
            },
            None => Box::new(by_ns.values().flat_map(BTreeMap::values)),
        }
    }

    pub fn namespaces_with(&self, gk: &str) -> Vec<String> {
        self.objects
            .get(gk)
            .map(|m| {
                m.iter()
                    .filter(|(_, v)| !v.is_empty())
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn find_named(&self, gk: &str, name: &str) -> Option<&Value> {
        self.objects.get(gk)?.values().find_map(|m| m.get(name))
    }

    /// Every object: gk → namespace → name → object (for saving the world).
    pub fn objects(&self) -> &BTreeMap<String, BTreeMap<String, BTreeMap<String, Value>>> {
        &self.objects
    }

    pub fn len(&self) -> usize {
        self.objects
            .values()
            .flat_map(BTreeMap::values)
            .map(BTreeMap::len)
            .sum()
    }

    pub fn insert(&mut self, gk: &str, ns: &str, name: &str, obj: Value) {
        if gk == self::gk::CRD {
            self.index_crd(&obj);
        }
        // Keys are allocated only when new: most writes replace an object that exists.
        if !self.objects.contains_key(gk) {
            self.objects.insert(gk.to_owned(), BTreeMap::new());
        }
        let by_ns = self.objects.get_mut(gk).expect("inserted above");
        if !by_ns.contains_key(ns) {
            by_ns.insert(ns.to_owned(), BTreeMap::new());
        }
        let by_name = by_ns.get_mut(ns).expect("inserted above");
        match by_name.get_mut(name) {
            Some(slot) => *slot = obj,
            None => {
                by_name.insert(name.to_owned(), obj);
            }
        }
    }

    pub fn remove(&mut self, gk: &str, ns: &str, name: &str) -> Option<Value> {
        let by_ns = self.objects.get_mut(gk)?;
        let m = by_ns.get_mut(ns)?;
        let old = m.remove(name)?;
        if m.is_empty() {
            by_ns.remove(ns);
        }
        if gk == self::gk::CRD
            && let Some(k) = self::gk::of_crd(&old)
        {
            self.crds.remove(&k);
        }
        Some(old)
    }

    /// Every object in a namespace, as (gk, ns, name).
    pub fn all_in_namespace(&self, ns: &str) -> Vec<(String, String, String)> {
        self.objects
            .iter()
            .filter_map(|(k, by_ns)| by_ns.get(ns).map(|m| (k, m)))
            .flat_map(|(k, m)| m.keys().map(move |n| (k.clone(), ns.to_owned(), n.clone())))
            .collect()
    }

    /// Objects whose ownerReferences name `uid`: in `ns` for a namespaced owner, anywhere for a
    /// cluster-scoped one.
    pub fn dependents(&self, uid: &str, ns: Option<&str>) -> Vec<(String, String, String)> {
        let owned = |o: &Value| {
            o.at("/metadata/ownerReferences")
                .and_then(Value::as_array)
                .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid))
        };
        let mut out = Vec::new();
        for (k, by_ns) in &self.objects {
            for (n, m) in by_ns {
                if ns.is_some_and(|ns| ns != n) {
                    continue;
                }
                for (name, o) in m {
                    if owned(o) {
                        out.push((k.clone(), n.clone(), name.clone()));
                    }
                }
            }
        }
        out
    }

    pub fn crd_served(&self, gk: &str) -> bool {
        self.crds.contains_key(gk)
    }

    fn index_crd(&mut self, crd: &Value) {
        let Some(k) = gk::of_crd(crd) else { return };
        if util::condition_is(crd, "Established", "True") {
            let versions = crd
                .at("/spec/versions")
                .and_then(Value::as_array)
                .map(|vs| {
                    vs.iter()
                        .filter(|v| v["served"] == true)
                        .filter_map(|v| v["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            self.crds.insert(
                k,
                KindInfo {
                    group: crd["spec"]["group"].as_str().unwrap_or("").to_owned(),
                    kind: crd["spec"]["names"]["kind"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    plural: crd["spec"]["names"]["plural"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned(),
                    namespaced: crd["spec"]["scope"] == "Namespaced",
                    versions,
                },
            );
        } else {
            self.crds.remove(&k);
        }
    }

    pub fn rebuild_index(&mut self) {
        let crds: Vec<Value> = self.list(gk::CRD, None).cloned().collect();
        self.crds.clear();
        for c in &crds {
            self.index_crd(c);
        }
    }
}

// ---- discovery ---------------------------------------------------------------------------------

/// The served kind for `apiVersion`/`kind`, or `None` (discovery has no match).
pub(crate) fn resolve(w: &World, cluster: &str, api_version: &str, kind: &str) -> Option<KindInfo> {
    let (group, version) = match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    };
    if let Some((g, v, k, p, n)) = BUILTIN
        .iter()
        .find(|(g, v, k, _, _)| *g == group && *v == version && *k == kind)
    {
        return Some(KindInfo {
            group: (*g).to_owned(),
            kind: (*k).to_owned(),
            plural: (*p).to_owned(),
            namespaced: *n,
            versions: vec![(*v).to_owned()],
        });
    }
    let c = w.clusters.get(cluster)?;
    c.api
        .crds
        .get(&gk::make(group, kind))
        .filter(|i| i.versions.iter().any(|v| v == version))
        .cloned()
}

// Errors are worded and classified like the real backend's (`backend::kube`, `backend::kube::classify`):
// the simulation replaces the API server *and* the client.

/// A discovery miss (kubectl's wording; OCM-FACTS §9.3): permanent, like the real backend's.
fn no_match(api_version: &str, kind: &str) -> BackendError {
    BackendError::permanent(format!(
        "no matches for kind \"{kind}\" in version \"{api_version}\""
    ))
    .with_help(
        "the cluster does not serve this kind: apply its CRD first and wait until it is Established \
         (OCM's gated kinds appear only once the operator installs them)",
    )
}

fn not_found(info: &KindInfo, name: &str) -> BackendError {
    BackendError::permanent(format!(
        "not found (HTTP 404): {} \"{name}\" not found",
        info.resource()
    ))
}

/// A request the API server refused (HTTP 4xx other than 404).
fn rejected(code: u16, msg: String) -> BackendError {
    BackendError::permanent(format!("rejected (HTTP {code}): {msg}"))
}

pub(crate) fn unreachable(cluster: &str) -> BackendError {
    BackendError::transient(format!(
        "failed to reach the API server of cluster {cluster}: cluster {cluster} is not reachable (simulated)"
    ))
    .with_help(
        "this simulated cluster is stopped or gone in the simulated world (there is no container to inspect: \
         it is a simulation); rebuild the simulated lab with `ocm-lab down --simulate`, then \
         `ocm-lab up --simulate` (with the same `-t` as this command)",
    )
}

fn check_reachable(w: &World, cluster: &str) -> Result<(), BackendError> {
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

pub(crate) fn get(w: &World, cluster: &str, r: &ObjectRef) -> Result<Option<Value>, BackendError> {
    check_reachable(w, cluster)?;
    // A kind that is not served reads as absent (a 404, like `get_opt`).
    let Some(info) = resolve(w, cluster, &r.api_version, &r.kind) else {
        return Ok(None);
    };
    let ns = if info.namespaced {
        r.namespace.as_deref().unwrap_or("default")
    } else {
        ""
    };
    Ok(w.get(cluster, &gk::of_ref(r), ns, &r.name)
        .map(|o| at_version(o, &r.api_version)))
}

/// A parsed label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated.
pub(crate) fn parse_selector(s: &str) -> Result<Vec<(String, SelOp)>, BackendError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let term = if let Some((k, v)) = part.split_once("!=") {
            (k.trim().to_owned(), SelOp::Ne(v.trim().to_owned()))
        } else if let Some((k, v)) = part.split_once("==") {
            (k.trim().to_owned(), SelOp::Eq(v.trim().to_owned()))
        } else if let Some((k, v)) = part.split_once('=') {
            (k.trim().to_owned(), SelOp::Eq(v.trim().to_owned()))
        } else if let Some(k) = part.strip_prefix('!') {
            (k.trim().to_owned(), SelOp::Absent)
        } else {
            (part.to_owned(), SelOp::Exists)
        };
        if term.0.is_empty() || term.0.contains(' ') {
            return Err(BackendError::permanent(format!(
                "unable to parse requirement: invalid label selector {s:?}"
            )));
        }
        out.push(term);
    }
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SelOp {
    Eq(String),
    Ne(String),
    Exists,
    Absent,
}

pub(crate) fn selector_matches(sel: &[(String, SelOp)], obj: &Value) -> bool {
    sel.iter().all(|(k, op)| {
        let v = util::label(obj, k);
        match op {
            SelOp::Eq(x) => v == Some(x.as_str()),
            SelOp::Ne(x) => v != Some(x.as_str()),
            SelOp::Exists => v.is_some(),
            SelOp::Absent => v.is_none(),
        }
    })
}

pub(crate) fn list(
    w: &World,
    cluster: &str,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<Value>, BackendError> {
    check_reachable(w, cluster)?;
    let info = resolve(w, cluster, api_version, kind).ok_or_else(|| no_match(api_version, kind))?;
    let sel = parse_selector(labels.unwrap_or(""))?;
    let ns = if info.namespaced { namespace } else { None };
    Ok(w.list(cluster, &gk::make(&info.group, &info.kind), ns)
        .filter(|o| selector_matches(&sel, o))
        .map(|o| at_version(o, api_version))
        .collect())
}

// ---- writes ------------------------------------------------------------------------------------

/// RFC 1123 subdomain, what most kinds require of names (OCM-FACTS §10: a `/` in a ClusterProperty name
/// is rejected with 422).
fn valid_subdomain(name: &str) -> bool {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    !name.is_empty()
        && name.len() <= 253
        && name.chars().all(ok_char)
        && name
            .split('.')
            .all(|l| !l.is_empty() && l.starts_with(alnum) && l.ends_with(alnum))
}

fn validate_name(info: &KindInfo, name: &str) -> Result<(), BackendError> {
    let ok = if info.group == "rbac.authorization.k8s.io" {
        // RBAC names are path segments (`open-cluster-management:bootstrap` is fine).
        !name.is_empty()
            && !name.contains('/')
            && !name.contains('%')
            && name != "."
            && name != ".."
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

/// The HTTP 500 a server-side apply gets for fields the CRD does not declare (OCM-FACTS §10).
fn check_declared(info: &KindInfo, api_version: &str, obj: &Value) -> Result<(), BackendError> {
    let key = gk::make(&info.group, &info.kind);
    let Some((_, paths)) = UNDECLARED.iter().find(|(k, _)| *k == key) else {
        return Ok(());
    };
    let found: Vec<String> = paths
        .iter()
        .filter(|p| util::has_path(obj, p))
        .map(|p| p.replace('/', "."))
        .collect();
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
        let lines: Vec<String> = found
            .iter()
            .map(|f| format!("  {f}: field not declared in schema"))
            .collect();
        format!("{head}: errors:\n{}", lines.join("\n"))
    };
    // ... as the real backend reports it: permanent, naming the fields (kubernetes#122480).
    let list = found
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let (noun, verb) = if found.len() == 1 {
        ("field", "is")
    } else {
        ("fields", "are")
    };
    Err(BackendError::permanent(format!(
        "{noun} {list} {verb} not declared in the schema the cluster has for this kind (HTTP 500: {server})"
    ))
    .with_help(
        "the object sets a field the installed CRD does not define: remove it, or patch the chart \
         that renders it (charts-patches/); retrying cannot help",
    ))
}

/// Whether OCM's hub webhooks run on the cluster (the cluster-manager operator deployed them).
pub(crate) fn hub_webhooks(w: &World, cluster: &str) -> bool {
    w.get(
        cluster,
        gk::DEPLOYMENT,
        "open-cluster-management-hub",
        "cluster-manager-registration-webhook",
    )
    .is_some()
}

/// Whether a hub registration feature gate is on: listed with mode Enable, or on by default
/// (`DefaultClusterSet`) and not disabled (OCM-FACTS §2.1, §4.1).
pub(crate) fn hub_gate(w: &World, cluster: &str, gate: &str) -> bool {
    let Some(cm) = w.get(cluster, gk::CLUSTER_MANAGER, "", "cluster-manager") else {
        return false;
    };
    gate_on(
        cm.at("/spec/registrationConfiguration/featureGates"),
        gate,
        gate == "DefaultClusterSet",
    )
}

/// Feature gate lookup in a `[{feature, mode}]` list.
pub(crate) fn gate_on(list: Option<&Value>, gate: &str, default: bool) -> bool {
    list.and_then(Value::as_array)
        .and_then(|l| l.iter().find(|g| g["feature"] == gate))
        .map_or(default, |g| g["mode"] == "Enable")
}

/// OCM's hub admission webhooks where they matter (OCM-FACTS §2.2, §9.10): the ManagedCluster default
/// cluster set label, and a binding's name equal to its set.
pub(crate) fn admit(
    w: &World,
    cluster: &str,
    key: &str,
    obj: &mut Value,
) -> Result<(), BackendError> {
    if !hub_webhooks(w, cluster) {
        return Ok(());
    }
    if key == gk::MANAGED_CLUSTER
        && hub_gate(w, cluster, "DefaultClusterSet")
        && util::label(obj, crate::topology::CLUSTERSET_LABEL).is_none()
    {
        util::set_label(obj, crate::topology::CLUSTERSET_LABEL, "default");
    }
    if key == gk::SET_BINDING {
        let set = obj.at("/spec/clusterSet").and_then(Value::as_str);
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
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "deletionTimestamp",
        ] {
            m.remove(k);
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

/// Server-side apply (field manager `ocm-lab`, force, Strict validation): maps merge recursively into
/// the stored object, lists replace, `status` is never set by an apply. Returns the stored object.
///
/// Simplification: with one field manager, fields an earlier apply set and a later one omits are kept
/// (real SSA would remove them).
pub(crate) fn apply(w: &mut World, cluster: &str, obj: &Value) -> Result<Value, BackendError> {
    check_reachable(w, cluster)?;
    let r = ObjectRef::of(obj).ok_or_else(|| {
        BackendError::permanent("the object has no apiVersion, kind or metadata.name")
    })?;
    let info = resolve(w, cluster, &r.api_version, &r.kind)
        .ok_or_else(|| no_match(&r.api_version, &r.kind))?;
    validate_name(&info, &r.name)?;
    let key = gk::make(&info.group, &info.kind);
    let mut obj = obj.clone();
    let ns = if info.namespaced {
        let ns = r.namespace.clone().unwrap_or_else(|| "default".to_owned());
        if w.get(cluster, gk::NAMESPACE, "", &ns).is_none() {
            return Err(BackendError::permanent(format!(
                "not found (HTTP 404): namespaces \"{ns}\" not found"
            ))
            .with_help(format!("create namespace {ns} first")));
        }
        obj["metadata"]["namespace"] = json!(ns);
        ns
    } else {
        if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        String::new()
    };
    check_declared(&info, &r.api_version, &obj)?;
    normalize(&mut obj, &key);
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
    }
    let merged = match w.get(cluster, &key, &ns, &r.name) {
        Some(existing) => {
            let mut m = existing.clone();
            util::merge(&mut m, &obj);
            m
        }
        None => obj,
    };
    let mut merged = merged;
    admit(w, cluster, &key, &mut merged)?;
    w.put(cluster, merged);
    Ok(w.get(cluster, &key, &ns, &r.name)
        .cloned()
        .expect("just stored"))
}

/// JSON merge patch (RFC 7386) on the main resource: `status` in the patch is ignored, as for every
/// kind with a status subresource.
pub(crate) fn merge_patch(
    w: &mut World,
    cluster: &str,
    r: &ObjectRef,
    patch: &Value,
) -> Result<(), BackendError> {
    check_reachable(w, cluster)?;
    let info = resolve(w, cluster, &r.api_version, &r.kind)
        .ok_or_else(|| no_match(&r.api_version, &r.kind))?;
    let key = gk::make(&info.group, &info.kind);
    let ns = if info.namespaced {
        r.namespace.as_deref().unwrap_or("default")
    } else {
        ""
    };
    let Some(existing) = w.get(cluster, &key, ns, &r.name) else {
        return Err(not_found(&info, &r.name));
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

pub(crate) fn delete(w: &mut World, cluster: &str, r: &ObjectRef) -> Result<bool, BackendError> {
    check_reachable(w, cluster)?;
    let Some(info) = resolve(w, cluster, &r.api_version, &r.kind) else {
        return Ok(false);
    };
    let ns = if info.namespaced {
        r.namespace.as_deref().unwrap_or("default")
    } else {
        ""
    };
    Ok(
        w.remove(cluster, &gk::make(&info.group, &info.kind), ns, &r.name)
            .is_some(),
    )
}

/// TokenRequest: the ServiceAccount must exist; the token is remembered so the simulated hub can tell
/// its own tokens from others (OCM-FACTS §2.1).
pub(crate) fn token_request(
    w: &mut World,
    cluster: &str,
    namespace: &str,
    sa: &str,
    seconds: i64,
) -> Result<String, BackendError> {
    check_reachable(w, cluster)?;
    if w.get(cluster, gk::SERVICE_ACCOUNT, namespace, sa).is_none() {
        return Err(BackendError::permanent(format!(
            "not found (HTTP 404): serviceaccounts \"{sa}\" not found"
        ))
        .with_help(format!(
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

/// CSR `/approval`: appends condition Approved (as `clusteradm accept` does, OCM-FACTS §2.3); the
/// signer then issues the certificate.
pub(crate) fn approve_csr(
    w: &mut World,
    cluster: &str,
    name: &str,
    reason: &str,
) -> Result<(), BackendError> {
    check_reachable(w, cluster)?;
    let Some(csr) = w.get(cluster, gk::CSR, "", name) else {
        return Err(BackendError::permanent(format!(
            "CertificateSigningRequest {name} does not exist"
        )));
    };
    if util::condition_is(csr, "Approved", "True") {
        return Ok(());
    }
    if util::condition_is(csr, "Denied", "True") {
        return Err(BackendError::permanent(format!(
            "CertificateSigningRequest {name} was denied; a denied CSR cannot be approved"
        ))
        .with_help("the agent creates a new CSR after a while; approve that one"));
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

    #[test]
    fn subdomains() {
        assert!(valid_subdomain("tier.lab.example.com"));
        assert!(!valid_subdomain("lab.example.com/region"));
        assert!(!valid_subdomain("-a"));
        assert!(!valid_subdomain("A"));
    }
}
