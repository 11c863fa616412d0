//! Ownership that survives damage, on the real Docker engine with a stand-in kind: `ocm-lab up` is killed
//! (SIGKILL, from outside) while `kind create` runs, so the ownership record holds intents and no
//! confirmation; or the confirmation is torn, or the record is lost. The lab then proves its clusters
//! from what the engine shows (the control plane publishes the port of the kubeconfig kind wrote into the
//! lab's state folder) and deletes them on `down`; what it cannot prove it leaves alone, naming
//! `kind delete cluster --name X`, never `docker rm -f`.
//!
//! The stand-in kind is a shell script over the `docker` CLI: `create` runs one control-plane container
//! labelled as kind labels it, publishing 6443/tcp on a free host port as kind does, writes the kubeconfig
//! at `--kubeconfig` and then hangs (before or after writing it) until the test kills the run; `delete`
//! removes the containers with the cluster's label. Without Docker (or the `docker` CLI, or
//! busybox-static for the test image) the tests are ignored, with the reason (`lab/build.rs`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ocm_lab::backend::docker::Docker;

use crate::common::{Output, script};
use crate::docker::{Cleanup, docker_with_test_image, exists};

/// When the stand-in kind hangs during `create`.
#[derive(Clone, Copy)]
enum Hang {
    /// After the container runs, before the kubeconfig is written (kind's own order: the kubeconfig comes
    /// once the control plane is up).
    BeforeKubeconfig,
    /// After the kubeconfig is written, before kind exits.
    AfterKubeconfig,
}

struct StandIn {
    dir: tempfile::TempDir,
    topology: PathBuf,
    tag: String,
    hub: String,
    spoke: String,
    network: String,
}

impl StandIn {
    fn new(image: &str) -> Self {
        let tag = format!("dmg{}x{}", std::process::id() % 100_000, nanos() % 100_000);
        let (hub, spoke) = (format!("{tag}-hub"), format!("{tag}-spoke"));
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().display();
        script(
            &dir.path().join("kind"),
            &format!(
                r#"echo "$*" >> {d}/kind.log
case "$1" in
  version) echo 'kind v0.32.0 go1.24.3 linux/amd64' ;;
  get) exit 0 ;;
  create)
    shift 2
    while [ $# -gt 0 ]; do
      case "$1" in --name) name=$2; shift ;; --kubeconfig) kc=$2; shift ;; esac
      shift
    done
    cat > /dev/null
    docker run -d --name "$name-control-plane" --label "io.x-k8s.kind.cluster=$name" \
      --label io.x-k8s.kind.role=control-plane --network "$KIND_EXPERIMENTAL_DOCKER_NETWORK" \
      -p 127.0.0.1::6443 {image} /bin/sleep 600 > /dev/null || exit 1
    port=$(docker port "$name-control-plane" 6443/tcp | head -n 1 | sed 's/.*://')
    if [ "$STAND_IN_HANG" = before ]; then echo $$ > {d}/hanging-$name; exec sleep 600; fi
    printf 'apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://127.0.0.1:%s\n  name: kind-%s\ncontexts:\n- context: {{cluster: kind-%s, user: kind-%s}}\n  name: kind-%s\ncurrent-context: kind-%s\nusers:\n- name: kind-%s\n  user: {{}}\n' "$port" "$name" "$name" "$name" "$name" "$name" "$name" > "$kc"
    if [ "$STAND_IN_HANG" = after ]; then echo $$ > {d}/hanging-$name; exec sleep 600; fi
    ;;
  delete)
    shift 2
    while [ $# -gt 0 ]; do
      case "$1" in --name) name=$2; shift ;; esac
      shift
    done
    ids=$(docker ps -aq --filter "label=io.x-k8s.kind.cluster=$name")
    [ -z "$ids" ] || docker rm -f $ids > /dev/null
    ;;
esac
"#
            ),
        );
        script(&dir.path().join("helm"), "echo v3.19.0\n");
        let topology = dir.path().join("lab.yaml");
        std::fs::write(
            &topology,
            format!(
                "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {{name: {tag}}}\nspec:\n  hub: {{name: {hub}, featureGates: [ClusterProfile]}}\n  spokes: [{{name: {spoke}}}]\n  clusterSets: [{{name: s, clusters: [{spoke}], bindTo: [inventory]}}]\n"
            ),
        )
        .unwrap();
        StandIn {
            network: format!("{tag}-net"),
            dir,
            topology,
            tag,
            hub,
            spoke,
        }
    }

    fn command(&self, verb: &str) -> Command {
        let d = self.dir.path();
        let mut c = Command::new(env!("CARGO_BIN_EXE_ocm-lab"));
        c.args([verb, "-t"])
            .arg(&self.topology)
            .env("OCM_LAB_KIND", d.join("kind"))
            .env("OCM_LAB_HELM", d.join("helm"))
            .env("OCM_LAB_STATE_DIR", d.join("state"))
            .env("OCM_LAB_CACHE_DIR", d.join("cache"))
            .env("HOME", d.join("home"))
            .env("KUBECONFIG", d.join("home/kubeconfig"))
            .env("KIND_EXPERIMENTAL_DOCKER_NETWORK", &self.network)
            .env_remove("RUST_LOG")
            .env_remove("STAND_IN_HANG")
            .env("NO_COLOR", "1");
        if verb == "up" {
            c.arg("--no-download");
        }
        c
    }

    fn run(&self, verb: &str) -> Output {
        let out = self.command(verb).output().expect("ocm-lab runs");
        Output {
            code: out.status.code().expect("not killed by a signal"),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs `up` until the stand-in kind hangs in both creates, then SIGKILLs `ocm-lab` (and the hanging
    /// stand-ins, by the process IDs they wrote: a killed `ocm-lab` leaves its children running).
    fn up_killed_during_create(&self, hang: Hang) {
        let mut up = self
            .command("up")
            .env(
                "STAND_IN_HANG",
                match hang {
                    Hang::BeforeKubeconfig => "before",
                    Hang::AfterKubeconfig => "after",
                },
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pids: Vec<PathBuf> = [&self.hub, &self.spoke]
            .iter()
            .map(|c| self.dir.path().join(format!("hanging-{c}")))
            .collect();
        let start = Instant::now();
        while !pids.iter().all(|p| p.exists()) {
            if let Some(status) = up.try_wait().unwrap() {
                panic!(
                    "up ended ({status}) before both creates hung; kind calls: {}",
                    self.kind_log()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the creates never hung: {}",
                self.kind_log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        up.kill().unwrap(); // SIGKILL
        up.wait().unwrap();
        for p in &pids {
            let pid = std::fs::read_to_string(p).unwrap();
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }

    fn kind_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kind.log")).unwrap_or_default()
    }

    fn owned_log(&self) -> PathBuf {
        self.dir
            .path()
            .join("state")
            .join(&self.tag)
            .join("owned.jsonl")
    }

    fn nodes(&self) -> [String; 2] {
        [
            format!("{}-control-plane", self.hub),
            format!("{}-control-plane", self.spoke),
        ]
    }
}

fn nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

/// Docker, the test image and the `docker` CLI the stand-in kind uses.
async fn setup() -> (Docker, StandIn, Cleanup) {
    let (d, image) = docker_with_test_image().await;
    let cli = Command::new("docker")
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        cli,
        "the `docker` CLI the stand-in kind uses does not work (`docker version` fails)"
    );
    let lab = StandIn::new(&image);
    let mut cleanup = Cleanup::new(&d);
    cleanup.containers.extend(lab.nodes());
    cleanup.networks.push(lab.network.clone());
    (d, lab, cleanup)
}

/// The clusters' finding of `doctor`, which refuses look-alikes the lab cannot prove its own.
fn refuses(doctor: &Output, node: &str) -> bool {
    doctor.stdout.contains(&format!("{node} (labelled"))
        && doctor.stdout.contains("did not create them")
}

async fn assert_down_deletes_both_and_then_the_record(d: &Docker, lab: &StandIn, what: &str) {
    let doctor = lab.run("doctor");
    for node in lab.nodes() {
        assert!(
            !refuses(&doctor, &node),
            "{what}: doctor refuses {node}: {doctor:?}"
        );
    }
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{what}: {down:?}");
    for node in lab.nodes() {
        assert!(
            !exists(d, &node).await,
            "{what}: down left {node}: {down:?}"
        );
    }
    assert!(
        !lab.owned_log().exists(),
        "{what}: the record stays though nothing it proves is left: {}",
        std::fs::read_to_string(lab.owned_log()).unwrap_or_default()
    );
    assert!(
        !down.stderr.contains("docker rm -f") && !down.stdout.contains("docker rm -f"),
        "{down:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker_cli,
    ignore = "needs a Docker engine, busybox-static and the docker CLI, missing when the tests were built"
)]
async fn a_run_killed_during_kind_create_after_the_kubeconfig_proves_its_clusters_and_down_deletes_them()
 {
    let (d, lab, _cleanup) = setup().await;
    lab.up_killed_during_create(Hang::AfterKubeconfig);
    let record = std::fs::read_to_string(lab.owned_log()).unwrap();
    assert!(
        record.contains("intend-cluster") && !record.contains("confirm-cluster"),
        "killed before any confirmation: {record}"
    );
    for node in lab.nodes() {
        assert!(exists(&d, &node).await, "{node} was made");
    }
    assert_down_deletes_both_and_then_the_record(&d, &lab, "killed create").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker_cli,
    ignore = "needs a Docker engine, busybox-static and the docker CLI, missing when the tests were built"
)]
async fn a_torn_confirmation_costs_no_cluster() {
    let (d, lab, _cleanup) = setup().await;
    lab.up_killed_during_create(Hang::AfterKubeconfig);
    // The run got as far as confirming the hub, and was killed in the middle of that line.
    let mut record = std::fs::read_to_string(lab.owned_log()).unwrap();
    record.push_str(&format!(
        "{{\"op\":\"confirm-cluster\",\"name\":\"{}\",\"contai",
        lab.hub
    ));
    std::fs::write(lab.owned_log(), record).unwrap();
    assert_down_deletes_both_and_then_the_record(&d, &lab, "torn confirmation").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker_cli,
    ignore = "needs a Docker engine, busybox-static and the docker CLI, missing when the tests were built"
)]
async fn a_lost_ownership_record_costs_no_cluster() {
    let (d, lab, _cleanup) = setup().await;
    lab.up_killed_during_create(Hang::AfterKubeconfig);
    std::fs::remove_file(lab.owned_log()).unwrap();
    assert_down_deletes_both_and_then_the_record(&d, &lab, "lost record").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker_cli,
    ignore = "needs a Docker engine, busybox-static and the docker CLI, missing when the tests were built"
)]
async fn a_create_killed_before_its_kubeconfig_is_refused_naming_kind_delete_and_kept_on_record() {
    let (d, lab, _cleanup) = setup().await;
    lab.up_killed_during_create(Hang::BeforeKubeconfig);
    let [hub_node, _] = lab.nodes();
    // Nothing the engine shows proves these the lab's: doctor refuses them and names kind's own delete.
    let doctor = lab.run("doctor");
    assert!(refuses(&doctor, &hub_node), "{doctor:?}");
    let fix = format!("kind delete cluster --name {}", lab.hub);
    assert!(doctor.stdout.contains(&fix), "{doctor:?}");
    assert!(!doctor.stdout.contains("docker rm -f"), "{doctor:?}");
    // down leaves them, says what deletes them, and keeps the intents (so the record).
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(down.stderr.contains(&fix), "{down:?}");
    for node in lab.nodes() {
        assert!(exists(&d, &node).await, "down removed unproven {node}");
    }
    assert!(lab.owned_log().exists(), "the intents are kept");
    // The command it names works; the next down then finds nothing and forgets the record.
    for c in [&lab.hub, &lab.spoke] {
        let kind = lab.dir.path().join("kind");
        let status = Command::new(&kind)
            .args(["delete", "cluster", "--name", c])
            .status()
            .unwrap();
        assert!(status.success());
    }
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(!lab.owned_log().exists(), "{down:?}");
}
