//! The version catalog's image table against the real charts: `plan --out` renders every pinned chart of
//! every shipped topology with the real `helm template` and ocm-lab's post-renderer (what `up` installs),
//! and the images those objects name must be exactly the ones the table lists for that chart version.
//! Needs helm and the chart repository, so it is ignored here and run by the e2e workflow
//! (`cargo test -p ocm-lab --test it -- --ignored catalog_images_helm`).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::common::ocm_lab;

#[test]
#[ignore = "needs helm and network: run by the e2e workflow"]
fn the_catalog_image_table_matches_helm_template_of_the_real_charts() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let dir = tempfile::tempdir().unwrap();
        let out_dir = dir.path().join("plan");
        let out = ocm_lab(&["plan", "-t", name, "--out", out_dir.to_str().unwrap()]);
        assert_eq!(out.code, 0, "plan -t {name} --out: {}", out.stderr);
        let index: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(out_dir.join("charts.yaml")).unwrap())
                .unwrap();
        assert!(
            index["notIncluded"].is_null(),
            "topology {name}: helm rendered not every chart: {}",
            index["notIncluded"]
        );
        let mut rendered: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
        for chart in index["charts"].as_array().unwrap() {
            let text =
                std::fs::read_to_string(out_dir.join(chart["rendered"].as_str().unwrap())).unwrap();
            let objects: Vec<Value> = serde_saphyr::from_multiple(&text).unwrap();
            let key = (
                chart["chart"].as_str().unwrap().to_owned(),
                chart["version"].as_str().unwrap().to_owned(),
            );
            rendered.entry(key).or_default().extend(
                objects
                    .iter()
                    .flat_map(ocm_lab::images::images_in)
                    .map(|(image, _)| image),
            );
        }
        let lab = crate::common::lab(name);
        for chart in crate::common::plan(&lab).charts() {
            let table =
                ocm_lab::topology::catalog::chart_image_references(chart.chart, &chart.version)
                    .expect("the catalog knows every pinned chart");
            let key = (chart.chart.name().to_owned(), chart.version.clone());
            assert_eq!(
                rendered.get(&key),
                Some(&table),
                "topology {name}: {} {}: helm template names other images than the catalog",
                chart.chart,
                chart.version
            );
        }
    }
}
