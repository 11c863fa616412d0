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
