//! The CLI on `existing:` clusters in the simulated lab (`--simulate`, a test double): an existing
//! cluster is in the simulated world from the first command on, as someone else's; `status` says so;
//! `down` leaves it (and the simulated world that serves it) in place.

use std::path::PathBuf;

use ocm_lab::backend::ObjectRef;
use ocm_lab::state::StateDir;
use ocm_lab_sim::SimLab;
use serde_json::{Value, json};

use crate::common::{Output, ocm_lab_env};
use crate::existing_lifecycle::{Shape, topology};

struct Cli {
    dir: tempfile::TempDir,
    topology: PathBuf,
}

impl Cli {
    fn new(shape: Shape) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let topology = dir.path().join("existing.yaml");
        std::fs::write(&topology, topology_text(shape)).unwrap();
        Cli { dir, topology }
    }

    fn run(&self, args: &[&str]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["-t", self.topology.to_str().unwrap(), "--simulate"]);
        ocm_lab_env(
            &all,
            &[("OCM_LAB_STATE_DIR", &self.dir.path().join("state"))],
        )
    }

    fn world(&self) -> PathBuf {
        StateDir {
            path: self.dir.path().join("state").join("sandbox"),
        }
        .simulated_dir()
        .sim_world()
    }
}

fn topology_text(shape: Shape) -> String {
    topology(shape)
}

fn get(sim: &SimLab, cluster: &str, r: &ObjectRef) -> Option<Value> {
    sim.object(cluster, r)
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn status_says_existing_clusters_are_not_the_labs_and_down_leaves_them_running() {
    let cli = Cli::new(Shape::All);
    // Someone else's namespace on their hub, before the lab ever ran: seeded into the simulated world.
    {
        std::fs::create_dir_all(cli.world().parent().unwrap()).unwrap();
        let sim = SimLab::new();
        sim.with_world(|w| {
            w.add_foreign_cluster("hub");
            w.put_object(
                "hub",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
            )
            .unwrap();
        });
        sim.save(&cli.world()).unwrap();
    }
    let up = cli.run(&["up"]);
    assert_eq!(up.code, 0, "{}", up.stderr);

    let status = cli.run(&["status"]);
    assert_eq!(status.code, 0, "{}\n{}", status.stdout, status.stderr);
    for (c, ctx) in [
        ("hub", "their-hub"),
        ("cluster1", "their-cluster1"),
        ("cluster2", "their-cluster2"),
    ] {
        let line = status
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{c} ")))
            .unwrap_or_else(|| panic!("no line for {c}:\n{}", status.stdout));
        assert!(line.contains("existing"), "{line}");
        assert!(
            line.contains(&format!("not created by this lab (context {ctx})")),
            "{line}"
        );
    }
    let json = cli.run(&["status", "--output", "json"]);
    let s: Value = serde_json::from_str(&json.stdout).unwrap();
    for c in s["clusters"].as_array().unwrap() {
        assert_eq!(c["provider"], "existing", "{c}");
        assert_eq!(c["createdByLab"], false, "{c}");
    }

    for command in ["verify", "reset"] {
        let r = cli.run(&[command]);
        assert_eq!(r.code, 0, "{command}: {}", r.stderr);
    }
    let down = cli.run(&["down"]);
    assert_eq!(down.code, 0, "{}", down.stderr);
    assert!(
        down.stderr.contains(&format!(
            "delete {} to start from an empty simulated world",
            cli.world().display()
        )),
        "{}",
        down.stderr
    );

    // The simulated world still serves the existing clusters, with someone else's namespace, and
    // without what the lab installed.
    assert!(
        cli.world().exists(),
        "down forgot the clusters someone else runs"
    );
    let sim = SimLab::load(&cli.world()).unwrap();
    let names = sim.with_world(|w| w.cluster_names());
    assert_eq!(names, ["cluster1", "cluster2", "hub"]);
    assert!(
        get(
            &sim,
            "hub",
            &ObjectRef::new("v1", "Namespace", None, "team-a")
        )
        .is_some()
    );
    assert!(
        get(
            &sim,
            "hub",
            &ObjectRef::new("v1", "Namespace", None, "open-cluster-management")
        )
        .is_none()
    );
    for c in &names {
        let ours: Vec<String> = sim.with_world(|w| w.releases(c)).into_keys().collect();
        assert!(ours.is_empty(), "{c}: {ours:?}");
    }
    // The lab can come up again on the same clusters.
    let up = cli.run(&["up"]);
    assert_eq!(up.code, 0, "{}", up.stderr);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_simulate_on_a_lab_with_an_existing_hub_starts_from_a_simulated_cluster_someone_else_runs() {
    let cli = Cli::new(Shape::Hub);
    let up = cli.run(&["up"]);
    assert_eq!(up.code, 0, "{}", up.stderr);
    let down = cli.run(&["down"]);
    assert_eq!(down.code, 0, "{}", down.stderr);
    let sim = SimLab::load(&cli.world()).unwrap();
    assert_eq!(sim.with_world(|w| w.cluster_names()), ["hub"]);
}
