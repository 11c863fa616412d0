//! Preflight asks only for what the lab will use: a lab whose clusters all exist never runs kind or
//! Docker, so neither is looked for, downloaded, or required.

use std::path::Path;

fn write_executable(path: &Path, contents: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, contents).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_lab_of_existing_clusters_needs_no_kind_and_no_docker() {
    let root = tempfile::tempdir().unwrap();
    let helm = root.path().join("helm");
    write_executable(&helm, "#!/bin/sh\necho v3.19.0\n");
    let topology = crate::common::root().join("examples/existing-clusters.yaml");
    let nowhere = root.path().join("no-such-kind");
    let env = [
        ("OCM_LAB_KIND", nowhere.as_path()),
        ("OCM_LAB_HELM", &helm),
        ("OCM_LAB_STATE_DIR", &root.path().join("state")),
        ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
        ("HOME", &root.path().join("home")),
        // No Docker daemon there: a lab of existing clusters must not need one.
        ("DOCKER_HOST", Path::new("unix:///nonexistent/docker.sock")),
    ];
    let doctor = crate::common::ocm_lab_env(
        &["doctor", "-t", topology.to_str().unwrap(), "--no-download"],
        &env,
    );
    assert_eq!(doctor.code, 0, "{doctor:?}");
    assert!(
        doctor
            .stdout
            .lines()
            .any(|l| l.starts_with("✓ kind") && l.contains("not needed")),
        "{doctor:?}"
    );
    assert!(
        doctor
            .stdout
            .lines()
            .any(|l| l.starts_with("✓ docker") && l.contains("not needed")),
        "{doctor:?}"
    );

    // `up` asks for neither: it fails only reaching for contexts this machine does not have (its preflight
    // looks at the existing clusters for an OCM install it did not make, see `existing_adopt.rs`).
    let up = crate::common::ocm_lab_env(
        &["up", "-t", topology.to_str().unwrap(), "--no-download"],
        &env,
    );
    let text = format!("{}{}", up.stdout, up.stderr);
    assert!(
        text.contains("failed to connect to cluster")
            && !text.contains("OCM_LAB_KIND")
            && !text.to_lowercase().contains("docker"),
        "{text}"
    );
    // Nothing was downloaded.
    assert!(
        !root.path().join("cache").join("tools").exists()
            || std::fs::read_dir(root.path().join("cache").join("tools"))
                .unwrap()
                .next()
                .is_none(),
        "nothing is downloaded"
    );
}

/// `doctor`'s verdict predicts `up`'s preflight: without helm, it asks the release host (here a mirror,
/// `OCM_LAB_TOOLS_BASE_URL`) whether the download `up` would make can start. A mirror that answers: a
/// warning, exit 0, as `up` would get its helm. A closed port: a failure naming the three ways out, exit
/// 1, and `-o json` still one document. `--no-download` asks no host and fails as `up --no-download` would.
#[test]
fn doctor_fails_when_a_missing_tool_cannot_be_downloaded_and_passes_when_it_can() {
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let topology = crate::common::root().join("examples/existing-clusters.yaml");
    let doctor = |base_url: &str, extra: &[&str]| {
        let mut args = vec!["doctor", "-t", topology.to_str().unwrap()];
        args.extend(extra);
        crate::common::ocm_lab_env(
            &args,
            &[
                ("PATH", empty.as_path()),
                ("OCM_LAB_TOOLS_BASE_URL", Path::new(base_url)),
                ("OCM_LAB_STATE_DIR", &root.path().join("state")),
                ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
                ("HOME", &root.path().join("home")),
                ("DOCKER_HOST", Path::new("unix:///nonexistent/docker.sock")),
            ],
        )
    };
    let platform = ocm_lab::backend::tools::Platform::current().expect("a platform ocm-lab knows");
    let pin = ocm_lab::backend::tools::PINNED
        .iter()
        .find(|p| {
            p.tool == ocm_lab::backend::tools::ToolName::Helm
                && p.os == platform.os
                && p.arch == platform.arch
        })
        .unwrap();
    let route = pin
        .checksum_url
        .strip_prefix("https://get.helm.sh")
        .unwrap()
        .to_owned();
    let server = crate::tools::serve(
        std::collections::HashMap::from([(
            route,
            format!("{}  {}\n", "b".repeat(64), pin.file_name()).into_bytes(),
        )]),
        2,
    );

    let answered = doctor(&server.base, &[]);
    assert_eq!(answered.code, 0, "{answered:?}");
    let helm = answered
        .stdout
        .lines()
        .find(|l| l.starts_with("! helm"))
        .unwrap_or_else(|| panic!("helm is a warning: {answered:?}"));
    assert!(helm.contains("not found"), "{helm}");
    assert!(
        answered
            .stdout
            .contains("`ocm-lab up` downloads the pinned release"),
        "{answered:?}"
    );

    let dead = format!("http://127.0.0.1:{}", crate::tools::dead_port());
    let closed = doctor(&dead, &[]);
    assert_eq!(closed.code, 1, "{closed:?}");
    assert!(
        closed.stdout.lines().any(|l| l.starts_with("✗ helm")
            && l.contains("not found")
            && l.contains("cannot start")),
        "{closed:?}"
    );
    for way_out in [
        "install helm v3.14.0 or newer",
        "OCM_LAB_TOOLS_BASE_URL",
        "ocm-lab up --bundle FILE",
    ] {
        assert!(closed.stdout.contains(way_out), "{way_out}: {closed:?}");
    }
    assert!(
        closed
            .stderr
            .contains("`ocm-lab up` would stop in preflight: helm")
            && !closed.stderr.contains("re-checks"),
        "doctor does not send the user to doctor: {closed:?}"
    );

    let json = doctor(&dead, &["-o", "json"]);
    assert_eq!(json.code, 1, "{json:?}");
    let findings: serde_json::Value =
        serde_json::from_str(&json.stdout).expect("one JSON document");
    assert!(
        findings
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["check"] == "helm" && f["level"] == "fail"),
        "{findings}"
    );

    // `up` stops in the same place, and its error names the same ways out.
    let up = crate::common::ocm_lab_env(
        &["up", "-t", topology.to_str().unwrap()],
        &[
            ("PATH", empty.as_path()),
            ("OCM_LAB_TOOLS_BASE_URL", Path::new(&dead)),
            ("OCM_LAB_STATE_DIR", &root.path().join("state")),
            ("OCM_LAB_CACHE_DIR", &root.path().join("cache")),
            ("HOME", &root.path().join("home")),
            ("DOCKER_HOST", Path::new("unix:///nonexistent/docker.sock")),
        ],
    );
    assert_eq!(up.code, 1, "{up:?}");
    let error = up
        .stderr
        .split("preflight failed")
        .nth(1)
        .unwrap_or_else(|| panic!("a preflight error: {up:?}"));
    for way_out in [
        "install them",
        "OCM_LAB_TOOLS_BASE_URL",
        "ocm-lab up --bundle FILE",
    ] {
        assert!(error.contains(way_out), "{way_out}: {up:?}");
    }

    let asked_before = server.requests.lock().unwrap().len();
    let offline = doctor(&server.base, &["--no-download"]);
    assert_eq!(offline.code, 1, "{offline:?}");
    assert!(offline.stdout.contains("drop --no-download"), "{offline:?}");
    assert_eq!(
        server.requests.lock().unwrap().len(),
        asked_before,
        "--no-download asks no host"
    );
}
