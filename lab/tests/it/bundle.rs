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

async fn tagged(d: &Docker, what: &str) -> Option<Tag> {
    let image = crate::docker::test_image(d).await?;
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
    Some(Tag {
        host: d.host().to_owned(),
        name: format!("{repo}:{tag}"),
    })
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
async fn a_saved_bundle_loads_back_the_images_it_names() {
    let Some(d) = crate::docker::docker_or_skip().await else {
        return;
    };
    let Some(tag) = tagged(&d, "roundtrip").await else {
        return;
    };
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
async fn a_truncated_or_tampered_bundle_is_refused_and_nothing_is_loaded() {
    let Some(d) = crate::docker::docker_or_skip().await else {
        return;
    };
    let Some(tag) = tagged(&d, "damaged").await else {
        return;
    };
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
async fn saving_an_image_the_engine_lacks_names_it_and_writes_nothing() {
    let Some(d) = crate::docker::docker_or_skip().await else {
        return;
    };
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
