//! The Docker backend against the real Docker engine of this machine.
//!
//! A test that needs the engine carries `#[cfg_attr(ocm_lab_tests_no_docker, ignore = "...")]` (or
//! `ocm_lab_tests_no_test_image` when it runs containers): without a reachable daemon, `lab/build.rs` sets
//! that cfg and `cargo test` lists the test as ignored, with the reason; with `OCM_LAB_REQUIRE_DOCKER=1`
//! (set by `.ci/run`) it runs, and fails on what is missing. Nothing is pulled (the engine may have no
//! registry): the one image the tests run is imported from Debian's statically linked busybox (package
//! `busybox-static`) under a tag of this process's own, and removed when the test binary exits.
//!
//! Every test names what it creates `ocm-lab-test-<what>-<pid>-<n>`, so parallel tests and parallel runs
//! never collide, and registers it with a [`Cleanup`] guard before creating it, so it is removed even when
//! an assertion fails.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, InspectContainerOptions,
    ListContainersOptionsBuilder, ListNetworksOptions, RemoveContainerOptionsBuilder,
    RemoveImageOptionsBuilder, StartContainerOptions,
};
use futures::StreamExt;
use ocm_lab::backend::docker::{CLUSTER_LABEL, Docker, ROLE_LABEL, SYSCTL_CONTAINER_PREFIX};
use ocm_lab::backend::{ContainerRuntime, Transience};

/// The machine's Docker engine. Only tests marked for `ocm_lab_tests_no_docker` call this: it fails when
/// the engine does not answer.
pub(crate) async fn engine() -> Docker {
    match Docker::connect().await {
        Ok(d) => d,
        Err(e) => panic!(
            "Docker is not reachable: {e}\n{}\n(start Docker; or, to have the Docker tests ignored, rebuild \
             them without OCM_LAB_REQUIRE_DOCKER=1: touch lab/build.rs)",
            e.help().as_deref().unwrap_or_default()
        ),
    }
}

/// A name no other test, and no other run on this machine, uses.
pub(crate) fn unique(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "ocm-lab-test-{what}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// The Docker engine and the test image: what a test that runs containers starts with (marked for
/// `ocm_lab_tests_no_test_image`).
pub(crate) async fn docker_with_test_image() -> (Docker, String) {
    let d = engine().await;
    let image = test_image(&d).await;
    (d, image)
}

/// The test image, imported on first use in this process under a tag of its own (so that one run
/// removing its image never takes another's), and removed when the test binary exits, however its tests
/// ended.
pub(crate) async fn test_image(d: &Docker) -> String {
    static IMAGE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    IMAGE.get_or_init(|| make_test_image(d)).await.clone()
}

/// `ocm-lab-test/busybox:<pid>`.
fn test_image_name() -> String {
    format!("ocm-lab-test/busybox:{}", std::process::id())
}

/// Removes this process's test image; registered with `atexit` once the image exists. libtest ends the
/// process through `exit` whether its tests passed or failed (`std::process::exit` runs the `atexit`
/// handlers), after every test thread has finished and dropped its [`Cleanup`] guards, so no container of
/// the image is left to hold it.
extern "C" fn remove_test_image() {
    let name = test_image_name();
    let left = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let d = Docker::connect().await.map_err(|e| e.to_string())?;
            let opts = RemoveImageOptionsBuilder::default().build();
            d.client()
                .remove_image(&name, Some(opts), None)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
    })
    .join()
    .unwrap_or_else(|_| Err("the removal panicked".to_owned()));
    if let Err(e) = left {
        let name = test_image_name();
        eprintln!("the test image {name} is left in Docker ({e}): docker rmi {name}");
    }
}

async fn make_test_image(d: &Docker) -> String {
    let name = test_image_name();
    let busybox = static_busybox().expect(
        "no statically linked busybox at /bin/busybox or /usr/bin/busybox: install busybox-static \
         (apt-get install busybox-static)",
    );
    // `docker import` of a root file system holding busybox, with the two applets the tests call.
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    tar.append_data(&mut dir, "bin/", std::io::empty())
        .expect("tar dir");
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o755);
    file.set_size(busybox.len() as u64);
    tar.append_data(&mut file, "bin/busybox", busybox.as_slice())
        .expect("tar busybox");
    for applet in ["sh", "sleep"] {
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_mode(0o777);
        link.set_size(0);
        tar.append_link(&mut link, format!("bin/{applet}"), "busybox")
            .expect("tar symlink");
    }
    let bytes = tar.into_inner().expect("tar");
    let (repo, tag) = name.split_once(':').expect("image has a tag");
    // Registered before the import: a failed or half-done import leaves nothing either.
    // SAFETY: `atexit` with a handler that is `extern "C"`, takes nothing and does not unwind.
    assert_eq!(unsafe { libc::atexit(remove_test_image) }, 0, "atexit");
    let mut progress = d.client().create_image(
        Some(
            CreateImageOptionsBuilder::default()
                .from_src("-")
                .repo(repo)
                .tag(tag)
                .build(),
        ),
        Some(bollard::body_full(bytes.into())),
        None,
    );
    while let Some(p) = progress.next().await {
        if let Err(e) = p {
            panic!("docker import of {name} failed: {e}");
        }
    }
    d.client()
        .inspect_image(&name)
        .await
        .unwrap_or_else(|e| panic!("{name} missing after import: {e}"));
    name
}

/// Debian's busybox binary, if it is the static one (the dynamic one cannot run in an empty image).
fn static_busybox() -> Option<Vec<u8>> {
    ["/bin/busybox", "/usr/bin/busybox"]
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .find(|b| is_static_elf64(b))
}

/// An ELF64 little-endian executable without a PT_INTERP program header (no dynamic loader).
fn is_static_elf64(b: &[u8]) -> bool {
    let u16_at = |o: usize| {
        b.get(o..o + 2)
            .map(|s| u16::from_le_bytes([s[0], s[1]]) as usize)
    };
    let u64_at = |o: usize| {
        b.get(o..o + 8)
            .and_then(|s| <[u8; 8]>::try_from(s).ok())
            .map(|a| u64::from_le_bytes(a) as usize)
    };
    if b.get(0..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        b.get(at..at + 4) != Some(&3u32.to_le_bytes()[..])
    })
}

/// Removes the containers, networks and image tags a test registered, when the test ends however it ends.
pub(crate) struct Cleanup {
    host: String,
    pub(crate) containers: Vec<String>,
    pub(crate) networks: Vec<String>,
    /// Image references (tags) the test made: untagged, or removed when nothing else names the image.
    pub(crate) images: Vec<String>,
}

impl Cleanup {
    pub(crate) fn new(d: &Docker) -> Self {
        Cleanup {
            host: d.host().to_owned(),
            containers: Vec::new(),
            networks: Vec::new(),
            images: Vec::new(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let host = self.host.clone();
        let containers = std::mem::take(&mut self.containers);
        let networks: HashSet<String> = std::mem::take(&mut self.networks).into_iter().collect();
        let images = std::mem::take(&mut self.images);
        // Its own thread and runtime: after a failed assertion the test's runtime is unwinding, and a task
        // spawned on it would never run. Joining makes the test end only once its objects are gone.
        let done = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("cleanup runtime");
            rt.block_on(async move {
                let client = match bollard::Docker::connect_with_host(&host) {
                    Ok(c) => c,
                    Err(e) => return eprintln!("cleanup: cannot reach Docker at {host}: {e}"),
                };
                for c in containers {
                    let opts = RemoveContainerOptionsBuilder::default()
                        .force(true)
                        .v(true)
                        .build();
                    match client.remove_container(&c, Some(opts)).await {
                        Ok(()) => {}
                        Err(bollard::errors::Error::DockerResponseServerError {
                            status_code: 404,
                            ..
                        }) => {}
                        Err(e) => eprintln!("cleanup: container {c}: {e}"),
                    }
                }
                // By id: an old daemon may hold two networks of one name, which a name cannot remove.
                let all = client
                    .list_networks(None::<ListNetworksOptions>)
                    .await
                    .unwrap_or_default();
                for n in all {
                    if n.name.as_ref().is_some_and(|name| networks.contains(name))
                        && let Some(id) = n.id
                        && let Err(e) = client.remove_network(&id).await
                    {
                        eprintln!("cleanup: network {id}: {e}");
                    }
                }
                for i in images {
                    match client
                        .remove_image(
                            &i,
                            None::<bollard::query_parameters::RemoveImageOptions>,
                            None,
                        )
                        .await
                    {
                        Ok(_)
                        | Err(bollard::errors::Error::DockerResponseServerError {
                            status_code: 404,
                            ..
                        }) => {}
                        Err(e) => eprintln!("cleanup: image {i}: {e}"),
                    }
                }
            });
        })
        .join();
        if done.is_err() {
            eprintln!("cleanup thread panicked");
        }
    }
}

/// Creates (and, if `start`, starts) a `sleep 300` container of the test image, registered for cleanup.
pub(crate) async fn sleeper(
    d: &Docker,
    cleanup: &mut Cleanup,
    image: &str,
    labels: &[(&str, &str)],
    network: Option<&str>,
    start: bool,
) -> String {
    let name = unique("ctr");
    cleanup.containers.push(name.clone());
    let body = ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(vec!["/bin/sleep".into(), "300".into()]),
        labels: Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        host_config: Some(HostConfig {
            network_mode: network.map(str::to_owned),
            ..Default::default()
        }),
        ..Default::default()
    };
    d.client()
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&name).build()),
            body,
        )
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    if start {
        d.client()
            .start_container(&name, None::<StartContainerOptions>)
            .await
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
    }
    name
}

pub(crate) async fn exists(d: &Docker, container: &str) -> bool {
    match d
        .client()
        .inspect_container(container, None::<InspectContainerOptions>)
        .await
    {
        Ok(_) => true,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => false,
        Err(e) => panic!("inspect {container}: {e}"),
    }
}

async fn networks_named(d: &Docker, name: &str) -> Vec<bollard::models::Network> {
    d.client()
        .list_networks(None::<ListNetworksOptions>)
        .await
        .expect("list networks")
        .into_iter()
        .filter(|n| n.name.as_deref() == Some(name))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn ensure_network_is_idempotent_and_exactly_one_racer_creates() {
    let d = engine().await;
    let mut cleanup = Cleanup::new(&d);

    let name = unique("net");
    cleanup.networks.push(name.clone());
    assert!(d.ensure_network(&name).await.expect("first ensure"));
    assert!(!d.ensure_network(&name).await.expect("second ensure"));
    let nets = networks_named(&d, &name).await;
    assert_eq!(nets.len(), 1);
    assert_eq!(nets[0].driver.as_deref(), Some("bridge"));
    // Made as kind makes it (see preflight.rs for the details): masquerading on, no labels.
    assert_eq!(
        nets[0]
            .options
            .as_ref()
            .and_then(|o| o.get("com.docker.network.bridge.enable_ip_masquerade"))
            .map(String::as_str),
        Some("true")
    );

    // Several rounds, each with two separate connections as two processes would have: a lost race
    // does not show every time.
    for round in 0..5 {
        let name = unique("race");
        cleanup.networks.push(name.clone());
        let a = Docker::connect_to(d.host()).await.expect("connection a");
        let b = Docker::connect_to(d.host()).await.expect("connection b");
        let (na, nb) = (name.clone(), name.clone());
        let ta = tokio::spawn(async move { a.ensure_network(&na).await });
        let tb = tokio::spawn(async move { b.ensure_network(&nb).await });
        let ra = ta.await.expect("task a").expect("ensure a");
        let rb = tb.await.expect("task b").expect("ensure b");
        assert!(
            ra ^ rb,
            "round {round}: exactly one racer must create {name}: {ra} {rb}"
        );
        assert_eq!(
            networks_named(&d, &name).await.len(),
            1,
            "round {round}: one network named {name}"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn node_containers_reports_roles_state_and_addresses_on_the_network() {
    let (d, image) = docker_with_test_image().await;
    let mut cleanup = Cleanup::new(&d);
    let net = unique("kindnet");
    cleanup.networks.push(net.clone());
    assert!(d.ensure_network(&net).await.expect("test network"));

    let cluster = unique("cluster");
    let node = |role| [(CLUSTER_LABEL, cluster.as_str()), (ROLE_LABEL, role)];
    let cp = sleeper(
        &d,
        &mut cleanup,
        &image,
        &node("control-plane"),
        Some(&net),
        true,
    )
    .await;
    let worker = sleeper(&d, &mut cleanup, &image, &node("worker"), Some(&net), true).await;
    let stopped = sleeper(&d, &mut cleanup, &image, &node("worker"), Some(&net), false).await;

    let nodes = d
        .clone()
        .with_network(net.clone())
        .node_containers(&cluster)
        .await
        .expect("node_containers");
    let by_name: HashMap<&str, _> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    assert_eq!(nodes.len(), 3, "{nodes:#?}");
    let (c, w, s) = (
        &by_name[cp.as_str()],
        &by_name[worker.as_str()],
        &by_name[stopped.as_str()],
    );
    assert_eq!((c.role.as_str(), c.running), ("control-plane", true));
    assert_eq!((w.role.as_str(), w.running), ("worker", true));
    assert_eq!((s.role.as_str(), s.running), ("worker", false));
    let ip = |n: &ocm_lab::backend::NodeContainer| -> Ipv4Addr {
        n.ip.as_deref()
            .unwrap_or_else(|| panic!("{} has no address on {net}", n.name))
            .parse()
            .expect("an IPv4 address")
    };
    assert_ne!(ip(c), ip(w));
    assert_eq!(
        s.ip, None,
        "a created, never started container has no address"
    );
    assert!(!c.id.is_empty() && c.id != c.name);

    // The same containers seen through the default network (`kind`): they are not on it.
    if d.network() != net {
        let on_default = d.node_containers(&cluster).await.expect("node_containers");
        assert_eq!(on_default.len(), 3);
        assert!(on_default.iter().all(|n| n.ip.is_none()), "{on_default:#?}");
    }
    assert!(
        d.node_containers(&unique("nobody"))
            .await
            .expect("node_containers")
            .is_empty()
    );
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn remove_cluster_containers_removes_exactly_the_clusters_containers() {
    let (d, image) = docker_with_test_image().await;
    let mut cleanup = Cleanup::new(&d);
    let a = unique("owned");
    let b = unique("foreign");
    let a_prefixed = format!("{a}-2");
    let label = |cluster: &str, role: &str| {
        [
            (CLUSTER_LABEL, cluster.to_owned()),
            (ROLE_LABEL, role.to_owned()),
        ]
    };
    let mut owned = Vec::new();
    for (role, start) in [("control-plane", true), ("worker", true), ("worker", false)] {
        let l = label(&a, role);
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        owned.push(sleeper(&d, &mut cleanup, &image, &l, None, start).await);
    }
    let mut survivors = Vec::new();
    for cluster in [&b, &a_prefixed] {
        let l = label(cluster, "control-plane");
        let l: Vec<(&str, &str)> = l.iter().map(|(k, v)| (*k, v.as_str())).collect();
        survivors.push(sleeper(&d, &mut cleanup, &image, &l, None, true).await);
    }
    survivors.push(sleeper(&d, &mut cleanup, &image, &[], None, true).await);

    let removed = d.remove_cluster_containers(&a).await.expect("remove");
    let mut gone = Vec::new();
    for c in &owned {
        gone.push(!exists(&d, c).await);
    }
    let mut kept = Vec::new();
    for c in &survivors {
        kept.push(exists(&d, c).await);
    }
    assert_eq!(removed, 3);
    assert_eq!(gone, [true; 3], "cluster {a}'s containers are gone");
    assert_eq!(
        kept, [true; 3],
        "the foreign cluster's, the look-alike's and the unlabelled container survive"
    );
    assert_eq!(d.remove_cluster_containers(&a).await.expect("again"), 0);
    assert!(d.node_containers(&a).await.expect("nodes").is_empty());
    assert_eq!(d.node_containers(&b).await.expect("nodes").len(), 1);
    assert!(d.remove_cluster_containers("").await.is_err());
}

#[tokio::test]
async fn connecting_to_a_missing_socket_says_to_start_docker() {
    let e = Docker::connect_to("unix:///nonexistent.sock")
        .await
        .expect_err("no daemon there");
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(
        e.to_string().contains("/nonexistent.sock"),
        "{}",
        e.to_string()
    );
    assert!(e.to_string().contains("start Docker"), "{}", e.to_string());
    assert!(
        e.help()
            .as_deref()
            .unwrap_or_default()
            .contains("DOCKER_HOST"),
        "{e:?}"
    );
}

#[tokio::test]
async fn connecting_to_a_stale_socket_or_closed_port_says_to_start_docker() {
    // A socket file nobody listens on, as a crashed daemon leaves behind.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("docker.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).expect("bind"));
    let host = format!("unix://{}", path.display());
    for host in [host.as_str(), "tcp://127.0.0.1:1"] {
        let e = Docker::connect_to(host).await.expect_err("no daemon there");
        assert_eq!(e.transience(), Transience::Permanent, "{host}");
        assert!(e.to_string().contains(host), "{}", e.to_string());
        assert!(e.to_string().contains("start Docker"), "{}", e.to_string());
    }
}

#[tokio::test]
async fn unsupported_docker_hosts_say_which_forms_work() {
    for host in ["ssh://me@example.invalid", "/var/run/docker.sock"] {
        let e = Docker::connect_to(host).await.expect_err("unsupported");
        assert_eq!(e.transience(), Transience::Permanent);
        assert!(e.to_string().contains(host), "{}", e.to_string());
        assert!(
            e.help().as_deref().unwrap_or_default().contains("unix://"),
            "{e:?}"
        );
    }
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn read_sysctl_via_container_reads_inotify_limits_and_leaves_nothing() {
    let (d, image) = docker_with_test_image().await;
    let keys = [
        "fs.inotify.max_user_watches",
        "fs/inotify/max_user_instances",
        "fs.inotify.no_such_setting",
    ];
    let got = d
        .read_sysctl_via_container(&image, &keys)
        .await
        .expect("read sysctls");
    let leftovers = leftover_sysctl_containers(&d).await;

    assert_eq!(got.len(), 2, "the missing key is left out: {got:?}");
    assert_eq!(got[0].0, keys[0]);
    assert_eq!(got[1].0, keys[1]);
    let watches: u64 = got[0].1.parse().expect("a number");
    let instances: u64 = got[1].1.parse().expect("a number");
    assert!(watches > 0 && instances > 0);
    let info = d.info().await.expect("info");
    if !info.remote && !info.docker_desktop {
        // The daemon shares this machine's kernel: the container must see the same limits.
        let host =
            std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches").expect("host sysctl");
        assert_eq!(host.trim(), got[0].1);
    }
    assert!(
        leftovers.is_empty(),
        "containers left behind: {leftovers:?}"
    );

    let e = d
        .read_sysctl_via_container("ocm-lab-test/not-here:none", &keys)
        .await
        .expect_err("image absent");
    assert_eq!(e.transience(), Transience::Permanent);
    assert!(e.to_string().contains("not present"), "{}", e.to_string());
    assert!(
        d.read_sysctl_via_container(&image, &["fs.inotify;reboot"])
            .await
            .is_err()
    );
    assert!(leftover_sysctl_containers(&d).await.is_empty());

    // A cancelled read (a caller's timeout) leaves nothing either. In this test, not a separate one:
    // tests run in parallel and the leftover check looks at every sysctl container of this process.
    // Cut the read off at different points: before, during and after the container's creation. The
    // guard removes in a spawned task, the second time after a pause (for a create that was still in
    // flight), here 300 ms instead of 2 s; `cleanups_done` waits until both looks have run.
    let quick = d.clone().with_guard_recheck(Duration::from_millis(300));
    for ms in [1, 5, 20, 50, 100] {
        let read = quick.read_sysctl_via_container(&image, &["fs.inotify.max_user_watches"]);
        let _ = tokio::time::timeout(Duration::from_millis(ms), read).await;
    }
    let cut_off = leftover_sysctl_containers(&d).await.len();
    quick.cleanups_done().await;
    // Auto-removal of a container that did start and exit is the daemon's, a moment after it exits.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut left = leftover_sysctl_containers(&d).await;
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = leftover_sysctl_containers(&d).await;
    }
    assert!(
        left.is_empty(),
        "containers left behind by cancelled reads ({cut_off} right after): {left:?}"
    );
}

/// This process's sysctl containers that still exist, running or not.
async fn leftover_sysctl_containers(d: &Docker) -> Vec<String> {
    let prefix = format!("/{SYSCTL_CONTAINER_PREFIX}{}-", std::process::id());
    d.client()
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .expect("list containers")
        .into_iter()
        .flat_map(|c| c.names.unwrap_or_default())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn ping_and_info_describe_the_engine() {
    let d = engine().await;
    let version = d.ping().await.expect("ping");
    let info = d.info().await.expect("info");
    assert_eq!(info.server_version, version);
    assert!(!info.kernel_version.is_empty() && !info.operating_system.is_empty());
    assert_eq!(info.host, d.host());
    assert_eq!(info.remote, !d.host().starts_with("unix://"));
    assert!(!d.api_version().is_empty());
}

/// `ocm-lab down` on the real engine: the lab's own clusters' containers go, a foreign kind cluster's and an
/// unlabelled container stay, and a second `down` succeeds. kind is not installed here, which also proves
/// that `down` cleans up through Docker when kind cannot.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn down_removes_the_owned_clusters_containers_and_leaves_a_foreign_clusters() {
    use std::sync::Arc;

    use ocm_lab::backend::tools::{ToolError, ToolName};
    use ocm_lab::backend::{Backends, HelmError, KindError, Unavailable};
    use ocm_lab::engine::{self, RunOptions};
    use ocm_lab::step::{RunCtx, events::Events};
    use tokio_util::sync::CancellationToken;

    let (d, image) = docker_with_test_image().await;
    let mut cleanup = Cleanup::new(&d);
    let tag = format!("d{}x{}", std::process::id() % 100_000, rand_suffix());
    let (hub, spoke, foreign) = (
        format!("{tag}-hub"),
        format!("{tag}-spoke"),
        format!("{tag}-other"),
    );
    let node = |c: &str| {
        [
            (CLUSTER_LABEL, c.to_owned()),
            (ROLE_LABEL, "control-plane".to_owned()),
        ]
    };
    let mut containers = Vec::new();
    for c in [&hub, &spoke, &foreign] {
        let labels = node(c);
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        containers.push((
            c.clone(),
            sleeper(&d, &mut cleanup, &image, &labels, None, true).await,
        ));
    }
    let unlabelled = sleeper(&d, &mut cleanup, &image, &[], None, true).await;

    let text = format!(
        "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {{name: {tag}}}\nspec:\n  hub: {{name: {hub}, featureGates: [ClusterProfile]}}\n  spokes: [{{name: {spoke}}}]\n  clusterSets: [{{name: s, clusters: [{spoke}], bindTo: [inventory]}}]\n"
    );
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
        .unwrap_or_else(|e| panic!("{}", ocm_lab::render(&e)))
        .lab;
    let dir = tempfile::tempdir().unwrap();
    let state = ocm_lab::state::StateDir {
        path: dir.path().to_owned(),
    };
    // The lab saw its own creates of hub and spoke succeed, with these node containers.
    for (cluster, container) in containers.iter().filter(|(c, _)| *c != foreign) {
        let id = d
            .client()
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .unwrap()
            .id
            .unwrap();
        state.intend_cluster(cluster).unwrap();
        state.confirm_cluster(cluster, &[id]).unwrap();
    }
    let missing = |tool: ToolName| ToolError::NotFound {
        tool,
        install: tool.install_url(),
    };
    let backends = Backends {
        docker: Arc::new(d.clone()),
        kind: Arc::new(Unavailable(KindError::from(missing(ToolName::Kind)))),
        helm: Arc::new(Unavailable(HelmError::from(missing(ToolName::Helm)))),
        kube: Arc::new(ocm_lab::backend::kube::KubeConnector::new()),
        simulated: false,
    };
    let plan = crate::common::plan_workflow(&lab, "down");
    let patches = ocm_lab::patch::PatchSet::embedded().unwrap();

    for round in 1..=2 {
        let (events, _rx) = Events::channel();
        let ctx = Arc::new(RunCtx::new(
            lab.clone(),
            backends.clone(),
            state.clone(),
            patches.clone(),
            events,
            CancellationToken::new(),
        ));
        let r = engine::run(&plan, ctx, &RunOptions::default())
            .await
            .unwrap();
        assert!(r.ok, "down round {round} failed: {:?}", r.failed);
    }
    for (cluster, container) in &containers {
        let alive = exists(&d, container).await;
        assert_eq!(
            alive,
            *cluster == foreign,
            "{cluster}'s container {container} alive={alive}"
        );
    }
    assert!(
        exists(&d, &unlabelled).await,
        "an unlabelled container is never touched"
    );
    assert!(state.owned().unwrap().clusters.is_empty());
}

fn rand_suffix() -> u32 {
    static N: AtomicUsize = AtomicUsize::new(0);
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 1000)
        + N.fetch_add(1, Ordering::Relaxed) as u32
}

/// What a test made in Docker is gone once the test binary exits, also after a failed test: the test reruns
/// itself in a child process of this test binary that imports the test image, starts a container of it and
/// then fails; afterwards neither the container nor the child's test image is left in the engine.
#[tokio::test]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_failed_test_leaves_neither_its_container_nor_the_test_image_in_docker() {
    const CHILD: &str = "OCM_LAB_TEST_FAIL_ON_PURPOSE";
    if let Some(record) = std::env::var_os(CHILD) {
        let (d, image) = docker_with_test_image().await;
        let mut cleanup = Cleanup::new(&d);
        let container = sleeper(&d, &mut cleanup, &image, &[], None, true).await;
        std::fs::write(record, format!("{image}\n{container}\n")).unwrap();
        panic!("failing on purpose with {container} running");
    }
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("made");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "docker::a_failed_test_leaves_neither_its_container_nor_the_test_image_in_docker",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD, &record)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("1 failed"),
        "the child should have failed: {stdout}"
    );
    let made = std::fs::read_to_string(&record).expect("the child made the image and a container");
    let [image, container] = made.lines().collect::<Vec<_>>()[..] else {
        panic!("{made:?}")
    };
    // The child's own image, not this process's.
    assert_ne!(image, test_image_name());
    let d = engine().await;
    assert!(!exists(&d, container).await, "{container} is left");
    assert!(!d.image_present(image).await.unwrap(), "{image} is left");
}
