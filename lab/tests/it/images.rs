//! `ocm-lab images list`: the images come from the version catalog (checked against the chart models) and match
//! the published charts' templates.

use std::collections::BTreeSet;

use ocm_lab::images::{ImageKind, LabImage};
use serde_json::Value;

use crate::common::{self, fixtures, ocm_lab};

fn images(lab: &ocm_lab::topology::Lab) -> Vec<LabImage> {
    ocm_lab::images::list(lab, &common::plan(lab)).expect("the image list renders")
}

/// The preload list for kind with ocm-lab's values: no chart pins a digest (the charts' templates, as
/// published in open-cluster-management-io/helm-charts).
fn facts_section_3(cluster_proxy: &str) -> BTreeSet<String> {
    let ocm = [
        "registration-operator",
        "registration",
        "work",
        "placement",
        "addon-manager",
    ]
    .map(|n| format!("quay.io/open-cluster-management/{n}:v1.3.1"));
    ocm.into_iter()
        .chain([
            format!("quay.io/open-cluster-management/cluster-proxy:v{cluster_proxy}"),
            "quay.io/open-cluster-management/managed-serviceaccount:v0.10.0".to_owned(),
        ])
        .collect()
}

#[test]
fn every_shipped_topology_runs_the_images_facts_section_3_lists_and_the_pinned_node_image() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let lab = common::lab(name);
        let list = images(&lab);
        let charts: BTreeSet<String> = list
            .iter()
            .filter(|i| i.kind == ImageKind::Chart)
            .map(|i| i.image.clone())
            .collect();
        let proxy = lab
            .addons
            .cluster_proxy
            .as_ref()
            .map(|c| c.release.version.to_owned())
            .expect("shipped topologies enable cluster-proxy");
        assert_eq!(charts, facts_section_3(&proxy), "topology {name}");
        assert!(
            list.iter()
                .filter(|i| i.kind == ImageKind::Chart)
                .all(|i| i.digest.is_none()),
            "topology {name}: no chart pins a digest"
        );
        let node: Vec<&LabImage> = list.iter().filter(|i| i.kind == ImageKind::Node).collect();
        assert_eq!(node.len(), 1, "topology {name}");
        assert_eq!(node[0].image, lab.versions.kind_node_image);
        assert!(
            node[0]
                .digest
                .as_deref()
                .is_some_and(|d| d.starts_with("sha256:")),
            "topology {name}: the node image is pinned by digest: {}",
            node[0].image
        );
        assert_eq!(node[0].clusters.len(), lab.clusters().count());
    }
}

#[test]
fn cluster_proxy_0_11_0_changes_only_the_cluster_proxy_image() {
    let text = common::default_with(
        "      version: 0.10.0\n      clusterSet",
        "      version: 0.11.0\n      clusterSet",
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .expect("valid")
        .lab;
    let charts: BTreeSet<String> = images(&lab)
        .into_iter()
        .filter(|i| i.kind == ImageKind::Chart)
        .map(|i| i.image)
        .collect();
    assert_eq!(charts, facts_section_3("0.11.0"));
}

#[test]
fn addon_agent_images_are_listed_for_the_spokes_the_addons_reach() {
    let lab = common::lab("default");
    let list = images(&lab);
    let on = |image: &str| -> Vec<String> {
        list.iter()
            .find(|i| i.image == image)
            .unwrap_or_else(|| panic!("{image} listed"))
            .clusters
            .clone()
    };
    for image in [
        "quay.io/open-cluster-management/cluster-proxy:v0.10.0",
        "quay.io/open-cluster-management/managed-serviceaccount:v0.10.0",
        "quay.io/open-cluster-management/registration:v1.3.1",
        "quay.io/open-cluster-management/work:v1.3.1",
    ] {
        let clusters = on(image);
        for spoke in &lab.spokes {
            assert!(
                clusters.contains(&spoke.cluster.name),
                "{image} on {clusters:?}"
            );
        }
        assert!(
            clusters.contains(&lab.hub.cluster.name),
            "{image} on {clusters:?}"
        );
    }
    // Only the cluster-manager's images stay on the hub.
    assert_eq!(
        on("quay.io/open-cluster-management/placement:v1.3.1"),
        vec![lab.hub.cluster.name.clone()]
    );
}

#[test]
#[cfg_attr(
    ocm_lab_tests_no_fixtures,
    ignore = "needs ../shared/fixtures (upstream CRDs, recorded objects), not beside this checkout"
)]
fn the_images_a_recorded_chart_render_names_are_in_the_list() {
    let dir = fixtures();
    let text = std::fs::read_to_string(
        dir.join("charts/cluster-proxy-0.10.0/rendered-managedproxyconfiguration.example.yaml"),
    )
    .expect("fixture reads");
    let mpc: Value = serde_saphyr::from_str(&text).expect("fixture parses");
    let found: BTreeSet<String> = ocm_lab::images::images_in(&mpc)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        found,
        BTreeSet::from(["quay.io/open-cluster-management/cluster-proxy:v0.10.0".to_owned()])
    );
    let listed: BTreeSet<String> = images(&common::lab("default"))
        .into_iter()
        .map(|i| i.image)
        .collect();
    assert!(found.is_subset(&listed), "{found:?} not in {listed:?}");
}

#[test]
fn images_list_prints_json_with_where_each_image_was_found() {
    let out = ocm_lab(&["images", "list", "-t", "minimal", "-o", "json"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let list: Vec<Value> = serde_json::from_str(&out.stdout).expect("JSON");
    let work = list
        .iter()
        .find(|i| i["image"] == "quay.io/open-cluster-management/work:v1.3.1")
        .expect("work image listed");
    let sources: Vec<&str> = work["sources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        sources
            .iter()
            .any(|s| s.contains("cluster-manager 1.3.1: cluster-manager templates/cluster_manager.yaml workImagePullSpec")),
        "{sources:?}"
    );
    let human = ocm_lab(&["images", "list", "-t", "minimal"]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    assert!(
        human.stdout.contains("8 images, 1 pinned by digest"),
        "{}",
        human.stdout
    );
}

/// The human table keeps its columns narrow and ends each row with the whole image reference: the
/// workshop's five clusters become a count, and only a reference itself can reach past 80 columns.
#[test]
fn images_list_ends_each_row_with_the_whole_reference_after_narrow_columns() {
    let json = ocm_lab(&["images", "list", "-t", "workshop", "-o", "json"]);
    let list: Vec<Value> = serde_json::from_str(&json.stdout).expect("JSON");
    let human = ocm_lab(&["images", "list", "-t", "workshop"]);
    assert_eq!(human.code, 0, "{}", human.stderr);
    let rows: Vec<&str> = human.stdout.lines().skip(1).take(list.len()).collect();
    for (row, image) in rows.iter().zip(&list) {
        let reference = image["image"].as_str().unwrap();
        let columns = row
            .strip_suffix(reference)
            .unwrap_or_else(|| panic!("{row} does not end with {reference}"));
        assert!(columns.chars().count() <= 40, "{row}");
    }
    assert!(human.stdout.contains("5 clusters"), "{}", human.stdout);
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn doctor_counts_the_images_the_local_docker_engine_lacks_and_says_what_to_do() {
    let (d, image) = crate::docker::docker_with_test_image().await;
    let mut lab = common::lab("minimal");
    // The test image stands in for the node image, which has its own finding (`image`): it is not
    // counted here, so the one image of the list the engine has makes no "present".
    lab.versions.kind_node_image = image.clone();
    let listed = ocm_lab::images::for_doctor(
        &lab,
        &ocm_lab::workflow::Sources::embedded(),
        &ocm_lab::patch::PatchSet::embedded().unwrap(),
    );
    let f = ocm_lab::commands::checks::doctor_finding(&listed, &d).await;
    assert_eq!(f.level, ocm_lab::commands::doctor::Level::Warn, "{f:?}");
    assert!(f.detail.starts_with("7 of 7 images"), "{}", f.detail);
    assert!(f.detail.contains("(0 present)"), "{}", f.detail);
    assert!(!f.detail.contains(&image), "{}", f.detail);
    assert!(
        f.detail
            .contains("quay.io/open-cluster-management/work:v1.3.1"),
        "{}",
        f.detail
    );
    assert!(
        f.fix.as_deref().unwrap_or_default().contains("docker pull"),
        "{f:?}"
    );
}

/// The version catalog's image table (what a real lab pre-pulls) against the simulated lab's chart models:
/// every chart version the catalog pins, rendered by the models with the lab's values, names exactly the
/// images the table lists for it. A chart bump that updates one and not the other fails here; the e2e
/// workflow checks the table against `helm template` of the real charts the same way.
#[test]
fn the_catalog_image_table_matches_the_simulated_chart_models() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let lab = common::lab(name);
        let plan = common::plan(&lab);
        let patches = ocm_lab::patch::PatchSet::embedded().unwrap();
        for chart in plan.charts() {
            let rendered = ocm_lab_sim::render_chart_patched(chart, &chart.values, &patches)
                .expect("the simulated model renders the pinned chart");
            let modelled: BTreeSet<String> = rendered
                .objects
                .iter()
                .flat_map(ocm_lab::images::images_in)
                .map(|(image, _)| image)
                .collect();
            let table =
                ocm_lab::topology::catalog::chart_image_references(chart.chart, &chart.version)
                    .expect("the catalog knows every pinned chart's images");
            assert_eq!(
                modelled, table,
                "topology {name}: {} {}",
                chart.chart, chart.version
            );
        }
    }
}
