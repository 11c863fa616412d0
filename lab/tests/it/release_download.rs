//! The action's release path (`version:`): `action/download-release.sh` against a local HTTP server standing
//! in for the release host, serving an archive laid out as `.github/workflows/release.yml` publishes it and a
//! SHA256SUMS. The binary is installed only when its checksum matches; anything else installs nothing.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use sha2::Digest;

use crate::common::root;

/// A release host: serves `files` by path, 404 for anything else, and records the paths asked for.
struct Host {
    url: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl Host {
    fn serve(files: HashMap<String, Vec<u8>>) -> Host {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut request = String::new();
                let mut reader = BufReader::new(&stream);
                if reader.read_line(&mut request).is_err() {
                    continue;
                }
                // The headers, up to the blank line (curl sends no body with a GET).
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let path = request.split(' ').nth(1).unwrap_or("").to_owned();
                log.lock().unwrap().push(path.clone());
                let (status, body) = match files.get(&path) {
                    Some(b) => ("200 OK", b.clone()),
                    None => ("404 Not Found", b"Not Found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Host { url, asked }
    }
}

/// A release archive for `target`: `ocm-lab-<target>-v<version>/ocm-lab`, a script printing its version.
fn archive(target: &str, version: &str) -> Vec<u8> {
    let script = format!("#!/bin/sh\necho 'ocm-lab {version} (the release stand-in)'\n");
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut header = tar::Header::new_gnu();
    header.set_mode(0o755);
    header.set_size(script.len() as u64);
    tar.append_data(
        &mut header,
        format!("ocm-lab-{target}-v{version}/ocm-lab"),
        script.as_bytes(),
    )
    .unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Runs the action's download script for release 9.9.9 from `host`, on runner `os`/`arch`, into `dest`.
fn download(host: &Host, os: &str, arch: &str, dest: &Path) -> crate::common::Output {
    let out = Command::new("bash")
        .arg(root().join("action/download-release.sh"))
        .args([&format!("{}/v9.9.9", host.url), "9.9.9", os, arch])
        .arg(dest)
        .output()
        .expect("bash runs");
    crate::common::Output {
        code: out.status.code().expect("not killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

const LINUX_X64: &str = "ocm-lab-x86_64-unknown-linux-musl-v9.9.9.tgz";

/// A host serving the Linux X64 archive with `sums` as its SHA256SUMS.
fn host_with_sums(sums: impl FnOnce(&str) -> String) -> Host {
    let tgz = archive("x86_64-unknown-linux-musl", "9.9.9");
    let sums = sums(&sha256(&tgz));
    Host::serve(HashMap::from([
        (format!("/v9.9.9/{LINUX_X64}"), tgz),
        ("/v9.9.9/SHA256SUMS".to_owned(), sums.into_bytes()),
    ]))
}

fn installed(dest: &Path) -> PathBuf {
    dest.join("bin/ocm-lab")
}

#[test]
fn a_release_whose_checksum_matches_is_installed_and_runs() {
    let host = host_with_sums(|sum| {
        format!(
            "{}  ocm-lab-aarch64-apple-darwin-v9.9.9.tgz\n{sum}  {LINUX_X64}\n",
            "0".repeat(64)
        )
    });
    let dest = tempfile::tempdir().unwrap();
    let r = download(&host, "Linux", "X64", dest.path());
    assert_eq!(r.code, 0, "{r:?}");
    let bin = installed(dest.path());
    let ran = Command::new(&bin).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout),
        "ocm-lab 9.9.9 (the release stand-in)\n"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&bin).unwrap().permissions().mode() & 0o777,
        0o755
    );
    assert_eq!(
        *host.asked.lock().unwrap(),
        [
            format!("/v9.9.9/{LINUX_X64}"),
            "/v9.9.9/SHA256SUMS".to_owned()
        ]
    );
}

#[test]
fn an_archive_that_does_not_match_its_checksum_is_refused_and_nothing_installed() {
    let host = host_with_sums(|sum| {
        // One hex digit changed: the archive on the host is not the one the release summed.
        let wrong = format!(
            "{}{}",
            if sum.starts_with('0') { "1" } else { "0" },
            &sum[1..]
        );
        format!("{wrong}  {LINUX_X64}\n")
    });
    let dest = tempfile::tempdir().unwrap();
    let r = download(&host, "Linux", "X64", dest.path());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&format!(
            "{LINUX_X64} does not match SHA256SUMS of release 9.9.9"
        )) && r.stderr.contains("not installed"),
        "{}",
        r.stderr
    );
    assert!(!dest.path().join("bin").exists());
}

#[test]
fn sums_without_a_line_for_the_archive_install_nothing() {
    let host = host_with_sums(|sum| format!("{sum}  ocm-lab-x86_64-apple-darwin-v9.9.9.tgz\n"));
    let dest = tempfile::tempdir().unwrap();
    let r = download(&host, "Linux", "X64", dest.path());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("has no checksum for {LINUX_X64}")),
        "{}",
        r.stderr
    );
    assert!(!dest.path().join("bin").exists());
}

#[test]
fn a_release_the_host_lacks_names_the_url_and_installs_nothing() {
    let host = Host::serve(HashMap::new());
    let dest = tempfile::tempdir().unwrap();
    let r = download(&host, "macOS", "ARM64", dest.path());
    assert_eq!(r.code, 1, "{r:?}");
    let url = format!(
        "{}/v9.9.9/ocm-lab-aarch64-apple-darwin-v9.9.9.tgz",
        host.url
    );
    assert!(
        r.stderr.contains(&format!("cannot download {url}")),
        "{}",
        r.stderr
    );
    assert!(!dest.path().join("bin").exists());
}

#[test]
fn a_runner_without_a_release_binary_is_told_to_build_from_source_before_any_download() {
    let host = Host::serve(HashMap::new());
    let dest = tempfile::tempdir().unwrap();
    let r = download(&host, "Windows", "X64", dest.path());
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("no ocm-lab release binary for Windows on X64")
            && r.stderr.contains("build from source"),
        "{}",
        r.stderr
    );
    assert!(host.asked.lock().unwrap().is_empty());
}

/// The action downloads for `version:` and builds only without it, and the names it downloads are the
/// ones the release workflow publishes and `cargo binstall` looks for.
#[test]
fn the_action_downloads_a_version_and_builds_only_source_and_its_own_revision() {
    let text = std::fs::read_to_string(root().join("action.yml")).unwrap();
    let action: serde_json::Value = serde_saphyr::from_str(&text).unwrap();
    let steps = action["runs"]["steps"].as_array().unwrap();
    let step = |needle: &str| {
        steps
            .iter()
            .find(|s| s["run"].as_str().is_some_and(|r| r.contains(needle)))
            .unwrap_or_else(|| panic!("no step runs {needle}"))
    };
    let download = step("download-release.sh");
    let build = step("cargo install");
    assert!(
        download["if"]
            .as_str()
            .unwrap()
            .contains("steps.plan.outputs.version != ''")
    );
    assert!(
        build["if"]
            .as_str()
            .unwrap()
            .contains("steps.plan.outputs.version == ''")
    );
    assert!(!build["run"].as_str().unwrap().contains("--git"));

    let workflow = std::fs::read_to_string(root().join(".github/workflows/release.yml")).unwrap();
    assert!(workflow.contains(r#"dir="ocm-lab-$TARGET-$TAG""#) && workflow.contains("SHA256SUMS"));
    let manifest = std::fs::read_to_string(root().join("lab/Cargo.toml")).unwrap();
    assert!(manifest.contains(
        r#"pkg-url = "{ repo }/releases/download/v{ version }/{ name }-{ target }-v{ version }{ archive-suffix }""#
    ));
    assert!(
        manifest.contains(r#"bin-dir = "{ name }-{ target }-v{ version }/{ bin }{ binary-ext }""#)
    );
}
