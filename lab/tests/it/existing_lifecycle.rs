//! `up`, `verify`, `reset` and `down` end to end on `existing:` clusters, in the simulated lab (a test
//! double: an existing cluster is a simulated cluster someone else made). `down` deletes no existing
//! cluster and nothing the lab did not create, and removes what it did create there.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use ocm_lab::actions::prune::LAB_KINDS;
use ocm_lab::backend::{ClusterApi, ObjectRef};
use ocm_lab::topology::{LAB_LABEL, Provider};
use serde_json::{Value, json};

use crate::engine::{Harness, failure};

const PROP: &str = "about.k8s.io/v1alpha1";
const SETS: &str = "cluster.open-cluster-management.io/v1beta2";

/// Which clusters of the default lab someone else runs.
#[derive(Debug, Clone, Copy)]
pub enum Shape {
    /// The hub exists, the spokes are kind clusters the lab creates.
    Hub,
    /// The spokes exist, the hub is a kind cluster.
    Spokes,
    /// Every cluster exists.
    All,
}

/// The default lab with `shape`'s clusters given as `existing:` contexts.
pub fn topology(shape: Shape) -> String {
    let mut text = ocm_lab::embedded::topology("default")
        .expect("embedded default")
        .to_owned();
    let mut edit = |from: &str, to: &str| {
        assert!(text.contains(from), "default topology lacks {from:?}");
        text = text.replacen(from, to, 1);
    };
    if matches!(shape, Shape::Hub | Shape::All) {
        edit(
            "    name: hub\n",
            "    name: hub\n    existing: {kubeconfig: /nonexistent/hub.kubeconfig, context: their-hub}\n",
        );
    }
    if matches!(shape, Shape::Spokes | Shape::All) {
        for c in ["cluster1", "cluster2"] {
            edit(
                &format!("    - name: {c}\n"),
                &format!(
                    "    - name: {c}\n      existing: {{kubeconfig: /nonexistent/{c}.kubeconfig, context: their-{c}}}\n"
                ),
            );
        }
    }
    text
}

/// A harness over `shape`'s lab whose existing clusters are in the simulated world, as someone else's.
pub fn harness(shape: Shape) -> Harness {
    let lab = match ocm_lab::topology::load_str(
        &crate::common::host(),
        "existing.yaml",
        &topology(shape),
    ) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    };
    let h = Harness::new(lab);
    let existing = existing_names(&h);
    h.sim.with_world(|w| {
        for c in &existing {
            w.add_foreign_cluster(c);
        }
    });
    h
}

fn existing_names(h: &Harness) -> Vec<String> {
    h.lab
        .clusters()
        .filter(|c| matches!(c.provider, Provider::Existing { .. }))
        .map(|c| c.name.clone())
        .collect()
}

pub async fn api(h: &Harness, cluster: &str) -> Arc<dyn ClusterApi> {
    let c = h.lab.cluster(cluster).unwrap();
    h.sim
        .backends()
        .kube
        .connect(c, Path::new("unused"))
        .await
        .unwrap()
}

fn r(api_version: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(api_version, kind, ns, name)
}

/// Someone else's objects that exist before the lab comes: a namespace with a ConfigMap and a Helm
/// release. (The OCM kinds do not exist yet on a cluster without OCM: see [`foreign_ocm_objects`].)
async fn foreign_plain_objects(h: &Harness, cluster: &str) -> Vec<ObjectRef> {
    let api = api(h, cluster).await;
    api.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}))
        .await
        .unwrap();
    api.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "team-a"}, "data": {"k": "v"}}))
        .await
        .unwrap();
    h.sim
        .with_world(|w| w.add_foreign_release(cluster, "team-a", "their-app", None));
    vec![
        r("v1", "Namespace", None, "team-a"),
        r("v1", "ConfigMap", Some("team-a"), "settings"),
    ]
}

/// Someone else's objects of the OCM kinds, once their CRDs are served: a ClusterProperty on an existing
/// spoke, a ManagedClusterSet on an existing hub.
async fn foreign_ocm_objects(h: &Harness, cluster: &str) -> Vec<ObjectRef> {
    let api = api(h, cluster).await;
    if cluster == h.lab.hub.cluster.name {
        api.apply(&json!({"apiVersion": SETS, "kind": "ManagedClusterSet", "metadata": {"name": "their-set"}, "spec": {"clusterSelector": {"selectorType": "ExclusiveClusterSetLabel"}}}))
            .await
            .unwrap();
        vec![r(SETS, "ManagedClusterSet", None, "their-set")]
    } else {
        api.apply(&json!({"apiVersion": PROP, "kind": "ClusterProperty", "metadata": {"name": "team.someone-else.example.com"}, "spec": {"value": "x"}}))
            .await
            .unwrap();
        vec![r(
            PROP,
            "ClusterProperty",
            None,
            "team.someone-else.example.com",
        )]
    }
}

/// Every object of the lab's kinds (and ManagedClusters) carrying the lab's label on `cluster`.
async fn labelled(h: &Harness, cluster: &str) -> BTreeSet<String> {
    let api = api(h, cluster).await;
    let sel = format!("{LAB_LABEL}={}", h.lab.name);
    let mut out = BTreeSet::new();
    let kinds = LAB_KINDS
        .iter()
        .copied()
        .chain([("cluster.open-cluster-management.io/v1", "ManagedCluster")]);
    for (av, kind) in kinds {
        if !api.served(av, kind).await.unwrap() {
            continue;
        }
        for o in api.list(av, kind, None, Some(&sel)).await.unwrap() {
            out.insert(format!(
                "{kind}/{}/{}",
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            ));
        }
    }
    out
}

async fn lifecycle(shape: Shape) {
    let h = harness(shape);
    let existing = existing_names(&h);
    let mut foreign: Vec<(String, ObjectRef)> = Vec::new();
    for c in &existing {
        for o in foreign_plain_objects(&h, c).await {
            foreign.push((c.clone(), o));
        }
    }

    let (res, _) = h.run("up").await;
    assert!(res.ok, "{shape:?}: up: {}", failure(&res));
    // The namespaces the lab created on existing clusters (none of them was there before).
    let mut created: Vec<(String, String)> = Vec::new();
    for c in &existing {
        let api = api(&h, c).await;
        for ns in [
            "open-cluster-management",
            "cluster-inventory",
            "open-cluster-management-addon",
            // The OCM operators' own, made from the lab's install.
            "open-cluster-management-hub",
            "open-cluster-management-agent",
        ] {
            if api
                .get(&r("v1", "Namespace", None, ns))
                .await
                .unwrap()
                .is_some()
            {
                created.push((c.clone(), ns.to_owned()));
            }
        }
        assert!(
            !labelled(&h, c).await.is_empty()
                || h.sim
                    .with_world(|w| !w.releases(c).values().all(|r| r.name == "their-app")),
            "{shape:?}: the lab installed nothing on {c}"
        );
        for o in foreign_ocm_objects(&h, c).await {
            foreign.push((c.clone(), o));
        }
    }
    assert!(
        !created.is_empty(),
        "{shape:?}: the lab created no namespace"
    );
    if matches!(shape, Shape::Spokes | Shape::All) {
        let spoke = api(&h, "cluster1").await;
        assert!(
            spoke
                .get(&r(
                    "apps/v1",
                    "Deployment",
                    Some("open-cluster-management-cluster-proxy"),
                    "cluster-proxy-proxy-agent"
                ))
                .await
                .unwrap()
                .is_some(),
            "{shape:?}: the cluster-proxy agent runs on cluster1 after up"
        );
    }

    // A second `up` changes nothing (observe before acting), on existing clusters too.
    let writes = |h: &Harness| {
        h.sim
            .calls()
            .iter()
            .filter(|c| {
                matches!(
                    c.verb.as_str(),
                    "kube.apply" | "kube.merge-patch" | "kube.delete" | "helm.upgrade-install"
                )
            })
            .count()
    };
    let before = writes(&h);
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{shape:?}: second up: {}", failure(&res));
    assert_eq!(writes(&h), before, "{shape:?}: a second up wrote");

    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{shape:?}: verify: {}", failure(&res));
    let (res, _) = h.run("reset").await;
    assert!(res.ok, "{shape:?}: reset: {}", failure(&res));
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{shape:?}: down: {}", failure(&res));

    // No existing cluster was deleted: the simulation still serves each one.
    let clusters = h.sim.with_world(|w| w.cluster_names());
    for c in &existing {
        assert!(clusters.contains(c), "{shape:?}: {c} was deleted");
        let api = api(&h, c).await;
        assert!(
            api.version().await.is_ok(),
            "{shape:?}: {c} does not answer"
        );
    }
    // The kind clusters the lab created are gone.
    for c in h.lab.clusters().filter(|c| c.provider == Provider::Kind) {
        assert!(
            !clusters.contains(&c.name),
            "{shape:?}: kind cluster {} is left",
            c.name
        );
    }
    // Every foreign object is still there, and someone else's release too.
    for (c, o) in &foreign {
        let api = api(&h, c).await;
        assert!(
            api.get(o).await.unwrap().is_some(),
            "{shape:?}: {o} on {c} was deleted"
        );
    }
    for c in &existing {
        let releases = h.sim.with_world(|w| w.releases(c));
        assert!(
            releases.contains_key("team-a/their-app"),
            "{shape:?}: someone else's release on {c} was uninstalled"
        );
        let ours: Vec<&String> = releases
            .iter()
            .filter(|(_, r)| r.labels.get(LAB_LABEL).map(String::as_str) == Some("sandbox"))
            .map(|(k, _)| k)
            .collect();
        assert!(
            ours.is_empty(),
            "{shape:?}: the lab's releases on {c} are left: {ours:?}"
        );
        let left = labelled(&h, c).await;
        assert!(
            left.is_empty(),
            "{shape:?}: objects the lab applied on {c} are left: {left:?}"
        );
    }
    // The namespaces the lab created are gone.
    for (c, ns) in &created {
        let api = api(&h, c).await;
        assert!(
            api.get(&r("v1", "Namespace", None, ns))
                .await
                .unwrap()
                .is_none(),
            "{shape:?}: namespace {ns} the lab created on {c} is left"
        );
    }
    // On an existing spoke, the cluster-proxy addon's agent and its install namespace are gone too: the
    // spoke is as it was before `up`. Real OCM deletes the agent when the addon's ManifestWork goes while
    // the work agent runs (after the klusterlet, it orphans it), and orphans the namespace itself
    // (cluster-proxy v0.10.0 `addon-agent/templates/namespace.yaml`:
    // `addon.open-cluster-management.io/deletion-orphan`); the lab, which caused it, removes it.
    if matches!(shape, Shape::Spokes | Shape::All) {
        for c in ["cluster1", "cluster2"] {
            let api = api(&h, c).await;
            for o in [
                r(
                    "v1",
                    "Namespace",
                    None,
                    "open-cluster-management-cluster-proxy",
                ),
                r(
                    "apps/v1",
                    "Deployment",
                    Some("open-cluster-management-cluster-proxy"),
                    "cluster-proxy-proxy-agent",
                ),
                // Cluster-scoped, so only the spoke's work agent removes it (before the klusterlet goes).
                r(
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRole",
                    None,
                    "cluster-proxy-addon-agent-impersonator",
                ),
            ] {
                assert!(
                    api.get(&o).await.unwrap().is_none(),
                    "{shape:?}: {o} is left on {c}"
                );
            }
        }
    }
    // On an existing hub, the registrations of the lab's spokes are gone (not only unlabelled: no agent
    // registered them again).
    if matches!(shape, Shape::Hub | Shape::All) {
        let hub = api(&h, "hub").await;
        for n in ["cluster1", "cluster2"] {
            let mc = r(
                "cluster.open-cluster-management.io/v1",
                "ManagedCluster",
                None,
                n,
            );
            assert!(
                hub.get(&mc).await.unwrap().is_none(),
                "{shape:?}: ManagedCluster {n} is left"
            );
            // The cluster namespace the hub made when the lab accepted the cluster: OCM's gc empties
            // it and leaves it; the lab, which caused it, removes it.
            assert!(
                hub.get(&r("v1", "Namespace", None, n))
                    .await
                    .unwrap()
                    .is_none(),
                "{shape:?}: the hub's namespace {n} is left"
            );
        }
    }
    // A second `down` finds nothing more to do.
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{shape:?}: second down: {}", failure(&res));
}

#[tokio::test(start_paused = true)]
async fn simulated_lab_with_an_existing_hub_and_kind_spokes_goes_up_and_down_leaving_others_objects()
 {
    lifecycle(Shape::Hub).await;
}

#[tokio::test(start_paused = true)]
async fn simulated_lab_with_existing_spokes_and_a_kind_hub_goes_up_and_down_leaving_others_objects()
{
    lifecycle(Shape::Spokes).await;
}

#[tokio::test(start_paused = true)]
async fn simulated_lab_of_existing_clusters_only_goes_up_and_down_leaving_others_objects() {
    lifecycle(Shape::All).await;
}

/// A namespace that was there before `up` is never deleted by `down`, even when the lab applied its
/// label to it (it is not in the ownership record).
#[tokio::test(start_paused = true)]
async fn down_keeps_a_namespace_that_was_there_before_the_lab_labelled_it() {
    let h = harness(Shape::Hub);
    let hub = api(&h, "hub").await;
    hub.apply(&json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cluster-inventory"}}))
        .await
        .unwrap();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    let ns: Value = hub
        .get(&r("v1", "Namespace", None, "cluster-inventory"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ns["metadata"]["labels"][LAB_LABEL], "sandbox", "{ns:#}");
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    assert!(
        hub.get(&r("v1", "Namespace", None, "cluster-inventory"))
            .await
            .unwrap()
            .is_some(),
        "a namespace someone else made survives down"
    );
    assert!(
        hub.get(&r("v1", "Namespace", None, "open-cluster-management"))
            .await
            .unwrap()
            .is_none(),
        "the namespace the lab created goes"
    );
}
