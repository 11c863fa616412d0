//! Finds (or downloads) the `kind` and `helm` binaries, and runs them.
//!
//! # Resolution
//!
//! Each tool is resolved once, in this order:
//!
//! 1. The env override (`OCM_LAB_KIND`, `OCM_LAB_HELM`): a path, or a bare name looked up on `PATH`. An
//!    override is an explicit choice, so a missing or too-old binary there is an error, never a reason to
//!    look elsewhere. Then the bundle's binary, with `up --bundle` ([`ToolsConfig::bundled`], unpacked
//!    and verified by `commands::bundle`): as explicit as an override, so it is never passed over either.
//! 2. `PATH` (the `which` crate).
//! 3. The tool cache: `<cache>/tools/<name>-<version>/<name>`, where `<cache>` is `$OCM_LAB_CACHE_DIR`, else
//!    `$XDG_CACHE_HOME/ocm-lab`, else `~/.cache/ocm-lab`.
//! 4. A download of the pinned release into the cache, unless downloads are off ([`Downloads::Forbid`],
//!    the CLI's `--no-download`).
//!
//! Every candidate is run once (`kind version`, `helm version --template '{{.Version}}'`) and must be at
//! least kind v0.27.0 or helm v3.14.0. Helm v3 and v4 are both supported.
//!
//! # Downloads and their digests
//!
//! The pinned releases are kind v0.32.0 (`https://kind.sigs.k8s.io/dl/v0.32.0/kind-<os>-<arch>`, a bare
//! binary) and helm v3.19.0 (`https://get.helm.sh/helm-v3.19.0-<os>-<arch>.tar.gz`, a tarball holding
//! `<os>-<arch>/helm`), for linux and darwin on amd64 and arm64 (eight entries in [`PINNED`]).
//!
//! A download fetches the release's published checksum file first (the `.sha256sum` file next to the
//! binary, on the same host), then the binary, hashing it while it streams into a private temporary file
//! (`tempfile`) in the cache folder. The file is used only when its sha256 equals the expected digest: the digest pinned in
//! [`PINNED`] when the entry has one (and then the published checksum must agree with the pin too), else
//! the published one. A mismatch is a hard error naming both digests, and the temporary file is removed.
//! Only then is the binary extracted (helm), made executable (0755), run once to check its version, and
//! renamed atomically into place.
//!
//! **Which digests are pinned:** those in `topology::catalog::TOOL_DIGESTS`, each with its source:
//! helm v3.19.0 on all four platforms and kind v0.32.0 on linux/amd64 and darwin/arm64. kind v0.32.0 on
//! linux/arm64 and darwin/amd64 has no pin (no corroborated published digest was found): those two
//! downloads are checked against the published `.sha256sum` file only, and a warning says so. The
//! published file proves the download arrived whole and is the one the release host publishes; the pin
//! also protects against a compromised host or mirror (`OCM_LAB_TOOLS_BASE_URL`), because a checksum
//! file that disagrees with the pin is refused.
//!
//! `OCM_LAB_TOOLS_BASE_URL` (or [`ToolsConfig::base_url`]) replaces both upstream hosts with one mirror,
//! laid out as the union of the two: `<base>/v0.32.0/kind-linux-amd64` (+ `.sha256sum`) and
//! `<base>/helm-v3.19.0-linux-amd64.tar.gz` (+ `.sha256sum`). Tests point it at a local server.
//!
//! The helm tarball is unpacked in-process with the `tar` and `flate2` crates (no system `tar`), into a
//! private temporary file (`tempfile`) in the cache folder, which is renamed into place only after the
//! checks; any failure leaves nothing behind.
//!
//! # Running
//!
//! [`run`] is the one way the adapters start a tool: `tokio::process::Command` with `kill_on_drop(true)`
//! (a cancelled step kills its tool), stdout and stderr captured, and errors carrying the full command
//! line and the tool's stderr (never its stdout, which can hold kubeconfigs and rendered Secrets).

use std::ffi::OsString;
use std::fmt;
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use semver::Version;
use sha2::{Digest as _, Sha256};

use super::{Failure, Transience};

/// The kind release ocm-lab downloads when none is installed.
pub const KIND_PINNED_VERSION: &str = "0.32.0";
/// The helm release ocm-lab downloads when none is installed.
pub const HELM_PINNED_VERSION: &str = "3.19.0";
/// The oldest kind ocm-lab accepts.
pub const KIND_MINIMUM: Version = Version::new(0, 27, 0);
/// The oldest helm ocm-lab accepts (Helm v4 is newer, so it is accepted too).
pub const HELM_MINIMUM: Version = Version::new(3, 14, 0);

const KIND_UPSTREAM: &str = "https://kind.sigs.k8s.io/dl";
const HELM_UPSTREAM: &str = "https://get.helm.sh";

/// How long a version check may take before the binary is considered broken.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// Larger downloads are refused (kind is about 10 MB, the helm tarball about 17 MB).
const MAX_DOWNLOAD_BYTES: u64 = 256 * 1024 * 1024;
/// How much of a tool's stderr an error keeps (the end: that is where kind and helm say what failed).
const MAX_STDERR_IN_ERROR: usize = 32 * 1024;

/// One of the two tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    Kind,
    Helm,
}

impl ToolName {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::Kind => "kind",
            ToolName::Helm => "helm",
        }
    }

    /// The env var that overrides where the tool is found.
    pub fn env_var(self) -> &'static str {
        match self {
            ToolName::Kind => "OCM_LAB_KIND",
            ToolName::Helm => "OCM_LAB_HELM",
        }
    }

    pub fn minimum(self) -> Version {
        match self {
            ToolName::Kind => KIND_MINIMUM,
            ToolName::Helm => HELM_MINIMUM,
        }
    }

    /// The version a download fetches.
    pub fn pinned_version(self) -> Version {
        let v = match self {
            ToolName::Kind => KIND_PINNED_VERSION,
            ToolName::Helm => HELM_PINNED_VERSION,
        };
        Version::parse(v).expect("pinned versions are semver")
    }

    /// Where a person installs it by hand.
    pub fn install_url(self) -> &'static str {
        match self {
            ToolName::Kind => "https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
            ToolName::Helm => "https://helm.sh/docs/intro/install/",
        }
    }

    /// The arguments that print the version.
    pub fn version_args(self) -> &'static [&'static str] {
        match self {
            ToolName::Kind => &["version"],
            ToolName::Helm => &["version", "--template", "{{.Version}}"],
        }
    }

    /// Parses the output of [`ToolName::version_args`]: `kind v0.32.0 go1.24.3 linux/amd64` for kind,
    /// `v3.19.0` (or `v4.0.1`) for helm.
    pub fn parse_version(self, stdout: &str) -> Option<Version> {
        let token = match self {
            ToolName::Kind => {
                let mut words = stdout.split_whitespace();
                // `kind v0.32.0 go1.24.3 linux/amd64`; very old releases printed `v0.5.1` alone.
                match words.next()? {
                    "kind" => words.next()?,
                    other => other,
                }
            }
            ToolName::Helm => stdout.split_whitespace().next()?,
        };
        Version::parse(token.strip_prefix('v').unwrap_or(token)).ok()
    }

    fn upstream(self) -> &'static str {
        match self {
            ToolName::Kind => KIND_UPSTREAM,
            ToolName::Helm => HELM_UPSTREAM,
        }
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A resolved tool: where it is and what version it reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    pub name: ToolName,
    pub path: PathBuf,
    pub version: Version,
}

impl Tool {
    /// The shell-quoted command line running this tool with `args`.
    pub fn command_line(&self, args: &[String]) -> String {
        command_line(&self.path, args)
    }
}

/// Both tools.
#[derive(Debug, Clone)]
pub struct Tools {
    pub kind: Tool,
    pub helm: Tool,
}

/// Whether a missing or too-old tool may be downloaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Downloads {
    Allow,
    /// `--no-download`: use what is installed (or cached) or fail.
    Forbid,
}

/// An OS and CPU in the release file names' spelling (`linux`/`darwin`, `amd64`/`arm64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Platform {
    pub os: &'static str,
    pub arch: &'static str,
}

impl Platform {
    /// This machine, when a pinned download can exist for it.
    pub fn current() -> Option<Platform> {
        let os = match std::env::consts::OS {
            "linux" => "linux",
            "macos" => "darwin",
            _ => return None,
        };
        let arch = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            _ => return None,
        };
        Some(Platform { os, arch })
    }

    /// The platform a program is built for, read from the start of its file (at least 20 bytes): a
    /// 64-bit little-endian ELF (Linux) or Mach-O (macOS) for amd64 or arm64. `None` for anything else
    /// (a script, a universal binary, another format): nothing to say it cannot run here.
    pub fn of_executable(head: &[u8]) -> Option<Platform> {
        let arch = |amd64: bool, arm64: bool| match (amd64, arm64) {
            (true, _) => "amd64",
            (_, true) => "arm64",
            _ => "another architecture",
        };
        if head.len() >= 20 && head.starts_with(b"\x7fELF") && head[4] == 2 && head[5] == 1 {
            // e_machine (ELF-64 header offset 18): EM_X86_64 62, EM_AARCH64 183.
            let machine = u16::from_le_bytes([head[18], head[19]]);
            return Some(Platform {
                os: "linux",
                arch: arch(machine == 62, machine == 183),
            });
        }
        if head.len() >= 8 && head.starts_with(&[0xcf, 0xfa, 0xed, 0xfe]) {
            // cputype: CPU_TYPE_X86_64 0x01000007, CPU_TYPE_ARM64 0x0100000c.
            let cpu = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            return Some(Platform {
                os: "darwin",
                arch: arch(cpu == 0x0100_0007, cpu == 0x0100_000c),
            });
        }
        None
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.arch)
    }
}

/// One downloadable release file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    pub tool: ToolName,
    /// Without the `v`.
    pub version: &'static str,
    pub os: &'static str,
    pub arch: &'static str,
    /// The upstream URL of the binary or tarball.
    pub url: &'static str,
    /// The upstream checksum file published next to it (`<sha256>  <file name>`).
    pub checksum_url: &'static str,
    /// For a tarball: the member holding the binary.
    pub archive_member: Option<&'static str>,
    /// The sha256 we pinned ourselves, lowercase hex; `None`: trust the published checksum file only.
    pub sha256: Option<&'static str>,
}

/// The downloads ocm-lab knows, each with the upstream checksum file it is verified against and the
/// digest pinned for it in the catalog (`topology::catalog::TOOL_DIGESTS`), where one was found.
pub const PINNED: &[Pinned] = &[
    Pinned {
        tool: ToolName::Kind,
        version: KIND_PINNED_VERSION,
        os: "linux",
        arch: "amd64",
        url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-linux-amd64",
        checksum_url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-linux-amd64.sha256sum",
        archive_member: None,
        sha256: crate::topology::catalog::tool_digest(
            "kind",
            KIND_PINNED_VERSION,
            "linux",
            "amd64",
        ),
    },
    Pinned {
        tool: ToolName::Kind,
        version: KIND_PINNED_VERSION,
        os: "linux",
        arch: "arm64",
        url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-linux-arm64",
        checksum_url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-linux-arm64.sha256sum",
        archive_member: None,
        sha256: crate::topology::catalog::tool_digest(
            "kind",
            KIND_PINNED_VERSION,
            "linux",
            "arm64",
        ),
    },
    Pinned {
        tool: ToolName::Kind,
        version: KIND_PINNED_VERSION,
        os: "darwin",
        arch: "amd64",
        url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-darwin-amd64",
        checksum_url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-darwin-amd64.sha256sum",
        archive_member: None,
        sha256: crate::topology::catalog::tool_digest(
            "kind",
            KIND_PINNED_VERSION,
            "darwin",
            "amd64",
        ),
    },
    Pinned {
        tool: ToolName::Kind,
        version: KIND_PINNED_VERSION,
        os: "darwin",
        arch: "arm64",
        url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-darwin-arm64",
        checksum_url: "https://kind.sigs.k8s.io/dl/v0.32.0/kind-darwin-arm64.sha256sum",
        archive_member: None,
        sha256: crate::topology::catalog::tool_digest(
            "kind",
            KIND_PINNED_VERSION,
            "darwin",
            "arm64",
        ),
    },
    Pinned {
        tool: ToolName::Helm,
        version: HELM_PINNED_VERSION,
        os: "linux",
        arch: "amd64",
        url: "https://get.helm.sh/helm-v3.19.0-linux-amd64.tar.gz",
        checksum_url: "https://get.helm.sh/helm-v3.19.0-linux-amd64.tar.gz.sha256sum",
        archive_member: Some("linux-amd64/helm"),
        sha256: crate::topology::catalog::tool_digest(
            "helm",
            HELM_PINNED_VERSION,
            "linux",
            "amd64",
        ),
    },
    Pinned {
        tool: ToolName::Helm,
        version: HELM_PINNED_VERSION,
        os: "linux",
        arch: "arm64",
        url: "https://get.helm.sh/helm-v3.19.0-linux-arm64.tar.gz",
        checksum_url: "https://get.helm.sh/helm-v3.19.0-linux-arm64.tar.gz.sha256sum",
        archive_member: Some("linux-arm64/helm"),
        sha256: crate::topology::catalog::tool_digest(
            "helm",
            HELM_PINNED_VERSION,
            "linux",
            "arm64",
        ),
    },
    Pinned {
        tool: ToolName::Helm,
        version: HELM_PINNED_VERSION,
        os: "darwin",
        arch: "amd64",
        url: "https://get.helm.sh/helm-v3.19.0-darwin-amd64.tar.gz",
        checksum_url: "https://get.helm.sh/helm-v3.19.0-darwin-amd64.tar.gz.sha256sum",
        archive_member: Some("darwin-amd64/helm"),
        sha256: crate::topology::catalog::tool_digest(
            "helm",
            HELM_PINNED_VERSION,
            "darwin",
            "amd64",
        ),
    },
    Pinned {
        tool: ToolName::Helm,
        version: HELM_PINNED_VERSION,
        os: "darwin",
        arch: "arm64",
        url: "https://get.helm.sh/helm-v3.19.0-darwin-arm64.tar.gz",
        checksum_url: "https://get.helm.sh/helm-v3.19.0-darwin-arm64.tar.gz.sha256sum",
        archive_member: Some("darwin-arm64/helm"),
        sha256: crate::topology::catalog::tool_digest(
            "helm",
            HELM_PINNED_VERSION,
            "darwin",
            "arm64",
        ),
    },
];

impl Pinned {
    /// The binary's URL, on the mirror when `base` is set.
    pub fn url_with_base(&self, base: Option<&str>) -> String {
        rebase(self.tool, self.url, base)
    }

    /// The checksum file's URL, on the mirror when `base` is set.
    pub fn checksum_url_with_base(&self, base: Option<&str>) -> String {
        rebase(self.tool, self.checksum_url, base)
    }

    /// The last path segment of the URL.
    pub fn file_name(&self) -> &'static str {
        self.url.rsplit('/').next().unwrap_or(self.url)
    }
}

fn rebase(tool: ToolName, url: &str, base: Option<&str>) -> String {
    match (base, url.strip_prefix(tool.upstream())) {
        (Some(base), Some(rest)) => format!("{}{rest}", base.trim_end_matches('/')),
        _ => url.to_owned(),
    }
}

/// Where and how to look for the tools.
#[derive(Debug, Clone)]
pub struct ToolsConfig {
    pub downloads: Downloads,
    /// The `tools` folder of the cache (holds `<name>-<version>/<name>`).
    pub cache_dir: PathBuf,
    /// A mirror replacing both upstream hosts (see the module docs).
    pub base_url: Option<String>,
    /// `OCM_LAB_KIND`: a path, or a name looked up on the search path.
    pub kind_override: Option<OsString>,
    /// `OCM_LAB_HELM`.
    pub helm_override: Option<OsString>,
    /// The search path; `None`: the process's `PATH` at resolution time.
    pub search_path: Option<OsString>,
    /// The platform to download for; `None`: this machine.
    pub platform: Option<Platform>,
    /// The download table ([`PINNED`]; tests substitute their own).
    pub pinned: Vec<Pinned>,
    /// The binaries a bundle brought (`up --bundle`), used before `PATH`, the cache and downloads.
    pub bundled: Vec<(ToolName, PathBuf)>,
    /// A kind minimum above [`KIND_MINIMUM`] and why: the node image's (see
    /// `topology::catalog::kind_for_node_image`). A kind older than this is passed over, as a too-old
    /// one is.
    pub kind_minimum: Option<(Version, String)>,
}

impl ToolsConfig {
    /// A configuration that reads nothing from the environment: no overrides, the process `PATH`, the
    /// upstream hosts and [`PINNED`].
    pub fn new(downloads: Downloads, cache_dir: PathBuf) -> Self {
        ToolsConfig {
            downloads,
            cache_dir,
            base_url: None,
            kind_override: None,
            helm_override: None,
            search_path: None,
            platform: None,
            pinned: PINNED.to_vec(),
            bundled: Vec::new(),
            kind_minimum: None,
        }
    }

    /// The configuration from the environment: `OCM_LAB_KIND`, `OCM_LAB_HELM`, `OCM_LAB_CACHE_DIR`
    /// (else `XDG_CACHE_HOME`, else `HOME`), and `OCM_LAB_TOOLS_BASE_URL`.
    pub fn from_env(downloads: Downloads) -> Result<Self, ToolError> {
        let root = cache_root_from_env().ok_or(ToolError::NoCacheDir)?;
        let mut cfg = ToolsConfig::new(downloads, root.join("tools"));
        // The adapter's configuration: each binary may be overridden from the environment (documented
        // per tool), as every subprocess adapter allows.
        let non_empty = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
        cfg.kind_override = non_empty(ToolName::Kind.env_var());
        cfg.helm_override = non_empty(ToolName::Helm.env_var());
        cfg.base_url =
            non_empty("OCM_LAB_TOOLS_BASE_URL").map(|v| v.to_string_lossy().into_owned());
        Ok(cfg)
    }

    /// The oldest acceptable version of `name`, and why when the node image raised it above the
    /// tool's own minimum.
    pub fn minimum(&self, name: ToolName) -> (Version, Option<String>) {
        match (name, &self.kind_minimum) {
            (ToolName::Kind, Some((v, why))) if *v > name.minimum() => {
                (v.clone(), Some(why.clone()))
            }
            _ => (name.minimum(), None),
        }
    }

    fn override_for(&self, name: ToolName) -> Option<&OsString> {
        match name {
            ToolName::Kind => self.kind_override.as_ref(),
            ToolName::Helm => self.helm_override.as_ref(),
        }
    }

    fn search_path(&self) -> Option<OsString> {
        self.search_path
            .clone()
            // Tools are found as a shell finds them.
            .or_else(|| std::env::var_os("PATH"))
    }

    /// Where the pinned release of `name` lives in the cache.
    pub fn cached_path(&self, name: ToolName) -> PathBuf {
        self.cache_dir
            .join(format!("{name}-{}", name.pinned_version()))
            .join(name.as_str())
    }
}

/// The cache root: `$OCM_LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/ocm-lab`, else `~/.cache/ocm-lab`.
pub fn cache_root_from_env() -> Option<PathBuf> {
    // The XDG cache convention is defined by the environment; tests and CI point it elsewhere.
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("OCM_LAB_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(xdg) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("ocm-lab"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache/ocm-lab"))
}

/// Why a tool cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ToolError {
    #[error(
        "{tool} not found on PATH (and downloads are off): install it from {install} or drop --no-download"
    )]
    #[diagnostic(code(ocm_lab::tools::not_found))]
    NotFound {
        tool: ToolName,
        install: &'static str,
    },
    #[error(
        "{tool} v{found} at {path} is older than the minimum v{minimum}{why} (and downloads are off): upgrade it from {install} or drop --no-download",
        install = .tool.install_url()
    )]
    #[diagnostic(code(ocm_lab::tools::too_old))]
    TooOld {
        tool: ToolName,
        path: String,
        found: Version,
        minimum: Version,
        /// `: node image … needs kind v0.32.0 or newer` when the node image raised the minimum, else
        /// empty. Boxed, with the install URL derived from `tool`, to keep the error small.
        why: Box<str>,
    },
    #[error("{var}={value}: {problem}")]
    #[diagnostic(
        code(ocm_lab::tools::bad_override),
        help("point {var} at a {tool} binary (v{minimum} or newer), or unset it to use PATH")
    )]
    BadOverride {
        tool: ToolName,
        var: &'static str,
        value: String,
        problem: String,
        minimum: Version,
    },
    #[error("the {tool} the bundle brought ({path}) cannot be used: {problem}")]
    #[diagnostic(
        code(ocm_lab::tools::bundled),
        help(
            "make the bundle on a machine of the same operating system and architecture (`ocm-lab bundle save`), or set {var} to a working {tool}",
            var = .tool.env_var()
        )
    )]
    Bundled {
        tool: ToolName,
        path: String,
        problem: String,
    },
    #[error("failed to check the version of {tool} at {path}: {problem}")]
    #[diagnostic(
        code(ocm_lab::tools::probe),
        help(
            "reinstall {tool} from {install}, or remove it from PATH so ocm-lab downloads its own (without --no-download)"
        )
    )]
    Probe {
        tool: ToolName,
        path: String,
        problem: String,
        install: &'static str,
    },
    #[error("failed to download {what} from {url}: {problem}")]
    #[diagnostic(
        code(ocm_lab::tools::download),
        help(
            "check the network connection (and HTTPS_PROXY) and run again; or install {tool} by hand from {install}, put it on PATH (or set {var}), and pass --no-download so ocm-lab never downloads"
        )
    )]
    Download {
        tool: ToolName,
        what: String,
        url: String,
        problem: String,
        install: &'static str,
        var: &'static str,
    },
    #[error("refusing to use {file}: its sha256 is {actual}, but {expected_from} says {expected}")]
    #[diagnostic(
        code(ocm_lab::tools::checksum),
        help(
            "the download was corrupted or tampered with; nothing was installed. Run again, or install {tool} by hand from {install}"
        )
    )]
    ChecksumMismatch {
        tool: ToolName,
        file: String,
        expected: String,
        expected_from: String,
        actual: String,
        install: &'static str,
    },
    #[error(
        "refusing to download {tool} v{version}: the published checksum {published} ({checksum_url}) differs from the digest pinned in ocm-lab, {pinned}"
    )]
    #[diagnostic(
        code(ocm_lab::tools::pin_mismatch),
        help(
            "the release host serves a file ocm-lab did not expect; install {tool} by hand from {install} after checking it"
        )
    )]
    PinMismatch {
        tool: ToolName,
        version: String,
        checksum_url: String,
        published: String,
        pinned: String,
        install: &'static str,
    },
    /// The lab has no cluster this tool would be run for (kind, when every cluster already exists), so it
    /// was not looked for. Reaching it is a bug: nothing should run the tool.
    #[error(
        "{tool} is not needed by this lab (every cluster already exists), so ocm-lab did not look for it"
    )]
    #[diagnostic(
        code(ocm_lab::tools::not_needed),
        help("give the cluster a `kind:` provider in the topology if ocm-lab should create it")
    )]
    NotNeeded { tool: ToolName },
    #[error("{url} is not a checksum file: expected `<64 hex digits>  <file name>`")]
    #[diagnostic(code(ocm_lab::tools::checksum_file))]
    BadChecksumFile { tool: ToolName, url: String },
    #[error("ocm-lab has no {tool} download for {platform}")]
    #[diagnostic(
        code(ocm_lab::tools::no_download),
        help("install {tool} by hand from {install} and put it on PATH (or set {var})")
    )]
    NoDownload {
        tool: ToolName,
        platform: String,
        install: &'static str,
        var: &'static str,
    },
    #[error("failed to extract {member} from {archive}: {problem}")]
    #[diagnostic(
        code(ocm_lab::tools::extract),
        help("the helm tarball may be damaged: run again, or install helm by hand from {install}")
    )]
    Extract {
        member: String,
        archive: String,
        problem: String,
        install: &'static str,
    },
    #[error(
        "the downloaded {tool} reports v{found}, not the pinned v{expected}; refusing to cache it"
    )]
    #[diagnostic(code(ocm_lab::tools::wrong_version))]
    WrongVersion {
        tool: ToolName,
        found: Version,
        expected: Version,
    },
    #[error("failed to use the tool cache {path}: {source}")]
    #[diagnostic(
        code(ocm_lab::tools::cache),
        help("check its permissions, or set OCM_LAB_CACHE_DIR to another folder")
    )]
    Cache {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "cannot find a cache folder: none of OCM_LAB_CACHE_DIR, XDG_CACHE_HOME and HOME is set"
    )]
    #[diagnostic(
        code(ocm_lab::tools::no_cache),
        help("set OCM_LAB_CACHE_DIR to a writable folder")
    )]
    NoCacheDir,
    #[error("failed to start `{command}`: {source}")]
    #[diagnostic(
        code(ocm_lab::tools::start),
        help("check that {path} still exists and runs, or set {var} to a working {tool}")
    )]
    Start {
        command: String,
        tool: ToolName,
        path: String,
        var: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("failed to wait for `{command}`: {source}")]
    #[diagnostic(code(ocm_lab::tools::wait))]
    Wait {
        command: String,
        #[source]
        source: io::Error,
    },
}

impl Failure for ToolError {
    fn backend(&self) -> crate::backend::Backend {
        crate::backend::Backend::Tools
    }
    /// Only losing track of a running tool may pass; a missing, broken or unverifiable tool stays so.
    fn transience(&self) -> Transience {
        match self {
            ToolError::Wait { .. } => Transience::Transient,
            _ => Transience::Permanent,
        }
    }

    fn help(&self) -> Option<String> {
        miette::Diagnostic::help(self).map(|h| h.to_string())
    }
}

fn cache_err(path: &Path) -> impl FnOnce(io::Error) -> ToolError + '_ {
    move |source| ToolError::Cache {
        path: path.display().to_string(),
        source,
    }
}

impl Tools {
    /// Resolves both tools (see the module docs). Blocking: it runs the tools and may download; call it
    /// before starting async work or from `spawn_blocking`.
    pub fn resolve(cfg: &ToolsConfig) -> Result<Tools, ToolError> {
        Ok(Tools {
            kind: resolve(ToolName::Kind, cfg)?,
            helm: resolve(ToolName::Helm, cfg)?,
        })
    }
}

/// Resolves one tool: override, then `PATH`, then the cache, then a download (when allowed). Blocking.
pub fn resolve(name: ToolName, cfg: &ToolsConfig) -> Result<Tool, ToolError> {
    if let Some(value) = cfg.override_for(name) {
        return from_override(name, value, cfg);
    }
    if let Some((_, path)) = cfg.bundled.iter().find(|(n, _)| *n == name) {
        return from_bundle(name, path, cfg);
    }
    let (minimum, why) = cfg.minimum(name);
    // What was wrong with the tool on PATH, reported if nothing better turns up.
    let mut on_path_problem: Option<ToolError> = None;
    if let Some(path) = find_on_path(name.as_str(), cfg) {
        match probe(name, &path) {
            Ok(version) if version >= minimum => {
                tracing::debug!(tool = %name, path = %path.display(), %version, "using the tool on PATH");
                return Ok(Tool {
                    name,
                    path,
                    version,
                });
            }
            Ok(found) => {
                tracing::warn!(tool = %name, path = %path.display(), %found, %minimum, "the tool on PATH is too old; looking further");
                on_path_problem = Some(ToolError::TooOld {
                    tool: name,
                    path: path.display().to_string(),
                    found,
                    minimum: minimum.clone(),
                    why: why.map(|w| format!(": {w}")).unwrap_or_default().into(),
                });
            }
            Err(e) => {
                tracing::warn!(tool = %name, error = %e, "the tool on PATH does not work; looking further");
                on_path_problem = Some(e);
            }
        }
    }
    let cached = cfg.cached_path(name);
    if cached.is_file() {
        match probe(name, &cached) {
            Ok(version) if version >= minimum => {
                tracing::debug!(tool = %name, path = %cached.display(), %version, "using the cached tool");
                return Ok(Tool {
                    name,
                    path: cached,
                    version,
                });
            }
            Ok(found) => {
                tracing::warn!(tool = %name, path = %cached.display(), %found, "ignoring the cached tool: too old")
            }
            Err(e) => tracing::warn!(tool = %name, error = %e, "ignoring the cached tool"),
        }
    }
    match cfg.downloads {
        Downloads::Forbid => Err(on_path_problem.unwrap_or(ToolError::NotFound {
            tool: name,
            install: name.install_url(),
        })),
        Downloads::Allow => download(name, cfg),
    }
}

/// The bundle's binary, which must run and be new enough.
fn from_bundle(name: ToolName, path: &Path, cfg: &ToolsConfig) -> Result<Tool, ToolError> {
    let (minimum, why) = cfg.minimum(name);
    let bad = |problem: String| ToolError::Bundled {
        tool: name,
        path: path.display().to_string(),
        problem,
    };
    let version = probe(name, path).map_err(|e| bad(e.to_string()))?;
    if version < minimum {
        return Err(bad(format!(
            "{name} v{version} is older than the minimum v{minimum}{}",
            why.map(|w| format!(": {w}")).unwrap_or_default()
        )));
    }
    tracing::debug!(tool = %name, path = %path.display(), %version, "using the bundle's tool");
    Ok(Tool {
        name,
        path: path.to_owned(),
        version,
    })
}

fn from_override(name: ToolName, value: &OsString, cfg: &ToolsConfig) -> Result<Tool, ToolError> {
    let (minimum, why) = cfg.minimum(name);
    let bad = |problem: String| ToolError::BadOverride {
        tool: name,
        var: name.env_var(),
        value: value.to_string_lossy().into_owned(),
        problem,
        minimum: minimum.clone(),
    };
    let as_path = Path::new(value);
    let path = if as_path.components().count() > 1 || as_path.is_absolute() {
        if !as_path.is_file() {
            return Err(bad("no such file".to_owned()));
        }
        as_path.to_owned()
    } else {
        find_on_path(value, cfg).ok_or_else(|| bad("not found on PATH".to_owned()))?
    };
    let version = probe(name, &path).map_err(|e| bad(e.to_string()))?;
    if version < minimum {
        return Err(bad(format!(
            "{name} v{version} is older than the minimum v{minimum}{}",
            why.map(|w| format!(": {w}")).unwrap_or_default()
        )));
    }
    Ok(Tool {
        name,
        path,
        version,
    })
}

fn find_on_path(name: impl AsRef<std::ffi::OsStr>, cfg: &ToolsConfig) -> Option<PathBuf> {
    let paths = cfg.search_path()?;
    which::which_in_global(name, Some(paths)).ok()?.next()
}

/// Runs the tool's version command (with a timeout) and parses the version. Blocking.
pub fn probe(name: ToolName, path: &Path) -> Result<Version, ToolError> {
    let args: Vec<String> = name.version_args().iter().map(|a| a.to_string()).collect();
    let fail = |problem: String| ToolError::Probe {
        tool: name,
        path: path.display().to_string(),
        problem,
        install: name.install_url(),
    };
    let mut cmd = std::process::Command::new(path);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn_retrying_busy(|| cmd.spawn()).map_err(|e| {
        fail(format!(
            "`{}` could not start: {e}",
            command_line(path, &args)
        ))
    })?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "`{}` did not finish within {PROBE_TIMEOUT:?}",
                    command_line(path, &args)
                )));
            }
            Err(e) => return Err(fail(e.to_string())),
        }
    };
    // Version output is a line or two, far below a pipe's buffer, so reading after exit cannot block.
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    if !status.success() {
        return Err(fail(format!(
            "`{}` exited with {status}: {}",
            command_line(path, &args),
            stderr.trim()
        )));
    }
    name.parse_version(&stdout).ok_or_else(|| {
        fail(format!(
            "`{}` printed {:?}, which holds no version",
            command_line(path, &args),
            stdout.trim()
        ))
    })
}

/// Starting a binary that was just written can fail with "text file busy" while another thread's fork
/// still holds the file open for writing (until that child execs). It clears within milliseconds.
fn spawn_retrying_busy<T>(mut spawn: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut attempts = 0;
    loop {
        match spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

/// Downloads the pinned release of `name` into the cache, verifying it first (see the module docs).
/// Blocking.
pub fn download(name: ToolName, cfg: &ToolsConfig) -> Result<Tool, ToolError> {
    let platform = cfg.platform.or_else(Platform::current);
    let no_download = || ToolError::NoDownload {
        tool: name,
        platform: platform.map_or_else(
            || format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
            |p| p.to_string(),
        ),
        install: name.install_url(),
        var: name.env_var(),
    };
    let platform = platform.ok_or_else(no_download)?;
    let pin = cfg
        .pinned
        .iter()
        .find(|p| p.tool == name && p.os == platform.os && p.arch == platform.arch)
        .ok_or_else(no_download)?;
    let base = cfg.base_url.as_deref();
    let url = pin.url_with_base(base);
    let checksum_url = pin.checksum_url_with_base(base);
    let download_err = |what: String, url: &str, problem: String| ToolError::Download {
        tool: name,
        what,
        url: url.to_owned(),
        problem,
        install: name.install_url(),
        var: name.env_var(),
    };
    tracing::info!(tool = %name, version = pin.version, %url, "downloading");

    std::fs::create_dir_all(&cfg.cache_dir).map_err(cache_err(&cfg.cache_dir))?;
    let agent = http_agent();

    // The published checksum first: a release without one is not used at all.
    let text = fetch_text(&agent, &checksum_url).map_err(|problem| {
        download_err(
            format!("the {name} v{} checksum file", pin.version),
            &checksum_url,
            problem,
        )
    })?;
    let published = parse_checksum_file(&text).ok_or_else(|| ToolError::BadChecksumFile {
        tool: name,
        url: checksum_url.clone(),
    })?;
    let (expected, expected_from) = expected_digest(name, pin, checksum_url, published)?;

    // A private (0600) temporary file in the cache, removed when dropped unless persisted.
    let mut part = tempfile::Builder::new()
        .prefix(&format!(".{}.part", pin.file_name()))
        .tempfile_in(&cfg.cache_dir)
        .map_err(cache_err(&cfg.cache_dir))?;
    let actual = fetch_to_file(&agent, &url, part.as_file_mut())
        .map_err(|problem| download_err(format!("{name} v{}", pin.version), &url, problem))?;
    if actual != expected {
        // `part` is removed when it drops: nothing is left in the cache.
        return Err(ToolError::ChecksumMismatch {
            tool: name,
            file: url,
            expected,
            expected_from,
            actual,
            install: name.install_url(),
        });
    }

    // Closed before it runs (an open write handle makes exec fail with ETXTBSY).
    let binary = match pin.archive_member {
        None => part.into_temp_path(),
        Some(member) => extract(part.path(), member, &cfg.cache_dir, name)?,
    };
    crate::state::restrict(&binary, 0o755).map_err(cache_err(&binary))?;
    let found = probe(name, &binary)?;
    let expected_version = name.pinned_version();
    if found != expected_version {
        return Err(ToolError::WrongVersion {
            tool: name,
            found,
            expected: expected_version,
        });
    }
    let dest = cfg.cached_path(name);
    let dest_dir = dest.parent().expect("cached paths have a parent");
    std::fs::create_dir_all(dest_dir).map_err(cache_err(dest_dir))?;
    binary
        .persist(&dest)
        .map_err(|e| cache_err(&dest)(e.error))?;
    tracing::info!(tool = %name, path = %dest.display(), "downloaded and verified");
    Ok(Tool {
        name,
        path: dest,
        version: found,
    })
}

/// The digest a download of `pin` must have, and where it comes from: the digest pinned in ocm-lab, which must
/// agree with the `published` checksum file, or that file alone when none is pinned.
fn expected_digest(
    name: ToolName,
    pin: &Pinned,
    checksum_url: String,
    published: String,
) -> Result<(String, String), ToolError> {
    Ok(match pin.sha256 {
        Some(pinned) => {
            let pinned = pinned.to_ascii_lowercase();
            if pinned != published {
                return Err(ToolError::PinMismatch {
                    tool: name,
                    version: pin.version.to_owned(),
                    checksum_url,
                    published,
                    pinned,
                    install: name.install_url(),
                });
            }
            (pinned, "the digest pinned in ocm-lab".to_owned())
        }
        None => {
            tracing::warn!(
                "no sha256 is pinned in ocm-lab for {name} v{} ({}/{}): checking the download against the published checksum file {checksum_url} only",
                pin.version,
                pin.os,
                pin.arch
            );
            (
                published,
                format!("the published checksum file {checksum_url}"),
            )
        }
    })
}

/// How long `doctor` waits for a release host before saying it does not answer.
pub const DOWNLOAD_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether the download [`download`] would make of `name` can start, without downloading it: a GET of
/// the pinned release's checksum file (a few bytes, on the host or mirror the binary comes from) that
/// must answer with a checksum within `timeout`, connecting included. Returns the URL that answered;
/// the error is the one [`download`] would fail with ([`ToolError::Download`], or
/// [`ToolError::NoDownload`] on a platform without a pinned release). Blocking.
pub fn probe_download(
    name: ToolName,
    cfg: &ToolsConfig,
    timeout: Duration,
) -> Result<String, ToolError> {
    let platform = cfg.platform.or_else(Platform::current);
    let pin = platform.and_then(|platform| {
        cfg.pinned
            .iter()
            .find(|p| p.tool == name && p.os == platform.os && p.arch == platform.arch)
    });
    let Some(pin) = pin else {
        return Err(ToolError::NoDownload {
            tool: name,
            platform: platform.map_or_else(
                || format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
                |p| p.to_string(),
            ),
            install: name.install_url(),
            var: name.env_var(),
        });
    };
    let url = pin.checksum_url_with_base(cfg.base_url.as_deref());
    let config = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .user_agent(concat!("ocm-lab/", env!("CARGO_PKG_VERSION")))
        .build();
    let agent = ureq::Agent::new_with_config(config);
    let answered = fetch_text(&agent, &url).and_then(|text| {
        parse_checksum_file(&text)
            .map(|_| ())
            .ok_or_else(|| "the answer is not a checksum file".to_owned())
    });
    match answered {
        Ok(()) => Ok(url),
        Err(problem) => Err(ToolError::Download {
            tool: name,
            what: format!("the {name} v{} checksum file", pin.version),
            url,
            problem,
            install: name.install_url(),
            var: name.env_var(),
        }),
    }
}

/// The digest in a `sha256sum`-style file (`<hex>  <name>`, or the bare digest), lowercase.
pub fn parse_checksum_file(text: &str) -> Option<String> {
    let digest = text.split_whitespace().next()?;
    (digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| digest.to_ascii_lowercase())
}

fn http_agent() -> ureq::Agent {
    let config = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(20)))
        .timeout_global(Some(Duration::from_secs(15 * 60)))
        .http_status_as_error(false)
        .user_agent(concat!("ocm-lab/", env!("CARGO_PKG_VERSION")))
        .build();
    ureq::Agent::new_with_config(config)
}

fn get(agent: &ureq::Agent, url: &str) -> Result<ureq::http::Response<ureq::Body>, String> {
    let resp = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("the server answered HTTP {status}"));
    }
    Ok(resp)
}

fn fetch_text(agent: &ureq::Agent, url: &str) -> Result<String, String> {
    get(agent, url)?
        .into_body()
        .into_with_config()
        .limit(64 * 1024)
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// Streams `url` into `file`, returning the sha256 of what was written.
fn fetch_to_file(
    agent: &ureq::Agent,
    url: &str,
    file: &mut std::fs::File,
) -> Result<String, String> {
    let mut body = get(agent, url)?
        .into_body()
        .into_with_config()
        .limit(MAX_DOWNLOAD_BYTES)
        .reader();
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match body.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        };
        hasher.update(&buf[..n]);
        file.write_all(&buf[..n])
            .map_err(|e| format!("failed to write the download: {e}"))?;
    }
    file.sync_all()
        .map_err(|e| format!("failed to write the download: {e}"))?;
    Ok(hex::encode(hasher.finalize()))
}

/// Unpacks `member` from a `.tar.gz` (already verified) into a new private temporary file in `dir`,
/// with the `tar` and `flate2` crates (no system `tar` needed).
fn extract(
    archive: &Path,
    member: &str,
    dir: &Path,
    name: ToolName,
) -> Result<tempfile::TempPath, ToolError> {
    let fail = |problem: String| ToolError::Extract {
        member: member.to_owned(),
        archive: archive.display().to_string(),
        problem,
        install: name.install_url(),
    };
    let file = std::fs::File::open(archive).map_err(|e| fail(e.to_string()))?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(io::BufReader::new(file)));
    let entries = tar
        .entries()
        .map_err(|e| fail(format!("it is not a gzipped tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| fail(format!("it is not a gzipped tar archive: {e}")))?;
        let path = entry
            .path()
            .map_err(|e| fail(format!("an entry has an unreadable name: {e}")))?
            .into_owned();
        if path.strip_prefix(".").unwrap_or(&path) != Path::new(member) {
            continue;
        }
        if !entry.header().entry_type().is_file() {
            return Err(fail("it is not a regular file".to_owned()));
        }
        let mut out = tempfile::Builder::new()
            .prefix(&format!(".{name}.part"))
            .tempfile_in(dir)
            .map_err(cache_err(dir))?;
        io::copy(&mut entry, out.as_file_mut())
            .and_then(|_| out.as_file().sync_all())
            .map_err(|e| fail(format!("failed to unpack it: {e}")))?;
        return Ok(out.into_temp_path());
    }
    Err(fail("the archive has no such member".to_owned()))
}

/// Writes a file only its owner can read (0600 from creation), for values that hold secrets.
pub(crate) fn write_private(path: &Path, contents: &[u8]) -> io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    f.write_all(contents)?;
    f.sync_all()
}

/// The shell-quoted command line (for error messages; arguments never hold secrets).
pub fn command_line(program: &Path, args: &[String]) -> String {
    let mut line = quote(&program.to_string_lossy());
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line
}

fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A verdict on a tool's failure: whether a retry may help, and what to tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub transience: super::Transience,
    pub help: Option<String>,
}

impl Verdict {
    pub fn permanent(help: Option<String>) -> Self {
        Verdict {
            transience: super::Transience::Permanent,
            help,
        }
    }

    pub fn transient(help: impl Into<String>) -> Self {
        Verdict {
            transience: super::Transience::Transient,
            help: Some(help.into()),
        }
    }
}

/// A tool that ran and failed: its command line, exit status, and the end of its stderr.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command}` exited with {status}:\n{stderr_tail}")]
pub struct ToolFailure {
    pub command: String,
    pub status: ExitStatus,
    /// The end of stderr (long output is cut to its last part).
    pub stderr_tail: String,
}

/// What a finished tool printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    /// May hold secrets (kubeconfigs, rendered Secrets): never log it or put it in an error.
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// The command line, for error messages.
    pub command: String,
}

impl Output {
    /// "`<command>` exited with exit status: 1:\n<stderr>", with long stderr cut to its end.
    pub fn failure(&self) -> ToolFailure {
        ToolFailure {
            command: self.command.clone(),
            status: self.status,
            stderr_tail: tail(self.stderr.trim_end(), MAX_STDERR_IN_ERROR),
        }
    }
}

fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("[… earlier output cut …]\n{}", &s[start..])
}

/// Runs `tool` with `args`, feeding `stdin` when given, and waits for it. The child is killed if the
/// returned future is dropped (a cancelled step). Only a failure to start is an error here: the caller
/// decides what a non-zero exit means.
pub async fn run(
    tool: &Tool,
    args: &[String],
    stdin: Option<Vec<u8>>,
) -> Result<Output, ToolError> {
    run_with_env(tool, args, stdin, &[]).await
}

/// [`run`] with extra environment variables (Helm 4's `HELM_PLUGINS`).
pub async fn run_with_env(
    tool: &Tool,
    args: &[String],
    stdin: Option<Vec<u8>>,
    env: &[(String, std::ffi::OsString)],
) -> Result<Output, ToolError> {
    use tokio::io::AsyncWriteExt as _;

    let command = tool.command_line(args);
    let mut cmd = tokio::process::Command::new(&tool.path);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.args(args)
        .kill_on_drop(true)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut attempts = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy && attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                return Err(ToolError::Start {
                    command,
                    tool: tool.name,
                    path: tool.path.display().to_string(),
                    var: tool.name.env_var(),
                    source: e,
                });
            }
            Ok(child) => break child,
        }
    };
    tracing::debug!(%command, "running");
    let pipe = child.stdin.take();
    let command_ref = &command;
    let feed = async move {
        if let (Some(input), Some(mut pipe)) = (stdin, pipe) {
            // A tool that exits without reading its input closes the pipe; its exit status says why.
            if let Err(e) = pipe.write_all(&input).await {
                tracing::debug!(command = %command_ref, error = %e, "the tool did not read all of its input");
            }
            // Dropping the pipe closes it: the tool sees the end of its input.
        }
    };
    let (_, out) = tokio::join!(feed, child.wait_with_output());
    let out = out.map_err(|source| ToolError::Wait {
        command: command.clone(),
        source,
    })?;
    Ok(Output {
        status: out.status,
        stdout: out.stdout,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first 20 bytes of a 64-bit little-endian ELF for `machine`.
    fn elf_head(machine: u16) -> Vec<u8> {
        let mut h = b"\x7fELF\x02\x01\x01".to_vec();
        h.resize(18, 0);
        h.extend_from_slice(&machine.to_le_bytes());
        h
    }

    #[test]
    fn the_platform_of_a_program_is_read_from_its_header() {
        let of = |h: &[u8]| Platform::of_executable(h).map(|p| p.to_string());
        assert_eq!(of(&elf_head(62)).as_deref(), Some("linux/amd64"));
        assert_eq!(of(&elf_head(183)).as_deref(), Some("linux/arm64"));
        assert_eq!(
            of(&elf_head(243)).as_deref(),
            Some("linux/another architecture")
        );
        let macho = |cpu: u32| {
            let mut h = vec![0xcf, 0xfa, 0xed, 0xfe];
            h.extend_from_slice(&cpu.to_le_bytes());
            h.resize(20, 0);
            h
        };
        assert_eq!(of(&macho(0x0100_000c)).as_deref(), Some("darwin/arm64"));
        assert_eq!(of(&macho(0x0100_0007)).as_deref(), Some("darwin/amd64"));
        // Scripts, universal binaries and short files say nothing.
        assert_eq!(of(b"#!/bin/sh\necho kind v0.32.0\n"), None);
        assert_eq!(of(&[0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2]), None);
        assert_eq!(of(&elf_head(62)[..10]), None);
    }

    #[test]
    fn versions_parse() {
        assert_eq!(
            ToolName::Kind.parse_version("kind v0.32.0 go1.24.3 linux/amd64\n"),
            Some(Version::new(0, 32, 0))
        );
        assert_eq!(
            ToolName::Kind
                .parse_version("kind v0.33.0-alpha+3c2c6bf9a1a2b3 go1.25.0 darwin/arm64")
                .map(|v| v.pre.to_string()),
            Some("alpha".to_owned())
        );
        assert_eq!(
            ToolName::Helm.parse_version("v4.0.1"),
            Some(Version::new(4, 0, 1))
        );
        assert_eq!(ToolName::Helm.parse_version(""), None);
        assert_eq!(ToolName::Kind.parse_version("kind version unknown"), None);
    }

    #[test]
    fn quoting_keeps_plain_words_and_quotes_the_rest() {
        let line = command_line(
            Path::new("/usr/bin/helm"),
            &[
                "template".into(),
                "{{.Version}}".into(),
                "it's".into(),
                "".into(),
            ],
        );
        assert_eq!(line, r"/usr/bin/helm template '{{.Version}}' 'it'\''s' ''");
    }

    #[test]
    fn the_pin_table_covers_every_platform_and_names_its_checksum_file() {
        for tool in [ToolName::Kind, ToolName::Helm] {
            for os in ["linux", "darwin"] {
                for arch in ["amd64", "arm64"] {
                    let pin = PINNED
                        .iter()
                        .find(|p| p.tool == tool && p.os == os && p.arch == arch)
                        .unwrap_or_else(|| panic!("no {tool} for {os}/{arch}"));
                    assert_eq!(pin.checksum_url, format!("{}.sha256sum", pin.url));
                    assert!(pin.url.starts_with(tool.upstream()), "{}", pin.url);
                    assert!(pin.url.contains(&format!("{os}-{arch}")), "{}", pin.url);
                    assert_eq!(pin.version, tool.pinned_version().to_string());
                    if let Some(member) = pin.archive_member {
                        assert_eq!(member, format!("{os}-{arch}/helm"));
                    }
                    if let Some(d) = pin.sha256 {
                        assert!(parse_checksum_file(d).is_some(), "{d}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_mirror_replaces_the_upstream_host() {
        let kind = PINNED[0];
        assert_eq!(
            kind.url_with_base(Some("http://127.0.0.1:9/")),
            "http://127.0.0.1:9/v0.32.0/kind-linux-amd64"
        );
        let helm = PINNED.iter().find(|p| p.tool == ToolName::Helm).unwrap();
        assert_eq!(
            helm.checksum_url_with_base(Some("http://m")),
            "http://m/helm-v3.19.0-linux-amd64.tar.gz.sha256sum"
        );
        assert_eq!(kind.url_with_base(None), kind.url);
    }

    #[test]
    fn checksum_files_parse_in_both_published_formats() {
        let d = "A".repeat(64);
        assert_eq!(
            parse_checksum_file(&format!("{d}  kind-linux-amd64\n")),
            Some("a".repeat(64))
        );
        assert_eq!(parse_checksum_file(&d), Some("a".repeat(64)));
        assert_eq!(parse_checksum_file("<html>not found</html>"), None);
        assert_eq!(parse_checksum_file(""), None);
    }

    #[test]
    fn long_stderr_keeps_its_end() {
        let s = format!("{}END", "é".repeat(40_000));
        let t = tail(&s, 100);
        assert!(t.ends_with("END") && t.len() < 200, "{t}");
    }
}
