//! `ocm-lab bundle save` and `ocm-lab up --bundle`: a bundle is checked against
//! the topology's versions and its digests before anything runs, and a bundle for other versions, a
//! tampered or a truncated one is refused with nothing created. The `up` tests run on the simulated lab
//! with small bundles the tests write themselves (manifest first, entries with their sha256), so they
//! need no Docker and no images; `bundle save` with an image the engine lacks runs on the real engine.

use std::io::Write as _;

use ocm_lab::backend::docker::bundle::FORMAT;
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::common::{ocm_lab, ocm_lab_env};

/// The images `images list -t minimal` names.
pub(crate) fn minimal_images() -> Vec<String> {
    let r = ocm_lab(&["images", "list", "-t", "minimal", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    list.iter()
        .map(|i| i["image"].as_str().unwrap().to_owned())
        .collect()
}

/// Writes a bundle naming `images` (each entry a few bytes) recording `node_image` as the lab's.
pub(crate) fn write_bundle(path: &std::path::Path, images: &[String], node_image: &str) {
    let lab = ocm_lab::topology::load_arg(&crate::common::host(), Some("minimal"))
        .unwrap()
        .lab;
    let mut items = Vec::new();
    let mut entries = Vec::new();
    for (n, image) in images.iter().enumerate() {
        let data = format!("not a real image archive: {image}").into_bytes();
        items.push(json!({
            "name": image, "kind": "image", "path": format!("images/{n}.tar"),
            "digest": format!("sha256:{}", hex::encode(Sha256::digest(&data))),
            "size": data.len(),
        }));
        entries.push((format!("images/{n}.tar"), data));
    }
    let manifest = json!({
        "format": FORMAT,
        "lab": {"kindNodeImage": node_image, "ocm": lab.versions.ocm.version},
        "items": items,
    });
    let mut tar = tar::Builder::new(std::fs::File::create(path).unwrap());
    let json = serde_json::to_vec(&manifest).unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_size(json.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "manifest.json", json.as_slice())
        .unwrap();
    for (name, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, name, data.as_slice()).unwrap();
    }
    tar.into_inner().unwrap().flush().unwrap();
}

/// `text` without whitespace and the diagnostic's frame, so a needle matches across miette's line wraps.
fn squeezed(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace() && *c != '│')
        .collect()
}

fn says(stderr: &str, needle: &str) -> bool {
    squeezed(stderr).contains(&squeezed(needle))
}

pub(crate) fn node_image() -> String {
    ocm_lab::topology::load_arg(&crate::common::host(), Some("minimal"))
        .unwrap()
        .lab
        .versions
        .kind_node_image
}

/// Nothing at all in the state folder: no simulated lab, no journal.
fn assert_nothing_created(state: &std::path::Path) {
    let left: Vec<_> = walk(state);
    assert!(left.is_empty(), "the refused `up` left {left:?}");
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn up_with(bundle: &std::path::Path, state: &std::path::Path) -> crate::common::Output {
    ocm_lab_env(
        &[
            "up",
            "--simulate",
            "-t",
            "minimal",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
        &[("OCM_LAB_STATE_DIR", state)],
    )
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_simulated_from_a_bundle_made_for_the_topology_runs_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    write_bundle(&bundle, &minimal_images(), &node_image());
    let r = up_with(&bundle, &state);
    assert_eq!(r.code, 0, "{}", r.stderr);
}

#[test]
fn a_bundle_for_another_node_image_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    write_bundle(&bundle, &minimal_images(), "kindest/node:v1.30.0");
    let r = up_with(&bundle, &state);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        says(&r.stderr, "other versions")
            && says(
                &r.stderr,
                "kindNodeImage is kindest/node:v1.30.0 in the bundle"
            )
            && says(&r.stderr, "ocm-lab bundle save"),
        "{}",
        r.stderr
    );
    assert_nothing_created(&state);
}

#[test]
fn a_bundle_lacking_an_image_the_lab_runs_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    let mut images = minimal_images();
    let dropped = images.pop().unwrap();
    write_bundle(&bundle, &images, &node_image());
    let r = up_with(&bundle, &state);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        says(&r.stderr, &format!("it lacks {dropped}")),
        "{}",
        r.stderr
    );
    assert_nothing_created(&state);
}

#[test]
fn a_tampered_or_truncated_bundle_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let good = dir.path().join("good.tar");
    write_bundle(&good, &minimal_images(), &node_image());
    let bytes = std::fs::read(&good).unwrap();

    // One byte of the last image's entry changed.
    let needle = b"not a real image archive: ";
    let at = bytes
        .windows(needle.len())
        .rposition(|w| w == needle)
        .unwrap();
    let mut tampered = bytes.clone();
    tampered[at] ^= 0x20;
    let path = dir.path().join("tampered.tar");
    std::fs::write(&path, &tampered).unwrap();
    let r = up_with(&path, &state);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        says(&r.stderr, "changed or damaged") && says(&r.stderr, "make the bundle again"),
        "{}",
        r.stderr
    );
    assert_nothing_created(&state);

    // Cut inside the last entry.
    let path = dir.path().join("truncated.tar");
    std::fs::write(&path, &bytes[..at + 4]).unwrap();
    let r = up_with(&path, &state);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(says(&r.stderr, "truncated"), "{}", r.stderr);
    assert_nothing_created(&state);
}

/// `bundle save` checks every image first and names all that the engine lacks, each with its own
/// `docker pull` line, whole (never broken across lines), and writes nothing.
#[test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
fn bundle_save_names_every_image_missing_from_the_engine_and_writes_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let d = rt.block_on(crate::docker::engine());
    let images = minimal_images();
    let missing: Vec<String> = images
        .iter()
        .filter(|image| !rt.block_on(d.image_present(image)).unwrap())
        .cloned()
        .collect();
    if missing.len() < 2 {
        eprintln!("skipped: this engine lacks fewer than two images of the minimal lab");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab-bundle.tar");
    let r = ocm_lab(&[
        "bundle",
        "save",
        "-t",
        "minimal",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains(&format!("{} of the {} images", missing.len(), images.len())),
        "{}",
        r.stderr
    );
    for image in &missing {
        let pull = format!("docker pull {image}");
        assert_eq!(
            r.stderr.lines().filter(|l| l.contains(&pull)).count(),
            1,
            "one whole line for {image}:\n{}",
            r.stderr
        );
    }
    assert!(walk(dir.path()).is_empty(), "{:?}", walk(dir.path()));
}

/// `-o` is the output format in every command; `bundle save`'s old `-o FILE` is refused saying so.
#[test]
fn bundle_save_refuses_the_old_dash_o_file_and_names_out() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lab-bundle.tar");
    let r = ocm_lab(&[
        "bundle",
        "save",
        "-t",
        "minimal",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("`--out FILE`") && r.stderr.contains("output format"),
        "{}",
        r.stderr
    );
    assert!(walk(dir.path()).is_empty(), "{:?}", walk(dir.path()));
    let help = ocm_lab(&["bundle", "save", "--help"]);
    assert!(help.stdout.contains("--out <FILE>"), "{}", help.stdout);
    assert!(!help.stdout.contains("--output"), "{}", help.stdout);
}
