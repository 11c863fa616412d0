//! Loading an image archive into a kind node through the Docker API, as `kind load image-archive` does
//! (kubernetes-sigs/kind v0.32.0 `pkg/cluster/nodeutils/util.go`): the archive is copied into the node
//! container, then imported into containerd's `k8s.io` namespace with
//! `ctr --namespace=k8s.io images import --all-platforms --digests` (as kind runs it; `--digests` also keeps an
//! image whose archive names no tag reachable by digest), and the copy is removed again. An archive holding one
//! platform's content only (saved from Docker's containerd image store) fails `--all-platforms` with
//! `content digest … not found` (kubernetes-sigs/kind#3795); it is then imported for the node's own platform.
//! Like kind, the import passes `--snapshotter=<s>` read from the node's `containerd config dump`
//! ([`parse_snapshotter`]): kind's entrypoint picks `native` on zfs and `fuse-overlayfs` on fuse/rootless
//! hosts, and an image unpacked into another snapshotter than the CRI's is not there for the kubelet.

use std::path::Path;

use bollard::models::ExecConfig;
use bollard::query_parameters::UploadToContainerOptionsBuilder;
use futures::StreamExt;
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _};

use super::{Docker, DockerError};

/// Where the archive is put in the node while it is imported.
pub const IN_NODE_DIR: &str = "/";
pub const IN_NODE_NAME: &str = "ocm-lab-images.tar";

impl Docker {
    /// Copies the `docker save` archive `archive` into the node container `node` and imports it into
    /// containerd's `k8s.io` namespace; the copy in the node is removed whatever the outcome.
    pub async fn import_into_node(&self, node: &str, archive: &Path) -> Result<(), DockerError> {
        let size = tokio::fs::metadata(archive)
            .await
            .map_err(|e| DockerError::Io {
                what: format!("read {}", archive.display()),
                detail: e.to_string(),
            })?
            .len();
        self.import_range_into_node(node, archive, 0, size, &archive.display().to_string())
            .await
    }

    /// [`Docker::import_into_node`] for bytes `offset..offset + size` of `file` (one entry of a bundle,
    /// streamed in place: nothing is extracted on the host). `what` names the archive in errors.
    pub async fn import_range_into_node(
        &self,
        node: &str,
        file: &Path,
        offset: u64,
        size: u64,
        what: &str,
    ) -> Result<(), DockerError> {
        self.upload_range(node, file, offset, size, what).await?;
        self.import_uploaded(node, Path::new(what)).await
    }

    /// Copies bytes `offset..offset + size` of `file` into `node` as the archive to import, streamed as a
    /// one-entry tar.
    async fn upload_range(
        &self,
        node: &str,
        file: &Path,
        offset: u64,
        size: u64,
        what: &str,
    ) -> Result<(), DockerError> {
        let mut opened = tokio::fs::File::open(file)
            .await
            .map_err(|e| DockerError::Io {
                what: format!("open {}", file.display()),
                detail: e.to_string(),
            })?;
        opened
            .seek(std::io::SeekFrom::Start(offset))
            .await
            .map_err(|e| DockerError::Io {
                what: format!("read {}", file.display()),
                detail: e.to_string(),
            })?;
        let archive = Path::new(what);
        // The upload is itself a tar: one header, the archive's bytes, padding and the end blocks.
        let mut header = tar::Header::new_gnu();
        header
            .set_path(IN_NODE_NAME)
            .expect("a short relative path");
        header.set_size(size);
        header.set_mode(0o600);
        header.set_cksum();
        let head = bytes::Bytes::copy_from_slice(header.as_bytes());
        let tail = bytes::Bytes::from(vec![0u8; ((512 - size % 512) % 512) as usize + 1024]);
        let body =
            futures::stream::unfold((opened.take(size), false), |(mut f, done)| async move {
                if done {
                    return None;
                }
                let mut buf = vec![0u8; 1 << 20];
                match f.read(&mut buf).await {
                    Ok(0) => None,
                    Ok(n) => {
                        buf.truncate(n);
                        Some((Ok(bytes::Bytes::from(buf)), (f, false)))
                    }
                    Err(e) => Some((Err(e), (f, true))),
                }
            });
        let stream = futures::stream::once(async { Ok(head) })
            .chain(body)
            .chain(futures::stream::once(async { Ok(tail) }));
        self.client
            .upload_to_container(
                node,
                Some(
                    UploadToContainerOptionsBuilder::default()
                        .path(IN_NODE_DIR)
                        .build(),
                ),
                bollard::body_try_stream(stream),
            )
            .await
            .map_err(|e| self.err(&format!("copy {} into node {node}", archive.display()), e))?;
        Ok(())
    }

    /// Imports the uploaded archive into the node's containerd (all platforms, or this machine's when the
    /// archive holds only that one's content) and removes it from the node; `archive` names it in errors.
    async fn import_uploaded(&self, node: &str, archive: &Path) -> Result<(), DockerError> {
        let path = format!("{IN_NODE_DIR}{IN_NODE_NAME}");
        let snapshotter = match self.node_snapshotter(node).await {
            Ok(s) => format!("--snapshotter={s}"),
            Err(e) => {
                let _ = self.exec_in(node, &["rm", "-f", &path]).await;
                return Err(e);
            }
        };
        let mut import = self
            .exec_in(
                node,
                &[
                    "ctr",
                    "--namespace=k8s.io",
                    "images",
                    "import",
                    "--all-platforms",
                    "--digests",
                    &snapshotter,
                    &path,
                ],
            )
            .await;
        // An archive `docker save` wrote from Docker's containerd image store (Docker Desktop, OrbStack,
        // Docker 29 by default) can hold an index that names every platform's manifest but only the local
        // platform's content; `--all-platforms` then fails with `content digest … not found`
        // (kubernetes-sigs/kind#3795, #4224). The node runs this machine's platform, so import that one.
        if let Ok((code, output)) = &import
            && *code != 0
            && missing_other_platform(output)
        {
            import = self
                .exec_in(
                    node,
                    &[
                        "ctr",
                        "--namespace=k8s.io",
                        "images",
                        "import",
                        "--digests",
                        &snapshotter,
                        &path,
                    ],
                )
                .await;
        }
        let removed = self.exec_in(node, &["rm", "-f", &path]).await;
        let (code, output) = import?;
        if code != 0 {
            return Err(DockerError::NodeImportFailed {
                node: node.to_owned(),
                archive: archive.display().to_string(),
                code,
                output: last_chars(&output, 800),
            });
        }
        removed?;
        Ok(())
    }

    /// The snapshotter containerd's CRI plugin uses in `node`, read from `containerd config dump` as
    /// `kind load` reads it (kubernetes-sigs/kind v0.32.0 `pkg/cluster/nodeutils/util.go`
    /// `getSnapshotter`).
    pub async fn node_snapshotter(&self, node: &str) -> Result<String, DockerError> {
        let (code, output) = self
            .exec_in(node, &["containerd", "config", "dump"])
            .await?;
        if code != 0 {
            return Err(DockerError::NodeCommandFailed {
                node: node.to_owned(),
                command: "containerd config dump".to_owned(),
                code,
                output: last_chars(&output, 800),
            });
        }
        parse_snapshotter(&output).map_err(|detail| DockerError::NodeSnapshotterUnknown {
            node: node.to_owned(),
            detail,
        })
    }

    /// The images containerd holds in the node's `k8s.io` namespace (`ctr --namespace=k8s.io images ls`):
    /// each reference with the digest it points at.
    pub async fn node_image_refs(
        &self,
        node: &str,
    ) -> Result<Vec<crate::backend::NodeImage>, DockerError> {
        let (code, output) = self
            .exec_in(node, &["ctr", "--namespace=k8s.io", "images", "ls"])
            .await?;
        if code != 0 {
            return Err(DockerError::NodeCommandFailed {
                node: node.to_owned(),
                command: "ctr --namespace=k8s.io images ls".to_owned(),
                code,
                output: last_chars(&output, 800),
            });
        }
        Ok(parse_ctr_images(&output))
    }

    /// `crictl pull <image>` in the node: the node's containerd pulls it (its mirrors, its credentials).
    pub async fn pull_image_in_node(&self, node: &str, image: &str) -> Result<(), DockerError> {
        let (code, output) = self.exec_in(node, &["crictl", "pull", image]).await?;
        if code != 0 {
            return Err(DockerError::NodeCommandFailed {
                node: node.to_owned(),
                command: format!("crictl pull {image}"),
                code,
                output: last_chars(&output, 800),
            });
        }
        Ok(())
    }

    /// Runs `cmd` in the container; its exit code and output. kind adds `--privileged` to its exec, but
    /// kind's node containers run privileged already (kubernetes-sigs/kind v0.32.0
    /// `pkg/cluster/internal/providers/docker/provision.go`), so the exec gets their full capabilities without
    /// it (and an unprivileged stand-in refuses a privileged exec).
    async fn exec_in(&self, container: &str, cmd: &[&str]) -> Result<(i64, String), DockerError> {
        let what = format!("run `{}` in {container}", cmd.join(" "));
        let exec = self
            .client
            .create_exec(
                container,
                ExecConfig {
                    cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| self.err(&what, e))?;
        let mut text = String::new();
        if let bollard::exec::StartExecResults::Attached { mut output, .. } = self
            .client
            .start_exec(&exec.id, None)
            .await
            .map_err(|e| self.err(&what, e))?
        {
            while let Some(chunk) = output.next().await {
                text.push_str(&chunk.map_err(|e| self.err(&what, e))?.to_string());
            }
        }
        let code = self
            .client
            .inspect_exec(&exec.id)
            .await
            .map_err(|e| self.err(&what, e))?
            .exit_code
            .unwrap_or(-1);
        Ok((code, text))
    }
}

/// Whether `ctr images import --all-platforms` failed for content the archive does not hold
/// (`ctr: content digest sha256:…: not found`): another platform's manifest of a single-platform save.
fn missing_other_platform(output: &str) -> bool {
    output.contains("content digest sha256:") && output.contains("not found")
}

/// The last `n` characters of `text`, trimmed.
fn last_chars(text: &str, n: usize) -> String {
    let count = text.chars().count();
    text.chars()
        .skip(count.saturating_sub(n))
        .collect::<String>()
        .trim()
        .to_owned()
}

/// The snapshotter in a `containerd config dump`, where kind v0.32.0 reads it
/// (`pkg/cluster/nodeutils/util.go` `parseSnapshotter`): config version 2 (containerd 1.3 and later)
/// `plugins."io.containerd.grpc.v1.cri".containerd.snapshotter`; versions 3 and 4 (containerd 2.0, 2.1)
/// `plugins."io.containerd.cri.v1.images".snapshotter`; any other version is an error, as in kind.
///
/// The dump is TOML as containerd writes it: `[table.'quoted.key']` headers and `key = value` lines, one
/// a line; that is all this reads (no inline tables or multi-line values, which the dump does not put
/// on these keys).
pub fn parse_snapshotter(dump: &str) -> Result<String, String> {
    let mut table: Vec<String> = Vec::new();
    let mut version = None;
    let mut v2 = None;
    let mut v3 = None;
    for line in dump.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            if header.starts_with('[') {
                // An array of tables: none of the keys read here live in one.
                table = vec!["[[".to_owned()];
                continue;
            }
            let header = header.trim_end().strip_suffix(']').unwrap_or(header);
            table = toml_key_path(header);
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let mut path = table.clone();
        path.extend(toml_key_path(key.trim()));
        let value = value.trim();
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        match path.as_slice() {
            ["version"] => version = value.parse::<i64>().ok(),
            [
                "plugins",
                "io.containerd.grpc.v1.cri",
                "containerd",
                "snapshotter",
            ] => v2 = toml_string(value),
            ["plugins", "io.containerd.cri.v1.images", "snapshotter"] => v3 = toml_string(value),
            _ => {}
        }
    }
    match version {
        Some(2) => v2
            .ok_or_else(|| "failed to detect containerd snapshotter (config version 2)".to_owned()),
        Some(n @ (3 | 4)) => v3
            .ok_or_else(|| format!("failed to detect containerd snapshotter (config version {n})")),
        Some(n) => Err(format!(
            "unknown containerd config version: {n} (supported versions: 2, 3 and 4)"
        )),
        None => Err("failed to detect containerd config version".to_owned()),
    }
}

/// The parts of a dotted TOML key: `plugins.'io.containerd.cri.v1.images'` → `plugins`,
/// `io.containerd.cri.v1.images`.
fn toml_key_path(key: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote = None;
    for c in key.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '.') => parts.push(std::mem::take(&mut current).trim().to_owned()),
            (None, c) if c.is_whitespace() => {}
            (_, c) => current.push(c),
        }
    }
    parts.push(current.trim().to_owned());
    parts
}

/// A basic (`"…"`) or literal (`'…'`) TOML string without escapes, as the dump writes names.
fn toml_string(value: &str) -> Option<String> {
    let value = value.split(" #").next().unwrap_or(value).trim();
    let inner = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))?;
    Some(inner.to_owned())
}

/// The references and digests of `ctr images ls` (columns REF, TYPE, DIGEST, SIZE, PLATFORMS, LABELS;
/// the header line and anything without a `sha256:` digest skipped).
pub fn parse_ctr_images(output: &str) -> Vec<crate::backend::NodeImage> {
    output
        .lines()
        .filter_map(|line| {
            let mut cols = line.split_whitespace();
            let reference = cols.next()?;
            let digest = cols.nth(1)?;
            (reference != "REF" && digest.starts_with("sha256:")).then(|| {
                crate::backend::NodeImage {
                    reference: reference.to_owned(),
                    digest: digest.to_owned(),
                }
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_snapshotter_is_read_where_kind_reads_it_for_each_config_version() {
        // containerd 2.x (config version 3) as it dumps itself: literal strings, quoted table keys.
        let v3 = "version = 3\nroot = '/var/lib/containerd'\n\n[plugins]\n  [plugins.'io.containerd.cri.v1.images']\n    snapshotter = 'native'\n    disable_snapshot_annotations = true\n\n  [plugins.'io.containerd.cri.v1.runtime']\n    snapshotter = 'other'\n";
        assert_eq!(super::parse_snapshotter(v3).unwrap(), "native");
        let v4 = v3.replace("version = 3", "version = 4");
        assert_eq!(super::parse_snapshotter(&v4).unwrap(), "native");
        // Config version 2 (kind's own config.toml is `version = 2`).
        let v2 = "version = 2\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"registry.k8s.io/pause:3.10\"\n    [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n      snapshotter = \"fuse-overlayfs\"\n";
        assert_eq!(super::parse_snapshotter(v2).unwrap(), "fuse-overlayfs");
        // Each version's key only: a version 2 key in a version 3 dump is not read.
        let mixed = v2.replace("version = 2", "version = 3");
        assert_eq!(
            super::parse_snapshotter(&mixed).unwrap_err(),
            "failed to detect containerd snapshotter (config version 3)"
        );
        assert_eq!(
            super::parse_snapshotter("version = 5\n").unwrap_err(),
            "unknown containerd config version: 5 (supported versions: 2, 3 and 4)"
        );
        assert_eq!(
            super::parse_snapshotter("[plugins]\n").unwrap_err(),
            "failed to detect containerd config version"
        );
    }

    #[test]
    fn ctr_images_ls_is_read_as_references_and_digests() {
        let out = "REF                                              TYPE                                                      DIGEST                                                                  SIZE     PLATFORMS   LABELS\n\
quay.io/open-cluster-management/work:v1.3.1      application/vnd.oci.image.manifest.v1+json                sha256:1111111111111111111111111111111111111111111111111111111111111111 30.1 MiB linux/amd64 io.cri-containerd.image=managed\n\
import-2026-11-25@sha256:2222222222222222222222222222222222222222222222222222222222222222 application/vnd.oci.image.index.v1+json sha256:2222222222222222222222222222222222222222222222222222222222222222 1.0 MiB linux/amd64 -\n";
        let images = super::parse_ctr_images(out);
        assert_eq!(images.len(), 2, "{images:?}");
        assert_eq!(
            images[0].reference,
            "quay.io/open-cluster-management/work:v1.3.1"
        );
        assert_eq!(images[0].digest, format!("sha256:{}", "1".repeat(64)));
    }
}
