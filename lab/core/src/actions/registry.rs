//! Actions: what a workflow step's `uses:` names. This module is the one registry of them: each entry carries
//! the name and inputs (which let a workflow file be checked before anything runs) and the function that runs
//! the action, so a new action is one entry here and its function, and the two cannot drift apart.

use futures::future::BoxFuture;

use super::{
    ActionResult, NoInputs, OnCluster, StepCtx, cluster, departed, images, kube, ocm, prune, reset,
    verify,
};
use crate::workflow::Catalog;
use crate::workflow::catalog::{ActionInfo, CheckInputs, Input, Renders, check_inputs};

/// The function that runs an action: the boxed future of the action's `async fn`.
pub type ActionFn = for<'a, 'b> fn(&'a StepCtx<'b>) -> BoxFuture<'a, ActionResult>;

/// An [`ActionFn`] that boxes the future of the `async fn(&StepCtx) -> ActionResult` at `$f`.
macro_rules! action_fn {
    ($f:path) => {{
        fn run<'a>(ctx: &'a StepCtx<'_>) -> BoxFuture<'a, ActionResult> {
            Box::pin($f(ctx))
        }
        run as ActionFn
    }};
}

/// An action's contract.
#[derive(Debug, Clone, Copy)]
pub struct ActionSpec {
    pub name: &'static str,
    pub summary: &'static str,
    /// Its inputs, as documented; [`ActionSpec::check`] is their type.
    pub inputs: &'static [Input],
    /// Checks a step's rendered `with:` against the action's input type, when the plan is built.
    pub check: CheckInputs,
    /// What the planner renders for its steps.
    pub renders: Renders,
    /// Its `keep` input is filled by the planner.
    pub planner_fills_keep: bool,
    /// Runs the action.
    pub run: ActionFn,
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
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::preflight),
    },
    ActionSpec {
        name: "docker.network",
        summary: "create the Docker network `kind` once, up front, if absent",
        inputs: &[opt("name", "network name (default `kind`)")],
        check: check_inputs::<cluster::NetworkInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::network),
    },
    ActionSpec {
        name: "docker.network-remove",
        summary: "remove the Docker networks this lab created, once no container uses them",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::remove_networks),
    },
    ActionSpec {
        name: "registry.local",
        summary: "run the lab's local registry container (registry:3) on the kind network, if the topology asks for one",
        inputs: &[opt("network", "network name (default `kind`)")],
        check: check_inputs::<cluster::RegistryInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::local_registry),
    },
    ActionSpec {
        name: "registry.remove",
        summary: "remove the local registry containers the lab created (by their recorded IDs)",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::remove_local_registries),
    },
    ActionSpec {
        name: "node.images",
        summary: "put the images a kind cluster runs into its nodes before its charts: imported from the bundle (up --bundle, spec.bundle) and checked, or else pre-pulled with crictl (best effort)",
        inputs: &[req("cluster", "lab cluster name (a kind cluster)")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(images::node_images),
    },
    ActionSpec {
        name: "cluster.create",
        summary: "create a kind cluster with its own kubeconfig, or connect to an existing one",
        inputs: &[req("cluster", "lab cluster name")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::create),
    },
    ActionSpec {
        name: "kubeconfig.merge",
        summary: "merge the per-cluster kubeconfigs into the user's kubeconfig (contexts `kind-<name>`)",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::merge_kubeconfigs),
    },
    ActionSpec {
        name: "chart.install",
        summary: "install a pinned chart as a Helm release (helm upgrade --install), our chart patches applied by the post-renderer; CRDs first",
        inputs: &[
            req("cluster", "lab cluster to install on"),
            req("chart", "chart name from the version catalog"),
            req("namespace", "release namespace"),
        ],
        check: check_inputs::<kube::ChartInputs>,
        renders: Renders::Chart,
        planner_fills_keep: false,
        run: action_fn!(kube::chart_install),
    },
    ActionSpec {
        name: "chart.uninstall",
        summary: "helm uninstall the lab's releases on a cluster (only releases labelled as this lab's)",
        inputs: &[req("cluster", "lab cluster")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(kube::chart_uninstall),
    },
    ActionSpec {
        name: "lab.remove-objects",
        summary: "on an existing cluster, delete what the lab applied there (objects with its label, the bootstrap Secret of its joins)",
        inputs: &[req("cluster", "an existing lab cluster")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(prune::remove_objects),
    },
    ActionSpec {
        name: "ocm.remove-addons",
        summary: "before the klusterlets on existing spokes go, remove the lab's addons from them on the hub and wait until their agents are gone (the spokes' work agents delete them)",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(prune::remove_addons),
    },
    ActionSpec {
        name: "lab.remove-registrations",
        summary: "on an existing hub, delete the ManagedClusters of the lab's own joins (after their klusterlets are gone)",
        inputs: &[req("cluster", "an existing lab cluster")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(prune::remove_registrations),
    },
    ActionSpec {
        name: "lab.remove-namespaces",
        summary: "on an existing cluster, delete the namespaces the ownership record says the lab created there",
        inputs: &[req("cluster", "an existing lab cluster")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(prune::remove_namespaces),
    },
    ActionSpec {
        name: "ocm.hub-ready",
        summary: "wait for the ClusterManager conditions, the six hub Deployments and webhooks and, with the gate, the ClusterProfile CRD",
        inputs: &[req("cluster", "the hub")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(ocm::hub_ready),
    },
    ActionSpec {
        name: "ocm.klusterlet",
        summary: "the klusterlet chart without a bootstrap kubeconfig: operator and Klusterlet, before the hub is ready",
        inputs: &[
            req("managedCluster", "ManagedCluster name"),
            req("cluster", "lab cluster the klusterlet runs on"),
        ],
        check: check_inputs::<ocm::JoinInputs>,
        renders: Renders::FixedChart {
            chart: "klusterlet",
            namespace: "open-cluster-management",
        },
        planner_fills_keep: false,
        run: action_fn!(ocm::klusterlet),
    },
    ActionSpec {
        name: "ocm.join",
        summary: "bootstrap token, bootstrap kubeconfig Secret to the hub's internal endpoint, wait for the ManagedCluster",
        inputs: &[
            req("managedCluster", "ManagedCluster name"),
            req("cluster", "lab cluster the klusterlet runs on"),
        ],
        check: check_inputs::<ocm::JoinInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(ocm::join),
    },
    ActionSpec {
        name: "ocm.accept",
        summary: "approve the cluster's CSRs, set hubAcceptsClient, wait for Joined and Available",
        inputs: &[req("managedCluster", "ManagedCluster name")],
        check: check_inputs::<ocm::AcceptInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(ocm::accept),
    },
    ActionSpec {
        name: "manifest.apply",
        summary: "render a manifest template and server-side apply it, waiting for the kinds to be served",
        inputs: &[
            req("cluster", "lab cluster to apply to"),
            req("template", "template under workflows/manifests/"),
        ],
        check: check_inputs::<kube::ManifestInputs>,
        renders: Renders::Manifest,
        planner_fills_keep: false,
        run: action_fn!(kube::manifest_apply),
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
        check: check_inputs::<kube::WaitInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(kube::wait),
    },
    ActionSpec {
        name: "addon.ready",
        summary: "wait for an addon's hub objects and each ManagedClusterAddOn to be Available",
        inputs: &[
            req("addon", "addon name"),
            req("namespace", "addon namespace on the hub"),
        ],
        check: check_inputs::<ocm::AddonInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(ocm::addon_ready),
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
        check: check_inputs::<verify::VerifyInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(verify::run),
    },
    ActionSpec {
        name: "cluster.delete",
        summary: "delete a kind cluster the lab owns and its leftover containers",
        inputs: &[req("cluster", "lab cluster name")],
        check: check_inputs::<OnCluster>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::delete),
    },
    ActionSpec {
        name: "cluster.delete-departed",
        summary: "delete the kind clusters the ownership record proves the lab's that the topology no longer declares",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(departed::delete_departed_clusters),
    },
    ActionSpec {
        name: "lab.departed",
        summary: "deregister the spokes that left the topology and delete the kind clusters the lab made for them",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(departed::run),
    },
    ActionSpec {
        name: "kubeconfig.prune",
        summary: "remove the lab's contexts from the user's kubeconfig, keeping current-context valid",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(cluster::prune_kubeconfig),
    },
    ActionSpec {
        name: "lab.reset",
        summary: "remove what participants added to the lab's kinds and namespaces (on existing clusters: only objects with the lab's label)",
        inputs: &[],
        check: check_inputs::<NoInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: false,
        run: action_fn!(reset::run),
    },
    ActionSpec {
        name: "lab.prune",
        summary: "delete objects carrying the lab's label that the plan no longer renders (topology edits)",
        inputs: &[opt(
            "keep",
            "filled by the planner: per cluster, `Kind/namespace/name` of every object the plan applies",
        )],
        check: check_inputs::<prune::PruneInputs>,
        renders: Renders::Nothing,
        planner_fills_keep: true,
        run: action_fn!(prune::run),
    },
];

/// The action named `name`.
pub fn find(name: &str) -> Option<&'static ActionSpec> {
    ACTIONS.iter().find(|a| a.name == name)
}

/// The registry as the workflow loader and the planner see it: [`ACTIONS`]' inputs and properties.
#[derive(Debug, Clone, Copy)]
pub struct Registry;

impl Catalog for Registry {
    fn action(&self, name: &str) -> Option<ActionInfo> {
        find(name).map(|a| ActionInfo {
            inputs: a.inputs,
            check: a.check,
            renders: a.renders,
            planner_fills_keep: a.planner_fills_keep,
        })
    }

    fn names(&self) -> Vec<&'static str> {
        ACTIONS.iter().map(|a| a.name).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_names_are_unique_so_no_entry_is_shadowed() {
        let mut names: Vec<&str> = ACTIONS.iter().map(|a| a.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "an action name is registered twice");
        assert!(find("no.such-action").is_none());
    }

    /// The input names serde's "unknown field" error lists for an action's input type.
    fn type_fields(a: &ActionSpec) -> Vec<String> {
        let e = (a.check)(&serde_json::json!({"no-such-input": 1}))
            .expect_err("an unknown input is refused");
        let expected = e.message.split("expected").nth(1).unwrap_or_default();
        let mut names: Vec<String> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        names.sort();
        names
    }

    #[test]
    fn documented_inputs_are_the_input_types_fields() {
        for a in ACTIONS {
            let mut documented: Vec<String> = a.inputs.iter().map(|i| i.name.to_owned()).collect();
            documented.sort();
            assert_eq!(type_fields(a), documented, "{}", a.name);
            // With no `with:`, exactly the actions with a required input fail.
            let required = a.inputs.iter().any(|i| i.required);
            let empty = (a.check)(&serde_json::json!({}));
            assert_eq!(empty.is_err(), required, "{}: {empty:?}", a.name);
        }
    }

    #[test]
    fn a_mistyped_input_names_the_input() {
        let verify = find("verify.lab").unwrap();
        let e = (verify.check)(&serde_json::json!({"probe": "maybe"})).unwrap_err();
        assert_eq!(e.input.as_deref(), Some("probe"));
        assert!(e.message.contains("`maybe` is not true or false"), "{e:?}");
        let e = (verify.check)(&serde_json::json!({"checks": "properties,reachabel"})).unwrap_err();
        assert!(e.message.contains("unknown check `reachabel`"), "{e:?}");
        assert!(
            (verify.check)(&serde_json::json!({"probe": false, "checks": ["reachable"]})).is_ok()
        );
        let wait = find("kube.wait").unwrap();
        let e = (wait.check)(&serde_json::json!({"cluster": ["hub"], "apiVersion": "v1", "kind": "Secret", "name": "s", "condition": "Ready"})).unwrap_err();
        assert_eq!(e.input.as_deref(), Some("cluster"));
    }
}
