//! `ocm-lab bundle save` and the Docker side of `ocm-lab up --bundle` (issue 13, items 3, 4 and 6).
//!
//! `bundle save` writes the kind node image and every other image of `ocm-lab images list` from the local
//! Docker engine into one bundle (`backend/docker/bundle.rs`: a streamed tar, manifest first, one
//! `docker save` archive per image with its sha256), and records in the manifest the versions the bundle
//! was made for. An image the engine lacks fails before anything is written, naming it.
//!
//! `up --bundle` reads the manifest first and refuses a bundle made for other versions than the
//! topology's (the node image, the OCM release, and every image the lab runs must be in it); then it
//! checks every digest and size, and only then loads the images into Docker, so a truncated or tampered
//! bundle loads nothing. With the node image in the engine, kind does not pull it (FACTS-HELM-KIND B6.6).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use crate::backend::docker::Docker;
use crate::backend::docker::bundle::{self, Manifest};
use crate::cli::{BundleCommand, LabArgs};
use crate::error::Error;
use crate::images::LabImage;
use crate::topology::Lab;

/// `ocm-lab bundle …`.
pub fn run(command: &BundleCommand) -> Result<(), Error> {
    match command {
        BundleCommand::Save(args) => {
            let (lab, images) = lab_images(&args.lab)?;
            let names: Vec<String> = images.iter().map(|i| i.image.clone()).collect();
            let rt = super::runner::runtime()?;
            let manifest = rt.block_on(async {
                let docker = Docker::connect().await?;
                docker
                    .save_bundle_for(&names, recorded(&lab), &args.output)
                    .await
            })?;
            let size: u64 = manifest.items.iter().map(|i| i.size).sum();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "wrote {} ({} images, {} MB); bring a lab up from it with `ocm-lab up --bundle {}`",
                args.output.display(),
                manifest.items.len(),
                size / 1_000_000,
                args.output.display()
            )
            .and_then(|()| out.flush())
            .map_err(Error::Stdout)
        }
    }
}

/// The lab and the images it runs (`images list`), with the embedded or given workflows and patches.
fn lab_images(args: &LabArgs) -> Result<(Lab, Vec<LabImage>), Error> {
    let (loaded, sources, patches) = super::inputs(args)?;
    let plan = crate::workflow::plan::plan(
        &loaded.lab,
        &sources,
        &crate::actions::Registry,
        &patches,
        "up",
    )?;
    let images = crate::images::list(&loaded.lab, &plan, &patches)?;
    Ok((loaded.lab, images))
}

/// What a bundle records of the lab it was made for.
fn recorded(lab: &Lab) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "kindNodeImage".to_owned(),
            lab.versions.kind_node_image.clone(),
        ),
        ("ocm".to_owned(), lab.versions.ocm.version.to_owned()),
    ])
}

/// Why `manifest` does not fit the lab: a recorded version that differs, or an image the lab runs that
/// the bundle lacks. `None` when it fits.
pub fn mismatch(manifest: &Manifest, lab: &Lab, images: &[LabImage]) -> Option<String> {
    let mut why = Vec::new();
    for (key, want) in recorded(lab) {
        match manifest.lab.get(&key) {
            Some(have) if *have == want => {}
            Some(have) => why.push(format!(
                "{key} is {have} in the bundle, {want} in the topology"
            )),
            None => why.push(format!("it records no {key} (the topology has {want})")),
        }
    }
    let missing: Vec<&str> = images
        .iter()
        .filter(|i| !manifest.items.iter().any(|item| item.name == i.image))
        .map(|i| i.image.as_str())
        .collect();
    if !missing.is_empty() {
        why.push(format!("it lacks {}", missing.join(", ")));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// `up --bundle FILE` (or the topology's `spec.bundle`; the flag wins): refuses a bundle for other
/// versions, then checks every digest and loads the node image into the Docker engine (kind boots from
/// it without pulling). The chart images go into the kind nodes in the `node-images` step
/// ([`node_images`]). On the simulated lab only the checks run. Without a bundle, nothing.
pub fn preload(args: &LabArgs, simulate: bool, flag: Option<&Path>) -> Result<(), Error> {
    let (lab, images) = lab_images(args)?;
    let Some(file) = flag.map(Path::to_path_buf).or(lab.bundle.clone()) else {
        return Ok(());
    };
    let file = file.as_path();
    let manifest = bundle::manifest(file)?;
    if let Some(why) = mismatch(&manifest, &lab, &images) {
        return Err(Error::BundleVersions {
            bundle: file.display().to_string(),
            why,
        });
    }
    if simulate {
        bundle::verify(file)?;
        return Ok(());
    }
    let hosted: Vec<String> = images
        .iter()
        .filter(|i| i.kind != crate::images::ImageKind::Chart)
        .map(|i| i.image.clone())
        .collect();
    let rt = super::runner::runtime()?;
    rt.block_on(async {
        let docker = Docker::connect().await?;
        docker.load_bundle_images(file, &hosted).await
    })?;
    Ok(())
}

/// What the `node-images` step loads into each cluster: the chart images each lab cluster runs
/// (`images list`), and with a bundle, where it holds each (entries located by their tar headers; the
/// digests were checked by [`preload`] before the run).
pub fn node_images(
    lab: &Lab,
    plan: &crate::workflow::Plan,
    patches: &crate::patch::PatchSet,
) -> Result<crate::step::NodeImages, Error> {
    let images = crate::images::list(lab, plan, patches)?;
    let mut per_cluster: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in images
        .iter()
        .filter(|i| i.kind == crate::images::ImageKind::Chart)
    {
        for c in &i.clusters {
            per_cluster
                .entry(c.clone())
                .or_default()
                .push(i.image.clone());
        }
    }
    let bundle = match &lab.bundle {
        None => None,
        Some(file) => {
            let (manifest, located) = bundle::locate(file)?;
            Some(
                manifest
                    .items
                    .iter()
                    .zip(located)
                    .map(|(item, (offset, size))| {
                        (
                            item.name.clone(),
                            crate::backend::ImageArchive {
                                image: item.name.clone(),
                                file: file.clone(),
                                offset,
                                size,
                            },
                        )
                    })
                    .collect(),
            )
        }
    };
    Ok(crate::step::NodeImages {
        per_cluster,
        bundle,
    })
}
