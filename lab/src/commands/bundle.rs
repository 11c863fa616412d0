//! `ocm-lab bundle save` and the Docker side of `ocm-lab up --bundle`.
//!
//! `bundle save` writes the kind node image and every other image of `ocm-lab images list` from the local
//! Docker engine into one bundle (`backend/docker/bundle.rs`: a streamed tar, manifest first, one
//! `docker save` archive per image with its sha256), then each chart the lab installs from the chart cache
//! (`backend::chart_cache`, fetched and verified first when missing; kind `chart`), and the kind and helm
//! binaries the lab resolves (kind `tool`), and records in the manifest the versions the bundle was made
//! for. Images the engine lacks fail the save before anything is fetched or written, all of them named,
//! each with its `docker pull` line.
//!
//! `up --bundle` reads the manifest first and refuses a bundle made for other versions than the
//! topology's (the node image, the OCM release, and every image the lab runs must be in it); then it
//! checks every digest and size, and only then puts the charts into the chart cache (checked again against
//! the manifest as they are written, and recorded as verified), unpacks the tools into
//! `<cache>/tools/bundle/<digest>/<name>` (0755) for the run to use, and loads the images into Docker, so
//! a truncated or tampered bundle loads nothing. With the node image in the engine, kind does not pull it
//! (kubernetes-sigs/kind v0.32.0 `pkg/cluster/internal/providers/docker/images.go`, `pullIfNotPresent`). A
//! bundle of images only (made before charts and tools were bundled) still loads; the lab then finds its charts
//! and tools as without a bundle.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use crate::backend::chart_cache::{self, ChartCache};
use crate::backend::docker::bundle::{self, FileItem, Manifest};
use crate::backend::docker::{Docker, DockerError};
use crate::backend::tools::{self, ToolName};
use crate::charts::ChartPlan;
use crate::cli::{BundleCommand, LabArgs};
use crate::error::Error;
use crate::images::LabImage;
use crate::topology::Lab;

/// `ocm-lab bundle …`.
pub fn run(command: &BundleCommand, host: &crate::topology::Host) -> Result<(), Error> {
    match command {
        BundleCommand::Save(args) => {
            let file = args
                .out
                .as_ref()
                .expect("clap requires --out (or refuses -o)");
            let (lab, images, charts) = lab_images(&args.lab, host)?;
            let names: Vec<String> = images.iter().map(|i| i.image.clone()).collect();
            let rt = super::runtime()?;
            let docker = rt.block_on(Docker::connect())?;
            // Every image is checked first: all that are missing stop the save together, before any
            // chart or tool is fetched and before anything is written.
            let mut missing = Vec::new();
            for image in &names {
                if !rt.block_on(docker.image_present(image))? {
                    missing.push(image.clone());
                }
            }
            if !missing.is_empty() {
                return Err(Error::BundleImagesMissing {
                    count: missing.len(),
                    of: names.len(),
                    host: docker.host().to_owned(),
                    help: pull_help(&missing),
                    images: missing,
                });
            }
            let mut files = chart_files(&charts)?;
            files.extend(tool_files(&lab)?);
            let manifest =
                rt.block_on(docker.save_bundle_with(&names, &files, recorded(&lab), file))?;
            let size: u64 = manifest.items.iter().map(|i| i.size).sum();
            let count = |kind: &str| manifest.items.iter().filter(|i| i.kind == kind).count();
            let tools: Vec<&str> = manifest
                .items
                .iter()
                .filter(|i| i.kind == bundle::KIND_TOOL)
                .map(|i| i.name.as_str())
                .collect();
            let mut out = std::io::stdout().lock();
            writeln!(
                out,
                "wrote {} ({} images, {} charts, {}; {} MB); bring a lab up from it with `ocm-lab up --bundle {}`",
                file.display(),
                count(bundle::KIND_IMAGE),
                count(bundle::KIND_CHART),
                if tools.is_empty() {
                    "no tools".to_owned()
                } else {
                    tools.join(" and ")
                },
                size / 1_000_000,
                file.display()
            )
            .and_then(|()| out.flush())
            .map_err(Error::Stdout)
        }
    }
}

/// What gets the missing images into the engine: one `docker pull` line each, whole, ready to copy.
fn pull_help(missing: &[String]) -> String {
    let pulls: Vec<String> = missing
        .iter()
        .map(|image| format!("`docker pull {image}`"))
        .collect();
    format!(
        "where a registry is reachable, pull them, then run `bundle save` again:\n{}",
        pulls.join("\n")
    )
}

/// The bundle's chart items: each chart the lab installs, from the chart cache (fetched and verified
/// first when it is not there).
fn chart_files(charts: &[ChartPlan]) -> Result<Vec<FileItem>, Error> {
    let cache = ChartCache::from_env().ok_or(tools::ToolError::NoCacheDir)?;
    let mut files: Vec<FileItem> = Vec::new();
    for c in charts {
        let name = c.chart.name();
        let path = format!(
            "charts/{}/{name}-{}.tgz",
            chart_cache::repo_host(&c.repo),
            c.version
        );
        if files.iter().any(|f| f.path == path) {
            continue;
        }
        let source = cache.ensure(&c.repo, name, &c.version)?;
        files.push(FileItem {
            name: name.to_owned(),
            kind: bundle::KIND_CHART.to_owned(),
            version: Some(c.version.clone()),
            repo: Some(c.repo.clone()),
            path,
            source,
        });
    }
    Ok(files)
}

/// The bundle's tool items: the kind (when the lab creates clusters) and helm the lab resolves, as `up`
/// resolves them (downloaded and verified when missing).
fn tool_files(lab: &Lab) -> Result<Vec<FileItem>, Error> {
    let mut cfg = tools::ToolsConfig::from_env(tools::Downloads::Allow)?;
    cfg.kind_minimum = Some(crate::topology::catalog::kind_for_node_image(
        &lab.versions.kind_node_image,
    ));
    let mut names = vec![ToolName::Helm];
    if lab
        .clusters()
        .any(|c| c.provider == crate::topology::Provider::Kind)
    {
        names.insert(0, ToolName::Kind);
    }
    names
        .into_iter()
        .map(|name| {
            let tool = tools::resolve(name, &cfg)?;
            Ok(FileItem {
                name: name.as_str().to_owned(),
                kind: bundle::KIND_TOOL.to_owned(),
                version: Some(tool.version.to_string()),
                repo: None,
                path: format!("tools/{name}"),
                source: tool.path,
            })
        })
        .collect()
}

/// The lab, the images it runs (`images list`) and the charts it installs, with the embedded or given workflows and patches.
fn lab_images(
    args: &LabArgs,
    host: &crate::topology::Host,
) -> Result<(Lab, Vec<LabImage>, Vec<ChartPlan>), Error> {
    let (loaded, sources, patches) = super::inputs(args, host)?;
    let plan = crate::workflow::plan::plan(
        &loaded.lab,
        &sources,
        &crate::actions::Registry,
        &patches,
        "up",
    )?;
    let images = crate::images::list(&loaded.lab, &plan)?;
    let charts = plan.charts().cloned().collect();
    Ok((loaded.lab, images, charts))
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
        .filter(|i| {
            !manifest
                .items
                .iter()
                .any(|item| item.kind == bundle::KIND_IMAGE && item.name == i.image)
        })
        .map(|i| i.image.as_str())
        .collect();
    if !missing.is_empty() {
        why.push(format!("it lacks {}", missing.join(", ")));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// `up --bundle FILE` (or the topology's `spec.bundle`; the flag wins): refuses a bundle for other
/// versions, then checks every digest, puts the charts into the chart cache and unpacks the tools (see
/// [`unpack`]), and loads the node image (and the local registry's) into the Docker engine, so kind boots
/// without pulling. The chart images go into the kind nodes in the `node-images` step ([`node_images`]).
/// Returns the bundle's tools and the images Docker knows by their tag only ([`local_names`]), for the
/// run to use. On the simulated lab no image is loaded into Docker. Without a bundle, nothing.
pub fn preload(
    args: &LabArgs,
    host: &crate::topology::Host,
    simulate: bool,
    flag: Option<&Path>,
) -> Result<Preloaded, Error> {
    let (lab, images, _) = lab_images(args, host)?;
    let Some(file) = flag.map(Path::to_path_buf).or(lab.bundle.clone()) else {
        return Ok(Preloaded::default());
    };
    let file = file.as_path();
    let manifest = bundle::manifest(file)?;
    if let Some(why) = mismatch(&manifest, &lab, &images) {
        return Err(Error::BundleVersions {
            bundle: file.display().to_string(),
            why,
        });
    }
    // Every item is checked before anything is unpacked or loaded.
    let (manifest, offsets) = bundle::verify(file)?;
    let root = tools::cache_root_from_env().ok_or(tools::ToolError::NoCacheDir)?;
    let tools = unpack(file, &manifest, &offsets, &root)?;
    let mut image_aliases = BTreeMap::new();
    if !simulate {
        // Only what runs on the host's engine: the chart images go into the nodes, not into Docker.
        let hosted: Vec<String> = images
            .iter()
            .filter(|i| i.kind != crate::images::ImageKind::Chart)
            .map(|i| i.image.clone())
            .collect();
        let rt = super::runtime()?;
        image_aliases = rt.block_on(async {
            let docker = Docker::connect().await?;
            docker
                .load_bundle_images(file, &manifest, &offsets, Some(&hosted))
                .await?;
            local_names(&docker, &hosted).await
        })?;
    }
    Ok(Preloaded {
        tools,
        image_aliases,
    })
}

/// What `up --bundle` prepared before the run.
#[derive(Debug, Default)]
pub struct Preloaded {
    /// The bundle's kind and helm, unpacked.
    pub tools: Vec<(ToolName, PathBuf)>,
    /// Pinned image references the engine knows by their tag only: reference → tag.
    pub image_aliases: BTreeMap<String, String>,
}

/// The images just loaded from the bundle that the engine knows by their tag but not by the digest they
/// are pinned with (`kindest/node:v1.36.1@sha256:…`): `docker load` on an engine with the classic image
/// store keeps no digest (Docker's behaviour, not confirmed in moby's source), and kind, which runs
/// `docker inspect` on the reference as written before it pulls, would then try to pull the image
/// (kubernetes-sigs/kind v0.32.0 `pkg/cluster/internal/providers/docker/images.go`, `pullIfNotPresent`), which
/// fails offline. The tag was just loaded from the bundle, whose every item was checked against its digest, so
/// it holds the pinned image: the run gives kind (and `docker run`) the tag instead.
pub async fn local_names(
    docker: &Docker,
    loaded: &[String],
) -> Result<BTreeMap<String, String>, Error> {
    let mut aliases = BTreeMap::new();
    for image in loaded {
        let Some(tag) = docker.local_name(image).await?.filter(|n| n != image) else {
            continue;
        };
        tracing::warn!(
            "Docker knows the bundle's {tag} by its tag only, not as {image} (docker load keeps no digest on an engine without the containerd image store): the lab runs it as {tag}, which was just loaded from the checked bundle"
        );
        aliases.insert(image.clone(), tag);
    }
    Ok(aliases)
}

/// Puts a checked bundle's charts into the chart cache under `cache_root` (`<root>/charts/<repo-host>/
/// <name>-<version>.tgz`, each checked again against the manifest's digest as it is written, and recorded
/// as verified), and its tools into `<root>/tools/bundle/<digest>/<name>` (0755, checked likewise).
/// `manifest` and `offsets` are what [`bundle::verify`] returned. Returns the tools.
pub fn unpack(
    file: &Path,
    manifest: &Manifest,
    offsets: &[u64],
    cache_root: &Path,
) -> Result<Vec<(ToolName, PathBuf)>, Error> {
    let refuse = |why: String| DockerError::BundleRefused {
        bundle: file.display().to_string(),
        why,
    };
    let io = |what: String| {
        move |e: std::io::Error| DockerError::Io {
            what,
            detail: e.to_string(),
        }
    };
    let charts = ChartCache::new(cache_root.join("charts"));
    let mut bundled = Vec::new();
    for (item, &offset) in manifest.items.iter().zip(offsets) {
        let reader = || {
            bundle::item_reader(file, offset, item.size).map_err(io(format!(
                "read {} from {}",
                item.path,
                file.display()
            )))
        };
        match item.kind.as_str() {
            bundle::KIND_CHART => {
                let (Some(repo), Some(version)) = (&item.repo, &item.version) else {
                    return Err(refuse(format!(
                        "chart {} ({}) does not say its repository and version",
                        item.name, item.path
                    ))
                    .into());
                };
                charts.install(repo, &item.name, version, &item.digest, &mut reader()?)?;
            }
            bundle::KIND_TOOL => {
                let name = match item.name.as_str() {
                    "kind" => ToolName::Kind,
                    "helm" => ToolName::Helm,
                    other => {
                        return Err(refuse(format!("it holds an unknown tool `{other}`")).into());
                    }
                };
                // A program built for another machine (a bundle made on Linux, used on a Mac) would fail
                // with `exec format error`: it is left out, and the lab finds the tool as it does
                // without a bundle (installed, cached, or downloaded).
                let mut head = Vec::with_capacity(20);
                reader()?
                    .take(20)
                    .read_to_end(&mut head)
                    .map_err(io(format!("read {} from {}", item.path, file.display())))?;
                if let (Some(built), Some(here)) = (
                    tools::Platform::of_executable(&head),
                    tools::Platform::current(),
                ) && built != here
                {
                    tracing::warn!(
                        "the bundle's {name} ({}) is a program for {built} and this machine is {here}: it is not used; {name} is found as without a bundle (installed, cached, or downloaded). A bundle made on a {here} machine carries one that runs here",
                        item.path
                    );
                    continue;
                }
                let dest = install_tool(file, offset, item, name, cache_root)?;
                bundled.push((name, dest));
            }
            _ => {}
        }
    }
    Ok(bundled)
}

/// Writes a bundled tool into the cache under its digest, hashed as it is written (what lands is what
/// was checked); one unpacked before (same digest, same folder) is checked, not written again.
fn install_tool(
    file: &Path,
    offset: u64,
    item: &bundle::Item,
    name: ToolName,
    cache_root: &Path,
) -> Result<PathBuf, Error> {
    let refuse = |why: String| DockerError::BundleRefused {
        bundle: file.display().to_string(),
        why,
    };
    let io = |what: String| {
        move |e: std::io::Error| DockerError::Io {
            what,
            detail: e.to_string(),
        }
    };
    let reader = || {
        bundle::item_reader(file, offset, item.size).map_err(io(format!(
            "read {} from {}",
            item.path,
            file.display()
        )))
    };
    let hex = item.digest.strip_prefix("sha256:").unwrap_or(&item.digest);
    let dir = cache_root
        .join("tools/bundle")
        .join(hex.get(..16).unwrap_or(hex));
    let dest = dir.join(name.as_str());
    // Unpacked before (same digest, same folder): checked, not written again.
    let current = dest
        .is_file()
        .then(|| chart_cache::sha256_file(&dest).ok())
        .flatten();
    if current.as_deref() != Some(hex) {
        std::fs::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let mut part = tempfile::Builder::new()
            .prefix(&format!(".{name}.part"))
            .tempfile_in(&dir)
            .map_err(io(format!("create a file in {}", dir.display())))?;
        // Hashed as it is written: what lands is what was checked.
        let written = chart_cache::copy_hashing(&mut reader()?, &mut part.as_file_mut())
            .map_err(io(format!("write {}", dest.display())))?;
        if written != hex {
            return Err(refuse(format!(
                "{} ({}) has digest sha256:{written}, the manifest says {}: it was changed or damaged",
                item.path, item.name, item.digest
            ))
            .into());
        }
        #[cfg(unix)]
        std::fs::set_permissions(
            part.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .map_err(io(format!("make {} executable", dest.display())))?;
        part.persist(&dest)
            .map_err(|e| io(format!("write {}", dest.display()))(e.error))?;
    }
    Ok(dest)
}

/// What the `node-images` step loads into each cluster: the chart images each lab cluster runs
/// (`images list`), and with a bundle, where it holds each (entries located by their tar headers; the
/// digests were checked by [`preload`] before the run).
pub fn node_images(
    lab: &Lab,
    plan: &crate::workflow::Plan,
) -> Result<crate::step::NodeImages, Error> {
    let images = crate::images::list(lab, plan)?;
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
