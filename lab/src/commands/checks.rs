//! What a lab needs from this machine, each finding with what to do: the checks of `ocm-lab doctor`
//! (`super::doctor`). `up` runs the same checks as its first step, so a lab never starts half-way on a
//! machine that cannot finish it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::backend::Backends;
use crate::images::{ImageKind, LabImage};
use crate::state::StateDir;
use crate::topology::{Lab, Provider};

/// inotify limits kind recommends for several clusters on one kernel (kind's known issues:
/// https://kind.sigs.k8s.io/docs/user/known-issues/#pod-errors-due-to-too-many-open-files).
pub const MIN_MAX_USER_WATCHES: u64 = 524_288;
pub const MIN_MAX_USER_INSTANCES: u64 = 512;
/// Memory a kind cluster with OCM needs, roughly (hub with cluster-manager and addons, spokes with agents).
pub const MIB_PER_CLUSTER: u64 = 1536;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub check: &'static str,
    pub level: Level,
    pub detail: String,
    /// What to do, for warnings and failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn ok(check: &'static str, detail: impl Into<String>) -> Self {
        Finding {
            check,
            level: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }
    pub(crate) fn warn(
        check: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            check,
            level: Level::Warn,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
    pub(crate) fn fail(
        check: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Finding {
            check,
            level: Level::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// inotify limits, from `/proc/sys/fs/inotify` as the kernel running the containers sees them.
pub fn inotify(
    max_user_watches: Option<u64>,
    max_user_instances: Option<u64>,
    source: &str,
) -> Finding {
    match (max_user_watches, max_user_instances) {
        (Some(w), Some(i)) if w >= MIN_MAX_USER_WATCHES && i >= MIN_MAX_USER_INSTANCES => {
            Finding::ok(
                "inotify",
                format!("max_user_watches={w}, max_user_instances={i} ({source})"),
            )
        }
        (Some(w), Some(i)) => Finding::warn(
            "inotify",
            format!(
                "max_user_watches={w}, max_user_instances={i} ({source}): low for several kind clusters; a node may then fail to boot (kind says \"could not find a log line that matches Reached target\"), so this is a warning, not a stop"
            ),
            format!(
                "sudo sysctl fs.inotify.max_user_watches={MIN_MAX_USER_WATCHES} fs.inotify.max_user_instances={MIN_MAX_USER_INSTANCES} (persist in /etc/sysctl.d/99-kind.conf)"
            ),
        ),
        _ => Finding::warn(
            "inotify",
            format!("could not read the inotify limits ({source})"),
            format!(
                "make sure fs.inotify.max_user_watches>={MIN_MAX_USER_WATCHES} and fs.inotify.max_user_instances>={MIN_MAX_USER_INSTANCES}"
            ),
        ),
    }
}

/// Memory for `clusters` kind clusters against the memory the Docker engine reports (`MemTotal`, MiB):
/// every node of every cluster shares it. Less than [`MIB_PER_CLUSTER`] per cluster is a failure.
pub fn memory(engine_total_mib: Option<u64>, clusters: usize) -> Finding {
    let need = MIB_PER_CLUSTER * clusters as u64;
    match engine_total_mib {
        Some(a) if a >= need => Finding::ok(
            "memory",
            format!(
                "Docker has {a} MiB; {clusters} clusters need about {need} MiB ({MIB_PER_CLUSTER} MiB each)"
            ),
        ),
        Some(a) => Finding::fail(
            "memory",
            format!(
                "Docker has {a} MiB, but {clusters} clusters need about {need} MiB ({MIB_PER_CLUSTER} MiB each)"
            ),
            "give Docker more memory (Docker Desktop: Settings → Resources), or use a topology with fewer clusters (`-t minimal`)",
        ),
        None => Finding::warn(
            "memory",
            "could not read how much memory Docker has",
            format!("about {need} MiB are needed for {clusters} clusters"),
        ),
    }
}

/// Whether the node image is already on the Docker engine, or kind will pull it on the first create.
pub fn node_image(image: &str, present: Option<bool>) -> Finding {
    match present {
        Some(true) => Finding::ok("image", format!("{image} is present")),
        Some(false) => Finding::warn(
            "image",
            format!(
                "{image} is not in the local Docker engine: kind pulls it on the first create (about 1 GB, from Docker Hub)"
            ),
            format!(
                "`docker pull {image}` now, or let kind pull it; without network access, `ocm-lab up --bundle FILE`"
            ),
        ),
        None => Finding::warn(
            "image",
            format!("could not check whether {image} is present"),
            "kind pulls it on the first create if it is missing",
        ),
    }
}

/// Whether the kind node image is there for kind ([`crate::backend::docker::Docker::local_name`]): a
/// pinned image the engine knows by its tag only would be pulled, a warning, unless the bundle loaded
/// it (`image_aliases`), when the lab runs it by its tag.
pub async fn node_image_finding(
    image: &str,
    d: &crate::backend::docker::Docker,
    image_aliases: &std::collections::BTreeMap<String, String>,
) -> Finding {
    match d.local_name(image).await {
        Ok(Some(name)) if name == image => node_image(image, Some(true)),
        Ok(Some(tag)) if image_aliases.contains_key(image) => Finding::ok(
            "image",
            format!(
                "{tag} is present, loaded from the bundle (Docker keeps no digest on `docker load` here): the lab runs it by its tag"
            ),
        ),
        Ok(Some(tag)) => Finding::warn(
            "image",
            format!(
                "{tag} is present, but Docker does not know it as {image} (`docker load` keeps no digest on an engine without the containerd image store): kind would try to pull it"
            ),
            format!(
                "online, `docker pull {image}`; offline, `up --bundle` with the lab's bundle, after which the lab runs the bundle's node image by its tag"
            ),
        ),
        Ok(None) => node_image(image, Some(false)),
        Err(_) => node_image(image, None),
    }
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Runs every check that does not need tools: Docker, kernel limits, memory, ports, clusters that clash.
pub async fn check(
    lab: &Lab,
    backends: &Backends,
    engine: Option<&crate::backend::docker::Docker>,
    state: &StateDir,
    images: &Result<Vec<crate::images::LabImage>, String>,
    image_aliases: &std::collections::BTreeMap<String, String>,
) -> Vec<Finding> {
    let mut out = Vec::new();
    let kind_clusters: Vec<&str> = lab
        .clusters()
        .filter(|c| c.provider == Provider::Kind)
        .map(|c| c.name.as_str())
        .collect();
    if kind_clusters.is_empty() {
        out.push(Finding::ok(
            "docker",
            "not needed: every cluster of this lab already exists",
        ));
        return out;
    }
    let docker = backends.docker.ping().await;
    match &docker {
        Ok(v) => out.push(Finding::ok("docker", format!("Docker {v} reachable"))),
        Err(e) => out.push(Finding::fail(
            "docker",
            e.to_string(),
            e.help()
                .unwrap_or_else(|| "start Docker, or set DOCKER_HOST".into()),
        )),
    }
    if backends.simulated {
        out.push(Finding::ok(
            "kernel",
            "simulated lab: no kernel limits apply",
        ));
        if docker.is_ok() {
            out.extend(clashes(lab, backends, state, &kind_clusters).await);
        }
        return out;
    }
    let info = match engine {
        Some(d) => d.info().await.ok(),
        None => None,
    };
    out.push(inotify_finding(lab, engine, info.as_ref()).await);
    out.push(memory(
        info.as_ref()
            .and_then(|i| i.mem_total)
            .map(|b| (b.max(0) as u64) / (1024 * 1024)),
        kind_clusters.len(),
    ));
    if let Some(d) = engine {
        out.push(node_image_finding(&lab.versions.kind_node_image, d, image_aliases).await);
        out.push(doctor_finding(images, d).await);
    }
    out.extend(mirror_findings(lab).await);
    match std::net::TcpListener::bind("127.0.0.1:0") {
        Ok(_) => out.push(Finding::ok(
            "ports",
            "free local ports available for the API servers (127.0.0.1)",
        )),
        Err(e) => out.push(Finding::fail(
            "ports",
            format!("cannot bind a port on 127.0.0.1: {e}"),
            "the API servers of kind clusters listen on 127.0.0.1",
        )),
    }
    if docker.is_ok() {
        out.extend(clashes(lab, backends, state, &kind_clusters).await);
    }
    out
}

/// The inotify limits of the kernel the nodes run on: this machine's, or read from inside a container on a
/// remote Docker host or Docker Desktop's VM.
async fn inotify_finding(
    lab: &Lab,
    engine: Option<&crate::backend::docker::Docker>,
    info: Option<&crate::backend::docker::EngineInfo>,
) -> Finding {
    if let (Some(d), Some(info)) = (engine, info.filter(|i| i.remote || i.docker_desktop)) {
        // The daemon's kernel is not this machine's: read its limits from inside a container of an image
        // that is already there (nothing is pulled).
        let keys = [
            "fs/inotify/max_user_watches",
            "fs/inotify/max_user_instances",
        ];
        let values = d
            .read_sysctl_via_container(&lab.versions.kind_node_image, &keys)
            .await
            .unwrap_or_default();
        let get = |k: &str| {
            values
                .iter()
                .find(|(key, _)| key.ends_with(k))
                .and_then(|(_, v)| v.trim().parse().ok())
        };
        let source = if info.docker_desktop {
            "Docker Desktop's VM"
        } else {
            "the remote Docker host"
        };
        inotify(get("max_user_watches"), get("max_user_instances"), source)
    } else {
        inotify(
            read_u64("/proc/sys/fs/inotify/max_user_watches"),
            read_u64("/proc/sys/fs/inotify/max_user_instances"),
            "this kernel",
        )
    }
}

/// Containers that look like nodes of the lab's kind clusters and that the lab does not own, and a
/// damaged ownership record.
async fn clashes(
    lab: &Lab,
    backends: &Backends,
    state: &StateDir,
    kind_clusters: &[&str],
) -> Vec<Finding> {
    let mut out = Vec::new();
    match state.owned() {
        Ok(owned) => {
            match crate::actions::foreign_containers(
                &*backends.docker,
                state,
                &owned,
                kind_clusters,
            )
            .await
            {
                Ok(clashes) => {
                    if let Some(e) =
                        crate::actions::clash_error(&lab.name, &owned, &clashes, backends.simulated)
                    {
                        out.push(Finding::fail(
                            "clusters",
                            e.message,
                            e.help.unwrap_or_default(),
                        ));
                    }
                }
                Err(e) => out.push(Finding::warn(
                    "clusters",
                    format!("could not list containers: {e}"),
                    "check `docker ps -a` for containers named like the lab's kind nodes",
                )),
            }
        }
        Err(e) => out.push(Finding::fail(
            "ownership",
            e.to_string(),
            miette::Diagnostic::help(&e).map_or_else(String::new, |h| h.to_string()),
        )),
    }
    if !out.iter().any(|f| f.check == "clusters") {
        out.push(Finding::ok(
            "clusters",
            "no container clashes with the lab's kind node names",
        ));
    }
    out
}

/// How a tool that is missing (or too old) would reach `up`.
#[derive(Debug)]
pub enum Download {
    /// `--no-download`: it would not.
    Off,
    /// `up` itself: it already tried, and the tool's own result says how that went.
    Tried,
    /// `doctor`: the release host (or `OCM_LAB_TOOLS_BASE_URL`'s mirror) was asked whether the download
    /// can start ([`crate::backend::tools::probe_download`]): the URL that answered, or why it did not.
    /// `None` when there was nothing to ask (the tool is installed).
    Probed(Option<Result<String, Box<crate::backend::tools::ToolError>>>),
}

/// Findings for the two tools, each with how a missing one would reach `up` ([`Download`]).
/// `kind` is `None` for a lab whose clusters all exist: kind is not needed, and is not looked for.
pub fn tools(
    kind: Option<(
        &Result<crate::backend::tools::Tool, crate::backend::tools::ToolError>,
        Download,
    )>,
    helm: (
        &Result<crate::backend::tools::Tool, crate::backend::tools::ToolError>,
        Download,
    ),
    kind_minimum: &semver::Version,
) -> Vec<Finding> {
    use crate::backend::tools::ToolName;
    let mut out = Vec::new();
    match kind {
        None => out.push(Finding::ok(
            "kind",
            "not needed: every cluster of this lab already exists",
        )),
        Some((r, download)) => out.push(tool(ToolName::Kind, r, download, kind_minimum)),
    }
    let helm_minimum = ToolName::Helm.minimum();
    out.push(tool(ToolName::Helm, helm.0, helm.1, &helm_minimum));
    out
}

/// One tool's finding: found, or what stops `up` and the ways out.
fn tool(
    name: crate::backend::tools::ToolName,
    r: &Result<crate::backend::tools::Tool, crate::backend::tools::ToolError>,
    download: Download,
    minimum: &semver::Version,
) -> Finding {
    use crate::backend::tools::ToolError;
    let check = name.as_str();
    let e = match r {
        Ok(t) => {
            return Finding::ok(
                check,
                format!("{name} {} at {}", t.version, t.path.display()),
            );
        }
        Err(e) => e,
    };
    let minimum = match e {
        ToolError::TooOld { minimum, .. } | ToolError::BadOverride { minimum, .. } => minimum,
        _ => minimum,
    };
    let why = if *minimum > name.minimum() {
        " (what the node image needs)"
    } else {
        ""
    };
    let install = format!(
        "install {name} v{minimum} or newer{why}: {} (or set {} to one)",
        name.install_url(),
        name.env_var()
    );
    // The doctor never downloads, so "downloads are off" would mislead: say what was found.
    let detail = match e {
        ToolError::NotFound { .. } => format!("{name} not found on PATH or in the ocm-lab cache"),
        ToolError::TooOld {
            path,
            found,
            minimum,
            why,
            ..
        } => {
            format!("{name} v{found} at {path} is older than v{minimum}{why}")
        }
        other => other.to_string(),
    };
    let missing = matches!(e, ToolError::NotFound { .. } | ToolError::TooOld { .. });
    match download {
        Download::Probed(Some(Ok(url))) if missing => Finding::warn(
            check,
            detail,
            format!(
                "`ocm-lab up` downloads the pinned release (sha256-checked) from {} (it answered); or {install}",
                host(&url)
            ),
        ),
        Download::Probed(Some(Err(probe))) if missing => Finding::fail(
            check,
            format!("{detail}, and its download cannot start: {probe}"),
            ways_out(&install, true),
        ),
        Download::Off if missing => Finding::fail(check, detail, ways_out(&install, false)),
        _ if matches!(e, ToolError::Download { .. } | ToolError::NoDownload { .. }) => {
            Finding::fail(check, detail, ways_out(&install, true))
        }
        _ => Finding::fail(
            check,
            detail,
            match crate::backend::Failure::help(e) {
                Some(help) => format!("{help}\nor {install}"),
                None => install,
            },
        ),
    }
}

/// The ways out for a tool `up` cannot get: install it, a mirror of the releases, or a bundle.
fn ways_out(install: &str, downloads: bool) -> String {
    let mirror = if downloads {
        "or set OCM_LAB_TOOLS_BASE_URL to a mirror of the kind and helm releases"
    } else {
        "or drop --no-download, so that `ocm-lab up` downloads it (from OCM_LAB_TOOLS_BASE_URL, a mirror, when set)"
    };
    format!(
        "{install}\n{mirror}\nor bring the lab up from a bundle, which carries kind and helm: `ocm-lab bundle save --out FILE` where the network is, then `ocm-lab up --bundle FILE`"
    )
}

/// `https://get.helm.sh` of `https://get.helm.sh/helm-v3.19.0-linux-amd64.tar.gz.sha256sum`.
fn host(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    url[after_scheme..]
        .find('/')
        .map_or(url, |i| &url[..after_scheme + i])
}

/// Whether any finding is a failure.
pub fn failed(findings: &[Finding]) -> bool {
    findings.iter().any(|f| f.level == Level::Fail)
}

/// The checks that failed, and whether a tool `up` cannot get is among them.
fn failures(findings: &[Finding]) -> (String, bool) {
    let failed: Vec<&Finding> = findings.iter().filter(|f| f.level == Level::Fail).collect();
    let names = failed
        .iter()
        .map(|f| f.check)
        .collect::<Vec<_>>()
        .join(", ");
    let tool_missing = failed.iter().any(|f| {
        matches!(f.check, "kind" | "helm")
            && f.fix.as_deref().is_some_and(|x| x.contains("up --bundle"))
    });
    (names, tool_missing)
}

/// The ways out for kind and helm, in one line, as a preflight's error says them after the findings.
pub const TOOL_WAYS_OUT: &str = "for kind and helm: install them, or set OCM_LAB_TOOLS_BASE_URL to a mirror of their releases, or bring the lab up from a bundle, which carries both (`ocm-lab bundle save --out FILE` where the network is, then `ocm-lab up --bundle FILE`)";

/// The error of findings that stop `up` (its preflight): the checks that failed; for a tool `up` cannot
/// get, the ways out again, after the findings.
pub fn preflight_error(findings: &[Finding]) -> crate::error::Error {
    let (failed, tool_missing) = failures(findings);
    let mut help = "fix the findings marked ✗ above (`ocm-lab doctor` checks them again without running anything)".to_owned();
    if tool_missing {
        help = format!("{help}; {TOOL_WAYS_OUT}");
    }
    crate::error::Error::Preflight { failed, help }
}

/// The error of `doctor` when something would stop `up`.
pub(crate) fn doctor_error(findings: &[Finding]) -> crate::error::Error {
    let (failed, _) = failures(findings);
    crate::error::Error::DoctorFailed {
        failed,
        help: "fix the findings marked ✗ above; each says what to do (→)".to_owned(),
    }
}

/// The human form.
pub fn render(findings: &[Finding]) -> String {
    let mut out = String::new();
    for f in findings {
        let mark = match f.level {
            Level::Ok => "✓",
            Level::Warn => "!",
            Level::Fail => "✗",
        };
        let _ = writeln!(out, "{mark} {:<9} {}", f.check, f.detail);
        if let Some(fix) = &f.fix {
            for (i, line) in fix.lines().enumerate() {
                let _ = writeln!(out, "  {:<9} {} {line}", "", if i == 0 { "→" } else { " " });
            }
        }
    }
    out
}

/// Which of the lab's images (`listed`, from [`crate::images::for_doctor`]) the local Docker engine already has, and
/// which would have to be pulled: the doctor's `images` finding, a warning when any is missing.
pub async fn doctor_finding(
    listed: &Result<Vec<LabImage>, String>,
    docker: &crate::backend::docker::Docker,
) -> Finding {
    let images = match listed {
        Ok(images) => images,
        Err(e) => {
            return Finding::warn(
                "images",
                format!("could not list the lab's images: {e}"),
                "`ocm-lab images list` shows the same error",
            );
        }
    };
    // The node image has its own finding (`image`): one finding per fact.
    let images: Vec<LabImage> = images
        .iter()
        .filter(|i| i.kind != ImageKind::Node)
        .cloned()
        .collect();
    let images = &images;
    let (present, missing) = partition_present(docker, images).await;
    let missing = match missing {
        Ok(m) => m,
        Err(e) => {
            return Finding::warn(
                "images",
                format!("could not ask Docker which images it has: {e}"),
                "`docker images` lists them",
            );
        }
    };
    if missing.is_empty() {
        return Finding::ok(
            "images",
            format!(
                "all {} images the lab runs in its clusters are in the local Docker engine",
                images.len()
            ),
        );
    }
    Finding::warn(
        "images",
        format!(
            "{} of {} images the lab runs in its clusters are not in the local Docker engine and would be pulled from their registries ({present} present): {}",
            missing.len(),
            images.len(),
            missing.join(", ")
        ),
        "with network access, `docker pull` them (`ocm-lab images list` names them all); for a room without it, \
         point the nodes at a mirror with `spec.registry.mirrors` in the topology",
    )
}

/// Whether each mirror of `spec.registry.mirrors` answers the registry API (`GET <url>/v2/`: any HTTP
/// answer, 200 or 401, is a registry that is there): one finding per mirror, a warning for one that does
/// not answer, naming it and what to do. Without mirrors, nothing.
pub async fn mirror_findings(lab: &Lab) -> Vec<Finding> {
    let mut out = Vec::new();
    for m in &lab.registry.mirrors {
        let url = format!("{}/v2/", m.url);
        let probe = url.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let config = ureq::Agent::config_builder()
                .timeout_global(Some(std::time::Duration::from_secs(5)))
                .http_status_as_error(false)
                .user_agent(concat!("ocm-lab/", env!("CARGO_PKG_VERSION")))
                .build();
            let agent = ureq::Agent::new_with_config(config);
            agent
                .get(&probe)
                .call()
                .map(|r| r.status().as_u16())
                .map_err(|e| e.to_string())
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        out.push(match answer {
            Ok(status) => Finding::ok(
                "mirror",
                format!("{} mirror {} answers (HTTP {status} on /v2/)", m.host, m.url),
            ),
            Err(e) => Finding::warn(
                "mirror",
                format!("{} mirror {} does not answer: {e}", m.host, m.url),
                format!(
                    "start the mirror or correct its URL in spec.registry.mirrors; until it answers the nodes fall back to {} itself, which needs the network",
                    m.host
                ),
            ),
        });
    }
    out
}

/// How many of `images` Docker has, and the references it does not have.
async fn partition_present(
    docker: &crate::backend::docker::Docker,
    images: &[LabImage],
) -> (usize, Result<Vec<String>, crate::backend::DockerError>) {
    let mut present = 0;
    let mut missing = Vec::new();
    for i in images {
        match docker.image_present(&i.image).await {
            Ok(true) => present += 1,
            Ok(false) => missing.push(i.image.clone()),
            Err(e) => return (present, Err(e)),
        }
    }
    (present, Ok(missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_inotify_limits_say_what_to_run() {
        let f = inotify(Some(8192), Some(128), "this kernel");
        assert_eq!(f.level, Level::Warn);
        // A warning says what may happen, never that it will.
        assert!(
            f.detail.contains("may") && !f.detail.contains("kind fails"),
            "{}",
            f.detail
        );
        assert!(
            f.fix
                .unwrap()
                .contains("fs.inotify.max_user_watches=524288")
        );
        assert_eq!(inotify(Some(524288), Some(512), "k").level, Level::Ok);
    }

    #[test]
    fn memory_scales_with_clusters_and_too_little_is_a_failure() {
        assert_eq!(memory(Some(4608), 3).level, Level::Ok);
        let f = memory(Some(4607), 3);
        assert_eq!(f.level, Level::Fail);
        assert!(f.detail.contains("4608 MiB"), "{}", f.detail);
        assert_eq!(memory(None, 3).level, Level::Warn);
    }

    #[test]
    fn low_inotify_warns_but_too_little_memory_stops_up() {
        assert!(!failed(&[inotify(Some(8192), Some(128), "k")]));
        assert!(failed(&[memory(Some(3000), 2)]));
    }

    #[test]
    fn the_node_image_is_present_or_will_be_pulled() {
        assert!(
            node_image("kindest/node:v1", Some(true))
                .detail
                .ends_with("is present")
        );
        assert!(
            node_image("kindest/node:v1", Some(false))
                .detail
                .contains("pulls it")
        );
        assert_eq!(
            node_image("kindest/node:v1", Some(false)).level,
            Level::Warn,
            "a missing node image is said as the other missing images are"
        );
    }
}
