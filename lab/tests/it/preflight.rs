//! What `up` checks before it creates anything, and how it picks kind: the kind a node image needs, the
//! memory the Docker engine has for the lab's clusters, and the kind network made as kind makes it.

use std::path::Path;

use ocm_lab::backend::tools::{self, Downloads, ToolError, ToolName, ToolsConfig};
use ocm_lab::topology::catalog;

fn write_executable(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A kind that reports `version` on a private search path; downloads go to a dead local port.
fn config_with_kind(root: &Path, version: &str, downloads: Downloads) -> ToolsConfig {
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    write_executable(
        &bin.join("kind"),
        &format!("#!/bin/sh\necho 'kind v{version} go1.24.3 linux/amd64'\n"),
    );
    let mut cfg = ToolsConfig::new(downloads, root.join("cache/tools"));
    cfg.search_path = Some(bin.into_os_string());
    cfg.platform = Some(tools::Platform {
        os: "linux",
        arch: "amd64",
    });
    cfg.base_url = Some("http://127.0.0.1:9".to_owned());
    cfg
}

#[test]
fn a_kind_too_old_for_the_node_image_is_not_used() {
    let root = tempfile::tempdir().unwrap();
    // kind v0.31.0 on PATH is fine for a 1.35 node image…
    let mut cfg = config_with_kind(root.path(), "0.31.0", Downloads::Forbid);
    cfg.kind_minimum = Some(catalog::kind_for_node_image(
        "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f",
    ));
    let kind = tools::resolve(ToolName::Kind, &cfg).unwrap();
    assert_eq!(kind.version, semver::Version::new(0, 31, 0));

    // …but not for the default 1.36 image: with downloads off, it says why and what to do.
    cfg.kind_minimum = Some(catalog::kind_for_node_image(
        catalog::DEFAULT_KIND_NODE_IMAGE,
    ));
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(matches!(e, ToolError::TooOld { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("kind v0.31.0")
            && msg.contains("older than the minimum v0.32.0")
            && msg.contains("(Kubernetes 1.36.1) needs kind v0.32.0"),
        "{msg}"
    );

    // With downloads on, the kind on PATH is passed over for the pinned download.
    cfg.downloads = Downloads::Allow;
    let e = tools::resolve(ToolName::Kind, &cfg).unwrap_err();
    assert!(
        matches!(e, ToolError::Download { .. }),
        "the pinned kind is downloaded instead: {e:?}"
    );
}

#[test]
fn up_with_no_download_and_an_old_kind_stops_before_creating_anything() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("kind.log");
    let kind = root.path().join("kind");
    write_executable(
        &kind,
        &format!(
            "#!/bin/sh\necho \"$*\" >> {}\necho 'kind v0.31.0 go1.24.3 linux/amd64'\n",
            log.display()
        ),
    );
    let helm = root.path().join("helm");
    write_executable(&helm, "#!/bin/sh\necho v3.19.0\n");
    let out = crate::common::ocm_lab_env(
        &["up", "-t", "minimal", "--no-download"],
        &[
            ("OCM_LAB_KIND", &kind),
            ("OCM_LAB_HELM", &helm),
            ("OCM_LAB_STATE_DIR", &root.path().join("state")),
            ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
            ("HOME", &root.path().join("home")),
        ],
    );
    assert_ne!(out.code, 0, "{out:?}");
    let text = format!("{}{}", out.stdout, out.stderr);
    assert!(
        text.contains("older than the minimum v0.32.0")
            && text.contains("needs kind v0.32.0 or newer"),
        "{text}"
    );
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        calls.lines().all(|l| l == "version"),
        "kind was only asked its version: {calls}"
    );

    // `doctor` says the same, and what to install.
    let doctor = crate::common::ocm_lab_env(
        &["doctor", "-t", "minimal"],
        &[
            ("OCM_LAB_KIND", &kind),
            ("OCM_LAB_HELM", &helm),
            ("OCM_LAB_STATE_DIR", &root.path().join("state")),
            ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
            ("HOME", &root.path().join("home")),
        ],
    );
    assert_ne!(doctor.code, 0, "{doctor:?}");
    let kind_line = doctor
        .stdout
        .lines()
        .find(|l| l.starts_with("✗ kind"))
        .unwrap_or_else(|| panic!("no failing kind line: {doctor:?}"));
    assert!(
        kind_line.contains("kind v0.31.0 is older than the minimum v0.32.0")
            && kind_line.contains("needs kind v0.32.0 or newer"),
        "{kind_line}"
    );
    assert!(
        doctor.stdout.contains("install kind v0.32.0 or newer"),
        "{doctor:?}"
    );
}

/// The kind network, made under a test name on the real engine, has what kind v0.32.0's `network.go`
/// gives it: a bridge with IP masquerading, the default bridge's MTU (when it sets one), the IPv6 ULA
/// subnet derived from the name (unless the daemon cannot do IPv6), and no labels.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn the_kind_network_is_made_as_kind_makes_it() {
    use ocm_lab::backend::ContainerRuntime as _;
    use ocm_lab::backend::docker::kind_ula_subnet;

    let d = crate::docker::engine().await;
    let mut cleanup = crate::docker::Cleanup::new(&d);
    let name = format!("ocm-lab-test-kindnet-{}", std::process::id());
    cleanup.networks.push(name.clone());
    assert!(d.ensure_network(&name).await.unwrap(), "created now");
    let client = d.client().clone();
    let inspect = |n: String| {
        let client = client.clone();
        async move {
            client
                .inspect_network(&n, None::<bollard::query_parameters::InspectNetworkOptions>)
                .await
                .unwrap()
        }
    };
    let net = inspect(name.clone()).await;
    let bridge = inspect("bridge".to_owned()).await;
    let options = net.options.clone().unwrap_or_default();
    assert_eq!(net.driver.as_deref(), Some("bridge"));
    assert_eq!(
        options
            .get("com.docker.network.bridge.enable_ip_masquerade")
            .map(String::as_str),
        Some("true"),
        "{options:?}"
    );
    let bridge_mtu = bridge
        .options
        .unwrap_or_default()
        .get("com.docker.network.driver.mtu")
        .and_then(|m| m.parse::<u32>().ok())
        .filter(|m| *m > 0);
    assert_eq!(
        options
            .get("com.docker.network.driver.mtu")
            .and_then(|m| m.parse::<u32>().ok()),
        bridge_mtu,
        "the MTU follows the default bridge: {options:?}"
    );
    assert!(
        net.labels.clone().unwrap_or_default().is_empty(),
        "kind puts no labels: {:?}",
        net.labels
    );
    let subnets: Vec<String> = net
        .ipam
        .and_then(|i| i.config)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|c| c.subnet)
        .collect();
    if net.enable_ipv6 == Some(true) {
        assert!(
            subnets.contains(&kind_ula_subnet(&name, 0)),
            "IPv6 subnet {} expected in {subnets:?}",
            kind_ula_subnet(&name, 0)
        );
    } else {
        eprintln!(
            "note: this Docker daemon cannot make IPv6 networks; the network was made without, as kind does"
        );
        assert!(!subnets.iter().any(|s| s.contains(':')), "{subnets:?}");
    }
    assert!(!d.ensure_network(&name).await.unwrap(), "second ensure");
}

/// `up` on the real engine with more clusters than Docker's memory holds (1536 MiB each) stops in
/// preflight, naming the memory check, before kind is asked to create anything.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn up_stops_in_preflight_when_docker_has_too_little_memory_for_the_clusters() {
    let d = crate::docker::engine().await;
    let total_mib = d.info().await.unwrap().mem_total.unwrap() as u64 / (1024 * 1024);
    // One cluster more than fits.
    let spokes = (total_mib / ocm_lab::commands::doctor::MIB_PER_CLUSTER) as usize;
    let root = tempfile::tempdir().unwrap();
    let tag = format!("mem{}", std::process::id());
    let names: Vec<String> = (0..spokes).map(|i| format!("{tag}-s{i}")).collect();
    let topology = root.path().join("lab.yaml");
    std::fs::write(
        &topology,
        format!(
            "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {{name: {tag}}}\nspec:\n  hub: {{name: {tag}-hub, featureGates: [ClusterProfile]}}\n  spokes: [{}]\n  clusterSets: [{{name: s, clusters: [{}], bindTo: [inventory]}}]\n",
            names.iter().map(|n| format!("{{name: {n}}}")).collect::<Vec<_>>().join(", "),
            names.join(", ")
        ),
    )
    .unwrap();
    let log = root.path().join("kind.log");
    let kind = root.path().join("kind");
    write_executable(
        &kind,
        &format!(
            "#!/bin/sh\necho \"$*\" >> {}\necho 'kind v0.32.0 go1.24.3 linux/amd64'\n",
            log.display()
        ),
    );
    let helm = root.path().join("helm");
    write_executable(&helm, "#!/bin/sh\necho v3.19.0\n");
    let out = crate::common::ocm_lab_env(
        &["up", "-t", topology.to_str().unwrap(), "--no-download"],
        &[
            ("OCM_LAB_KIND", &kind),
            ("OCM_LAB_HELM", &helm),
            ("OCM_LAB_STATE_DIR", &root.path().join("state")),
            ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
            ("HOME", &root.path().join("home")),
            (
                "KIND_EXPERIMENTAL_DOCKER_NETWORK",
                Path::new(&format!("{tag}-net-never-made")),
            ),
        ],
    );
    assert_ne!(out.code, 0, "{out:?}");
    let clusters = spokes + 1;
    let need = clusters as u64 * ocm_lab::commands::doctor::MIB_PER_CLUSTER;
    assert!(
        out.stderr.contains(&format!(
            "✗ memory    Docker has {total_mib} MiB, but {clusters} clusters need about {need} MiB"
        )),
        "{out:?}"
    );
    assert!(out.stderr.contains("preflight failed: memory"), "{out:?}");
    // The image line says whether the node image is there or kind will pull it.
    let image = ocm_lab::topology::catalog::DEFAULT_KIND_NODE_IMAGE;
    let present = d.image_present(image).await.unwrap();
    let expected = if present {
        format!("✓ image     {image} is present")
    } else {
        format!(
            "! image     {image} is not in the local Docker engine: kind pulls it on the first create"
        )
    };
    assert!(out.stderr.contains(&expected), "{expected}\n{out:?}");
    // One finding per fact: the node image is said once, not again among the missing images.
    let findings_naming_it = out
        .stderr
        .lines()
        .filter(|l| l.contains(image) && !l.trim_start().starts_with('→'))
        .count();
    assert_eq!(findings_naming_it, 1, "{out:?}");
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        calls.lines().all(|l| l == "version"),
        "kind was only asked its version: {calls}"
    );
}

/// The network step's name comes from the planner (`kindNetwork`): `kind`, or kind's own override.
#[test]
fn the_planned_network_follows_kinds_override() {
    let network_of = |env: &[(&str, &Path)]| {
        let out = crate::common::ocm_lab_env(&["plan", "-t", "minimal", "--output", "json"], env);
        assert_eq!(out.code, 0, "{out:?}");
        let plan: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        plan["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == "network")
            .map(|s| s["with"]["name"].clone())
            .unwrap()
    };
    assert_eq!(network_of(&[]), "kind");
    assert_eq!(
        network_of(&[(
            "KIND_EXPERIMENTAL_DOCKER_NETWORK",
            Path::new("workshop-net")
        )]),
        "workshop-net"
    );
}

/// A machine without kind and helm whose release hosts answer (a local mirror, as
/// `OCM_LAB_TOOLS_BASE_URL`): `up` downloads the pinned releases, so `doctor` warns and names the kind the
/// node image needs; with `--no-download` the same finding stops `up`, so it is a failure.
#[test]
fn missing_tools_warn_when_up_would_download_them_and_fail_with_no_download() {
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("bin");
    std::fs::create_dir_all(&empty).unwrap();
    let platform = tools::Platform::current().expect("a platform ocm-lab knows");
    let routes = tools::PINNED
        .iter()
        .filter(|p| p.os == platform.os && p.arch == platform.arch)
        .map(|p| {
            let route = p
                .checksum_url
                .trim_start_matches("https://kind.sigs.k8s.io/dl")
                .trim_start_matches("https://get.helm.sh");
            let body = format!("{}  {}\n", "c".repeat(64), p.file_name());
            (route.to_owned(), body.into_bytes())
        })
        .collect();
    let mirror = crate::tools::serve(routes, 8);
    let env = [
        ("PATH", empty.as_path()),
        ("OCM_LAB_TOOLS_BASE_URL", Path::new(&mirror.base)),
        ("OCM_LAB_STATE_DIR", &root.path().join("state")),
        ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
        ("HOME", &root.path().join("home")),
    ];
    let line = |out: &crate::common::Output, tool: &str| {
        out.stdout
            .lines()
            .find(|l| l.chars().skip(2).collect::<String>().starts_with(tool))
            .unwrap_or_else(|| panic!("no {tool} line: {out:?}"))
            .to_owned()
    };
    let doctor = crate::common::ocm_lab_env(&["doctor"], &env);
    for tool in ["kind", "helm"] {
        assert!(line(&doctor, tool).starts_with('!'), "{doctor:?}");
    }
    assert!(
        doctor
            .stdout
            .contains("install kind v0.32.0 or newer (what the node image needs)"),
        "{doctor:?}"
    );
    let strict = crate::common::ocm_lab_env(&["doctor", "--no-download"], &env);
    assert_ne!(strict.code, 0, "{strict:?}");
    for tool in ["kind", "helm"] {
        assert!(line(&strict, tool).starts_with('✗'), "{strict:?}");
    }
}
