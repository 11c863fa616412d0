//! What the integration tests (`tests/it`) can run on this machine, as cfgs their `#[cfg_attr(.., ignore =
//! "why")]` attributes read, so that a test that cannot run is reported as *ignored, with the reason*, in
//! `cargo test`'s summary instead of passing having done nothing. Nothing in `src/` reads these cfgs: the
//! product is the same whatever this finds.
//!
//! - `ocm_lab_tests_no_fixtures`: `../shared/fixtures` (upstream CRDs, recorded objects) is not beside the
//!   checkout, as in a clone from GitHub.
//! - `ocm_lab_tests_no_docker`: no Docker engine answers `GET /_ping` at `DOCKER_HOST` (or the default socket).
//! - `ocm_lab_tests_no_test_image`: that, or no statically linked busybox (Debian's `busybox-static`) to make
//!   the tests' image from.
//! - `ocm_lab_tests_no_docker_cli`: that, or no `docker` command on PATH (the stand-in kind runs it).
//! - `ocm_lab_tests_no_browser`: no headless Chromium (`OCM_LAB_CHROMIUM`, or chromium-headless-shell,
//!   chromium, chromium-browser or google-chrome on PATH) for the dashboard's browser test.
//!
//! `OCM_LAB_REQUIRE_FIXTURES=1`, `OCM_LAB_REQUIRE_DOCKER=1` and `OCM_LAB_REQUIRE_BROWSER=1` (set by
//! `.ci/run`) turn the ignores off: the
//! tests then run, and fail on what is missing. Docker is looked at when the tests are built: after starting
//! or stopping it, the next build looks again once the socket changes (`touch lab/build.rs` forces it).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    for cfg in [
        "ocm_lab_tests_no_fixtures",
        "ocm_lab_tests_no_docker",
        "ocm_lab_tests_no_test_image",
        "ocm_lab_tests_no_docker_cli",
        "ocm_lab_tests_no_browser",
    ] {
        println!("cargo::rustc-check-cfg=cfg({cfg})");
    }
    println!("cargo::rerun-if-changed=build.rs");
    for var in [
        "OCM_LAB_REQUIRE_FIXTURES",
        "OCM_LAB_REQUIRE_DOCKER",
        "OCM_LAB_REQUIRE_BROWSER",
        "OCM_LAB_CHROMIUM",
        "DOCKER_HOST",
    ] {
        println!("cargo::rerun-if-env-changed={var}");
    }

    let fixtures = manifest.join("../../shared/fixtures");
    if fixtures.is_dir() {
        println!("cargo::rerun-if-changed={}", fixtures.display());
    } else if !required("OCM_LAB_REQUIRE_FIXTURES") {
        println!("cargo::rustc-cfg=ocm_lab_tests_no_fixtures");
    }

    let browser = std::env::var_os("OCM_LAB_CHROMIUM").is_some()
        || [
            "chromium-headless-shell",
            "chromium",
            "chromium-browser",
            "google-chrome",
        ]
        .into_iter()
        .any(on_path);
    if !browser && !required("OCM_LAB_REQUIRE_BROWSER") {
        println!("cargo::rustc-cfg=ocm_lab_tests_no_browser");
    }

    if required("OCM_LAB_REQUIRE_DOCKER") {
        return;
    }
    let engine = docker_answers();
    let image = engine && static_busybox();
    let cli = image && on_path("docker");
    for (ok, cfg) in [
        (engine, "ocm_lab_tests_no_docker"),
        (image, "ocm_lab_tests_no_test_image"),
        (cli, "ocm_lab_tests_no_docker_cli"),
    ] {
        if !ok {
            println!("cargo::rustc-cfg={cfg}");
        }
    }
}

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// Whether a Docker engine answers `GET /_ping` with 200 at `DOCKER_HOST` (`unix://` or `tcp://`), else at
/// `/var/run/docker.sock`, within two seconds (Docker Engine API: `/_ping`).
fn docker_answers() -> bool {
    let host = std::env::var("DOCKER_HOST").unwrap_or_default();
    let timeout = Duration::from_secs(2);
    if let Some(addr) = host.strip_prefix("tcp://") {
        let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(addr) else {
            return false;
        };
        return addrs.next().is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, timeout)
                .is_ok_and(|s| s.set_read_timeout(Some(timeout)).is_ok() && pings(s))
        });
    }
    unix_pings(&host, timeout)
}

#[cfg(not(unix))]
fn unix_pings(_host: &str, _timeout: Duration) -> bool {
    false
}

#[cfg(unix)]
fn unix_pings(host: &str, timeout: Duration) -> bool {
    let socket = host
        .strip_prefix("unix://")
        .filter(|p| !p.is_empty())
        .unwrap_or("/var/run/docker.sock");
    if std::path::Path::new(socket).exists() {
        println!("cargo::rerun-if-changed={socket}");
    }
    std::os::unix::net::UnixStream::connect(socket)
        .is_ok_and(|s| s.set_read_timeout(Some(timeout)).is_ok() && pings(s))
}

fn pings(mut s: impl Read + Write) -> bool {
    if s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") && &head[9..12] == b"200"
}

/// Debian's busybox, if it is the static one (an ELF64 file without a PT_INTERP program header).
fn static_busybox() -> bool {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .any(|b| is_static_elf64(&b))
}

fn is_static_elf64(b: &[u8]) -> bool {
    let at = |o: usize, n: usize| -> Option<usize> {
        let s = b.get(o..o + n)?;
        Some(s.iter().rev().fold(0usize, |acc, x| acc << 8 | *x as usize))
    };
    if b.get(0..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (at(0x20, 8), at(0x36, 2), at(0x38, 2))
    else {
        return false;
    };
    (0..phnum).all(|i| at(phoff + i * phentsize, 4) != Some(3))
}

fn on_path(command: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| std::fs::metadata(dir.join(command)).is_ok_and(|m| m.is_file()))
    })
}
