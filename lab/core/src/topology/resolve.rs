//! Semantic checks on a parsed topology, and its resolution into a [`Lab`].
//!
//! Every check records a located issue and carries on, so a user sees all problems of a file at once.
//! Limits come from OCM and the Kubernetes API (open-cluster-management-io/ocm v1.3.1
//! `pkg/registration/spoke/managedcluster/claim_reconcile.go`,
//! `pkg/registration/webhook/v1beta2/managedclustersetbinding_validating.go`; recorded from kube-apiserver
//! v1.36.2 and open-cluster-management-io/ocm 00f84c32) and are checked here, before anything runs, because on
//! a live lab they fail late or silently.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_saphyr::{Location, Spanned};

use super::catalog;
use super::host::Host;
use super::lab::*;
use super::model::{self, Check, Selector};
use crate::diag::{Collector, suggest};

/// ClusterProfile `status.properties[].value` and ManagedCluster claim values hold at most this many
/// characters; a longer value blocks every later claim update of the cluster (open-cluster-management-io/api
/// v1.3.0 `cluster/v1/types.go`: a claim value has at most 1024 characters).
pub const MAX_PROPERTY_VALUE: usize = 1024;
/// The registration agent syncs at most this many custom claims (`--max-custom-cluster-claims`,
/// open-cluster-management-io/ocm v1.3.1 `pkg/registration/spoke/managedcluster/claim_reconcile.go`).
pub const MAX_CUSTOM_CLAIMS: usize = 20;
/// Kind names node containers `<cluster>-control-plane`; that must stay a DNS label (63 characters).
pub const MAX_CLUSTER_NAME: usize = 63 - "-control-plane".len();
/// Claim names OCM reserves (api@v1.3.0 `ReservedClusterClaimNames`).
const RESERVED_CLAIMS: &[&str] = &[
    "id.k8s.io",
    "kubeversion.open-cluster-management.io",
    "platform.open-cluster-management.io",
    "product.open-cluster-management.io",
];
/// Sets the hub maintains itself with `DefaultClusterSet` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/hub/managedclusterset/`).
const HUB_MAINTAINED_SETS: &[&str] = &["default", "global"];

fn at<T>(s: &Spanned<T>) -> Option<&Location> {
    Some(&s.referenced)
}

pub(super) fn resolve(
    t: &model::Topology,
    c: &mut Collector<'_>,
    origin: &str,
    host: &Host,
) -> Option<Lab> {
    header(c, t);
    dns_label(c, &t.metadata.name, "metadata.name", 63);
    let spec = &t.spec;
    let versions = versions(c, &spec.versions);
    let timeouts = timeouts(c, &spec.timeouts);

    // Clusters.
    let hub = hub(c, &spec.hub, host);
    let spokes = spokes(c, spec, &hub, host);
    context_flag(c, spec);

    let mut managed = managed_clusters(&hub, &spokes);

    let cluster_sets = cluster_sets(c, &spec.cluster_sets, &mut managed);
    let bindings = bindings(c, spec, &cluster_sets);
    let namespaces: Vec<String> = bindings
        .iter()
        .map(|b| b.namespace.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let addons = addons(c, &spec.addons, &cluster_sets, &bindings);
    let service_accounts = service_accounts(c, &spec.service_accounts, &addons, &cluster_sets);
    let verify = verify(
        c,
        spec,
        &cluster_sets,
        &bindings,
        &addons,
        &service_accounts,
        &hub,
        &spokes,
        &managed,
    );

    Some(Lab {
        name: t.metadata.name.value.clone(),
        description: t.metadata.description.clone(),
        versions: versions?,
        hub,
        spokes,
        managed_clusters: managed,
        cluster_sets,
        bindings,
        namespaces,
        addons,
        service_accounts,
        verify,
        timeouts,
        registry: registry(c, &spec.registry, &t.metadata.name.value),
        bundle: spec.bundle.as_ref().and_then(|b| bundle(c, b, origin)),
        host: host.clone(),
    })
}

/// The file's `apiVersion` and `kind`.
fn header(c: &mut Collector<'_>, t: &model::Topology) {
    if t.api_version.value != model::API_VERSION {
        c.error(
            at(&t.api_version),
            "apiVersion",
            format!("unsupported apiVersion `{}`", t.api_version.value),
        )
        .help(format!("use `{}`", model::API_VERSION));
    }
    if t.kind.value != model::KIND {
        c.error(
            at(&t.kind),
            "kind",
            format!("unsupported kind `{}`", t.kind.value),
        )
        .help(format!("use `{}`", model::KIND));
    }
}

/// The spokes, each named unlike the hub and every other spoke.
fn spokes(c: &mut Collector<'_>, spec: &model::TopologySpec, hub: &Hub, host: &Host) -> Vec<Spoke> {
    let mut seen = BTreeMap::<String, &str>::new();
    seen.insert(hub.cluster.name.clone(), "the hub");
    if spec.spokes.value.is_empty() {
        c.error(
            at(&spec.spokes),
            "spec.spokes",
            "a lab needs at least one spoke",
        )
        .help("add a spoke, for example `- name: cluster1`; `ocm-lab topology show minimal` has a small lab");
    }
    let spokes: Vec<Spoke> = spec
        .spokes
        .value
        .iter()
        .enumerate()
        .map(|(i, s)| spoke(c, s, i, &spec.verify, host))
        .collect();
    for (i, s) in spec.spokes.value.iter().enumerate() {
        let field = format!("spec.spokes[{i}].name");
        if let Some(other) = seen.get(&s.name.value) {
            c.error(
                at(&s.name),
                field,
                format!(
                    "duplicate cluster name `{}`: already used by {other}",
                    s.name.value
                ),
            )
            .help("every cluster of a lab needs its own name");
        } else if s.name.value == LOCAL_CLUSTER && hub.self_join {
            c.error(
                at(&s.name),
                field,
                format!("`{LOCAL_CLUSTER}` is the name of the self-joined hub"),
            )
            .help("rename the spoke, or set `spec.hub.selfJoin: false`");
        } else {
            seen.insert(s.name.value.clone(), "another spoke");
        }
    }
    spokes
}

/// The ManagedClusters: the spokes, plus the hub itself as local-cluster when it joins itself.
fn managed_clusters(hub: &Hub, spokes: &[Spoke]) -> Vec<ManagedCluster> {
    let mut managed: Vec<ManagedCluster> = spokes
        .iter()
        .map(|s| ManagedCluster {
            name: s.cluster.name.clone(),
            cluster: s.cluster.name.clone(),
            labels: s.labels.clone(),
            exclusive_set: None,
        })
        .collect();
    if hub.self_join {
        managed.push(ManagedCluster {
            name: LOCAL_CLUSTER.to_owned(),
            cluster: hub.cluster.name.clone(),
            // local-up.sh labels it so (open-cluster-management-io/ocm v1.3.1
            // `solutions/setup-dev-environment/local-up.sh`).
            labels: BTreeMap::from([(LOCAL_CLUSTER.to_owned(), "true".to_owned())]),
            exclusive_set: None,
        });
    }
    managed
}

/// `spec.bundle`: a path to a bundle file, relative to the topology file's folder (to the current folder
/// for an embedded topology); it must name a file that exists.
fn bundle(c: &mut Collector<'_>, b: &Spanned<String>, origin: &str) -> Option<std::path::PathBuf> {
    let given = std::path::Path::new(&b.value);
    if b.value.trim().is_empty() {
        c.error(at(b), "spec.bundle", "the bundle path is empty")
            .help("name the file `ocm-lab bundle save --out FILE` wrote, or remove `spec.bundle`");
        return None;
    }
    let path = if given.is_absolute() || origin.starts_with("embedded:") {
        given.to_path_buf()
    } else {
        std::path::Path::new(origin)
            .parent()
            .unwrap_or(std::path::Path::new(""))
            .join(given)
    };
    let path = std::path::absolute(&path).unwrap_or(path);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Some(path),
        Ok(_) => {
            c.error(
                at(b),
                "spec.bundle",
                format!("{} is not a file", path.display()),
            )
            .help("name the file `ocm-lab bundle save --out FILE` wrote");
            None
        }
        Err(e) => {
            c.error(
                at(b),
                "spec.bundle",
                format!("cannot read the bundle {}: {e}", path.display()),
            )
            .help("make it with `ocm-lab bundle save -t <topology> --out FILE`; a relative path is read from the topology file's folder");
            None
        }
    }
}

/// `spec.registry`: each mirror host a registry host (`quay.io`, `localhost:5001`) and each URL an
/// `http://` or `https://` URL with a host, so a typo fails here, not as a pull error in a node.
fn registry(c: &mut Collector<'_>, r: &model::Registry, lab: &str) -> Registry {
    let mut mirrors = Vec::new();
    for (host, url) in &r.mirrors {
        let field = format!("spec.registry.mirrors.{}", host.value);
        let mut ok = true;
        if let Err(why) = registry_host(&host.value) {
            c.error(at(host), field.clone(), format!("`{}` is not a registry host: {why}", host.value))
                .help("use the registry's host name as images name it, with a port if it has one: `quay.io`, `docker.io`, `registry.k8s.io`, `localhost:5001`");
            ok = false;
        }
        if let Err(why) = mirror_url(&url.value) {
            c.error(at(url), field, format!("`{}` is not a mirror URL: {why}", url.value))
                .help("write the mirror as a URL with its scheme, host and port: `http://mirror.classroom:5000` or `https://mirror.example.com`");
            ok = false;
        }
        if ok {
            mirrors.push(Mirror {
                host: host.value.clone(),
                url: url.value.trim_end_matches('/').to_owned(),
            });
        }
    }
    Registry {
        mirrors,
        local: r.local.then(|| LocalRegistry {
            container: format!("{lab}-registry"),
            image: LOCAL_REGISTRY_IMAGE.to_owned(),
            host_port: LOCAL_REGISTRY_PORT,
        }),
    }
}

/// A registry host as image references name it: a DNS name or IP, with an optional port.
fn registry_host(h: &str) -> Result<(), String> {
    if h.contains("://") {
        return Err(
            "it has a scheme; the key is the registry's host, the URL goes in the value".into(),
        );
    }
    if h.contains('/') {
        return Err("it has a path".into());
    }
    let (name, port) = match h.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (h, None),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '.' || ch == '-')
        || name.starts_with(['.', '-'])
        || name.ends_with(['.', '-'])
    {
        return Err("a host has letters, digits, dots and dashes".into());
    }
    if let Some(p) = port
        && !p.parse::<u16>().is_ok_and(|p| p != 0)
    {
        return Err(format!("`{p}` is not a port"));
    }
    Ok(())
}

/// A mirror URL: `http://` or `https://`, a host, an optional port and path, nothing else.
fn mirror_url(u: &str) -> Result<(), String> {
    let Some((scheme, rest)) = u.split_once("://") else {
        return Err("it has no scheme (`http://` or `https://`)".into());
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!("the scheme `{scheme}` is neither http nor https"));
    }
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return Err("credentials do not belong in the URL".into());
    }
    if u.contains(char::is_whitespace) || u.contains(['?', '#', '"']) {
        return Err("it has spaces, a query, a fragment or quotes".into());
    }
    registry_host(authority).map_err(|why| format!("its host `{authority}`: {why}"))
}

fn versions(c: &mut Collector<'_>, v: &model::Versions) -> Option<LabVersions> {
    let image = match &v.kind_node_image {
        Some(i) if i.value.trim().is_empty() => {
            c.error(
                at(i),
                "spec.versions.kindNodeImage",
                "the node image is empty",
            );
            String::new()
        }
        Some(i) => {
            if !catalog::KNOWN_KIND_NODE_IMAGES.contains(&i.value.as_str())
                && !i.value.contains("@sha256:")
            {
                c.warn(
                    at(i),
                    "spec.versions.kindNodeImage",
                    format!("`{}` is not pinned by digest", i.value),
                )
                .help("kind recommends images pinned with @sha256 from its release notes");
            }
            i.value.clone()
        }
        None => catalog::DEFAULT_KIND_NODE_IMAGE.to_owned(),
    };
    let ocm_version = v
        .ocm
        .as_ref()
        .map_or(catalog::DEFAULT_OCM, |s| s.value.as_str());
    match catalog::ocm(ocm_version) {
        Ok(ocm) => Some(LabVersions {
            kind_node_image: image,
            ocm: ocm.clone(),
        }),
        Err(known) => {
            unknown_version(
                c,
                v.ocm.as_ref(),
                "spec.versions.ocm",
                "OCM",
                ocm_version,
                &known,
            );
            None
        }
    }
}

fn unknown_version(
    c: &mut Collector<'_>,
    s: Option<&Spanned<String>>,
    field: &str,
    what: &str,
    version: &str,
    known: &[&str],
) {
    c.error(s.map(|s| &s.referenced), field, format!("{what} version `{version}` is not in the version catalog"))
        .help(format!(
            "known versions: {}; the catalog maps each version to the Helm values it needs, so an unknown one would be silently misconfigured",
            known.join(", ")
        ));
}

fn hub(c: &mut Collector<'_>, h: &model::Hub, host: &Host) -> Hub {
    cluster_name(c, &h.name, "spec.hub.name");
    let mut gates = vec!["DefaultClusterSet".to_owned()];
    for (i, g) in h.feature_gates.iter().enumerate() {
        gate(
            c,
            g,
            &format!("spec.hub.featureGates[{i}]"),
            catalog::HUB_REGISTRATION_GATES,
            "hub registration",
        );
        if !gates.contains(&g.value) {
            gates.push(g.value.clone());
        }
    }
    if !gates.iter().any(|g| g == "ClusterProfile") {
        c.warn(None, "spec.hub.featureGates", "the hub gate `ClusterProfile` is off: OCM will create no ClusterProfiles")
            .help("add `ClusterProfile` to spec.hub.featureGates; without it the properties and accessProviders checks fail");
    }
    Hub {
        cluster: cluster(
            c,
            &h.name.value,
            Role::Hub,
            h.existing.as_ref(),
            "spec.hub.existing",
            host,
        ),
        feature_gates: gates,
        self_join: h.self_join,
    }
}

fn cluster(
    c: &mut Collector<'_>,
    name: &str,
    role: Role,
    existing: Option<&model::Existing>,
    field: &str,
    host: &Host,
) -> Cluster {
    match existing {
        None => Cluster {
            name: name.to_owned(),
            role,
            provider: Provider::Kind,
            context: format!("kind-{name}"),
            internal_endpoint: Some(format!("https://{name}-control-plane:6443")),
            adopt: false,
        },
        Some(e) => {
            for (s, f) in [
                (e.kubeconfig.as_ref(), "kubeconfig"),
                (e.context.as_ref(), "context"),
                (e.join_endpoint.as_ref(), "joinEndpoint"),
            ] {
                if let Some(s) = s.filter(|s| s.value.trim().is_empty()) {
                    c.error(at(s), format!("{field}.{f}"), format!("`{f}` is empty"));
                }
            }
            if let Some(j) = e
                .join_endpoint
                .as_ref()
                .filter(|j| !j.value.trim().is_empty())
                && let Err(why) = https_url(&j.value)
            {
                c.error(
                    at(j),
                    format!("{field}.joinEndpoint"),
                    format!("`{}` is not an https URL: {why}", j.value),
                )
                .help("the API server URL the other clusters' agents reach, e.g. `https://hub.example.com:6443`");
            }
            let context = match (&e.context, &host.context) {
                (Some(ctx), _) => ctx.value.clone(),
                (None, Some(flag)) => flag.clone(),
                (None, None) => {
                    c.error(
                        None,
                        format!("{field}.context"),
                        format!("cluster `{name}` names no kubeconfig context"),
                    )
                    .help("set `context:` in the topology, or pass the global `--context <name>` flag (the kubeconfig's current-context is never used)");
                    String::new()
                }
            };
            Cluster {
                name: name.to_owned(),
                role,
                provider: Provider::Existing {
                    kubeconfig: match &e.kubeconfig {
                        Some(k) => host.expand_home(&k.value),
                        None => host.default_kubeconfig(),
                    },
                    context: context.clone(),
                },
                context,
                internal_endpoint: e
                    .join_endpoint
                    .as_ref()
                    .map(|j| j.value.trim_end_matches('/').to_owned()),
                adopt: e.adopt,
            }
        }
    }
}

/// `--context` names the context of exactly one existing cluster: the one that leaves `context` out. A
/// second such cluster would get the same context, and a flag no cluster takes would be silently ignored.
fn context_flag(c: &mut Collector<'_>, spec: &model::TopologySpec) {
    let mut without: Vec<String> = Vec::new();
    if spec
        .hub
        .existing
        .as_ref()
        .is_some_and(|e| e.context.is_none())
    {
        without.push("spec.hub.existing".to_owned());
    }
    for (i, s) in spec.spokes.value.iter().enumerate() {
        if s.existing.as_ref().is_some_and(|e| e.context.is_none()) {
            without.push(format!("spec.spokes[{i}].existing"));
        }
    }
    if without.len() > 1 {
        c.error(
            None,
            format!("{}.context", without[1]),
            format!(
                "{} existing clusters leave `context` out ({}); at most one may, and it takes `--context`",
                without.len(),
                without.join(", ")
            ),
        )
        .help("name the context of each existing cluster in the topology");
    }
}

/// The global `--context` when no cluster of the topology takes it (none is `existing:` without a
/// `context:`): a problem of the command line, not of the file, so it is not one of the file's issues.
pub(crate) fn unused_context_flag(spec: &model::TopologySpec, host: &Host) -> Option<String> {
    let takes_it = |e: Option<&model::Existing>| e.is_some_and(|e| e.context.is_none());
    let any = takes_it(spec.hub.existing.as_ref())
        || spec
            .spokes
            .value
            .iter()
            .any(|s| takes_it(s.existing.as_ref()));
    if any { None } else { host.context.clone() }
}

/// Why `url` is not an absolute https URL with a host.
fn https_url(url: &str) -> Result<(), String> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err("it must start with `https://`".to_owned());
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !path.is_empty() {
        return Err("an API server URL has no path".to_owned());
    }
    if authority.contains('@')
        || authority
            .chars()
            .any(|ch| ch.is_whitespace() || "?#".contains(ch))
    {
        return Err("it holds characters no host has".to_owned());
    }
    // An IPv6 address is bracketed (`https://[::1]:6443`, RFC 3986 §3.2.2); its colons are not the port's.
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((_, "")) => (authority, None),
            Some((_, after)) => match after.strip_prefix(':') {
                Some(p) => (&authority[..authority.len() - after.len()], Some(p)),
                None => return Err("it holds characters no host has".to_owned()),
            },
            None => return Err("an IPv6 address needs its closing `]`".to_owned()),
        },
        None => match authority.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err("an IPv6 address goes in brackets: `https://[::1]:6443`".to_owned());
            }
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() || host == "[]" {
        return Err("it names no host".to_owned());
    }
    if let Some(p) = port
        && p.parse::<u16>().map_or(true, |p| p == 0)
    {
        return Err(format!("`{p}` is not a port"));
    }
    Ok(())
}

fn gate(c: &mut Collector<'_>, g: &Spanned<String>, field: &str, known: &[&str], what: &str) {
    if !known.contains(&g.value.as_str()) {
        let issue = c.warn(
            at(g),
            field,
            format!("`{}` is not a {what} feature gate ocm-lab knows", g.value),
        );
        match suggest(&g.value, known.iter().copied()) {
            Some(s) => issue.help(format!("did you mean `{s}`?")),
            None => issue.help(format!("known gates: {}", known.join(", "))),
        };
    }
}

fn spoke(
    c: &mut Collector<'_>,
    s: &model::Spoke,
    i: usize,
    verify: &model::Verify,
    host: &Host,
) -> Spoke {
    let base = format!("spec.spokes[{i}]");
    cluster_name(c, &s.name, &format!("{base}.name"));
    let labels = spoke_labels(c, s, &base);
    let properties = spoke_properties(c, s, &base, verify);
    let feature_gates = spoke_gates(c, s, &base);
    Spoke {
        cluster: cluster(
            c,
            &s.name.value,
            Role::Spoke,
            s.existing.as_ref(),
            &format!("{base}.existing"),
            host,
        ),
        labels,
        properties,
        feature_gates,
    }
}

/// A spoke's labels, each a valid label, none the lab's own.
fn spoke_labels(c: &mut Collector<'_>, s: &model::Spoke, base: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    for (k, v) in &s.labels {
        let field = format!("{base}.labels.{}", k.value);
        if k.value == CLUSTERSET_LABEL {
            c.error(
                at(k),
                field,
                format!("`{CLUSTERSET_LABEL}` is managed by the lab"),
            )
            .help("list the spoke in an exclusive set's `clusters` instead");
            continue;
        }
        if let Err(why) = label_key(&k.value) {
            c.error(
                at(k),
                field.clone(),
                format!("invalid label key `{}`: {why}", k.value),
            );
        }
        if let Err(why) = label_value(&v.value) {
            c.error(
                at(v),
                field,
                format!("invalid label value `{}`: {why}", v.value),
            );
        }
        labels.insert(k.value.clone(), v.value.clone());
    }
    labels
}

/// A spoke's properties: valid ClusterProperty names and values, no more than OCM syncs.
fn spoke_properties(
    c: &mut Collector<'_>,
    s: &model::Spoke,
    base: &str,
    verify: &model::Verify,
) -> Vec<Property> {
    let mut properties = Vec::new();
    for (k, v) in &s.properties {
        let field = format!("{base}.properties.{}", k.value);
        if k.value.contains('/') {
            c.error(at(k), field.clone(), format!("property name `{}` contains `/`", k.value))
                .help("ClusterProperty names are DNS subdomains: use a dotted name such as `tier.lab.example.com`");
        } else if let Err(why) = dns_subdomain(&k.value) {
            c.error(
                at(k),
                field.clone(),
                format!("property name `{}` is not a DNS subdomain: {why}", k.value),
            )
            .help("ClusterProperty names are DNS subdomains: lowercase dot-separated parts such as `tier.lab.example.com`");
        } else if RESERVED_CLAIMS.contains(&k.value.as_str()) {
            c.error(
                at(k),
                field.clone(),
                format!("`{}` is a claim name OCM reserves", k.value),
            )
            .help("choose another name; reserved claims are set by OCM itself");
        }
        let len = v.value.chars().count();
        if len == 0 {
            c.error(at(v), field, "property value is empty")
                .help("ClusterProfile properties need a value of 1 to 1024 characters");
        } else if len > MAX_PROPERTY_VALUE {
            c.error(
                at(v),
                field,
                format!(
                    "property value is {len} characters long; at most {MAX_PROPERTY_VALUE} fit"
                ),
            )
            .help(
                "the hub rejects longer claims and then stops syncing every property of this spoke",
            );
        }
        properties.push(Property {
            name: k.value.clone(),
            value: v.value.clone(),
        });
    }
    // Verification adds one probe property, which must not push a real one out (open-cluster-management-io/ocm
    // v1.3.1 `pkg/registration/spoke/managedcluster/claim_reconcile.go` keeps the first 20 by name).
    let probe = verify
        .checks
        .as_ref()
        .is_none_or(|cs| cs.iter().any(|c| c.value == Check::Properties));
    let limit = if probe {
        MAX_CUSTOM_CLAIMS - 1
    } else {
        MAX_CUSTOM_CLAIMS
    };
    if properties.len() > limit {
        let help = if probe {
            format!(
                "OCM syncs at most {MAX_CUSTOM_CLAIMS} custom properties and verification adds a probe; keep at most {limit}"
            )
        } else {
            format!(
                "OCM syncs at most {MAX_CUSTOM_CLAIMS} custom properties and silently drops the rest (by name)"
            )
        };
        c.error(
            s.properties.get(limit).map(|(k, _)| &k.referenced),
            format!("{base}.properties"),
            format!(
                "{} properties on spoke `{}`",
                properties.len(),
                s.name.value
            ),
        )
        .help(help);
    }
    properties
}

/// A spoke's registration feature gates (default: `ClusterProperty`).
fn spoke_gates(c: &mut Collector<'_>, s: &model::Spoke, base: &str) -> Vec<String> {
    match &s.feature_gates {
        None => vec!["ClusterProperty".to_owned()],
        Some(gs) => {
            for (j, g) in gs.iter().enumerate() {
                gate(
                    c,
                    g,
                    &format!("{base}.featureGates[{j}]"),
                    catalog::SPOKE_REGISTRATION_GATES,
                    "spoke registration",
                );
            }
            if !gs.iter().any(|g| g.value == "ClusterProperty") {
                c.warn(None, format!("{base}.featureGates"), format!("spoke `{}` has the `ClusterProperty` gate off: its properties will not reach the hub", s.name.value));
            }
            gs.iter().map(|g| g.value.clone()).collect()
        }
    }
}

fn cluster_sets(
    c: &mut Collector<'_>,
    sets: &[model::ClusterSet],
    managed: &mut [ManagedCluster],
) -> Vec<ClusterSet> {
    let names: Vec<String> = managed.iter().map(|m| m.name.clone()).collect();
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, s) in sets.iter().enumerate() {
        let base = format!("spec.clusterSets[{i}]");
        dns_label(c, &s.name, &format!("{base}.name"), 63);
        if HUB_MAINTAINED_SETS.contains(&s.name.value.as_str()) {
            c.error(
                at(&s.name),
                format!("{base}.name"),
                format!("`{}` is maintained by the hub itself", s.name.value),
            )
            .help("bind it with `spec.bindings` instead of declaring it");
        }
        if !seen.insert(s.name.value.clone()) {
            c.error(
                at(&s.name),
                format!("{base}.name"),
                format!("duplicate cluster set `{}`", s.name.value),
            );
        }
        let selector = s
            .selector
            .as_ref()
            .map_or(Selector::Exclusive, |s| s.value.clone());
        let mut members = Vec::new();
        match &selector {
            Selector::Exclusive => {
                members = exclusive_members(c, s, &base, managed, &names);
            }
            Selector::LabelSelector(_) => {
                if let Some(first) = s.clusters.first() {
                    c.error(
                        at(first),
                        format!("{base}.clusters"),
                        "a labelSelector set takes its members from cluster labels",
                    )
                    .help("remove `clusters`, or use `selector: exclusive`");
                }
            }
        }
        let bind_to = bind_to(c, s, &base);
        out.push(ClusterSet {
            name: s.name.value.clone(),
            selector,
            members,
            bind_to,
        });
    }
    // Label selector membership is computed once all exclusive labels are known.
    for set in &mut out {
        if let Selector::LabelSelector(sel) = &set.selector {
            set.members = managed
                .iter()
                .filter(|m| {
                    sel.match_labels
                        .iter()
                        .all(|(k, v)| m.labels.get(k) == Some(v))
                })
                .map(|m| m.name.clone())
                .collect();
        }
    }
    out
}

/// The members an exclusive set lists, each a spoke of the lab in no other exclusive set: labelled
/// with the set (in `managed`).
fn exclusive_members(
    c: &mut Collector<'_>,
    s: &model::ClusterSet,
    base: &str,
    managed: &mut [ManagedCluster],
    names: &[String],
) -> Vec<String> {
    let mut members = Vec::new();
    if s.clusters.is_empty() {
        c.error(
            at(&s.name),
            format!("{base}.clusters"),
            format!("exclusive set `{}` has no clusters", s.name.value),
        )
        .help("list its members in `clusters`");
    }
    for (j, m) in s.clusters.iter().enumerate() {
        let field = format!("{base}.clusters[{j}]");
        let Some(mc) = managed.iter_mut().find(|mc| mc.name == m.value) else {
            let issue = c.error(
                at(m),
                field,
                format!("`{}` is not a spoke of this lab", m.value),
            );
            if let Some(s) = suggest(&m.value, names.iter().map(String::as_str)) {
                issue.help(format!("did you mean `{s}`?"));
            } else {
                issue.help(format!("spokes: {}", names.join(", ")));
            }
            continue;
        };
        if members.contains(&m.value) {
            c.error(at(m), field, format!("`{}` is listed twice", m.value));
            continue;
        }
        if let Some(other) = &mc.exclusive_set {
            c.error(
                at(m),
                field,
                format!("`{}` is already in exclusive set `{other}`", m.value),
            )
            .help("a cluster carries one clusterset label, so it belongs to one exclusive set");
            continue;
        }
        mc.exclusive_set = Some(s.name.value.clone());
        mc.labels
            .insert(CLUSTERSET_LABEL.to_owned(), s.name.value.clone());
        members.push(m.value.clone());
    }
    members
}

/// The namespaces a set is bound to, each once.
fn bind_to(c: &mut Collector<'_>, s: &model::ClusterSet, base: &str) -> Vec<String> {
    let mut bind_to = Vec::new();
    for (j, ns) in s.bind_to.iter().enumerate() {
        let field = format!("{base}.bindTo[{j}]");
        dns_label(c, ns, &field, 63);
        if bind_to.contains(&ns.value) {
            c.warn(
                at(ns),
                field,
                format!("namespace `{}` is listed twice", ns.value),
            );
        } else {
            bind_to.push(ns.value.clone());
        }
    }
    bind_to
}

fn bindings(
    c: &mut Collector<'_>,
    spec: &model::TopologySpec,
    sets: &[ClusterSet],
) -> Vec<Binding> {
    let mut out: BTreeSet<Binding> = sets
        .iter()
        .flat_map(|s| {
            s.bind_to.iter().map(|ns| Binding {
                cluster_set: s.name.clone(),
                namespace: ns.clone(),
            })
        })
        .collect();
    for (i, b) in spec.bindings.iter().enumerate() {
        let base = format!("spec.bindings[{i}]");
        if b.name.value != b.cluster_set.value {
            c.error(at(&b.name), format!("{base}.name"), format!("binding `{}` is for set `{}`: a ManagedClusterSetBinding must be named after its set", b.name.value, b.cluster_set.value))
                .help(format!("rename it to `{}`; the hub webhook rejects any other name", b.cluster_set.value));
        }
        let known = HUB_MAINTAINED_SETS
            .iter()
            .copied()
            .chain(sets.iter().map(|s| s.name.as_str()));
        if !HUB_MAINTAINED_SETS.contains(&b.cluster_set.value.as_str())
            && !sets.iter().any(|s| s.name == b.cluster_set.value)
        {
            let issue = c.error(
                at(&b.cluster_set),
                format!("{base}.clusterSet"),
                format!("no cluster set named `{}`", b.cluster_set.value),
            );
            if let Some(s) = suggest(&b.cluster_set.value, known) {
                issue.help(format!("did you mean `{s}`?"));
            }
        }
        dns_label(c, &b.namespace, &format!("{base}.namespace"), 63);
        out.insert(Binding {
            cluster_set: b.cluster_set.value.clone(),
            namespace: b.namespace.value.clone(),
        });
    }
    out.into_iter().collect()
}

fn addon_set(
    c: &mut Collector<'_>,
    set: &Spanned<String>,
    field: &str,
    sets: &[ClusterSet],
) -> Vec<String> {
    match sets.iter().find(|s| s.name == set.value) {
        Some(s) => s.members.clone(),
        None => {
            let issue = c.error(
                at(set),
                field,
                format!("no cluster set named `{}`", set.value),
            );
            if let Some(s) = suggest(&set.value, sets.iter().map(|s| s.name.as_str())) {
                issue.help(format!("did you mean `{s}`?"));
            }
            Vec::new()
        }
    }
}

fn addons(
    c: &mut Collector<'_>,
    a: &model::Addons,
    sets: &[ClusterSet],
    bindings: &[Binding],
) -> Addons {
    Addons {
        cluster_proxy: a
            .cluster_proxy
            .as_ref()
            .filter(|cp| cp.enabled)
            .and_then(|cp| cluster_proxy(c, cp, sets, bindings)),
        managed_serviceaccount: a
            .managed_serviceaccount
            .as_ref()
            .filter(|m| m.enabled)
            .and_then(|m| managed_serviceaccount(c, m, sets)),
    }
}

/// The enabled cluster-proxy addon: its release, namespace, set (bound where its Placement lives).
fn cluster_proxy(
    c: &mut Collector<'_>,
    cp: &model::ClusterProxy,
    sets: &[ClusterSet],
    bindings: &[Binding],
) -> Option<ClusterProxy> {
    let version = cp
        .version
        .as_ref()
        .map_or(catalog::DEFAULT_CLUSTER_PROXY, |v| v.value.as_str());
    // An unknown version is one error. The default release stands in for it so that the checks that
    // depend on the addon (verify checks, service accounts) do not report its absence as more errors;
    // the lab is never returned with an error recorded.
    let release = Some(catalog::cluster_proxy(version).unwrap_or_else(|known| {
        unknown_version(
            c,
            cp.version.as_ref(),
            "spec.addons.cluster-proxy.version",
            "cluster-proxy chart",
            version,
            &known,
        );
        catalog::cluster_proxy(catalog::DEFAULT_CLUSTER_PROXY)
            .expect("the default is in the catalog")
    }));
    let namespace = addon_namespace(
        c,
        cp.namespace.as_ref(),
        "spec.addons.cluster-proxy.namespace",
    );
    let clusters = addon_set(
        c,
        &cp.cluster_set,
        "spec.addons.cluster-proxy.clusterSet",
        sets,
    );
    // The addon's Placement lives in its namespace and can only select sets bound there.
    if sets.iter().any(|s| s.name == cp.cluster_set.value)
        && !bindings
            .iter()
            .any(|b| b.cluster_set == cp.cluster_set.value && b.namespace == namespace)
    {
        c.error(
            at(&cp.cluster_set),
            "spec.addons.cluster-proxy.clusterSet",
            format!(
                "set `{}` is not bound in `{namespace}`, where the cluster-proxy Placement lives",
                cp.cluster_set.value
            ),
        )
        .help(format!(
            "add `{namespace}` to `bindTo` of set `{}`",
            cp.cluster_set.value
        ));
    }
    if cp.access_provider && !cp.user_server {
        c.warn(None, "spec.addons.cluster-proxy.userServer", "accessProvider is on but the user server is off: the provider's URL will lead nowhere")
            .help("set `userServer: true` (the user server needs enableServiceProxy and userServer.enabled)");
    }
    release.map(|release| ClusterProxy {
        release: release.clone(),
        placement: format!("cluster-proxy-{}", cp.cluster_set.value),
        namespace,
        cluster_set: cp.cluster_set.value.clone(),
        clusters,
        access_provider: cp.access_provider,
        user_server: cp.user_server,
    })
}

/// The enabled managed-serviceaccount addon: its release, namespace and set.
fn managed_serviceaccount(
    c: &mut Collector<'_>,
    m: &model::ManagedServiceaccount,
    sets: &[ClusterSet],
) -> Option<ManagedServiceaccount> {
    let version = m
        .version
        .as_ref()
        .map_or(catalog::DEFAULT_MSA, |v| v.value.as_str());
    // As for cluster-proxy: one error, and the default release stands in for the later checks.
    let release = Some(catalog::msa(version).unwrap_or_else(|known| {
        unknown_version(
            c,
            m.version.as_ref(),
            "spec.addons.managed-serviceaccount.version",
            "managed-serviceaccount chart",
            version,
            &known,
        );
        catalog::msa(catalog::DEFAULT_MSA).expect("the default is in the catalog")
    }));
    let namespace = addon_namespace(
        c,
        m.namespace.as_ref(),
        "spec.addons.managed-serviceaccount.namespace",
    );
    let clusters = addon_set(
        c,
        &m.cluster_set,
        "spec.addons.managed-serviceaccount.clusterSet",
        sets,
    );
    release.map(|release| ManagedServiceaccount {
        release: release.clone(),
        namespace,
        cluster_set: m.cluster_set.value.clone(),
        clusters,
        credential_sync: m.credential_sync,
    })
}

fn addon_namespace(c: &mut Collector<'_>, ns: Option<&Spanned<String>>, field: &str) -> String {
    match ns {
        Some(ns) => {
            dns_label(c, ns, field, 63);
            ns.value.clone()
        }
        None => ADDON_NAMESPACE.to_owned(),
    }
}

fn service_accounts(
    c: &mut Collector<'_>,
    accounts: &[model::ServiceAccount],
    addons: &Addons,
    sets: &[ClusterSet],
) -> Vec<ServiceAccount> {
    let mut out: Vec<ServiceAccount> = Vec::new();
    for (i, sa) in accounts.iter().enumerate() {
        let base = format!("spec.serviceAccounts[{i}]");
        dns_label(c, &sa.name, &format!("{base}.name"), 63);
        let Some(msa) = &addons.managed_serviceaccount else {
            c.error(
                at(&sa.name),
                base.clone(),
                "ManagedServiceAccounts need the managed-serviceaccount addon",
            )
            .help("enable `spec.addons.managed-serviceaccount`");
            continue;
        };
        if sa.sync_to_cluster_profile && !msa.credential_sync {
            c.warn(at(&sa.name), format!("{base}.syncToClusterProfile"), "credential sync is off in the managed-serviceaccount addon: nothing will copy this token")
                .help("set `credentialSync: true` on the addon");
        }
        let role = sa
            .cluster_role
            .as_ref()
            .map_or("view", |r| r.value.as_str());
        if role.trim().is_empty() {
            c.error(
                sa.cluster_role.as_ref().map(|r| &r.referenced),
                format!("{base}.clusterRole"),
                "the cluster role is empty",
            );
        }
        let clusters: Vec<(String, Option<&Location>)> = match &sa.clusters {
            None => msa.clusters.iter().map(|m| (m.clone(), None)).collect(),
            Some(cs) => cs
                .iter()
                .map(|m| (m.value.clone(), Some(&m.referenced)))
                .collect(),
        };
        for (j, (cluster, loc)) in clusters.into_iter().enumerate() {
            let field = format!("{base}.clusters[{j}]");
            // An addon placed on a set that does not exist is one error already (at its `clusterSet`);
            // its clusters are unknown, so membership is not judged.
            let set_known = sets.iter().any(|s| s.name == msa.cluster_set);
            if set_known && !msa.clusters.contains(&cluster) {
                c.error(loc, field, format!("`{cluster}` does not get the managed-serviceaccount addon (not in set `{}`)", msa.cluster_set))
                    .help(format!("clusters with the addon: {}", msa.clusters.join(", ")));
                continue;
            }
            if out
                .iter()
                .any(|o| o.name == sa.name.value && o.cluster == cluster)
            {
                c.error(
                    loc.or(at(&sa.name)),
                    field,
                    format!(
                        "ManagedServiceAccount `{}` is declared twice for `{cluster}`",
                        sa.name.value
                    ),
                );
                continue;
            }
            out.push(ServiceAccount {
                name: sa.name.value.clone(),
                cluster,
                sync_to_cluster_profile: sa.sync_to_cluster_profile,
                cluster_role: role.to_owned(),
            });
        }
    }
    out
}

#[expect(
    clippy::too_many_arguments,
    reason = "verification depends on most of the lab"
)]
fn verify(
    c: &mut Collector<'_>,
    spec: &model::TopologySpec,
    sets: &[ClusterSet],
    bindings: &[Binding],
    addons: &Addons,
    accounts: &[ServiceAccount],
    hub: &Hub,
    spokes: &[Spoke],
    managed: &[ManagedCluster],
) -> Verify {
    let v = &spec.verify;
    let namespaces = verify_namespaces(c, v, sets, bindings);
    let proxy = addons.cluster_proxy.as_ref();
    let synced = accounts.iter().any(|a| a.sync_to_cluster_profile);
    let consumer_image = v.consumer_image.as_ref().map(|i| i.value.clone());
    let cred_sync = addons
        .managed_serviceaccount
        .as_ref()
        .is_some_and(|m| m.credential_sync);
    let possible = |check: Check| -> Result<(), &'static str> {
        match check {
            Check::Properties | Check::Conditions => Ok(()),
            Check::AccessProviders => match proxy {
                Some(p) if p.access_provider => Ok(()),
                _ => Err("needs the cluster-proxy addon with `accessProvider: true`"),
            },
            Check::Reachable => match proxy {
                Some(p) if p.access_provider && p.user_server && synced => Ok(()),
                _ => Err(
                    "needs cluster-proxy with `accessProvider` and `userServer`, and a ManagedServiceAccount synced to ClusterProfiles for its token",
                ),
            },
            Check::Credentials => match synced {
                true => Ok(()),
                false => Err("needs a ManagedServiceAccount with `syncToClusterProfile: true`"),
            },
            Check::Consumer => match proxy {
                _ if consumer_image.is_none() => Err(
                    "needs `spec.verify.consumerImage`: an image of examples/consumer already in the hub's nodes",
                ),
                Some(p) if p.access_provider && p.user_server && synced && cred_sync => Ok(()),
                _ => Err(
                    "needs cluster-proxy with `accessProvider` and `userServer`, managed-serviceaccount with `credentialSync`, and a ManagedServiceAccount synced to ClusterProfiles",
                ),
            },
        }
    };
    let checks: Vec<Check> = match &v.checks {
        None => Check::ALL
            .into_iter()
            .filter(|c| possible(*c).is_ok())
            .collect(),
        Some(cs) => {
            for (i, ch) in cs.iter().enumerate() {
                if let Err(why) = possible(ch.value) {
                    c.error(
                        at(ch),
                        format!("spec.verify.checks[{i}]"),
                        format!("check `{}` cannot run in this lab: it {why}", ch.value),
                    );
                }
            }
            cs.iter().map(|c| c.value).collect()
        }
    };
    if checks.contains(&Check::Properties) && hub.has_gate("ClusterProfile") {
        // Members of sets bound in a verified namespace, collected once (a lab may have hundreds of spokes).
        let covered: BTreeSet<&str> = sets
            .iter()
            .filter(|set| set.bind_to.iter().any(|ns| namespaces.contains(ns)))
            .flat_map(|set| set.members.iter().map(String::as_str))
            .collect();
        for s in spokes {
            let covered = managed
                .iter()
                .any(|m| m.cluster == s.cluster.name && covered.contains(m.name.as_str()));
            if !covered {
                c.warn(None, "spec.verify", format!("spoke `{}` is in no set bound to a verified namespace: its properties are not verified", s.cluster.name))
                    .help("add it to a set whose `bindTo` includes a verified namespace");
            }
        }
    }
    Verify {
        namespaces,
        checks,
        timeout: duration(
            c,
            v.timeout.as_ref(),
            "spec.verify.timeout",
            Duration::from_secs(300),
        ),
        consumer_image,
    }
}

/// The namespaces verification looks in: those given, each with a set bound there, else every bound one.
fn verify_namespaces(
    c: &mut Collector<'_>,
    v: &model::Verify,
    sets: &[ClusterSet],
    bindings: &[Binding],
) -> Vec<String> {
    let bound: Vec<&str> = bindings.iter().map(|b| b.namespace.as_str()).collect();
    match &v.namespaces {
        None => sets
            .iter()
            .flat_map(|s| s.bind_to.iter().cloned())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        Some(ns) => {
            for (i, n) in ns.iter().enumerate() {
                if !bound.contains(&n.value.as_str()) {
                    let issue = c.error(
                        at(n),
                        format!("spec.verify.namespaces[{i}]"),
                        format!(
                            "no set is bound in `{}`, so it holds no ClusterProfiles",
                            n.value
                        ),
                    );
                    match suggest(&n.value, bound.iter().copied()) {
                        Some(s) => issue.help(format!("did you mean `{s}`?")),
                        None => issue.help("add the namespace to a set's `bindTo`"),
                    };
                }
            }
            ns.iter().map(|n| n.value.clone()).collect()
        }
    }
}

fn timeouts(c: &mut Collector<'_>, t: &model::Timeouts) -> Timeouts {
    Timeouts {
        cluster_create: duration(
            c,
            t.cluster_create.as_ref(),
            "spec.timeouts.clusterCreate",
            Duration::from_secs(600),
        ),
        rollout: duration(
            c,
            t.rollout.as_ref(),
            "spec.timeouts.rollout",
            Duration::from_secs(300),
        ),
        join: duration(
            c,
            t.join.as_ref(),
            "spec.timeouts.join",
            Duration::from_secs(300),
        ),
        default: duration(
            c,
            t.default.as_ref(),
            "spec.timeouts.default",
            Duration::from_secs(180),
        ),
    }
}

fn duration(
    c: &mut Collector<'_>,
    s: Option<&Spanned<String>>,
    field: &str,
    default: Duration,
) -> Duration {
    let Some(s) = s else { return default };
    match humantime::parse_duration(&s.value) {
        Ok(d) if d.is_zero() => {
            c.error(at(s), field, "a timeout of zero never succeeds");
            default
        }
        Ok(d) => d,
        Err(e) => {
            c.error(
                at(s),
                field,
                format!("`{}` is not a duration: {e}", s.value),
            )
            .help("write durations like `90s`, `5m` or `1h30m`");
            default
        }
    }
}

fn cluster_name(c: &mut Collector<'_>, s: &Spanned<String>, field: &str) {
    dns_label(c, s, field, MAX_CLUSTER_NAME);
}

fn dns_label(c: &mut Collector<'_>, s: &Spanned<String>, field: &str, max: usize) {
    if let Err(why) = check_dns_label(&s.value, max) {
        c.error(
            at(s),
            field,
            format!("`{}` is not a valid name: {why}", s.value),
        )
        .help("use lowercase letters, digits and `-`, starting and ending with a letter or digit");
    }
}

/// RFC 1123 label, at most `max` characters.
pub fn check_dns_label(s: &str, max: usize) -> Result<(), String> {
    if s.is_empty() {
        return Err("it is empty".into());
    }
    if s.len() > max {
        return Err(format!(
            "it is {} characters long; at most {max} fit",
            s.len()
        ));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("only lowercase letters, digits and `-` are allowed".into());
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err("it must start and end with a letter or digit".into());
    }
    Ok(())
}

/// RFC 1123 subdomain: dot-separated labels, at most 253 characters.
pub fn dns_subdomain(s: &str) -> Result<(), String> {
    if s.len() > 253 {
        return Err(format!(
            "it is {} characters long; at most 253 fit",
            s.len()
        ));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Err("only lowercase letters, digits, `-` and `.` are allowed".into());
    }
    s.split('.').try_for_each(|l| {
        check_dns_label(l, 63).map_err(|why| match l {
            "" if s.is_empty() => why,
            "" => "it has an empty part (two dots in a row, or a dot at an end)".into(),
            _ => format!("part `{l}`: {why}"),
        })
    })
}

fn label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        dns_subdomain(p).map_err(|e| format!("the prefix `{p}` is not a DNS subdomain ({e})"))?;
    }
    label_value(name).and_then(|()| {
        if name.is_empty() {
            Err("the name part is empty".into())
        } else {
            Ok(())
        }
    })
}

fn label_value(v: &str) -> Result<(), String> {
    if v.len() > 63 {
        return Err(format!("it is {} characters long; at most 63 fit", v.len()));
    }
    let ok_char = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.');
    if !v.bytes().all(ok_char) {
        return Err("only letters, digits, `-`, `_` and `.` are allowed".into());
    }
    if v.starts_with(|c: char| !c.is_ascii_alphanumeric())
        || v.ends_with(|c: char| !c.is_ascii_alphanumeric())
    {
        return Err("it must start and end with a letter or digit".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert!(check_dns_label("cluster1", 63).is_ok());
        assert!(check_dns_label("Cluster1", 63).is_err());
        assert!(check_dns_label("-a", 63).is_err());
        assert!(check_dns_label(&"a".repeat(50), MAX_CLUSTER_NAME).is_err());
        assert!(dns_subdomain("tier.lab.example.com").is_ok());
        assert!(dns_subdomain("tier/lab").is_err());
    }

    #[test]
    fn label_syntax() {
        assert!(label_key("env").is_ok());
        assert!(label_key("example.com/env").is_ok());
        assert!(label_key("a/b/c").is_err());
        assert!(label_value("").is_ok());
        assert!(label_value("dev_1").is_ok());
        assert!(label_value("-dev").is_err());
    }
}
