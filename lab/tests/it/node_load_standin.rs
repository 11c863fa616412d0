//! `Docker::import_into_node` against a STAND-IN node container, not a kind node: there is no kind node
//! here, so the container is the busybox test image with a fake `ctr` and `crictl` (shell scripts that
//! record their arguments and copy the archive they were given). Each fake first checks its command line
//! against the contract of the version a pinned kindest/node image ships (`ocm_lab_testkit::contracts`:
//! `ctr`, `crictl`, `NODE_IMAGES`), so a flag or argument the real tool refuses is refused here too, in
//! its words. What this proves: the archive reaches the node whole, `ctr` is called as `kind load
//! image-archive` calls it (kubernetes-sigs/kind v0.32.0 `pkg/cluster/nodeutils/util.go`
//! `LoadImageArchive`: `--namespace=k8s.io images import --all-platforms --digests --snapshotter=<s>`,
//! with `<s>` read from a stand-in `containerd config dump`), the copy is removed afterwards, and a
//! failing import is a typed error naming the node, with the copy removed too. Whether real containerd
//! accepts the archive is not exercised here.

use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures::StreamExt as _;
use ocm_lab::backend::docker::{Docker, DockerError};
use ocm_lab_testkit::contracts::{self, Contract};

/// What the fake `ctr` does once its command line passed the contract.
const FAKE_CTR: &str = "if [ -e /fail ]; then echo 'ctr: simulated import failure' >&2; exit 3; fi\n\
echo \"$@\" > /ctr-args\n\
for last; do :; done\n\
/bin/busybox cp \"$last\" /imported.tar\n";

/// What the stand-in `containerd` does once `config dump` passed the contract: prints
/// `/containerd-config`.
const FAKE_CONTAINERD: &str = "/bin/busybox cat /containerd-config\n";

/// A containerd 2.x dump (config version 3) of a node whose CRI unpacks into `snapshotter`, as kind's
/// entrypoint configures it on a zfs (`native`) or fuse (`fuse-overlayfs`) host.
fn containerd_config(snapshotter: &str) -> String {
    format!(
        "version = 3\nroot = '/var/lib/containerd'\n\n[plugins]\n  [plugins.'io.containerd.cri.v1.images']\n    snapshotter = '{snapshotter}'\n"
    )
}

/// A stand-in `tool` script: the contract's guard, then `body`.
fn stand_in(contract: &Contract, body: &str) -> Vec<u8> {
    format!(
        "#!/bin/sh\n{}\ncontract_check \"$@\"\n{body}",
        contract.guard()
    )
    .into_bytes()
}

/// The `ctr` of the default node image (kind v0.32.0's kindest/node v1.36.1).
fn default_ctr() -> Contract {
    contracts::ctr(contracts::NODE_IMAGES[0].containerd)
}

/// The `containerd` of the default node image.
fn default_containerd() -> Contract {
    contracts::containerd(contracts::NODE_IMAGES[0].containerd)
}

/// Puts the default node image's `ctr` (answering `images ls` with an empty list) and a `containerd`
/// whose CRI uses `overlayfs` into `node`.
pub(crate) async fn put_default_tools(d: &Docker, node: &str) {
    put(
        d,
        node,
        &[
            ("bin/ctr", 0o755, &stand_in(&default_ctr(), FAKE_CTR_LS)),
            (
                "ls-output",
                0o644,
                contracts::ctr_images_list_output(&[]).as_bytes(),
            ),
            (
                "bin/containerd",
                0o755,
                &stand_in(&default_containerd(), FAKE_CONTAINERD),
            ),
            (
                "containerd-config",
                0o644,
                containerd_config("overlayfs").as_bytes(),
            ),
        ],
    )
    .await;
}

/// Puts `files` (path, mode, content) and the applet links the stand-ins use into the container.
async fn put(d: &Docker, container: &str, files: &[(&str, u32, &[u8])]) {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, mode, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        tar.append_data(&mut h, path, *data).unwrap();
    }
    for applet in ["rm", "awk", "cut", "tr", "cat"] {
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_size(0);
        link.set_mode(0o777);
        tar.append_link(&mut link, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let bytes = tar.into_inner().unwrap();
    d.client()
        .upload_to_container(
            container,
            Some(
                bollard::query_parameters::UploadToContainerOptionsBuilder::default()
                    .path("/")
                    .build(),
            ),
            bollard::body_full(bytes.into()),
        )
        .await
        .unwrap();
}

/// A file's content in the container, or `None` when it is not there.
async fn get(d: &Docker, container: &str, path: &str) -> Option<Vec<u8>> {
    let mut stream = d.client().download_from_container(
        container,
        Some(
            DownloadFromContainerOptionsBuilder::default()
                .path(path)
                .build(),
        ),
    );
    let mut tar_bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => tar_bytes.extend_from_slice(&c),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return None,
            Err(e) => panic!("download {path}: {e}"),
        }
    }
    let mut archive = tar::Archive::new(tar_bytes.as_slice());
    let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut out).unwrap();
    Some(out)
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn an_archive_is_imported_into_a_stand_in_node_as_kind_load_does_and_the_copy_removed() {
    let (d, image) = crate::docker::docker_with_test_image().await;
    let mut cleanup = crate::docker::Cleanup::new(&d);
    let node = crate::docker::sleeper(&d, &mut cleanup, &image, &[], None, true).await;
    let config = containerd_config("native");
    put(
        &d,
        &node,
        &[
            ("bin/ctr", 0o755, &stand_in(&default_ctr(), FAKE_CTR)),
            (
                "bin/containerd",
                0o755,
                &stand_in(&default_containerd(), FAKE_CONTAINERD),
            ),
            ("containerd-config", 0o644, config.as_bytes()),
        ],
    )
    .await;

    // An archive of an odd size (not a multiple of tar's 512-byte blocks).
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("images.tar");
    let data: Vec<u8> = (0..300_001u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&archive, &data).unwrap();

    d.import_into_node(&node, &archive).await.unwrap();
    let args = String::from_utf8(get(&d, &node, "/ctr-args").await.unwrap()).unwrap();
    assert_eq!(
        args.trim(),
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=native /ocm-lab-images.tar",
        "the snapshotter is the node's, as kind load passes it"
    );
    assert_eq!(get(&d, &node, "/imported.tar").await.unwrap(), data);
    assert_eq!(get(&d, &node, "/ocm-lab-images.tar").await, None);

    // A failing import names the node, carries ctr's output, and leaves no copy behind.
    put(&d, &node, &[("fail", 0o644, b"")]).await;
    let e = d.import_into_node(&node, &archive).await.unwrap_err();
    match &e {
        DockerError::NodeImportFailed {
            node: n,
            code,
            output,
            ..
        } => {
            assert_eq!(n, &node);
            assert_eq!(*code, 3);
            assert!(output.contains("simulated import failure"), "{output}");
        }
        other => panic!("expected NodeImportFailed, got {other:?}"),
    }
    assert!(e.help().unwrap().contains("up --bundle"));
    assert_eq!(get(&d, &node, "/ocm-lab-images.tar").await, None);
}

/// A stand-in `ctr` that also answers `images ls` (with what `/ls-output` holds) as containerd would.
/// With `/one-platform`, it fails `--all-platforms` as ctr does for an archive that holds only one
/// platform's content (kubernetes-sigs/kind#3795) and imports without it.
const FAKE_CTR_LS: &str = "if [ \"$3\" = ls ]; then /bin/busybox cat /ls-output; exit 0; fi\n\
if [ -e /fail ]; then echo 'ctr: simulated import failure' >&2; exit 3; fi\n\
if [ -e /one-platform ] && [ \"$4\" = --all-platforms ]; then echo 'ctr: content digest sha256:abcd: not found' >&2; exit 1; fi\n\
echo \"$@\" > /ctr-args\n\
for last; do :; done\n\
/bin/busybox cp \"$last\" /imported.tar\n";

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_bundle_entry_is_streamed_into_a_stand_in_node_in_place_and_a_failed_import_leaves_no_copy()
 {
    use ocm_lab::backend::{ContainerRuntime as _, ImageArchive, node_has};
    let (d, image) = crate::docker::docker_with_test_image().await;
    let mut cleanup = crate::docker::Cleanup::new(&d);
    let node = crate::docker::sleeper(&d, &mut cleanup, &image, &[], None, true).await;
    let digest = format!("sha256:{}", "1".repeat(64));
    let listed = contracts::ctr_images_list_output(&[[
        "quay.io/open-cluster-management/work:v1.3.1",
        "application/vnd.oci.image.manifest.v1+json",
        &digest,
        "30.1 MiB",
        "linux/amd64",
        "io.cri-containerd.image=managed",
    ]]);
    put(
        &d,
        &node,
        &[
            ("bin/ctr", 0o755, &stand_in(&default_ctr(), FAKE_CTR_LS)),
            ("ls-output", 0o644, listed.as_bytes()),
            (
                "bin/containerd",
                0o755,
                &stand_in(&default_containerd(), FAKE_CONTAINERD),
            ),
            (
                "containerd-config",
                0o644,
                containerd_config("overlayfs").as_bytes(),
            ),
        ],
    )
    .await;

    // The entry sits between other bytes of the bundle file: only its range reaches the node.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lab-bundle.tar");
    let entry: Vec<u8> = (0..70_001u32).map(|i| (i % 241) as u8).collect();
    let mut bytes = vec![b'x'; 1536];
    bytes.extend_from_slice(&entry);
    bytes.extend_from_slice(&[b'y'; 999]);
    std::fs::write(&file, &bytes).unwrap();
    let archive = ImageArchive {
        image: "quay.io/open-cluster-management/work:v1.3.1".into(),
        file: file.clone(),
        offset: 1536,
        size: entry.len() as u64,
    };
    d.import_node_image(&node, &archive).await.unwrap();
    assert_eq!(get(&d, &node, "/imported.tar").await.unwrap(), entry);
    assert_eq!(get(&d, &node, "/ocm-lab-images.tar").await, None);

    // An archive with one platform's content (a save from Docker's containerd image store): imported
    // for this platform once `--all-platforms` finds the other platforms' content missing.
    put(&d, &node, &[("one-platform", 0o644, b"")]).await;
    d.import_node_image(&node, &archive).await.unwrap();
    let args = String::from_utf8(get(&d, &node, "/ctr-args").await.unwrap()).unwrap();
    assert_eq!(
        args.trim(),
        "--namespace=k8s.io images import --digests --snapshotter=overlayfs /ocm-lab-images.tar"
    );
    assert_eq!(get(&d, &node, "/imported.tar").await.unwrap(), entry);
    assert_eq!(get(&d, &node, "/ocm-lab-images.tar").await, None);

    // What the node holds, read from `ctr images ls` as the step checks it after an import.
    let held = d.node_images(&node).await.unwrap();
    assert!(node_has(
        &held,
        "quay.io/open-cluster-management/work:v1.3.1"
    ));
    assert!(!node_has(
        &held,
        "quay.io/open-cluster-management/registration:v1.3.1"
    ));

    // A failing import names the node and the bundle, and leaves no copy in the node.
    put(&d, &node, &[("fail", 0o644, b"")]).await;
    let e = d.import_node_image(&node, &archive).await.unwrap_err();
    match &e {
        DockerError::NodeImportFailed {
            node: n,
            archive: a,
            ..
        } => {
            assert_eq!(n, &node);
            assert!(
                a.contains("work:v1.3.1") && a.contains("lab-bundle.tar"),
                "{a}"
            );
        }
        other => panic!("expected NodeImportFailed, got {other:?}"),
    }
    assert_eq!(get(&d, &node, "/ocm-lab-images.tar").await, None);
}

/// The fake `crictl`, once its command line passed the contract: records its arguments.
const FAKE_CRICTL: &str = "echo \"$@\" > /crictl-args\n";

/// Runs `cmd` in `container` through the Docker API; its exit code and output (stdout and stderr).
async fn exec(d: &Docker, container: &str, cmd: &[&str]) -> (i64, String) {
    let exec = d
        .client()
        .create_exec(
            container,
            bollard::models::ExecConfig {
                cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut text = String::new();
    if let bollard::exec::StartExecResults::Attached { mut output, .. } =
        d.client().start_exec(&exec.id, None).await.unwrap()
    {
        while let Some(chunk) = output.next().await {
            text.push_str(&chunk.unwrap().to_string());
        }
    }
    let code = d
        .client()
        .inspect_exec(&exec.id)
        .await
        .unwrap()
        .exit_code
        .unwrap();
    (code, text)
}

/// Every `ctr` and `crictl` command line ocm-lab builds (the import, the import for one platform, the
/// image list, the pre-pull) runs against the `ctr` and `crictl` of every node image the catalog pins,
/// each a stand-in that refuses what that version refuses; and a stand-in does refuse a misspelt flag
/// in the tool's words.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn every_ctr_and_crictl_line_passes_the_tools_of_every_pinned_node_image() {
    use ocm_lab::backend::{ContainerRuntime as _, ImageArchive, node_has};
    let (d, image) = crate::docker::docker_with_test_image().await;
    let mut cleanup = crate::docker::Cleanup::new(&d);
    let node = crate::docker::sleeper(&d, &mut cleanup, &image, &[], None, true).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("images.tar");
    let data: Vec<u8> = (0..5_000u32).map(|i| (i % 239) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let archive = ImageArchive {
        image: "quay.io/open-cluster-management/work:v1.3.1".into(),
        file: file.clone(),
        offset: 0,
        size: data.len() as u64,
    };
    let digest = format!("sha256:{}", "2".repeat(64));
    let listed = contracts::ctr_images_list_output(&[[
        "quay.io/open-cluster-management/work:v1.3.1",
        "application/vnd.oci.image.index.v1+json",
        &digest,
        "30.1 MiB",
        "linux/amd64",
        "io.cri-containerd.image=managed",
    ]]);
    for tools in contracts::NODE_IMAGES {
        let ctr = contracts::ctr(tools.containerd);
        let crictl = contracts::crictl(tools.crictl);
        put(
            &d,
            &node,
            &[
                ("bin/ctr", 0o755, &stand_in(&ctr, FAKE_CTR_LS)),
                ("bin/crictl", 0o755, &stand_in(&crictl, FAKE_CRICTL)),
                ("ls-output", 0o644, listed.as_bytes()),
                (
                    "bin/containerd",
                    0o755,
                    &stand_in(&contracts::containerd(tools.containerd), FAKE_CONTAINERD),
                ),
                (
                    "containerd-config",
                    0o644,
                    containerd_config("overlayfs").as_bytes(),
                ),
            ],
        )
        .await;
        let _ = exec(&d, &node, &["rm", "-f", "/one-platform", "/ctr-args"]).await;

        d.import_node_image(&node, &archive)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", tools.image));
        let args = String::from_utf8(get(&d, &node, "/ctr-args").await.unwrap()).unwrap();
        assert!(args.contains("--all-platforms"), "{}: {args}", tools.image);
        put(&d, &node, &[("one-platform", 0o644, b"")]).await;
        d.import_node_image(&node, &archive)
            .await
            .unwrap_or_else(|e| panic!("{} (one platform): {e}", tools.image));
        let held = d.node_images(&node).await.unwrap();
        assert!(
            node_has(&held, "quay.io/open-cluster-management/work:v1.3.1"),
            "{}: {held:?}",
            tools.image
        );
        d.pull_image_in_node(&node, "quay.io/open-cluster-management/work:v1.3.1")
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", tools.image));
        let args = String::from_utf8(get(&d, &node, "/crictl-args").await.unwrap()).unwrap();
        assert_eq!(
            args.trim(),
            "pull quay.io/open-cluster-management/work:v1.3.1"
        );

        // The stand-ins refuse what the real tools refuse, in their words.
        let (code, out) = exec(
            &d,
            &node,
            &[
                "ctr",
                "--namespace=k8s.io",
                "images",
                "import",
                "--snapshoter=native",
                "/x.tar",
            ],
        )
        .await;
        assert_eq!(
            (code, out.trim()),
            (1, "ctr: flag provided but not defined: -snapshoter"),
            "{}",
            tools.image
        );
        let (code, out) = exec(&d, &node, &["crictl", "pull"]).await;
        assert_eq!(code, 1, "{out}");
        assert!(
            out.trim()
                .ends_with("level=fatal msg=\"image name cannot be empty\""),
            "{out}"
        );
    }
}
