//! Image bundles through the Docker API: the start of `ocm-lab bundle save` / `up --bundle`. A bundle is a tar
//! holding `manifest.json` first, then one `docker save` archive per image (`images/<n>.tar`), then any files
//! (kind `chart`: `charts/<repo-host>/<name>-<version>.tgz`; kind `tool`: `tools/<name>`, the kind and helm
//! binaries). The manifest names each item (name, kind, path, sha256 digest, size, and for files their version
//! and repository); loading checks every digest and size before it sends anything to Docker, so a truncated or
//! tampered bundle is refused and nothing is half-loaded.
//!
//! Nothing is held in memory whole: saving streams each `GET /images/get` answer into a temporary file
//! while hashing it (a tar entry needs its size up front), then copies the files into the bundle; loading
//! hashes each entry in one pass over the file, then streams each entry from its offset into
//! `POST /images/load`.

use std::io::Read as _;
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
    /// An image's ID in the engine it was saved from (`sha256:<config digest>`): after `docker load`,
    /// the image under its tag must have this ID, which the saving engine resolved from the pinned
    /// reference (the classic image store keeps no registry digest on load, so the pinned digest itself
    /// cannot be asked for again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
}

/// The name to `docker save` a pinned `image` by: `<repository>:<tag>` for a `<repository>:<tag>@sha256:…`
/// reference, else the reference itself. moby's classic image store records no tag in the archive for
/// a reference with a digest (moby `image/tarexport/save.go`: `parseNames` / `addAssoc` return early for
/// a `reference.Canonical`), so an archive saved by digest loads untagged: on a machine that never had
/// the image, neither its tag nor its digest then finds it, and kind tries to pull it offline.
pub fn save_name(image: &str) -> String {
    match super::super::split_reference(image) {
        (repository, Some(tag), Some(_)) => format!("{repository}:{tag}"),
        _ => image.to_owned(),
    }
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

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> DockerError + use<> {
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
        let exports = self.export_names(images).await?;
        // Charts and tools are hashed first: then only the images' digests and sizes are unknown
        // until they are written, and the manifest's room at the start of the bundle can be reserved.
        let file_items = hash_files(files).await?;
        // The longest the manifest can be: every digest has the same length, no size has more digits.
        let widest = Manifest {
            format: FORMAT.to_owned(),
            lab: lab.clone(),
            items: images
                .iter()
                .enumerate()
                .map(|(n, i)| Item {
                    image_id: Some(format!("sha256:{}", "0".repeat(64))),
                    ..image_item(n, i, format!("sha256:{}", "0".repeat(64)), u64::MAX)
                })
                .chain(file_items.iter().cloned())
                .collect(),
        };
        let room = serde_json::to_vec_pretty(&widest)
            .expect("manifests serialize")
            .len() as u64;
        // Written under another name and renamed once whole: a cut-off save never leaves a bundle that
        // looks whole.
        let partial = out.with_extension("partial");
        let written = async {
            let mut w = Writer::create(&partial).await?;
            w.header(MANIFEST, room, 0o644).await?;
            w.zeros(room + pad(room)).await?;
            let mut items = Vec::new();
            for (n, image) in images.iter().enumerate() {
                let (name, id) = &exports[n];
                items.push(self.write_image(&mut w, n, image, name, id).await?);
            }
            for (item, f) in file_items.iter().zip(files) {
                w.header(
                    &item.path,
                    item.size,
                    if item.kind == KIND_TOOL { 0o755 } else { 0o644 },
                )
                .await?;
                w.copy_file(&f.source, item.size).await?;
                w.zeros(pad(item.size)).await?;
            }
            items.extend(file_items);
            let manifest = Manifest {
                format: FORMAT.to_owned(),
                lab,
                items,
            };
            let mut json = serde_json::to_vec_pretty(&manifest).expect("manifests serialize");
            // Trailing spaces fill the reserved room: JSON allows whitespace after the value.
            json.resize(room as usize, b' ');
            w.zeros(1024).await?;
            w.write_at(512, &json).await?;
            w.finish().await?;
            tokio::fs::rename(&partial, out)
                .await
                .map_err(io_err(format!(
                    "rename {} to {}",
                    partial.display(),
                    out.display()
                )))?;
            Ok(manifest)
        }
        .await;
        if written.is_err() {
            let _ = tokio::fs::remove_file(&partial).await;
        }
        written
    }

    /// Streams image `image` (saved as `name`, image ID `id`) from Docker straight into the bundle's `n`th image
    /// entry, hashed on the way; its header is written once the size is known.
    async fn write_image(
        &self,
        w: &mut Writer,
        n: usize,
        image: &str,
        name: &str,
        id: &str,
    ) -> Result<Item> {
        // Streamed from Docker straight into its entry, hashed on the way; its header is
        // written once the size is known.
        let at = w.position().await?;
        w.zeros(512).await?;
        let mut hash = Sha256::new();
        let mut size = 0u64;
        let mut stream = self.client.export_image(name);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.err(&format!("export image {image}"), e))?;
            hash.update(&chunk);
            size += chunk.len() as u64;
            w.write(&chunk).await?;
        }
        w.zeros(pad(size)).await?;
        let item = Item {
            image_id: Some(id.to_owned()),
            ..image_item(
                n,
                image,
                format!("sha256:{}", hex::encode(hash.finalize())),
                size,
            )
        };
        w.header_at(at, &item.path, size, 0o644).await?;
        Ok(item)
    }

    /// The name each image is saved under ([`save_name`]) and its image ID, in the order of `images`.
    async fn export_names(&self, images: &[String]) -> Result<Vec<(String, String)>> {
        // Each image is saved under its tag ([`save_name`]), which must name the image its pinned
        // reference names: the tag is set to it when the engine lacks the tag (an image pulled by
        // digest), and a tag naming another image stops the save.
        let mut exports = Vec::new();
        for image in images {
            let Some(id) = self.image_id(image).await? else {
                return Err(DockerError::NotInEngine {
                    image: image.clone(),
                    host: self.host.clone(),
                });
            };
            let name = save_name(image);
            if name != *image {
                match self.image_id(&name).await? {
                    Some(tagged) if tagged == id => {}
                    Some(tagged) => {
                        return Err(DockerError::TagNamesAnotherImage {
                            image: image.clone(),
                            tag: name,
                            tagged,
                            pinned: id,
                        });
                    }
                    None => self.tag_image(image, &name).await?,
                }
            }
            exports.push((name, id));
        }
        Ok(exports)
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
            // The image must now be there under the name it was saved by, as the image the pinned
            // reference named where the bundle was made.
            if let Some(want) = &item.image_id {
                let name = save_name(&item.name);
                let got = self.image_id(&name).await?;
                if got.as_ref() != Some(want) {
                    return Err(DockerError::BundleImageNotLoaded {
                        image: item.name.clone(),
                        name,
                        want: want.clone(),
                        got,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The bundle's items for `files` (charts and tools), each hashed as it is read.
async fn hash_files(files: &[FileItem]) -> Result<Vec<Item>> {
    let mut file_items = Vec::new();
    for f in files {
        let source = f.source.clone();
        let (digest, size) = tokio::task::spawn_blocking(move || hash_file(&source))
            .await
            .map_err(|e| DockerError::TaskStopped {
                what: "bundle hashing".to_owned(),
                detail: e.to_string(),
            })?
            .map_err(io_err(format!("read {}", f.source.display())))?;
        file_items.push(Item {
            name: f.name.clone(),
            kind: f.kind.clone(),
            path: f.path.clone(),
            digest: format!("sha256:{digest}"),
            size,
            version: f.version.clone(),
            repo: f.repo.clone(),
            image_id: None,
        });
    }
    Ok(file_items)
}

/// The manifest item of the `n`th image of a bundle.
fn image_item(n: usize, image: &str, digest: String, size: u64) -> Item {
    Item {
        name: image.to_owned(),
        kind: KIND_IMAGE.to_owned(),
        path: format!("images/{n}.tar"),
        digest,
        size,
        version: None,
        repo: None,
        image_id: None,
    }
}

/// A private temporary folder beside `out` (same file system, so no surprise about free space elsewhere),
/// removed when dropped (`tempfile`, 0700).
/// Padding after an entry of `size` bytes, to the next 512-byte block.
fn pad(size: u64) -> u64 {
    (512 - size % 512) % 512
}

/// The bundle file as it is written: buffered, with the seeks a header written after its entry needs.
struct Writer {
    path: PathBuf,
    file: tokio::io::BufWriter<tokio::fs::File>,
}

impl Writer {
    async fn create(path: &Path) -> Result<Writer> {
        let file = tokio::fs::File::create(path)
            .await
            .map_err(io_err(format!("create {}", path.display())))?;
        Ok(Writer {
            path: path.to_owned(),
            file: tokio::io::BufWriter::with_capacity(CHUNK, file),
        })
    }

    fn fail(&self) -> impl FnOnce(std::io::Error) -> DockerError + use<> {
        io_err(format!("write the bundle {}", self.path.display()))
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<()> {
        let fail = self.fail();
        self.file.write_all(bytes).await.map_err(fail)
    }

    async fn zeros(&mut self, n: u64) -> Result<()> {
        let block = [0u8; 4096];
        let mut left = n;
        while left > 0 {
            let k = left.min(block.len() as u64) as usize;
            self.write(&block[..k]).await?;
            left -= k as u64;
        }
        Ok(())
    }

    async fn position(&mut self) -> Result<u64> {
        let fail = self.fail();
        self.file.flush().await.map_err(self.fail())?;
        self.file.get_mut().stream_position().await.map_err(fail)
    }

    fn tar_header(path: &str, size: u64, mode: u32) -> std::io::Result<tar::Header> {
        let mut header = tar::Header::new_gnu();
        header.set_path(path)?;
        header.set_size(size);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        Ok(header)
    }

    async fn header(&mut self, path: &str, size: u64, mode: u32) -> Result<()> {
        let header = Self::tar_header(path, size, mode).map_err(self.fail())?;
        self.write(header.as_bytes()).await
    }

    /// Writes `bytes` at `offset`, then carries on at the end.
    async fn write_at(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let fail = self.fail();
        let end = self.position().await?;
        let f = self.file.get_mut();
        async {
            f.seek(std::io::SeekFrom::Start(offset)).await?;
            f.write_all(bytes).await?;
            f.seek(std::io::SeekFrom::Start(end)).await?;
            Ok(())
        }
        .await
        .map_err(fail)
    }

    async fn header_at(&mut self, offset: u64, path: &str, size: u64, mode: u32) -> Result<()> {
        let header = Self::tar_header(path, size, mode).map_err(self.fail())?;
        self.write_at(offset, header.as_bytes()).await
    }

    /// Appends exactly `size` bytes of `source` (a chart or tool), copied by the kernel
    /// (`copy_file_range`, through `std::io::copy` from a `File` to a `File`); one that shrank fails.
    async fn copy_file(&mut self, source: &Path, size: u64) -> Result<()> {
        self.file.flush().await.map_err(self.fail())?;
        let mut to = self
            .file
            .get_ref()
            .try_clone()
            .await
            .map_err(self.fail())?
            .into_std()
            .await;
        let from = source.to_owned();
        let copied = tokio::task::spawn_blocking(move || {
            std::io::copy(&mut std::fs::File::open(&from)?.take(size), &mut to)
        })
        .await
        .map_err(|e| DockerError::TaskStopped {
            what: "bundle writer".to_owned(),
            detail: e.to_string(),
        })?
        .map_err(io_err(format!("copy {} into the bundle", source.display())))?;
        if copied != size {
            return Err(DockerError::Io {
                what: format!("copy {} into the bundle", source.display()),
                detail: format!(
                    "it shrank from {size} to {copied} bytes while the bundle was written"
                ),
            });
        }
        // The clone shares the file offset: carry on after what it wrote.
        self.file
            .get_mut()
            .seek(std::io::SeekFrom::End(0))
            .await
            .map_err(self.fail())?;
        Ok(())
    }

    async fn finish(mut self) -> Result<()> {
        self.file.flush().await.map_err(self.fail())
    }
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

/// The bundle as a tar archive to read.
fn open(bundle: &Path) -> Result<tar::Archive<std::io::BufReader<std::fs::File>>> {
    let file = std::fs::File::open(bundle).map_err(|e| DockerError::Io {
        what: format!("open bundle {}", bundle.display()),
        detail: e.to_string(),
    })?;
    Ok(tar::Archive::new(std::io::BufReader::new(file)))
}

/// Reads the whole bundle once: the manifest, then each entry's digest and size against it. Returns the
/// manifest and the data offset of each item, in manifest order.
pub fn verify(bundle: &Path) -> Result<(Manifest, Vec<u64>)> {
    let mut archive = open(bundle)?;
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
    let mut archive = open(bundle)?;
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
