//! Actions: what a workflow step's `uses:` names. This module is the registry of their names and inputs,
//! which is what lets a workflow file be checked before anything runs.

/// One input of an action (`with:` key).
#[derive(Debug, Clone, Copy)]
pub struct Input {
    pub name: &'static str,
    pub required: bool,
    pub doc: &'static str,
}

/// An action's contract.
#[derive(Debug, Clone, Copy)]
pub struct ActionSpec {
    pub name: &'static str,
    pub summary: &'static str,
    pub inputs: &'static [Input],
}

const fn req(name: &'static str, doc: &'static str) -> Input {
    Input {
        name,
        required: true,
        doc,
    }
}
const fn opt(name: &'static str, doc: &'static str) -> Input {
    Input {
        name,
        required: false,
        doc,
    }
}

/// Every action a workflow may use.
pub const ACTIONS: &[ActionSpec] = &[
    ActionSpec {
        name: "lab.preflight",
        summary: "check Docker, kind, helm, kernel limits, memory and name clashes before touching anything",
        inputs: &[],
    },
    ActionSpec {
        name: "docker.network",
        summary: "create the Docker network `kind` once, up front, if absent",
        inputs: &[opt("name", "network name (default `kind`)")],
    },
    ActionSpec {
        name: "cluster.create",
        summary: "create a kind cluster with its own kubeconfig, or connect to an existing one",
        inputs: &[req("cluster", "lab cluster name")],
    },
    ActionSpec {
        name: "kubeconfig.merge",
        summary: "merge the per-cluster kubeconfigs into the user's kubeconfig (contexts `kind-<name>`)",
        inputs: &[],
    },
    ActionSpec {
        name: "chart.install",
        summary: "render a pinned chart with helm template, apply our chart patches, server-side apply CRDs first",
        inputs: &[
            req("cluster", "lab cluster to install on"),
            req("chart", "chart name from the version catalog"),
            req("namespace", "release namespace"),
        ],
    },
    ActionSpec {
        name: "ocm.hub-ready",
        summary: "wait for the ClusterManager's registration controller and, with the gate, the ClusterProfile CRD",
        inputs: &[req("cluster", "the hub")],
    },
    ActionSpec {
        name: "ocm.klusterlet",
        summary: "the klusterlet chart without a bootstrap kubeconfig: operator and Klusterlet, before the hub is ready",
        inputs: &[
            req("managedCluster", "ManagedCluster name"),
            req("cluster", "lab cluster the klusterlet runs on"),
        ],
    },
    ActionSpec {
        name: "ocm.join",
        summary: "bootstrap token, bootstrap kubeconfig Secret to the hub's internal endpoint, wait for the ManagedCluster",
        inputs: &[
            req("managedCluster", "ManagedCluster name"),
            req("cluster", "lab cluster the klusterlet runs on"),
        ],
    },
    ActionSpec {
        name: "ocm.accept",
        summary: "approve the cluster's CSRs, set hubAcceptsClient, wait for Joined and Available",
        inputs: &[req("managedCluster", "ManagedCluster name")],
    },
    ActionSpec {
        name: "manifest.apply",
        summary: "render a manifest template and server-side apply it, waiting for the kinds to be served",
        inputs: &[
            req("cluster", "lab cluster to apply to"),
            req("template", "template under workflows/manifests/"),
        ],
    },
    ActionSpec {
        name: "kube.wait",
        summary: "watch an object until a condition holds, with a deadline",
        inputs: &[
            req("cluster", "lab cluster"),
            req("apiVersion", "object API version"),
            req("kind", "object kind"),
            req("name", "object name"),
            opt("namespace", "object namespace"),
            req("condition", "condition type that must be True"),
        ],
    },
    ActionSpec {
        name: "addon.ready",
        summary: "wait for an addon's hub objects and each ManagedClusterAddOn to be Available",
        inputs: &[
            req("addon", "addon name"),
            req("namespace", "addon namespace on the hub"),
        ],
    },
    ActionSpec {
        name: "verify.lab",
        summary: "verify properties, accessProviders, reachability, credentials and conditions",
        inputs: &[
            opt("checks", "checks to run (default: the topology's)"),
            opt(
                "probe",
                "\"true\" writes a probe ClusterProperty unique to the run; \"false\" checks the topology's properties only",
            ),
        ],
    },
    ActionSpec {
        name: "cluster.delete",
        summary: "delete a kind cluster the lab owns and its leftover containers",
        inputs: &[req("cluster", "lab cluster name")],
    },
    ActionSpec {
        name: "kubeconfig.prune",
        summary: "remove the lab's contexts from the user's kubeconfig, keeping current-context valid",
        inputs: &[],
    },
    ActionSpec {
        name: "lab.reset",
        summary: "remove what participants added to the lab's kinds and namespaces (on existing clusters: only objects with the lab's label)",
        inputs: &[],
    },
    ActionSpec {
        name: "lab.prune",
        summary: "delete objects carrying the lab's label that the plan no longer renders (topology edits)",
        inputs: &[opt(
            "keep",
            "filled by the planner: per cluster, `Kind/namespace/name` of every object the plan applies",
        )],
    },
];

/// The action named `name`.
pub fn find(name: &str) -> Option<&'static ActionSpec> {
    ACTIONS.iter().find(|a| a.name == name)
}
