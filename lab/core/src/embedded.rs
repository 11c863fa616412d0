//! The data folders compiled into the binary, so `ocm-lab` works from any directory with no files at all.
//! A file given on the command line always overrides these.

/// Embedded topologies, by name (file stem).
pub const TOPOLOGIES: &[(&str, &str)] = &[
    ("default", include_str!("../../../topologies/default.yaml")),
    ("minimal", include_str!("../../../topologies/minimal.yaml")),
    (
        "workshop",
        include_str!("../../../topologies/workshop.yaml"),
    ),
];

/// The embedded topology named `name`.
pub fn topology(name: &str) -> Option<&'static str> {
    TOPOLOGIES.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

/// Embedded workflow files, by name (file stem).
pub const WORKFLOWS: &[(&str, &str)] = &[
    ("up", include_str!("../../../workflows/up.yaml")),
    ("verify", include_str!("../../../workflows/verify.yaml")),
    ("down", include_str!("../../../workflows/down.yaml")),
    ("reset", include_str!("../../../workflows/reset.yaml")),
];

/// Embedded manifest templates (`workflows/manifests/`), by file name.
pub const MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../../workflows/manifests/namespace.yaml"),
    ),
    (
        "clusterset.yaml",
        include_str!("../../../workflows/manifests/clusterset.yaml"),
    ),
    (
        "managedcluster.yaml",
        include_str!("../../../workflows/manifests/managedcluster.yaml"),
    ),
    (
        "binding.yaml",
        include_str!("../../../workflows/manifests/binding.yaml"),
    ),
    (
        "cluster-proxy-placement.yaml",
        include_str!("../../../workflows/manifests/cluster-proxy-placement.yaml"),
    ),
    (
        "msa-addon.yaml",
        include_str!("../../../workflows/manifests/msa-addon.yaml"),
    ),
    (
        "managedserviceaccount.yaml",
        include_str!("../../../workflows/manifests/managedserviceaccount.yaml"),
    ),
    (
        "msa-rbac.yaml",
        include_str!("../../../workflows/manifests/msa-rbac.yaml"),
    ),
    (
        "clusterproperties.yaml",
        include_str!("../../../workflows/manifests/clusterproperties.yaml"),
    ),
    (
        "registry-hosting.yaml",
        include_str!("../../../workflows/manifests/registry-hosting.yaml"),
    ),
];

/// Embedded workshop exercises (`exercises/`), by name (file stem).
pub const EXERCISES: &[(&str, &str)] = &[
    (
        "agent-stopped",
        include_str!("../../../exercises/agent-stopped.yaml"),
    ),
    (
        "binding-deleted",
        include_str!("../../../exercises/binding-deleted.yaml"),
    ),
    (
        "cluster-left-set",
        include_str!("../../../exercises/cluster-left-set.yaml"),
    ),
    (
        "hub-gate-off",
        include_str!("../../../exercises/hub-gate-off.yaml"),
    ),
    (
        "property-deleted",
        include_str!("../../../exercises/property-deleted.yaml"),
    ),
    (
        "property-too-long",
        include_str!("../../../exercises/property-too-long.yaml"),
    ),
    (
        "proxy-agents-scaled-down",
        include_str!("../../../exercises/proxy-agents-scaled-down.yaml"),
    ),
    (
        "proxy-server-scaled-down",
        include_str!("../../../exercises/proxy-server-scaled-down.yaml"),
    ),
    (
        "spoke-gate-off",
        include_str!("../../../exercises/spoke-gate-off.yaml"),
    ),
    (
        "spoke-only",
        include_str!("../../../exercises/spoke-only.yaml"),
    ),
    (
        "sync-label-dropped",
        include_str!("../../../exercises/sync-label-dropped.yaml"),
    ),
    (
        "too-many-properties",
        include_str!("../../../exercises/too-many-properties.yaml"),
    ),
    (
        "user-server-scaled-down",
        include_str!("../../../exercises/user-server-scaled-down.yaml"),
    ),
];
