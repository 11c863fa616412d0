//! `ocm-lab ci matrix` and `ci contexts`: the GitHub Actions matrix against the
//! catalog, what `--runner-memory` leaves out, and the contexts the Action exposes.

use serde_json::Value;

use crate::common::{lab, ocm_lab, ocm_lab_env};
use ocm_lab::topology::{Provider, catalog};

fn kind_clusters(topology: &str) -> u64 {
    lab(topology)
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
        .count() as u64
}

fn include(stdout: &str) -> Vec<(String, String, String, u64)> {
    let v: Value = serde_json::from_str(stdout).unwrap();
    assert_eq!(
        v.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["include"],
        "any other top-level key would become a matrix dimension"
    );
    v["include"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["topology"].as_str().unwrap().to_owned(),
                e["node"].as_str().unwrap().to_owned(),
                e["k8s"].as_str().unwrap().to_owned(),
                e["clusters"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_matrix_is_every_embedded_topology_times_every_catalog_node_image() {
    let r = ocm_lab(&["ci", "matrix"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.lines().count(), 1, "one line, for $GITHUB_OUTPUT");
    let mut expected = Vec::new();
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        for image in catalog::KNOWN_KIND_NODE_IMAGES {
            let k8s = catalog::node_image_version(image).unwrap().to_string();
            expected.push((
                (*name).to_owned(),
                (*image).to_owned(),
                k8s,
                kind_clusters(name),
            ));
        }
    }
    assert_eq!(include(&r.stdout), expected);
    assert!(
        expected.iter().any(|e| e.2 == "1.35.0") && expected.len() >= 6,
        "{expected:?}"
    );
}

#[test]
fn runner_memory_leaves_out_the_topologies_whose_kind_clusters_do_not_fit_and_says_so() {
    // Just enough for the default lab's three clusters: the workshop's five do not fit.
    let mib = (ocm_lab::commands::doctor::MIB_PER_CLUSTER * kind_clusters("default")).to_string();
    let r = ocm_lab(&[
        "ci",
        "matrix",
        "--runner-memory",
        &mib,
        "--node-image",
        catalog::DEFAULT_KIND_NODE_IMAGE,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let topologies: Vec<String> = include(&r.stdout).into_iter().map(|e| e.0).collect();
    assert_eq!(topologies, ["default", "minimal"]);
    assert!(
        r.stderr
            .contains("left out workshop on 1.36.1: memory: 5 kind clusters need 7680 MiB")
            && r.stderr.contains(&format!("the runner has {mib} MiB")),
        "{}",
        r.stderr
    );
    // One MiB less and the default lab goes too; units are understood.
    let r = ocm_lab(&[
        "ci",
        "matrix",
        "--runner-memory",
        "4607MiB",
        "-t",
        "default",
        "-t",
        "minimal",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let topologies: Vec<String> = include(&r.stdout).into_iter().map(|e| e.0).collect();
    assert_eq!(topologies, ["minimal", "minimal"]);
    // GitHub's standard runner (16 GB) holds every embedded topology.
    let r = ocm_lab(&["ci", "matrix", "--runner-memory", "16GB"]);
    assert_eq!(
        include(&r.stdout).len(),
        include(&ocm_lab(&["ci", "matrix"]).stdout).len()
    );
}

/// GitHub's standard Linux runner has the memory for the workshop's five clusters but not the CPUs; the
/// matrix says what it left out and why, and which resources it was not given to check.
#[test]
fn runner_cpus_and_disk_leave_out_what_the_runner_cannot_run_and_say_what_went_unchecked() {
    let r = ocm_lab(&[
        "ci",
        "matrix",
        "--runner-memory",
        "16GB",
        "--runner-cpus",
        "4",
        "--runner-disk",
        "14GB",
        "--node-image",
        catalog::DEFAULT_KIND_NODE_IMAGE,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let topologies: Vec<String> = include(&r.stdout).into_iter().map(|e| e.0).collect();
    assert_eq!(topologies, ["default", "minimal"]);
    assert!(
        r.stderr.contains(
            "left out workshop on 1.36.1: CPU: 5 kind clusters keep about 5 CPUs busy (1 each), the runner has 4"
        ) && r.stderr.contains("checked the runner's memory, CPU and disk"),
        "{}",
        r.stderr
    );
    // A small disk leaves the default lab out too, and says so.
    let r = ocm_lab(&[
        "ci",
        "matrix",
        "--runner-disk",
        "7000MiB",
        "--node-image",
        catalog::DEFAULT_KIND_NODE_IMAGE,
        "-o",
        "human",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains(
            "default      1.36.1     left out: disk: 3 kind clusters take about 7168 MiB"
        ) && r
            .stdout
            .contains("not checked, not given: memory (--runner-memory), CPU (--runner-cpus)"),
        "{}",
        r.stdout
    );
    let r = ocm_lab(&["ci", "matrix", "--runner-cpus", "0"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn a_topology_file_is_named_as_given_and_its_existing_clusters_take_no_memory() {
    let file = crate::common::root().join("examples/existing-clusters.yaml");
    let file = file.to_str().unwrap();
    let r = ocm_lab(&[
        "ci",
        "matrix",
        "-t",
        file,
        "--node-image",
        "my/node:dev",
        "--runner-memory",
        "1",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let entries = include(&r.stdout);
    let kind = kind_clusters(file);
    assert_eq!(
        entries,
        [(
            file.to_owned(),
            "my/node:dev".to_owned(),
            "my/node:dev".to_owned(),
            kind
        )]
    );
}

#[test]
fn a_bad_runner_memory_or_one_nothing_fits_in_is_an_input_error_that_says_what_to_give() {
    for bad in ["16XB", "lots", "0"] {
        let r = ocm_lab(&["ci", "matrix", "--runner-memory", bad]);
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert!(r.stdout.is_empty());
        assert!(
            r.stderr.contains("--runner-memory") && r.stderr.contains(&format!("`{bad}`")),
            "{bad}: {}",
            r.stderr
        );
    }
    let r = ocm_lab(&["ci", "matrix", "--runner-memory", "2GiB"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stdout.is_empty(),
        "no matrix GitHub would refuse: {}",
        r.stdout
    );
    assert!(
        r.stderr
            .contains("no combination of the matrix fits in the runner")
            && r.stderr.contains("`minimal`, lacks memory")
            && r.stderr.contains("3072 MiB (1536 MiB each)")
            && r.stderr.contains("--runner-memory 16GB"),
        "{}",
        r.stderr
    );
    let r = ocm_lab(&["ci", "matrix", "-t", "no-such-topology"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
}

#[test]
fn contexts_name_the_hub_and_spokes_as_up_makes_them_and_the_kubeconfig_it_writes() {
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kc");
    let r = ocm_lab_env(&["ci", "contexts", "-t", "default"], &[("KUBECONFIG", &kc)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    let lab = lab("default");
    assert_eq!(v["hub"], lab.hub.cluster.context.as_str());
    assert_eq!(v["hub"], format!("kind-{}", lab.hub.cluster.name));
    let spokes: Vec<&str> = lab
        .spokes
        .iter()
        .map(|s| s.cluster.context.as_str())
        .collect();
    assert_eq!(v["spokes"], serde_json::json!(spokes));
    assert_eq!(v["kubeconfig"], kc.to_str().unwrap());
}
