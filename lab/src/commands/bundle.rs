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

/// `up --bundle FILE`: refuses a bundle for other versions, then checks every digest and loads the
/// images into the Docker engine. On the simulated lab only the checks run (the simulated lab has no
/// image store yet).
pub fn preload(args: &LabArgs, simulate: bool, file: &Path) -> Result<(), Error> {
    let (lab, images) = lab_images(args)?;
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
    let rt = super::runner::runtime()?;
    rt.block_on(async {
        let docker = Docker::connect().await?;
        docker.load_bundle(file).await
    })?;
    Ok(())
}
