//! An existing cluster's kubeconfig defaults, as in kubectl, to `$KUBECONFIG` (all of its files, merged:
//! the first file to set a name wins) or `~/.kube/config`.

use ocm_lab::topology::Provider;

fn kubeconfig(server: &str, contexts: &[&str]) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: {}\nclusters:\n",
        contexts[0]
    );
    for c in contexts {
        out += &format!("- name: {c}\n  cluster: {{server: '{server}'}}\n");
    }
    out += "users:\n";
    for c in contexts {
        out += &format!("- name: {c}\n  user: {{token: t}}\n");
    }
    out += "contexts:\n";
    for c in contexts {
        out += &format!("- name: {c}\n  context: {{cluster: {c}, user: {c}}}\n");
    }
    out
}

#[test]
fn existing_clusters_read_every_file_of_kubeconfig_merged_as_kubectl_merges() {
    // It sets KUBECONFIG, HOME and the state folder for the process: only in a process of its own.
    if crate::common::rerun_alone_with_env(
        "existing_kubeconfig::existing_clusters_read_every_file_of_kubeconfig_merged_as_kubectl_merges",
        &[],
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.yaml");
    let b = dir.path().join("b.yaml");
    std::fs::write(&a, kubeconfig("https://first:6443", &["ocm-hub"])).unwrap();
    std::fs::write(
        &b,
        kubeconfig("https://second:6443", &["ocm-east", "ocm-hub", "ocm-west"]),
    )
    .unwrap();
    let list = std::env::join_paths([&a, &dir.path().join("missing.yaml"), &b]).unwrap();
    // This process runs this test alone: the environment is its own.
    unsafe {
        std::env::set_var("KUBECONFIG", &list);
        std::env::set_var("OCM_LAB_STATE_DIR", dir.path().join("state"));
        std::env::set_var("HOME", dir.path().join("home"));
    }
    let lab = crate::common::lab(
        crate::common::root()
            .join("examples/existing-clusters.yaml")
            .to_str()
            .unwrap(),
    );
    let east = lab.cluster("east").unwrap();
    let Provider::Existing {
        kubeconfig,
        context,
    } = &east.provider
    else {
        panic!("east is existing: {east:?}");
    };
    assert_eq!(context, "ocm-east");
    assert_eq!(std::ffi::OsStr::new(kubeconfig), list.as_os_str());

    let state = ocm_lab::state::StateDir::for_lab(&lab.name).unwrap();
    let merged = state.existing_kubeconfig("east", kubeconfig).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&merged).unwrap();
    let names: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["ocm-hub", "ocm-east", "ocm-west"], "{kc:?}");
    // The first file to name `ocm-hub` wins, and its current-context stays.
    let hub = kc.clusters.iter().find(|c| c.name == "ocm-hub").unwrap();
    assert_eq!(
        hub.cluster.as_ref().unwrap().server.as_deref(),
        Some("https://first:6443")
    );
    assert_eq!(kc.current_context.as_deref(), Some("ocm-hub"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&merged).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // Without KUBECONFIG: ~/.kube/config, not a literal `~`.
    unsafe { std::env::remove_var("KUBECONFIG") };
    let lab = crate::common::lab(
        crate::common::root()
            .join("examples/existing-clusters.yaml")
            .to_str()
            .unwrap(),
    );
    let Provider::Existing { kubeconfig, .. } = &lab.cluster("hub").unwrap().provider else {
        panic!("hub is existing");
    };
    assert_eq!(
        std::path::Path::new(kubeconfig),
        dir.path().join("home/.kube/config")
    );
}
