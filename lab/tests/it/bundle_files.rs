//! Bundles carry the charts and the tools: `bundle save` adds each chart `.tgz`
//! from the chart cache (kind `chart`) and the kind and helm binaries (kind `tool`) with their digests and
//! sizes; `up --bundle` checks them, puts the charts into the chart cache as verified (so the lab renders
//! them without the network) and unpacks the tools (0755) where the run uses them. A tampered chart
//! entry is refused before anything is unpacked or loaded. The tools here are small stand-in scripts
//! that answer `version` as kind and helm do.

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use ocm_lab::backend::chart_cache::ChartCache;
use ocm_lab::backend::docker::bundle::{self, FORMAT, FileItem, KIND_CHART, KIND_TOOL};
use ocm_lab::backend::tools::{self, Downloads, ToolError, ToolName, ToolsConfig};
use serde_json::{Value, json};
use sha2::{Digest as _, Sha256};

use crate::common::{ocm_lab, ocm_lab_env};

const KIND: &str = "#!/bin/sh\necho 'kind v0.32.0 go1.24.3 linux/amd64'\n";
const HELM: &str = "#!/bin/sh\nprintf 'v3.19.0'\n";

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

fn executable(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A repository URL nothing answers on: using it proves no network access is made.
fn dead_repo() -> String {
    let port = std::net::TcpListener::bind(("127.0.0.1", 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/charts")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn saved_charts_and_tools_land_where_the_lab_uses_them() {
    let d = crate::docker::engine().await;
    let src = tempfile::tempdir().unwrap();
    let repo = dead_repo();
    let chart = src.path().join("klusterlet-1.1.0.tgz");
    std::fs::write(&chart, b"a chart archive").unwrap();
    let (kind, helm) = (src.path().join("kind"), src.path().join("helm"));
    executable(&kind, KIND);
    executable(&helm, HELM);
    let files = vec![
        FileItem {
            name: "klusterlet".into(),
            kind: KIND_CHART.into(),
            version: Some("1.1.0".into()),
            repo: Some(repo.clone()),
            path: "charts/x/klusterlet-1.1.0.tgz".into(),
            source: chart.clone(),
        },
        FileItem {
            name: "kind".into(),
            kind: KIND_TOOL.into(),
            version: Some("0.32.0".into()),
            repo: None,
            path: "tools/kind".into(),
            source: kind.clone(),
        },
        FileItem {
            name: "helm".into(),
            kind: KIND_TOOL.into(),
            version: Some("3.19.0".into()),
            repo: None,
            path: "tools/helm".into(),
            source: helm.clone(),
        },
    ];
    let out = src.path().join("lab-bundle.tar");
    let manifest = d
        .save_bundle_with(&[], &files, Default::default(), &out)
        .await
        .unwrap();
    assert_eq!(manifest.items.len(), 3);
    let chart_item = &manifest.items[0];
    assert_eq!(
        (chart_item.kind.as_str(), chart_item.size),
        (KIND_CHART, 15)
    );
    assert_eq!(
        chart_item.digest,
        format!("sha256:{}", sha256(b"a chart archive"))
    );
    assert_eq!(chart_item.version.as_deref(), Some("1.1.0"));
    assert_eq!(
        manifest.items[2].digest,
        format!("sha256:{}", sha256(HELM.as_bytes()))
    );

    // Load side: check, then unpack into a fresh cache.
    let (read, offsets) = bundle::verify(&out).unwrap();
    assert_eq!(read, manifest);
    let cache = tempfile::tempdir().unwrap();
    let bundled = ocm_lab::commands::bundle::unpack(&out, &read, &offsets, cache.path()).unwrap();

    // The chart is in the chart cache, recorded as verified: used with no network access at all.
    let charts = ChartCache::new(cache.path().join("charts"));
    let cached = charts.ensure(&repo, "klusterlet", "1.1.0").unwrap();
    assert_eq!(cached, charts.path(&repo, "klusterlet", "1.1.0"));
    assert_eq!(std::fs::read(&cached).unwrap(), b"a chart archive");

    // The tools are unpacked executable, and resolution takes them before PATH.
    let names: Vec<ToolName> = bundled.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, [ToolName::Kind, ToolName::Helm]);
    for (name, path) in &bundled {
        assert!(
            path.starts_with(cache.path().join("tools/bundle")),
            "{path:?}"
        );
        assert_eq!(mode(path), 0o755, "{name}");
        let original = if *name == ToolName::Kind {
            &kind
        } else {
            &helm
        };
        assert_eq!(
            std::fs::read(path).unwrap(),
            std::fs::read(original).unwrap()
        );
    }
    let mut cfg = ToolsConfig::new(Downloads::Forbid, cache.path().join("tools"));
    cfg.search_path = Some(src.path().as_os_str().to_owned());
    cfg.bundled = bundled.clone();
    for (name, path) in &bundled {
        let tool = tools::resolve(*name, &cfg).unwrap();
        assert_eq!(&tool.path, path);
    }

    // Unpacking again (a second `up --bundle`) leaves the same files.
    let again = ocm_lab::commands::bundle::unpack(&out, &read, &offsets, cache.path()).unwrap();
    assert_eq!(again, bundled);
}

#[test]
fn a_bundled_tool_that_does_not_run_is_an_error_not_a_reason_to_use_another() {
    let dir = tempfile::tempdir().unwrap();
    let on_path = dir.path().join("bin");
    std::fs::create_dir(&on_path).unwrap();
    executable(&on_path.join("helm"), HELM);
    let broken = dir.path().join("bundled-helm");
    executable(
        &broken,
        "#!/bin/sh\necho 'exec format error' >&2\nexit 126\n",
    );
    let mut cfg = ToolsConfig::new(Downloads::Forbid, dir.path().join("tools"));
    cfg.search_path = Some(on_path.as_os_str().to_owned());
    cfg.bundled = vec![(ToolName::Helm, broken.clone())];
    let err = tools::resolve(ToolName::Helm, &cfg).unwrap_err();
    assert!(matches!(err, ToolError::Bundled { .. }), "{err:?}");
    assert!(
        err.to_string().contains(&broken.display().to_string()),
        "{err}"
    );
    let help = miette::Diagnostic::help(&err).unwrap().to_string();
    assert!(help.contains("bundle save"), "{help}");
}

// ---------------------------------------------------------------------------------------------------
// `up --bundle` through the CLI, on the simulated lab (no Docker, no images): a bundle the test writes.

fn minimal_images() -> Vec<String> {
    let r = ocm_lab(&["images", "list", "-t", "minimal", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list: Vec<Value> = serde_json::from_str(&r.stdout).unwrap();
    list.iter()
        .map(|i| i["image"].as_str().unwrap().to_owned())
        .collect()
}

/// One entry: (manifest item, bytes in the bundle).
type Entry = (Value, Vec<u8>);

fn entry(name: &str, kind: &str, path: &str, data: &[u8], extra: Value) -> Entry {
    let mut item = json!({
        "name": name, "kind": kind, "path": path,
        "digest": format!("sha256:{}", sha256(data)), "size": data.len(),
    });
    for (k, v) in extra.as_object().unwrap() {
        item[k] = v.clone();
    }
    (item, data.to_vec())
}

/// A bundle for `-t minimal`: its images (a few bytes each), the klusterlet chart and both tools.
/// `tamper_chart` changes the chart's bytes after its digest was taken.
fn write_bundle(path: &Path, tamper_chart: bool) -> (String, String) {
    let lab = ocm_lab::topology::load_arg(&crate::common::host(), Some("minimal"))
        .unwrap()
        .lab;
    let repo = ocm_lab::topology::catalog::OCM_HELM_REPO;
    let version = lab.versions.ocm.version.to_owned();
    let mut entries: Vec<Entry> = minimal_images()
        .iter()
        .enumerate()
        .map(|(n, image)| {
            entry(
                image,
                "image",
                &format!("images/{n}.tar"),
                format!("not a real image archive: {image}").as_bytes(),
                json!({}),
            )
        })
        .collect();
    let mut chart = entry(
        "klusterlet",
        "chart",
        &format!("charts/open-cluster-management.io/klusterlet-{version}.tgz"),
        b"the klusterlet chart",
        json!({"repo": repo, "version": version}),
    );
    if tamper_chart {
        chart.1 = b"the klusterlet CHART".to_vec();
    }
    entries.push(chart);
    entries.push(entry(
        "kind",
        "tool",
        "tools/kind",
        KIND.as_bytes(),
        json!({"version": "0.32.0"}),
    ));
    entries.push(entry(
        "helm",
        "tool",
        "tools/helm",
        HELM.as_bytes(),
        json!({"version": "3.19.0"}),
    ));
    let manifest = json!({
        "format": FORMAT,
        "lab": {"kindNodeImage": lab.versions.kind_node_image, "ocm": version},
        "items": entries.iter().map(|(i, _)| i.clone()).collect::<Vec<_>>(),
    });
    let mut tar = tar::Builder::new(std::fs::File::create(path).unwrap());
    let json = serde_json::to_vec(&manifest).unwrap();
    let mut header = tar::Header::new_gnu();
    header.set_size(json.len() as u64);
    header.set_mode(0o644);
    tar.append_data(&mut header, "manifest.json", json.as_slice())
        .unwrap();
    for (item, data) in &entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        tar.append_data(&mut header, item["path"].as_str().unwrap(), data.as_slice())
            .unwrap();
    }
    tar.into_inner().unwrap().flush().unwrap();
    (repo.to_owned(), version)
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

fn up_with(bundle: &Path, root: &Path) -> crate::common::Output {
    ocm_lab_env(
        &[
            "up",
            "--simulate",
            "-t",
            "minimal",
            "--bundle",
            bundle.to_str().unwrap(),
        ],
        &[
            ("OCM_LAB_STATE_DIR", &root.join("state")),
            ("OCM_LAB_CACHE_DIR", &root.join("cache")),
        ],
    )
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_from_a_bundle_puts_its_charts_into_the_chart_cache_and_unpacks_its_tools() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    let (repo, version) = write_bundle(&bundle, false);
    let r = up_with(&bundle, dir.path());
    assert_eq!(r.code, 0, "{}", r.stderr);

    let cache = ChartCache::new(dir.path().join("cache/charts"));
    let chart = cache.path(&repo, "klusterlet", &version);
    assert_eq!(std::fs::read(&chart).unwrap(), b"the klusterlet chart");
    let recorded =
        std::fs::read_to_string(chart.with_file_name(format!("klusterlet-{version}.tgz.sha256")))
            .unwrap();
    assert!(
        recorded.starts_with(&sha256(b"the klusterlet chart")),
        "{recorded}"
    );
    let tools: Vec<PathBuf> = files_under(&dir.path().join("cache/tools/bundle"));
    assert_eq!(tools.len(), 2, "{tools:?}");
    for t in &tools {
        assert_eq!(mode(t), 0o755, "{t:?}");
    }
}

#[test]
fn a_tampered_chart_entry_is_refused_before_anything_is_unpacked_or_run() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("lab-bundle.tar");
    write_bundle(&bundle, true);
    let r = up_with(&bundle, dir.path());
    assert_eq!(r.code, 1, "{}{}", r.stdout, r.stderr);
    let text: String = r
        .stderr
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '│')
        .collect();
    assert!(
        text.contains("klusterlet") && text.contains("itwaschangedordamaged"),
        "{}",
        r.stderr
    );
    assert!(
        files_under(&dir.path().join("cache")).is_empty(),
        "{:?}",
        files_under(&dir.path().join("cache"))
    );
    assert!(files_under(&dir.path().join("state")).is_empty());
}

#[test]
fn a_run_from_a_bundle_resolves_the_bundles_kind_and_helm() {
    use ocm_lab::cli::{LabArgs, RunArgs};
    use ocm_lab::commands::runner::{self, Purpose, Workflow};
    // Nothing on PATH, no overrides, downloads off: only the bundle's tools can be found. The environment
    // is set for a child process running this test alone (see `rerun_alone_with_env`).
    let Ok(root) = std::env::var("BUNDLE_TOOLS_TEST_DIR") else {
        let dir = tempfile::tempdir().unwrap();
        let empty_path = dir.path().join("bin");
        std::fs::create_dir(&empty_path).unwrap();
        let (state, cache) = (dir.path().join("state"), dir.path().join("cache"));
        crate::common::rerun_alone_with_env(
            "bundle_files::a_run_from_a_bundle_resolves_the_bundles_kind_and_helm",
            &[
                ("BUNDLE_TOOLS_TEST_DIR", dir.path().as_os_str()),
                ("OCM_LAB_STATE_DIR", state.as_os_str()),
                ("OCM_LAB_CACHE_DIR", cache.as_os_str()),
                ("PATH", empty_path.as_os_str()),
                ("OCM_LAB_KIND", std::ffi::OsStr::new("")),
                ("OCM_LAB_HELM", std::ffi::OsStr::new("")),
            ],
        );
        return;
    };
    let dir = std::path::PathBuf::from(root);
    let unpacked = dir.join("cache/tools/bundle/0123456789abcdef");
    std::fs::create_dir_all(&unpacked).unwrap();
    executable(&unpacked.join("kind"), KIND);
    executable(&unpacked.join("helm"), "#!/bin/sh\nprintf 'v3.99.7'\n");
    let lab = ocm_lab::topology::load_arg(&crate::common::host(), Some("minimal"))
        .unwrap()
        .lab;
    let mut args = RunArgs {
        lab: LabArgs {
            topology: Some("minimal".into()),
            workflows: None,
            chart_patches: None,
            node_image: None,
        },
        simulate: false,
        no_download: true,
        concurrency: 4,
        timing: false,
        junit: None,
        checks: Vec::new(),
        consumer_image: None,
        bundled_tools: Vec::new(),
        image_aliases: Default::default(),
        bundle: None,
        verify_timeout: None,
    };
    let rt = runner::runtime().unwrap();
    let state = ocm_lab::state::StateDir::for_run(&lab.name, false).unwrap();
    let purpose = Purpose::Run(Workflow::Up);

    let without = runner::open_backends(&rt, &args, &state, purpose, &lab).unwrap();
    assert!(
        without.tool_versions().is_empty(),
        "{:?}",
        without.tool_versions()
    );

    args.bundled_tools = vec![
        (ToolName::Kind, unpacked.join("kind")),
        (ToolName::Helm, unpacked.join("helm")),
    ];
    let with = runner::open_backends(&rt, &args, &state, purpose, &lab).unwrap();
    let versions: Vec<(&str, &str)> = with
        .tool_versions()
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(versions, [("helm", "3.99.7"), ("kind", "0.32.0")]);
}

/// A bundle made on another kind of machine: its kind is a program this one cannot run (an ELF for the
/// other CPU), so it is left out and kind is found as without a bundle; its helm (a script here) is used.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn a_bundled_tool_built_for_another_machine_is_not_used() {
    let d = crate::docker::engine().await;
    let here = tools::Platform::current().expect("a platform with pinned downloads");
    // A 64-bit little-endian ELF header for the CPU this machine is not (EM_AARCH64 183, EM_X86_64 62).
    let machine: u16 = if here.arch == "amd64" { 183 } else { 62 };
    let mut foreign = b"\x7fELF\x02\x01\x01".to_vec();
    foreign.resize(18, 0);
    foreign.extend_from_slice(&machine.to_le_bytes());
    foreign.resize(64, 0);
    let src = tempfile::tempdir().unwrap();
    let (kind, helm) = (src.path().join("kind"), src.path().join("helm"));
    std::fs::write(&kind, &foreign).unwrap();
    executable(&helm, HELM);
    let tool = |name: &str, version: &str, source: &Path| FileItem {
        name: name.into(),
        kind: KIND_TOOL.into(),
        version: Some(version.into()),
        repo: None,
        path: format!("tools/{name}"),
        source: source.to_owned(),
    };
    let files = vec![tool("kind", "0.32.0", &kind), tool("helm", "3.19.0", &helm)];
    let out = src.path().join("lab-bundle.tar");
    d.save_bundle_with(&[], &files, Default::default(), &out)
        .await
        .unwrap();
    let (read, offsets) = bundle::verify(&out).unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bundled = ocm_lab::commands::bundle::unpack(&out, &read, &offsets, cache.path()).unwrap();
    let names: Vec<ToolName> = bundled.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, [ToolName::Helm], "the foreign kind is left out");
    let unpacked: Vec<PathBuf> = files_under(&cache.path().join("tools/bundle"));
    assert!(
        unpacked.iter().all(|p| !p.ends_with("kind")),
        "nothing of the foreign kind is written: {unpacked:?}"
    );
}

/// `docker load` on an engine with the classic image store keeps no digest: an image the lab pins as
/// `<tag>@sha256:…` is then known by its tag only, and kind would try to pull it. After loading a bundle
/// the lab runs such an image by its tag (and leaves alone what Docker knows as pinned, or not at all).
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_pinned_image_docker_knows_by_its_tag_only_is_run_by_its_tag() {
    let (d, image) = crate::docker::docker_with_test_image().await;
    let zero = "0".repeat(64);
    let pinned = format!("{image}@sha256:{zero}");
    let absent = format!("ocm-lab-no-such/image:v9@sha256:{zero}");
    let aliases =
        ocm_lab::commands::bundle::local_names(&d, &[pinned.clone(), absent, image.clone()])
            .await
            .unwrap();
    assert_eq!(aliases, std::collections::BTreeMap::from([(pinned, image)]));
}

/// The doctor tells a pinned node image Docker knows by its tag only from one it lacks: kind would try
/// to pull the first, which fails offline; after `up --bundle` loaded it, the lab runs it by its tag.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn the_doctor_names_a_node_image_docker_knows_by_its_tag_only() {
    let (d, image) = crate::docker::docker_with_test_image().await;
    let pinned = format!("{image}@sha256:{}", "0".repeat(64));
    let finding = |aliases: std::collections::BTreeMap<String, String>| {
        let (pinned, d) = (pinned.clone(), &d);
        async move { ocm_lab::commands::doctor::node_image_finding(&pinned, d, &aliases).await }
    };
    let tag_only = finding(Default::default()).await;
    assert!(
        tag_only.detail.contains("kind would try to pull it")
            && tag_only
                .fix
                .as_deref()
                .is_some_and(|h| h.contains(&format!("docker pull {pinned}"))),
        "{tag_only:?}"
    );
    let loaded = finding([(pinned.clone(), image.clone())].into()).await;
    assert!(loaded.detail.contains("runs it by its tag"), "{loaded:?}");
    assert!(!ocm_lab::commands::doctor::failed(&[tag_only, loaded]));
}
