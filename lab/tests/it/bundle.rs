//! Image bundles through the Docker API on the real engine: a round trip, and a truncated or tampered
//! bundle refused before anything is loaded. The image is the one the Docker tests build (busybox-static),
//! under a tag of this test's own, so nothing is pulled and nothing another test uses is touched.

use bollard::query_parameters::{RemoveImageOptionsBuilder, TagImageOptionsBuilder};
use ocm_lab::backend::docker::Docker;
use ocm_lab::backend::docker::bundle::{self, FORMAT};

/// A tag of the test image only this test uses; removed again by the guard.
struct Tag {
    host: String,
    name: String,
}

impl Drop for Tag {
    fn drop(&mut self) {
        let (host, name) = (self.host.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(c) = bollard::Docker::connect_with_host(&host) {
                    let _ = c
                        .remove_image(
                            &name,
                            None::<bollard::query_parameters::RemoveImageOptions>,
                            None,
                        )
                        .await;
                }
            });
        })
        .join();
    }
}

async fn tagged(d: &Docker, what: &str) -> Tag {
    let image = crate::docker::test_image(d).await;
    let repo = "ocm-lab-test/bundle";
    let tag = format!("{what}-{}", std::process::id());
    d.client()
        .tag_image(
            &image,
            Some(
                TagImageOptionsBuilder::default()
                    .repo(repo)
                    .tag(&tag)
                    .build(),
            ),
        )
        .await
        .unwrap();
    Tag {
        host: d.host().to_owned(),
        name: format!("{repo}:{tag}"),
    }
}

async fn untag(d: &Docker, name: &str) {
    d.client()
        .remove_image(
            name,
            Some(RemoveImageOptionsBuilder::default().noprune(true).build()),
            None,
        )
        .await
        .unwrap();
    assert!(!d.image_present(name).await.unwrap());
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_saved_bundle_loads_back_the_images_it_names() {
    let d = crate::docker::engine().await;
    let tag = tagged(&d, "roundtrip").await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab-bundle.tar");
    let manifest = d
        .save_bundle(std::slice::from_ref(&tag.name), &out)
        .await
        .unwrap();
    assert_eq!(manifest.format, FORMAT);
    assert_eq!(manifest.items.len(), 1);
    assert_eq!(manifest.items[0].name, tag.name);
    assert!(manifest.items[0].digest.starts_with("sha256:"));
    assert!(
        manifest.items[0].size > 100_000,
        "a docker save archive of busybox: {:?}",
        manifest.items[0]
    );
    // Nothing but the bundle is left beside it.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("lab-bundle.tar")]);
    // A plain tar any tool reads: the manifest first, then the image's archive, each whole.
    let listed = std::process::Command::new("tar")
        .arg("-tvf")
        .arg(&out)
        .output()
        .expect("tar runs");
    assert!(listed.status.success(), "{listed:?}");
    let listed = String::from_utf8_lossy(&listed.stdout);
    let entries: Vec<(&str, &str)> = listed
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[2], f[f.len() - 1])
        })
        .collect();
    assert_eq!(entries.len(), 2, "{listed}");
    assert_eq!(entries[0].1, "manifest.json", "{listed}");
    assert_eq!(
        entries[1],
        (manifest.items[0].size.to_string().as_str(), "images/0.tar"),
        "{listed}"
    );

    untag(&d, &tag.name).await;
    let loaded = d.load_bundle(&out).await.unwrap();
    assert_eq!(loaded, manifest);
    assert!(
        d.image_present(&tag.name).await.unwrap(),
        "the bundle brought {} back",
        tag.name
    );
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_truncated_or_tampered_bundle_is_refused_and_nothing_is_loaded() {
    let d = crate::docker::engine().await;
    let tag = tagged(&d, "damaged").await;
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.tar");
    d.save_bundle(std::slice::from_ref(&tag.name), &good)
        .await
        .unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let (_, offsets) = bundle::verify(&good).unwrap();
    untag(&d, &tag.name).await;

    let tampered = dir.path().join("tampered.tar");
    let mut t = bytes.clone();
    t[offsets[0] as usize + 700] ^= 0xff;
    std::fs::write(&tampered, &t).unwrap();
    let e = d.load_bundle(&tampered).await.unwrap_err();
    assert!(
        e.to_string().contains("it was changed or damaged"),
        "{}",
        e.to_string()
    );
    assert!(
        e.to_string().contains(&tag.name) && e.to_string().contains("nothing was loaded"),
        "{}",
        e.to_string()
    );
    assert!(
        ocm_lab::backend::Failure::help(&e)
            .unwrap_or_default()
            .contains("bundle save"),
        "{e:?}"
    );

    let truncated = dir.path().join("truncated.tar");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let e = d.load_bundle(&truncated).await.unwrap_err();
    assert!(e.to_string().contains("truncated"), "{}", e.to_string());

    assert!(
        !d.image_present(&tag.name).await.unwrap(),
        "nothing was loaded"
    );
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn saving_an_image_the_engine_lacks_names_it_and_writes_nothing() {
    let d = crate::docker::engine().await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b.tar");
    let missing = format!("ocm-lab-test/absent:{}", std::process::id());
    let e = d
        .save_bundle(std::slice::from_ref(&missing), &out)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("image {missing} is not in the Docker engine")),
        "{}",
        e.to_string()
    );
    assert!(
        ocm_lab::backend::Failure::help(&e)
            .unwrap_or_default()
            .contains("docker pull"),
        "{e:?}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
}

/// A stand-in node image of this test's own (`docker import` of one file holding `content`), so it can be
/// removed from the engine without touching any other test's image; removed again by the guard.
async fn own_image(d: &Docker, name: &str, content: &str) -> Tag {
    let mut tar = tar::Builder::new(Vec::new());
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o644);
    file.set_size(content.len() as u64);
    tar.append_data(&mut file, "kind/version", content.as_bytes())
        .unwrap();
    let bytes = tar.into_inner().unwrap();
    let (repo, tag) = name.split_once(':').unwrap();
    let mut progress = d.client().create_image(
        Some(
            bollard::query_parameters::CreateImageOptionsBuilder::default()
                .from_src("-")
                .repo(repo)
                .tag(tag)
                .build(),
        ),
        Some(bollard::body_full(bytes.into())),
        None,
    );
    while let Some(p) = futures::StreamExt::next(&mut progress).await {
        p.unwrap();
    }
    Tag {
        host: d.host().to_owned(),
        name: name.to_owned(),
    }
}

/// The `RepoTags` of the `docker save` archive at `images/0.tar` in `bundle`.
fn saved_repo_tags(bundle: &std::path::Path) -> Vec<String> {
    let mut outer = tar::Archive::new(std::fs::File::open(bundle).unwrap());
    for entry in outer.entries().unwrap() {
        let entry = entry.unwrap();
        if entry.path().unwrap().to_str() != Some("images/0.tar") {
            continue;
        }
        let mut inner = tar::Archive::new(entry);
        for e in inner.entries().unwrap() {
            let mut e = e.unwrap();
            if e.path().unwrap().to_str() == Some("manifest.json") {
                let mut text = String::new();
                std::io::Read::read_to_string(&mut e, &mut text).unwrap();
                let m: serde_json::Value = serde_json::from_str(&text).unwrap();
                return m[0]["RepoTags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect();
            }
        }
    }
    panic!("no images/0.tar/manifest.json in {}", bundle.display());
}

/// The node image of an offline `up --bundle`: saved under its tag, it loads into an engine that never
/// had it and is found under that tag as the very image it was saved as (its ID, recorded in the
/// manifest, is checked after the load); a bundle whose image loads as another image is refused.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn a_node_image_loads_under_its_tag_into_an_engine_lacking_it_and_its_identity_is_checked() {
    let d = crate::docker::engine().await;
    let name = format!("ocm-lab-test/node:v1-{}", std::process::id());
    let image = own_image(&d, &name, &format!("v1.36.1 {}\n", std::process::id())).await;
    let id = d.image_id(&image.name).await.unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab-bundle.tar");
    let manifest = d
        .save_bundle(std::slice::from_ref(&image.name), &out)
        .await
        .unwrap();
    assert_eq!(manifest.items[0].image_id.as_deref(), Some(id.as_str()));
    assert_eq!(saved_repo_tags(&out), std::slice::from_ref(&image.name));

    // An engine that lacks the image: removed whole, not just untagged.
    d.client()
        .remove_image(
            &image.name,
            Some(RemoveImageOptionsBuilder::default().force(true).build()),
            None,
        )
        .await
        .unwrap();
    assert_eq!(d.image_id(&image.name).await.unwrap(), None);
    assert_eq!(d.image_id(&id).await.unwrap(), None, "the image is gone");
    d.load_bundle(&out).await.unwrap();
    assert_eq!(
        d.image_id(&image.name).await.unwrap().as_deref(),
        Some(id.as_str()),
        "found under its tag as the image it was saved as"
    );

    // A manifest that names another image ID than the archive holds: the load says so.
    let other = format!("sha256:{}", "1".repeat(64));
    let bytes = std::fs::read(&out).unwrap();
    let text = String::from_utf8_lossy(&bytes[..4096]).into_owned();
    assert!(text.contains(&id), "the manifest records the image ID");
    let tampered = dir.path().join("tampered.tar");
    let mut changed = bytes.clone();
    let at = text.find(&id).unwrap();
    changed[at..at + id.len()].copy_from_slice(other.as_bytes());
    std::fs::write(&tampered, &changed).unwrap();
    let e = d.load_bundle(&tampered).await.unwrap_err();
    assert!(
        matches!(
            &e,
            ocm_lab::backend::docker::DockerError::BundleImageNotLoaded { want, got, .. }
                if *want == other && got.as_deref() == Some(id.as_str())
        ),
        "{e:?}"
    );
}

#[test]
fn a_pinned_image_is_saved_by_its_tag_which_docker_load_keeps() {
    assert_eq!(
        bundle::save_name(
            "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5"
        ),
        "kindest/node:v1.36.1"
    );
    assert_eq!(bundle::save_name("registry:3"), "registry:3");
    assert_eq!(
        bundle::save_name("quay.io/x/y@sha256:ab"),
        "quay.io/x/y@sha256:ab",
        "nothing else to save it by"
    );
}
