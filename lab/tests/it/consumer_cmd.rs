//! `ocm-lab consumer NAMESPACE` on the simulated lab: what a ClusterProfile consumer needs, read-only, ready
//! to apply.

use serde_json::{Value, json};

use crate::common::Cli;

/// The image the lab runs for managed-serviceaccount, from the version catalog.
fn msa_image() -> String {
    let lab = crate::common::lab("default");
    let version = lab.addons.managed_serviceaccount.unwrap().release.version;
    ocm_lab::topology::catalog::chart_images(
        ocm_lab::topology::catalog::Chart::ManagedServiceaccount,
        version,
    )
    .unwrap()[0]
        .reference(version)
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn the_yaml_applies_a_service_account_that_may_read_profiles_and_get_secrets_and_the_provider_file()
{
    let cli = Cli::up();
    let world = cli.world();
    let r = cli.run(&["consumer", "cluster-inventory", "--simulate", "-o", "yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(cli.world(), world, "the command changes nothing in the lab");
    assert!(!r.stdout.contains("sim-token-"), "no token is printed");

    // The profiles, read from the hub, as comments.
    for cluster in ["cluster1", "cluster2"] {
        let line = format!(
            "#   {cluster}: server https://cluster-proxy-addon-user.open-cluster-management-addon:9092/{cluster}; credential Secret {cluster}-inventory-reader synced"
        );
        assert!(r.stdout.contains(&line), "{line:?} not in\n{}", r.stdout);
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple(&r.stdout).unwrap();
    let docs: Vec<&Value> = docs.iter().filter(|d| !d.is_null()).collect();
    let kinds: Vec<(&str, &str)> = docs
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap(),
                d["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("ServiceAccount", "clusterprofile-consumer"),
            ("Role", "clusterprofile-consumer-clusterprofiles"),
            ("RoleBinding", "clusterprofile-consumer-clusterprofiles"),
            ("Role", "clusterprofile-consumer-cp-creds"),
            ("RoleBinding", "clusterprofile-consumer-cp-creds"),
            ("ConfigMap", "clusterprofile-consumer-provider-file"),
        ]
    );
    assert!(
        docs.iter()
            .all(|d| d["metadata"]["namespace"] == "cluster-inventory"
                && d["metadata"]["labels"].is_null()),
        "in the namespace, and without the lab label that `reset` prunes by"
    );
    // cp-creds GETs the synced Secret: that, and nothing more.
    assert_eq!(
        docs[3]["rules"],
        json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}])
    );
    assert_eq!(
        docs[4]["subjects"],
        json!([{"kind": "ServiceAccount", "name": "clusterprofile-consumer", "namespace": "cluster-inventory"}])
    );
    let file: Value = serde_json::from_str(
        docs[5]["data"]["clusterprofile-provider-file.json"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        file,
        json!({"providers": [{"name": "open-cluster-management", "execConfig": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": "/plugins/cp-creds",
            "args": ["--managed-serviceaccount=inventory-reader"], "provideClusterInfo": true,
            "interactiveMode": "Never"}}]})
    );
    // The Pod spec, as a comment: the initContainer copies cp-creds out of the image the lab runs.
    let spec: String = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("# spec:"))
        .map(|l| format!("{}\n", l.strip_prefix("# ").unwrap()))
        .collect();
    let spec: Value = serde_saphyr::from_str(&spec).unwrap();
    let init = &spec["spec"]["initContainers"][0];
    assert_eq!(init["image"], msa_image().as_str());
    assert_eq!(
        init["command"],
        json!(["cp", "/cp-creds", "/plugins/cp-creds"])
    );
    assert_eq!(
        spec["spec"]["serviceAccountName"],
        "clusterprofile-consumer"
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn json_gives_the_same_as_one_object_and_the_names_follow_the_options() {
    let cli = Cli::up();
    let r = cli.run(&[
        "consumer",
        "cluster-inventory",
        "--simulate",
        "--service-account",
        "kueue",
        "--msa",
        "other",
        "-o",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let kit: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(kit["simulated"], true);
    assert_eq!(kit["managedServiceAccount"], "other");
    assert_eq!(kit["pluginImage"], msa_image().as_str());
    assert_eq!(
        kit["profiles"][0],
        json!({"name": "cluster1",
               "server": "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1",
               "syncedSecret": "cluster1-other", "synced": false})
    );
    assert_eq!(kit["objects"][0]["metadata"]["name"], "kueue");
    assert_eq!(
        kit["providerFile"]["providers"][0]["execConfig"]["args"],
        json!(["--managed-serviceaccount=other"])
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_namespace_no_set_is_bound_to_is_refused_naming_the_bound_ones() {
    let cli = Cli::up();
    let r = cli.run(&["consumer", "elsewhere", "--simulate"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no ManagedClusterSet of lab `sandbox` is bound to it")
            && r.stderr
                .contains("name a bound namespace (cluster-inventory"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty());
}
