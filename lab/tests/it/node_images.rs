//! The `node-images` step on the simulated lab: with a bundle (`up --bundle`,
//! `spec.bundle`) every kind node gets the images its cluster runs from the bundle before any chart goes
//! in, so no simulated node pulls anything; without one the step pre-pulls them (`crictl pull`) before
//! the charts, and a rollout pulls only what is still missing (`Behaviour::ImagePull`). The bundles are the
//! small ones `bundle_cmd.rs` writes (the simulated import takes each archive for the image the manifest
//! names); the real import into a node is exercised against a stand-in node in `node_load_standin.rs`.

use std::collections::BTreeMap;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::bundle_cmd::{minimal_images, node_image, write_bundle};
use crate::common::{self, ocm_lab_env};
use crate::engine::Harness;

/// The simulated world a CLI run left in `state` for lab `lab`.
fn world(state: &std::path::Path, lab: &str) -> Value {
    let text = std::fs::read_to_string(state.join(lab).join("simulated/sim-world.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every pull recorded in the world: (node, image, by).
fn pulls(w: &Value) -> Vec<(String, String, String)> {
    w["pulls"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["node"].as_str().unwrap().to_owned(),
                        p["image"].as_str().unwrap().to_owned(),
                        p["by"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Lab cluster → the chart images `images list -t minimal` says it runs.
fn chart_images_per_cluster() -> BTreeMap<String, Vec<String>> {
    let r = common::ocm_lab(&["images", "list", "-t", "minimal", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in list.iter().filter(|i| i["kind"] == "chart") {
        for c in i["clusters"].as_array().unwrap() {
            out.entry(c.as_str().unwrap().to_owned())
                .or_default()
                .push(i["image"].as_str().unwrap().to_owned());
        }
    }
    out
}

/// Asserts that each simulated node holds every chart image its cluster runs.
fn assert_nodes_hold_their_images(w: &Value) {
    let per_cluster = chart_images_per_cluster();
    assert!(!per_cluster.is_empty());
    for (cluster, images) in per_cluster {
        let node = format!("{cluster}-control-plane");
        let held: Vec<&str> = w["containers"][&node]["images"]
            .as_array()
            .unwrap_or_else(|| panic!("{node} holds no images: {}", w["containers"][&node]))
            .iter()
            .map(|i| i.as_str().unwrap())
            .collect();
        for image in images {
            assert!(
                held.contains(&image.as_str()),
                "{node} lacks {image}: {held:?}"
            );
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_simulated_from_a_bundle_pulls_nothing_on_any_node() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    write_bundle(&bundle, &minimal_images(), &node_image());
    let r = ocm_lab_env(
        &[
            "up",
            "--simulate",
            "-t",
            "minimal",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
        &[("OCM_LAB_STATE_DIR", &state)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = world(&state, "minimal");
    assert_eq!(pulls(&w), vec![], "no node may pull anything");
    assert_nodes_hold_their_images(&w);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_simulated_without_a_bundle_pre_pulls_in_the_node_images_step_and_the_pods_pull_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", "minimal"],
        &[("OCM_LAB_STATE_DIR", &state)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = world(&state, "minimal");
    let pulls = pulls(&w);
    assert!(!pulls.is_empty());
    let by_kubelet: Vec<_> = pulls.iter().filter(|p| p.2 != "crictl").collect();
    assert_eq!(
        by_kubelet,
        Vec::<&(String, String, String)>::new(),
        "every image was pre-pulled: a Pod had to pull"
    );
    assert_nodes_hold_their_images(&w);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn spec_bundle_in_the_topology_is_read_from_the_topology_files_folder() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let labdir = dir.path().join("lab");
    std::fs::create_dir(&labdir).unwrap();
    write_bundle(
        &labdir.join("lab-bundle.tar"),
        &minimal_images(),
        &node_image(),
    );
    let text = ocm_lab::embedded::topology("minimal").unwrap();
    assert!(text.contains("\nspec:\n"));
    let topology = labdir.join("lab.yaml");
    std::fs::write(
        &topology,
        text.replacen("\nspec:\n", "\nspec:\n  bundle: lab-bundle.tar\n", 1),
    )
    .unwrap();
    // Run from another folder: the relative path is the topology file's, not the current folder's.
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", topology.to_str().unwrap()],
        &[("OCM_LAB_STATE_DIR", &state)],
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let w = world(&state, "minimal");
    assert_eq!(pulls(&w), vec![], "no node may pull anything");
    assert_nodes_hold_their_images(&w);

    // A bundle that lacks an image the lab runs is refused before anything is created.
    let state2 = dir.path().join("state2");
    std::fs::create_dir(&state2).unwrap();
    let mut images = minimal_images();
    let dropped = images.pop().unwrap();
    write_bundle(&labdir.join("lab-bundle.tar"), &images, &node_image());
    let r = ocm_lab_env(
        &["up", "--simulate", "-t", topology.to_str().unwrap()],
        &[("OCM_LAB_STATE_DIR", &state2)],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    let squeezed: String = r
        .stderr
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '│')
        .collect();
    assert!(
        squeezed.contains(&format!("itlacks{dropped}")),
        "{}",
        r.stderr
    );
    assert_eq!(std::fs::read_dir(&state2).unwrap().count(), 0);

    // A path that names no file is a located topology error.
    std::fs::write(
        &topology,
        text.replacen("\nspec:\n", "\nspec:\n  bundle: no-such-bundle.tar\n", 1),
    )
    .unwrap();
    let r = ocm_lab_env(
        &["topology", "check", topology.to_str().unwrap()],
        &[("OCM_LAB_STATE_DIR", &state2)],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("spec.bundle")
            && r.stderr.contains("no-such-bundle.tar")
            && r.stderr.contains("lab.yaml:13"),
        "{}",
        r.stderr
    );
}

/// The pre-pull happens in `node-images[c]`, before any chart is installed on `c`, and the Pods then
/// pull nothing; without it (nothing to put into the nodes), the rollouts pull what they run.
#[tokio::test(start_paused = true)]
async fn the_pre_pull_of_each_cluster_comes_before_its_charts_and_a_rollout_pulls_only_what_is_missing()
 {
    let h = Harness::default_lab();
    let plan = common::plan_workflow(&h.lab, "up");
    let supply = ocm_lab::commands::bundle::node_images(&h.lab, &plan).unwrap();
    assert!(supply.bundle.is_none());
    let clusters: Vec<String> = supply.per_cluster.keys().cloned().collect();
    assert_eq!(clusters.len(), 3, "{clusters:?}");
    let (r, _) = h
        .run_plan_with(&plan, CancellationToken::new(), |_| {}, supply)
        .await;
    assert!(r.ok, "{:?}", r.failed);
    let calls = h.sim.calls();
    for c in &clusters {
        let node = format!("{c}-control-plane");
        let pulls: Vec<usize> = calls
            .iter()
            .enumerate()
            .filter(|(_, k)| k.verb == "docker.pull-in-node" && k.object.ends_with(&node))
            .map(|(i, _)| i)
            .collect();
        let first_chart = calls
            .iter()
            .position(|k| k.verb == "helm.upgrade-install" && &k.cluster == c)
            .unwrap_or_else(|| panic!("no chart installed on {c}"));
        assert!(!pulls.is_empty(), "nothing pre-pulled in {node}");
        assert!(
            pulls.iter().all(|i| *i < first_chart),
            "{c}: a pre-pull came after the first chart"
        );
    }
    let by_kubelet = h
        .sim
        .with_world(|w| w.pulls.iter().filter(|p| p.by == "kubelet").count());
    assert_eq!(by_kubelet, 0, "the Pods had to pull");

    // A lab whose nodes got nothing: the rollouts pull what each cluster runs, once per node and image.
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{:?}", r.failed);
    let pulled = h.sim.with_world(|w| w.pulls.clone());
    assert!(pulled.iter().all(|p| p.by == "kubelet"), "{pulled:?}");
    let hub_node = format!("{}-control-plane", h.lab.hub.cluster.name);
    assert!(
        pulled.iter().any(|p| p.node == hub_node
            && p.image == "quay.io/open-cluster-management/registration-operator:v1.3.1"),
        "{pulled:?}"
    );
    let mut seen = std::collections::BTreeSet::new();
    for p in &pulled {
        assert!(
            seen.insert((&p.node, &p.image)),
            "{} pulled {} twice",
            p.node,
            p.image
        );
    }
    // Every image a spoke's agents run was pulled on that spoke (the addon agents included).
    for image in [
        "quay.io/open-cluster-management/cluster-proxy:v0.10.0",
        "quay.io/open-cluster-management/managed-serviceaccount:v0.10.0",
    ] {
        assert!(
            pulled
                .iter()
                .any(|p| p.node == "cluster1-control-plane" && p.image == image),
            "{image}: {pulled:?}"
        );
    }
}

/// With a bundle, an import that fails stops the run at `node-images[<cluster>]`, naming the node, and
/// nothing is installed on that cluster (the charts wait for the images).
#[tokio::test(start_paused = true)]
async fn a_failed_import_stops_the_lab_before_any_chart_on_that_cluster() {
    use ocm_lab_sim::{Behaviour, Fault};
    let h = Harness::default_lab();
    let plan = common::plan_workflow(&h.lab, "up");
    let mut supply = ocm_lab::commands::bundle::node_images(&h.lab, &plan).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab-bundle.tar");
    std::fs::write(&file, b"archives").unwrap();
    supply.bundle = Some(
        supply
            .per_cluster
            .values()
            .flatten()
            .map(|image| {
                (
                    image.clone(),
                    ocm_lab::backend::ImageArchive {
                        image: image.clone(),
                        file: file.clone(),
                        offset: 0,
                        size: 8,
                    },
                )
            })
            .collect(),
    );
    h.sim.set_fault(
        Behaviour::NodeImageImport,
        Fault::FailAlways("ctr: no space left on device".into()),
    );
    let (r, _) = h
        .run_plan_with(&plan, CancellationToken::new(), |_| {}, supply)
        .await;
    assert!(!r.ok);
    let (step, e) = r.failed.expect("a step failed");
    assert!(step.starts_with("node-images["), "{step}: {e:?}");
    assert!(e.message.contains("no space left on device"), "{e:?}");
    let calls = h.sim.calls();
    assert!(
        !calls.iter().any(|k| k.verb == "helm.upgrade-install"),
        "a chart went in although its cluster's images did not: {:?}",
        calls
            .iter()
            .filter(|k| k.verb == "helm.upgrade-install")
            .collect::<Vec<_>>()
    );
    let pulled = h.sim.with_world(|w| w.pulls.clone());
    assert_eq!(pulled, vec![], "nothing may be pulled in bundle mode");
}
