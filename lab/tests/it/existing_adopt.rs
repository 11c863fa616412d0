//! `existing.adopt`, in the simulated lab (a test double): `up` refuses an existing cluster that already
//! runs OCM it did not install, before writing anything, unless the topology says `adopt: true`; then it
//! uses that install as it is, and `down` removes only what the lab created.

use ocm_lab::backend::ObjectRef;
use ocm_lab::topology::LAB_LABEL;
use serde_json::json;

use crate::engine::{Harness, failure};
use crate::existing_lifecycle::{Shape, api, topology};

fn load(text: &str) -> ocm_lab::topology::Lab {
    match ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", text) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

/// Our lab (all clusters existing) and, on the same simulated clusters, someone else's OCM: another lab,
/// `theirs`, brought up there first (its releases are labelled as `theirs`, not ours). `their_edit`
/// changes their topology.
async fn ours_over_theirs(adopt: bool, their_edit: &[(&str, &str)]) -> Harness {
    let mut ours_text = topology(Shape::All);
    if adopt {
        ours_text = ours_text.replace("context: their-", "adopt: true, context: their-");
    }
    let ours = Harness::new(load(&ours_text));
    // Their OCM: the hub and the klusterlets only, the spokes joined; no sets, addons or accounts.
    let mut their_text = "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {name: theirs}\nspec:\n  hub:\n    name: hub\n    featureGates: [ClusterProfile, ResourceCleanup]\n    existing: {context: their-hub}\n  spokes:\n    - name: cluster1\n      existing: {context: their-cluster1}\n    - name: cluster2\n      existing: {context: their-cluster2}\n".to_owned();
    for (from, to) in their_edit {
        assert!(their_text.contains(from), "{from:?}");
        their_text = their_text.replacen(from, to, 1);
    }
    let mut theirs = Harness::new(load(&their_text));
    theirs.sim = ours.sim.clone();
    ours.sim.with_world(|w| {
        for c in ["hub", "cluster1", "cluster2"] {
            w.add_foreign_cluster(c);
        }
    });
    let (res, _) = theirs.run("up").await;
    // Their OCM is installed and joined; their verification may fail (they have no sets).
    assert!(
        res.ok || res.failed.as_ref().is_some_and(|(s, _)| s == "verify"),
        "their up: {}",
        failure(&res)
    );
    ours
}

fn writes(h: &Harness) -> usize {
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
}

#[tokio::test(start_paused = true)]
async fn up_refuses_existing_clusters_running_ocm_it_did_not_install_and_writes_nothing() {
    let h = ours_over_theirs(false, &[]).await;
    let before = writes(&h);
    let (res, _) = h.run("up").await;
    assert!(!res.ok, "up must refuse");
    let (step, e) = res.failed.clone().unwrap();
    assert_eq!(step, "preflight");
    assert!(
        e.message.contains(
            "cluster `hub` already runs Open Cluster Management that this lab did not install"
        ),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("ClusterManager cluster-manager"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains("cluster `cluster1` already runs")
            && e.message.contains("Klusterlet klusterlet"),
        "{}",
        e.message
    );
    assert!(
        e.message.contains(
            "Helm release open-cluster-management/cluster-manager (not installed by lab `sandbox`)"
        ),
        "{}",
        e.message
    );
    let help = e.help.unwrap_or_default();
    for field in [
        "`spec.hub.existing`",
        "`spec.spokes[0].existing`",
        "`spec.spokes[1].existing`",
    ] {
        assert!(help.contains(field), "{help}");
    }
    assert!(help.contains("set `adopt: true`"), "{help}");
    assert_eq!(writes(&h), before, "a refused up writes nothing");
}

#[tokio::test(start_paused = true)]
async fn a_spoke_with_only_an_agent_namespace_is_refused_too() {
    let lab = load(&topology(Shape::Spokes));
    let h = Harness::new(lab);
    h.sim.with_world(|w| {
        w.add_foreign_cluster("cluster1");
        w.add_foreign_cluster("cluster2");
        w.put_object(
            "cluster2",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "open-cluster-management-agent"}}),
        )
        .unwrap();
    });
    let (res, _) = h.run("up").await;
    let (step, e) = res.failed.clone().expect("refused");
    assert_eq!(step, "preflight");
    assert!(
        e.message.contains("cluster `cluster2` already runs Open Cluster Management that this lab did not install: namespace open-cluster-management-agent"),
        "{}",
        e.message
    );
    assert!(!e.message.contains("cluster1"), "{}", e.message);
    assert!(
        e.help
            .unwrap_or_default()
            .contains("`spec.spokes[1].existing`")
    );
}

#[tokio::test(start_paused = true)]
async fn with_adopt_up_uses_their_ocm_changes_none_of_it_and_down_removes_only_the_labs() {
    let h = ours_over_theirs(true, &[]).await;
    let releases = |h: &Harness, c: &str| h.sim.with_world(|w| w.releases(c));
    let theirs_before = releases(&h, "hub");
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    // Their releases are theirs still, not upgraded; the addons (theirs has none) are the lab's.
    let after = releases(&h, "hub");
    assert_eq!(
        after["open-cluster-management-addon/cluster-proxy"].labels[LAB_LABEL],
        "sandbox"
    );
    for (key, rel) in &theirs_before {
        assert_eq!(after[key].revision, rel.revision, "{key} was upgraded");
        assert_eq!(after[key].labels[LAB_LABEL], "theirs", "{key}");
    }
    assert!(
        releases(&h, "cluster1")
            .values()
            .all(|r| r.labels[LAB_LABEL] == "theirs"),
        "the lab installed a release on an adopted spoke"
    );
    let (res, _) = h.run("verify").await;
    assert!(res.ok, "{}", failure(&res));

    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    let mc = |n: &str| {
        ObjectRef::new(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            n,
        )
    };
    for n in ["cluster1", "cluster2"] {
        assert!(
            hub.get(&mc(n)).await.unwrap().is_some(),
            "the registration of adopted spoke {n} stays"
        );
    }
    assert!(
        hub.get(&ObjectRef::new(
            "operator.open-cluster-management.io/v1",
            "ClusterManager",
            None,
            "cluster-manager"
        ))
        .await
        .unwrap()
        .is_some()
    );
    assert_eq!(
        releases(&h, "hub").keys().collect::<Vec<_>>(),
        theirs_before.keys().collect::<Vec<_>>(),
        "their releases stay, the lab's go"
    );
    let sets = ObjectRef::new(
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSet",
        None,
        "sandbox-fleet",
    );
    assert!(
        hub.get(&sets).await.unwrap().is_none(),
        "the lab's own set goes"
    );
    for r in ["cluster-proxy", "managed-serviceaccount"] {
        assert!(
            !releases(&h, "hub").contains_key(&format!("open-cluster-management-addon/{r}")),
            "the lab's own {r} release goes"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_adopted_hub_without_the_gates_the_topology_needs_is_refused_with_what_to_enable() {
    let h = ours_over_theirs(
        true,
        &[(
            "featureGates: [ClusterProfile, ResourceCleanup]",
            "featureGates: [ResourceCleanup]",
        )],
    )
    .await;
    let before = writes(&h);
    let (res, _) = h.run("up").await;
    let (step, e) = res.failed.clone().expect("refused");
    assert_eq!(step, "preflight");
    assert!(
        e.message.contains("`hub` (adopted): hub feature gate `ClusterProfile` is not enabled on ClusterManager cluster-manager"),
        "{}",
        e.message
    );
    assert!(
        e.help
            .unwrap_or_default()
            .contains("kubectl edit clustermanager")
    );
    assert_eq!(writes(&h), before);
}

/// `adopt: true` on clusters without OCM changes nothing: the lab installs it all, and `down` removes it
/// all again, the registrations and bootstrap Secrets of its joins included.
#[tokio::test(start_paused = true)]
async fn adopt_on_clusters_without_ocm_installs_it_and_down_removes_it() {
    let text = topology(Shape::All).replace("context: their-", "adopt: true, context: their-");
    let h = Harness::new(load(&text));
    h.sim.with_world(|w| {
        for c in ["hub", "cluster1", "cluster2"] {
            w.add_foreign_cluster(c);
        }
    });
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(
        h.sim.with_world(|w| w.releases("cluster1"))["open-cluster-management/klusterlet"].labels
            [LAB_LABEL],
        "sandbox"
    );
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    let hub = api(&h, "hub").await;
    for n in ["cluster1", "cluster2"] {
        let mc = ObjectRef::new(
            "cluster.open-cluster-management.io/v1",
            "ManagedCluster",
            None,
            n,
        );
        assert!(
            hub.get(&mc).await.unwrap().is_none(),
            "{n}'s registration stays"
        );
        let secret = ObjectRef::new(
            "v1",
            "Secret",
            Some("open-cluster-management-agent"),
            "bootstrap-hub-kubeconfig",
        );
        assert!(
            api(&h, n).await.get(&secret).await.unwrap().is_none(),
            "{n}'s bootstrap Secret stays"
        );
        assert!(h.sim.with_world(|w| w.releases(n)).is_empty());
    }
}
