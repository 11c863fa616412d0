//! `spec.registry`: mirrors rendered into every kind cluster's config in the containerd 2.x form
//! (kubernetes-sigs/kind v0.32.0 `site/static/examples/kind-with-registry.sh`; containerd/containerd v2.3.1
//! `docs/hosts.md`), typed and located errors for bad mirrors, and the local registry.

use ocm_lab::backend::kind::{CONFIG_PATH_PATCH, NODE_CERTS_DIR, kind_config};
use serde_json::Value;

use crate::common::{self, default_with, ocm_lab, topology_errors};

const MIRRORS: &str = "spec:\n  registry:\n    mirrors:\n      quay.io: http://mirror.classroom:5000/\n      docker.io: https://hub-mirror.example.com\n  hub:";

fn with_registry(block: &str) -> String {
    default_with("spec:\n  hub:", block)
}

fn lab(text: &str) -> ocm_lab::topology::Lab {
    match ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", text) {
        Ok(l) => l.lab,
        Err(e) => panic!("{}", ocm_lab::render(&e)),
    }
}

#[test]
fn mirrors_become_a_config_path_patch_and_a_hosts_toml_per_registry_for_every_cluster() {
    let lab = lab(&with_registry(MIRRORS));
    let state = ocm_lab::state::StateDir {
        path: "/state/lab".into(),
    };
    let regs = ocm_lab::backend::kind::NodeRegistries::for_lab(&lab, &state);
    assert_eq!(
        regs.mirrors,
        vec![
            (
                "quay.io".to_owned(),
                "http://mirror.classroom:5000".to_owned()
            ),
            (
                "docker.io".to_owned(),
                "https://hub-mirror.example.com".to_owned()
            ),
        ]
    );
    for cluster in lab.clusters() {
        let config: Value =
            serde_saphyr::from_str(&kind_config(40000, &regs)).expect("kind config is YAML");
        let patches = config["containerdConfigPatches"]
            .as_array()
            .expect("patches");
        assert_eq!(
            patches,
            &vec![Value::from(CONFIG_PATH_PATCH)],
            "{}",
            cluster.name
        );
        assert!(CONFIG_PATH_PATCH.contains("plugins.\"io.containerd.grpc.v1.cri\".registry"));
        assert!(CONFIG_PATH_PATCH.contains("config_path = \"/etc/containerd/certs.d\""));
        // No deprecated `mirrors` table: containerd 2.3 refuses it next to config_path (containerd/containerd
        // v2.3.1 `internal/cri/config/config.go`).
        assert!(!CONFIG_PATH_PATCH.contains("mirrors"));
        let mount = &config["nodes"][0]["extraMounts"][0];
        assert_eq!(config["nodes"][0]["role"], "control-plane");
        assert_eq!(mount["hostPath"], "/state/lab/registry/certs.d");
        assert_eq!(mount["containerPath"], NODE_CERTS_DIR);
        assert_eq!(mount["readOnly"], true);
        assert_eq!(config["networking"]["apiServerPort"], 40000);
    }
    let files = regs.hosts_files();
    assert_eq!(files[0].0, "quay.io");
    assert!(
        files[0].1.contains("server = \"https://quay.io\""),
        "{}",
        files[0].1
    );
    assert!(
        files[0].1.contains(
            "[host.\"http://mirror.classroom:5000\"]\n  capabilities = [\"pull\", \"resolve\"]"
        ),
        "{}",
        files[0].1
    );
    assert_eq!(files[1].0, "docker.io");
    assert!(
        files[1]
            .1
            .contains("server = \"https://registry-1.docker.io\""),
        "{}",
        files[1].1
    );
}

#[test]
fn without_mirrors_the_kind_config_is_kinds_default() {
    let lab = common::lab("default");
    let regs = ocm_lab::backend::kind::NodeRegistries::for_lab(
        &lab,
        &ocm_lab::state::StateDir { path: "/s".into() },
    );
    assert!(regs.mirrors.is_empty() && regs.certs_dir.is_none());
    let config: Value = serde_saphyr::from_str(&kind_config(40000, &regs)).unwrap();
    assert!(config.get("containerdConfigPatches").is_none() && config.get("nodes").is_none());
}

#[test]
fn hosts_toml_files_are_written_where_the_nodes_mount_them() {
    let dir = tempfile::tempdir().unwrap();
    let lab = lab(&with_registry(MIRRORS));
    let state = ocm_lab::state::StateDir {
        path: dir.path().to_owned(),
    };
    let regs = ocm_lab::backend::kind::NodeRegistries::for_lab(&lab, &state);
    regs.write_hosts_files().unwrap();
    let text =
        std::fs::read_to_string(dir.path().join("registry/certs.d/quay.io/hosts.toml")).unwrap();
    assert!(
        text.contains("[host.\"http://mirror.classroom:5000\"]"),
        "{text}"
    );
}

#[test]
fn the_local_registry_is_the_nodes_mirror_of_localhost_5001_and_its_image_is_listed() {
    let lab = lab(&with_registry(
        "spec:\n  registry:\n    local: true\n  hub:",
    ));
    let local = lab.registry.local.clone().expect("local registry");
    assert_eq!(local.image, "registry:3");
    assert_eq!(local.container, format!("{}-registry", lab.name));
    let regs = ocm_lab::backend::kind::NodeRegistries::for_lab(
        &lab,
        &ocm_lab::state::StateDir { path: "/s".into() },
    );
    assert_eq!(
        regs.mirrors,
        vec![(
            "localhost:5001".to_owned(),
            format!("http://{}:5000", local.container)
        )]
    );
    let text = &regs.hosts_files()[0].1;
    assert!(
        !text.contains("server ="),
        "the local registry has no upstream: {text}"
    );
    let images = ocm_lab::images::list(&lab, &common::plan(&lab)).unwrap();
    assert!(
        images
            .iter()
            .any(|i| i.image == "registry:3" && i.kind == ocm_lab::images::ImageKind::Registry)
    );
}

#[test]
fn bad_mirrors_are_located_errors_that_say_what_to_write() {
    let cases = [
        (
            "      quay.io: mirror.classroom:5000",
            "spec.registry.mirrors.quay.io: `mirror.classroom:5000` is not a mirror URL: it has no scheme",
        ),
        (
            "      quay.io: ftp://mirror",
            "spec.registry.mirrors.quay.io: `ftp://mirror` is not a mirror URL: the scheme `ftp` is neither http nor https",
        ),
        (
            "      quay.io: http://",
            "spec.registry.mirrors.quay.io: `http://` is not a mirror URL: its host ``",
        ),
        (
            "      quay.io: http://user:pw@mirror",
            "credentials do not belong in the URL",
        ),
        (
            "      https://quay.io: http://mirror",
            "is not a registry host: it has a scheme",
        ),
        (
            "      quay.io/org: http://mirror",
            "`quay.io/org` is not a registry host: it has a path",
        ),
        (
            "      localhost:99999: http://mirror",
            "`99999` is not a port",
        ),
    ];
    for (line, want) in cases {
        let text = with_registry(&format!("spec:\n  registry:\n    mirrors:\n{line}\n  hub:"));
        let errors = topology_errors(&text);
        assert!(
            errors.iter().any(|e| e.contains(want)),
            "{line}: {errors:?}"
        );
    }
    // Located: the rendered report points at the line of the bad value.
    let text =
        with_registry("spec:\n  registry:\n    mirrors:\n      quay.io: mirror:5000\n  hub:");
    let err = ocm_lab::topology::load_str(&crate::common::host(), "lab.yaml", &text).unwrap_err();
    let line = text
        .lines()
        .position(|l| l.contains("mirror:5000"))
        .unwrap()
        + 1;
    let rendered = ocm_lab::render(&err);
    assert!(
        rendered.contains(&format!("lab.yaml:{line}:")),
        "{rendered}"
    );
    assert!(
        rendered.contains("http://mirror.classroom:5000"),
        "the help shows the form: {rendered}"
    );
}

#[test]
fn the_json_schema_describes_spec_registry() {
    let r = ocm_lab(&["topology", "schema"]);
    assert_eq!(r.code, 0);
    let schema: Value = serde_json::from_str(&r.stdout).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let good: Value = serde_saphyr::from_str(&with_registry(MIRRORS)).unwrap();
    assert!(validator.is_valid(&good));
    let bad: Value = serde_saphyr::from_str(&with_registry(
        "spec:\n  registry:\n    locall: true\n  hub:",
    ))
    .unwrap();
    assert!(!validator.is_valid(&bad));
}

/// A one-shot HTTP server on 127.0.0.1 that answers like a registry that wants a login.
fn fake_registry() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[tokio::test]
async fn doctor_says_which_mirror_does_not_answer_and_what_to_do() {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let up = fake_registry();
    let lab = lab(&with_registry(&format!(
        "spec:\n  registry:\n    mirrors:\n      quay.io: http://127.0.0.1:{up}\n      docker.io: http://127.0.0.1:{closed}\n  hub:"
    )));
    let findings = ocm_lab::commands::checks::mirror_findings(&lab).await;
    assert_eq!(findings.len(), 2, "{findings:?}");
    assert_eq!(
        findings[0].level,
        ocm_lab::commands::doctor::Level::Ok,
        "{findings:?}"
    );
    assert!(
        findings[0].detail.contains("HTTP 401"),
        "{}",
        findings[0].detail
    );
    assert_eq!(
        findings[1].level,
        ocm_lab::commands::doctor::Level::Warn,
        "{findings:?}"
    );
    assert!(
        findings[1].detail.starts_with(&format!(
            "docker.io mirror http://127.0.0.1:{closed} does not answer"
        )),
        "{}",
        findings[1].detail
    );
    assert!(
        findings[1]
            .fix
            .as_deref()
            .unwrap()
            .contains("spec.registry.mirrors")
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn the_simulated_lab_runs_the_local_registry_on_up_and_down_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let text = ocm_lab::embedded::topology("minimal").unwrap().replacen(
        "spec:\n  hub:",
        "spec:\n  registry:\n    local: true\n  hub:",
        1,
    );
    let file = dir.path().join("lab.yaml");
    std::fs::write(&file, &text).unwrap();
    let file = file.to_str().unwrap();
    let state = dir.path().join("state");
    let run = |args: &[&str]| common::ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", state.as_path())]);
    let r = run(&["up", "--simulate", "-t", file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let sim = ocm_lab::state::StateDir {
        path: state.join("minimal/simulated"),
    };
    let world: Value =
        serde_json::from_str(&std::fs::read_to_string(sim.sim_world()).unwrap()).unwrap();
    let registry = &world["containers"]["minimal-registry"];
    assert_eq!(
        registry["labels"]["ocm-lab.open-cluster-management.io/lab"], "minimal",
        "{registry}"
    );
    assert!(
        registry["networks"]["kind"].is_string(),
        "on the kind network: {registry}"
    );
    // Each kind cluster tells in-cluster tools where the registry is (KEP-1755, kind's guide).
    for cluster in ["mini-hub", "mini-spoke"] {
        let hosting = &world["clusters"][cluster]["api"]["objects"]["ConfigMap"]["kube-public"]["local-registry-hosting"];
        assert_eq!(
            hosting["data"]["localRegistryHosting.v1"],
            "host: \"localhost:5001\"\nhelp: \"https://kind.sigs.k8s.io/docs/user/local-registry/\"\n",
            "{cluster}: {hosting}"
        );
    }
    let owned = sim.owned().unwrap();
    assert_eq!(
        owned.registries.get("minimal-registry"),
        registry["id"].as_str().map(str::to_owned).as_ref()
    );
    // Again: nothing new.
    assert_eq!(run(&["up", "--simulate", "-t", file]).code, 0);
    // Without `local`, the next `up` prunes the ConfigMap it no longer renders.
    std::fs::write(file, ocm_lab::embedded::topology("minimal").unwrap()).unwrap();
    let r = run(&["up", "--simulate", "-t", file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let world: Value =
        serde_json::from_str(&std::fs::read_to_string(sim.sim_world()).unwrap()).unwrap();
    for cluster in ["mini-hub", "mini-spoke"] {
        let public = &world["clusters"][cluster]["api"]["objects"]["ConfigMap"]["kube-public"];
        assert!(
            public["local-registry-hosting"].is_null(),
            "{cluster}: {public}"
        );
    }
    let r = run(&["down", "--simulate", "-t", file]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(sim.owned().unwrap().registries.is_empty());
}

/// The local registry on the real Docker engine, with a stand-in for `registry:3`: the busybox image the
/// Docker tests build (nothing is pulled here), running `sleep` instead of a registry.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn the_local_registry_stand_in_runs_labelled_on_the_network_once_and_a_foreign_namesake_is_refused()
 {
    use ocm_lab::backend::ContainerRuntime;
    let (d, image) = crate::docker::docker_with_test_image().await;
    let suffix = format!("{}-{}", std::process::id(), line!());
    let mut cleanup = crate::docker::Cleanup::new(&d);
    let network = format!("ocm-lab-test-regnet-{suffix}");
    let name = format!("ocm-lab-test-registry-{suffix}");
    cleanup.networks.push(network.clone());
    cleanup.containers.push(name.clone());
    d.ensure_network(&network).await.unwrap();
    let spec = ocm_lab::backend::RegistryContainer {
        name: name.clone(),
        image: image.clone(),
        // A port nobody uses: the test must not take 5001 from a real lab.
        host_port: {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        },
        network: network.clone(),
        labels: std::collections::BTreeMap::from([(
            "ocm-lab.open-cluster-management.io/lab".to_owned(),
            format!("test-{suffix}"),
        )]),
        command: Some(vec!["sleep".into(), "300".into()]),
    };
    let (id, created) = d.ensure_registry(&spec).await.unwrap();
    assert!(created);
    let c = d
        .client()
        .inspect_container(
            &name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap();
    assert_eq!(c.id.as_deref(), Some(id.as_str()));
    assert_eq!(c.state.and_then(|s| s.running), Some(true));
    let labels = c.config.and_then(|c| c.labels).unwrap_or_default();
    assert_eq!(
        labels.get("ocm-lab.open-cluster-management.io/lab"),
        Some(&format!("test-{suffix}"))
    );
    assert!(
        c.network_settings
            .and_then(|n| n.networks)
            .is_some_and(|n| n.contains_key(&network))
    );
    let host = c
        .host_config
        .and_then(|h| h.port_bindings)
        .unwrap_or_default();
    let binding = host.get("5000/tcp").cloned().flatten().unwrap_or_default();
    assert_eq!(binding[0].host_ip.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        binding[0].host_port.as_deref(),
        Some(spec.host_port.to_string().as_str())
    );

    // Again: the same container, nothing created.
    assert_eq!(d.ensure_registry(&spec).await.unwrap(), (id.clone(), false));

    // Another lab's labels: someone else's container of that name is refused and left alone.
    let mut other = spec.clone();
    other.labels.insert(
        "ocm-lab.open-cluster-management.io/lab".into(),
        "another-lab".into(),
    );
    let e = d.ensure_registry(&other).await.unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("a container named {name} exists")),
        "{}",
        e.to_string()
    );
    assert!(
        ocm_lab::backend::Failure::help(&e)
            .unwrap_or_default()
            .contains(&format!("docker rm -f {name}")),
        "{e:?}"
    );
    assert!(crate::docker::exists(&d, &name).await);

    // What `down` does with the recorded ID.
    assert_eq!(
        d.remove_containers(std::slice::from_ref(&id))
            .await
            .unwrap(),
        1
    );
    assert!(!crate::docker::exists(&d, &name).await);
}
