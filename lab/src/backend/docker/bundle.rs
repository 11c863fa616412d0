//! Image bundles through the Docker API: the start of `ocm-lab bundle save` / `up --bundle` (issue 13
//! items 3–4). A bundle is a tar holding `manifest.json` first, then one `docker save` archive per image
//! (`images/<n>.tar`), then any files (kind `chart`: `charts/<repo-host>/<name>-<version>.tgz`; kind `tool`:
//! `tools/<name>`, the kind and helm binaries). The manifest names each item (name, kind, path, sha256
//! digest, size, and for files their version and repository); loading checks
//! every digest and size before it sends anything to Docker, so a truncated or tampered bundle is refused
//! and nothing is half-loaded.
//!
//! Nothing is held in memory whole: saving streams each `GET /images/get` answer into a temporary file
//! while hashing it (a tar entry needs its size up front), then copies the files into the bundle; loading
//! hashes each entry in one pass over the file, then streams each entry from its offset into
//! `POST /images/load`.

use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use bollard::query_parameters::ImportImageOptionsBuilder;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};

use super::Docker;
use super::DockerError;

type Result<T, E = DockerError> = std::result::Result<T, E>;

/// The bundle format this code writes and reads.
pub const FORMAT: &str = "ocm-lab.open-cluster-management.io/bundle/v1alpha1";
/// The manifest's path in the bundle (its first entry).
pub const MANIFEST: &str = "manifest.json";
/// Chunk size of the streams to and from Docker.
const CHUNK: usize = 1 << 20;

/// What a bundle holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    /// What the bundle was made for, as `ocm-lab bundle save` records it (`kindNodeImage`, `ocm`, …), so
    /// `up --bundle` can refuse a bundle made for other versions. Empty for a bundle of bare images.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lab: std::collections::BTreeMap<String, String>,
    pub items: Vec<Item>,
}

/// One item of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    /// The image reference (`quay.io/open-cluster-management/work:v1.3.1`).
    pub name: String,
    /// `image` (the node image and chart images alike: a `docker save` archive), `chart` (a chart's
    /// `.tgz`, named by the chart's name) or `tool` (`kind` or `helm`, a binary).
    pub kind: String,
    /// Its entry in the bundle.
    pub path: String,
    /// `sha256:<hex>` of the entry.
    pub digest: String,
    /// Bytes.
    pub size: u64,
    /// A chart's or tool's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// A chart's repository URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
}

/// The item kind of a `docker save` archive.
pub const KIND_IMAGE: &str = "image";
/// The item kind of a chart `.tgz`.
pub const KIND_CHART: &str = "chart";
/// The item kind of a tool binary.
pub const KIND_TOOL: &str = "tool";

/// A local file to put into a bundle (a chart or a tool).
#[derive(Debug, Clone)]
pub struct FileItem {
    pub name: String,
    /// [`KIND_CHART`] or [`KIND_TOOL`].
    pub kind: String,
    pub version: Option<String>,
    pub repo: Option<String>,
    /// Its entry in the bundle.
    pub path: String,
    /// Where it is read from.
    pub source: PathBuf,
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> DockerError {
    move |e| DockerError::Io {
        what,
        detail: e.to_string(),
    }
}

impl Docker {
    /// Writes a bundle of `images` (each must be in the engine) to `out`, streamed; returns its manifest.
    /// An image the engine lacks fails before anything is written, naming it.
    pub async fn save_bundle(&self, images: &[String], out: &Path) -> Result<Manifest> {
        self.save_bundle_for(images, Default::default(), out).await
    }

    /// [`Docker::save_bundle`], recording in the manifest what the bundle was made for (`lab`).
    pub async fn save_bundle_for(
        &self,
        images: &[String],
        lab: std::collections::BTreeMap<String, String>,
        out: &Path,
    ) -> Result<Manifest> {
        self.save_bundle_with(images, &[], lab, out).await
    }

    /// [`Docker::save_bundle_for`], adding `files` (charts and tools, each hashed as it is read) after
    /// the images.
    pub async fn save_bundle_with(
        &self,
        images: &[String],
        files: &[FileItem],
        lab: std::collections::BTreeMap<String, String>,
        out: &Path,
    ) -> Result<Manifest> {
        for image in images {
            if !self.image_present(image).await? {
                return Err(DockerError::NotInEngine {
                    image: image.clone(),
                    host: self.host.clone(),
                });
            }
        }
        let extra = files;
        let scratch = tempdir_near(out)?;
        let mut items = Vec::new();
        let mut files = Vec::new();
        for (n, image) in images.iter().enumerate() {
            let path = scratch.path().join(format!("{n}.tar"));
            // Docker's chunks are small: buffered, so the file sees 1 MiB writes.
            let mut file = tokio::io::BufWriter::with_capacity(
                CHUNK,
                tokio::fs::File::create(&path)
                    .await
                    .map_err(io_err(format!("create {}", path.display())))?,
            );
            let mut hash = Sha256::new();
            let mut size = 0u64;
            let mut stream = self.client.export_image(image);
            while let Some(chunk) = stream.next().await {
                let chunk = chunk.map_err(|e| self.err(&format!("export image {image}"), e))?;
                hash.update(&chunk);
                size += chunk.len() as u64;
                file.write_all(&chunk)
                    .await
                    .map_err(io_err(format!("write {}", path.display())))?;
            }
            file.flush()
                .await
                .map_err(io_err(format!("write {}", path.display())))?;
            items.push(Item {
                name: image.clone(),
                kind: KIND_IMAGE.to_owned(),
                path: format!("images/{n}.tar"),
                digest: format!("sha256:{}", hex::encode(hash.finalize())),
                size,
                version: None,
                repo: None,
            });
            files.push(path);
        }
        for f in extra {
            let source = f.source.clone();
            let (digest, size) = tokio::task::spawn_blocking(move || hash_file(&source))
                .await
                .map_err(|e| DockerError::TaskStopped {
                    what: "bundle hashing".to_owned(),
                    detail: e.to_string(),
                })?
                .map_err(io_err(format!("read {}", f.source.display())))?;
            items.push(Item {
                name: f.name.clone(),
                kind: f.kind.clone(),
                path: f.path.clone(),
                digest: format!("sha256:{digest}"),
                size,
                version: f.version.clone(),
                repo: f.repo.clone(),
            });
            files.push(f.source.clone());
        }
        let manifest = Manifest {
            format: FORMAT.to_owned(),
            lab,
            items,
        };
        let out = out.to_owned();
        let m = manifest.clone();
        tokio::task::spawn_blocking(move || write_tar(&out, &m, &files))
            .await
            .map_err(|e| DockerError::TaskStopped {
                what: "bundle writer".to_owned(),
                detail: e.to_string(),
            })??;
        drop(scratch);
        Ok(manifest)
    }

    /// Loads a bundle's images into the engine, after checking every entry against the manifest; a
    /// bundle that fails the check is refused before anything is loaded. Returns the manifest.
    pub async fn load_bundle(&self, bundle: &Path) -> Result<Manifest> {
        let path = bundle.to_owned();
        let (manifest, offsets) = tokio::task::spawn_blocking(move || verify(&path))
            .await
            .map_err(|e| DockerError::TaskStopped {
                what: "bundle check".to_owned(),
                detail: e.to_string(),
            })??;
        self.load_bundle_images(bundle, &manifest, &offsets, None)
            .await?;
        Ok(manifest)
    }

    /// Loads the images of a bundle already checked by [`verify`] (which returned `manifest` and
    /// `offsets`) into the engine: all of them, or those named in `only` (what `up --bundle` loads into
    /// the engine: the node image; the chart images go into the kind nodes). Charts and tools are left
    /// to the caller.
    pub async fn load_bundle_images(
        &self,
        bundle: &Path,
        manifest: &Manifest,
        offsets: &[u64],
        only: Option<&[String]>,
    ) -> Result<()> {
        for (item, &offset) in manifest.items.iter().zip(offsets) {
            if item.kind != KIND_IMAGE || only.is_some_and(|names| !names.contains(&item.name)) {
                continue;
            }
            let mut file = tokio::fs::File::open(bundle)
                .await
                .map_err(io_err(format!("open {}", bundle.display())))?;
            file.seek(std::io::SeekFrom::Start(offset))
                .await
                .map_err(io_err(format!("read {}", bundle.display())))?;
            let body = futures::stream::unfold(
                (file.take(item.size), false),
                |(mut r, done)| async move {
                    if done {
                        return None;
                    }
                    let mut buf = vec![0u8; CHUNK];
                    match r.read(&mut buf).await {
                        Ok(0) => None,
                        Ok(n) => {
                            buf.truncate(n);
                            Some((Ok(bytes::Bytes::from(buf)), (r, false)))
                        }
                        Err(e) => Some((Err(e), (r, true))),
                    }
                },
            );
            let mut progress = self.client.import_image_stream(
                ImportImageOptionsBuilder::default().quiet(true).build(),
                body,
                None,
            );
            while let Some(p) = progress.next().await {
                p.map_err(|e| {
                    self.err(
                        &format!("load image {} from {}", item.name, bundle.display()),
                        e,
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// A private temporary folder beside `out` (same file system, so no surprise about free space elsewhere),
/// removed when dropped (`tempfile`, 0700).
fn tempdir_near(out: &Path) -> Result<tempfile::TempDir> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    tempfile::Builder::new()
        .prefix(".ocm-lab-bundle")
        .tempdir_in(&parent)
        .map_err(|e| DockerError::Io {
            what: format!("create a temporary folder in {}", parent.display()),
            detail: e.to_string(),
        })
}

fn write_tar(out: &Path, manifest: &Manifest, files: &[PathBuf]) -> Result<()> {
    let partial = out.with_extension("partial");
    let write = || -> std::io::Result<()> {
        let mut tar = tar::Builder::new(std::io::BufWriter::new(std::fs::File::create(&partial)?));
        let json = serde_json::to_vec_pretty(manifest).expect("manifests serialize");
        let mut header = tar::Header::new_gnu();
        header.set_size(json.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, MANIFEST, json.as_slice())?;
        // The entries are written by hand, file to file: `std::io::copy` from a `File` to a `File` is a
        // kernel copy (`copy_file_range`), where the tar builder would pass every byte through a buffer.
        tar.finish()?;
        let mut w = tar.into_inner()?;
        w.flush()?;
        let mut f = w.into_inner().map_err(|e| e.into_error())?;
        // `finish` wrote the two end-of-archive blocks: the entries go in their place.
        f.seek(std::io::SeekFrom::End(-1024))?;
        for (item, file) in manifest.items.iter().zip(files) {
            let mut header = tar::Header::new_gnu();
            header.set_path(&item.path)?;
            header.set_size(item.size);
            header.set_mode(if item.kind == KIND_TOOL { 0o755 } else { 0o644 });
            header.set_mtime(0);
            header.set_cksum();
            f.write_all(header.as_bytes())?;
            // Exactly the bytes hashed: a file that grew since is cut to its recorded size (and then
            // refused by its digest on loading); one that shrank fails the save.
            let copied = std::io::copy(&mut std::fs::File::open(file)?.take(item.size), &mut f)?;
            if copied != item.size {
                return Err(std::io::Error::other(format!(
                    "{} shrank from {} to {copied} bytes while the bundle was written",
                    file.display(),
                    item.size
                )));
            }
            f.write_all(&[0u8; 512][..((512 - item.size % 512) % 512) as usize])?;
        }
        // Two zero blocks end the archive. No fsync: a bundle cut off by a crash is refused by its digests.
        f.write_all(&[0u8; 1024])
    };
    // Written under another name and renamed: a cut-off save never leaves a bundle that looks whole.
    write()
        .and_then(|()| std::fs::rename(&partial, out))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            DockerError::Io {
                what: format!("write the bundle {}", out.display()),
                detail: e.to_string(),
            }
        })
}

/// The sha256 (hex) and size of a file, read in chunks.
fn hash_file(path: &Path) -> std::io::Result<(String, u64)> {
    let mut f = std::fs::File::open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        size += n as u64;
    }
    Ok((hex::encode(hash.finalize()), size))
}

/// The bytes of the item at `offset` (from [`verify`]) of `bundle`, `size` long.
pub fn item_reader(bundle: &Path, offset: u64, size: u64) -> std::io::Result<impl std::io::Read> {
    use std::io::Seek as _;
    let mut f = std::fs::File::open(bundle)?;
    f.seek(std::io::SeekFrom::Start(offset))?;
    Ok(std::io::BufReader::new(f).take(size))
}

/// Why a bundle is refused.
fn refuse(bundle: &Path, why: String) -> DockerError {
    DockerError::BundleRefused {
        bundle: bundle.display().to_string(),
        why,
    }
}

/// Reads the whole bundle once: the manifest, then each entry's digest and size against it. Returns the
/// manifest and the data offset of each item, in manifest order.
pub fn verify(bundle: &Path) -> Result<(Manifest, Vec<u64>)> {
    let file = std::fs::File::open(bundle).map_err(|e| DockerError::Io {
        what: format!("open bundle {}", bundle.display()),
        detail: e.to_string(),
    })?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let mut entries = archive
        .entries_with_seek()
        .map_err(|e| refuse(bundle, format!("it is not a tar archive ({e})")))?;
    let manifest = read_manifest(bundle, &mut entries)?;
    let mut found: std::collections::HashMap<String, (String, u64, u64)> = Default::default();
    for entry in entries {
        let mut entry =
            entry.map_err(|e| refuse(bundle, format!("it is truncated or damaged ({e})")))?;
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let offset = entry.raw_file_position();
        let declared = entry.size();
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; CHUNK];
        let mut read = 0u64;
        loop {
            let n = entry
                .read(&mut buf)
                .map_err(|e| refuse(bundle, format!("{path} is truncated ({e})")))?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            read += n as u64;
        }
        if read != declared {
            return Err(refuse(
                bundle,
                format!("{path} is truncated: {read} of its {declared} bytes are there"),
            ));
        }
        found.insert(
            path,
            (
                format!("sha256:{}", hex::encode(hash.finalize())),
                read,
                offset,
            ),
        );
    }
    // A file cut inside the tar's end blocks still parses: compare with the manifest, item by item.
    let mut offsets = Vec::new();
    for item in &manifest.items {
        let Some((digest, size, offset)) = found.get(&item.path) else {
            return Err(refuse(
                bundle,
                format!(
                    "{} ({}) is missing: the bundle is truncated",
                    item.path, item.name
                ),
            ));
        };
        if *size != item.size {
            return Err(refuse(
                bundle,
                format!(
                    "{} ({}) has {size} bytes, the manifest says {}",
                    item.path, item.name, item.size
                ),
            ));
        }
        if *digest != item.digest {
            return Err(refuse(
                bundle,
                format!(
                    "{} ({}) has digest {digest}, the manifest says {}: it was changed or damaged",
                    item.path, item.name, item.digest
                ),
            ));
        }
        offsets.push(*offset);
    }
    Ok((manifest, offsets))
}

/// The manifest and where each item's bytes are in the bundle (`(offset, size)`, in manifest order),
/// read from the tar headers alone (nothing is hashed: [`verify`] checks the digests). A bundle that
/// lacks an item, or whose entry has another size than the manifest says, is refused.
pub fn locate(bundle: &Path) -> Result<(Manifest, Vec<(u64, u64)>)> {
    let file = std::fs::File::open(bundle).map_err(|e| DockerError::Io {
        what: format!("open bundle {}", bundle.display()),
        detail: e.to_string(),
    })?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let mut entries = archive
        .entries_with_seek()
        .map_err(|e| refuse(bundle, format!("it is not a tar archive ({e})")))?;
    let manifest = read_manifest(bundle, &mut entries)?;
    let mut found: std::collections::HashMap<String, (u64, u64)> = Default::default();
    for entry in entries {
        let entry =
            entry.map_err(|e| refuse(bundle, format!("it is truncated or damaged ({e})")))?;
        let path = entry
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        found.insert(path, (entry.raw_file_position(), entry.size()));
    }
    let mut located = Vec::new();
    for item in &manifest.items {
        match found.get(&item.path) {
            Some(&(offset, size)) if size == item.size => located.push((offset, size)),
            _ => {
                return Err(refuse(
                    bundle,
                    format!(
                        "{} ({}) is missing or has another size than the manifest says",
                        item.path, item.name
                    ),
                ));
            }
        }
    }
    Ok((manifest, located))
}

/// Reads only a bundle's manifest (its first entry), without checking the items: what `up --bundle`
/// compares with the topology before the whole bundle is checked and loaded.
pub fn manifest(bundle: &Path) -> Result<Manifest> {
    let file = std::fs::File::open(bundle).map_err(|e| DockerError::Io {
        what: format!("open bundle {}", bundle.display()),
        detail: e.to_string(),
    })?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    let mut entries = archive
        .entries()
        .map_err(|e| refuse(bundle, format!("it is not a tar archive ({e})")))?;
    read_manifest(bundle, &mut entries)
}

fn read_manifest<'a, R: std::io::Read + 'a>(
    bundle: &Path,
    entries: &mut impl Iterator<Item = std::io::Result<tar::Entry<'a, R>>>,
) -> Result<Manifest> {
    let manifest: Manifest = {
        let mut first = match entries.next() {
            Some(Ok(e)) => e,
            Some(Err(e)) => return Err(refuse(bundle, format!("it is not a tar archive ({e})"))),
            None => return Err(refuse(bundle, "it is empty".to_owned())),
        };
        let path = first
            .path()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path != MANIFEST {
            return Err(refuse(
                bundle,
                format!("its first entry is `{path}`, not {MANIFEST}"),
            ));
        }
        let mut text = Vec::new();
        first
            .read_to_end(&mut text)
            .map_err(|e| refuse(bundle, format!("its manifest is cut off ({e})")))?;
        serde_json::from_slice(&text)
            .map_err(|e| refuse(bundle, format!("its manifest is not valid ({e})")))?
    };
    if manifest.format != FORMAT {
        return Err(refuse(
            bundle,
            format!(
                "its format is `{}`; this ocm-lab reads `{FORMAT}`",
                manifest.format
            ),
        ));
    }
    Ok(manifest)
}
