//! The CLI end to end on the simulated lab: every command a user runs, as the user runs it.

use serde_json::Value;

use crate::common::Cli;

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn up_simulate_passes_on_every_shipped_topology_and_reports_each_spokes_properties() {
    for (name, _) in ocm_lab::embedded::TOPOLOGIES {
        let cli = Cli::new();
        let r = cli.run(&["up", "--simulate", "-t", name]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        assert!(
            r.stderr.contains("SIMULATED lab"),
            "{name}: the output must say it is a simulation: {}",
            r.stderr
        );
        let lab = crate::common::lab(name);
        for spoke in &lab.spokes {
            for ns in &lab.verify.namespaces {
                let member = lab.bindings.iter().any(|b| {
                    &b.namespace == ns
                        && lab.cluster_sets.iter().any(|s| {
                            s.name == b.cluster_set && s.members.contains(&spoke.cluster.name)
                        })
                });
                if member {
                    // The verification table's row: properties is its first column.
                    let row = format!("{} ({ns}) ", spoke.cluster.name);
                    assert!(
                        r.stdout
                            .lines()
                            .any(|l| l.starts_with(&row)
                                && l[row.len()..].trim_start().starts_with('✓')),
                        "{name}: no passing row `{row}` in\n{}",
                        r.stdout
                    );
                }
            }
        }
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn output_json_prints_only_valid_json_lines() {
    let cli = Cli::new();
    let r = cli.run(&["up", "--simulate", "-t", "minimal", "--output", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let events: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(events.first().unwrap()["event"], "run-started");
    assert_eq!(events.first().unwrap()["simulated"], true);
    let last = events.last().unwrap();
    assert_eq!(
        (last["event"].as_str(), last["ok"].as_bool()),
        (Some("run-finished"), Some(true))
    );
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "result" && e["check"] == "properties" && e["status"] == "pass")
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn successive_commands_see_the_same_simulated_lab() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    let r = cli.run(&["status", "--simulate", "--output", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(s["simulated"], true);
    assert!(
        s["managedClusters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["joined"] == true && m["available"] == true),
        "{s:#}"
    );
    assert_eq!(s["lastVerification"]["ok"], true);
    let r = cli.run(&["verify", "--simulate", "--checks", "properties,conditions"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("cluster1 (cluster-inventory)"),
        "{}",
        r.stdout
    );
}

#[test]
fn status_and_verify_on_a_lab_that_is_not_up_say_so_and_fail() {
    let cli = Cli::new();
    for command in ["status", "verify", "reset"] {
        let r = cli.run(&[command, "--simulate", "-t", "minimal"]);
        assert_eq!(r.code, 1, "{command}: {}", r.stderr);
        assert!(
            r.stderr
                .contains("lab `minimal` is not up: no simulated lab was brought up"),
            "{command}: {}",
            r.stderr
        );
        assert!(
            r.stderr
                .contains("run `ocm-lab up -t minimal --simulate` first"),
            "{command}: {}",
            r.stderr
        );
    }
}

/// The read-only commands look at a lab without making it: on a lab that is not up, they fail and leave no
/// state folder behind.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn read_only_commands_on_a_lab_that_is_not_up_leave_no_state_behind() {
    let cli = Cli::new();
    for args in [
        &["status", "--simulate", "-t", "minimal"][..],
        &[
            "consumer",
            "cluster-inventory",
            "--simulate",
            "-t",
            "minimal",
        ],
        &["dashboard", "--simulate", "-t", "minimal"],
    ] {
        let r = cli.run(args);
        assert_eq!(r.code, 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("is not up"), "{args:?}: {}", r.stderr);
        let left: Vec<_> = std::fs::read_dir(cli.dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn verify_on_a_real_lab_never_created_here_says_what_to_run() {
    let cli = Cli::new();
    // A simulated lab of the same name exists: the message points at `--simulate`.
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    let r = cli.run(&["verify"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("lab `sandbox` is not up: none of its clusters was created on this machine"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("add `--simulate` to use it"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("run `ocm-lab up` first"), "{}", r.stderr);
}

#[test]
fn a_second_run_on_a_busy_lab_is_refused_naming_the_holder() {
    let cli = Cli::new();
    let state = ocm_lab::state::StateDir {
        path: cli.dir.path().join("sandbox/simulated"),
    };
    std::fs::create_dir_all(&state.path).unwrap();
    let _held = state.lock("sandbox", "up").unwrap();
    let r = cli.run(&["down", "--simulate"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("lab `sandbox` is busy") && r.stderr.contains("`ocm-lab up` (pid"),
        "{}",
        r.stderr
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn down_twice_succeeds_and_forgets_the_lab() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate", "-t", "minimal"]).code, 0);
    let r = cli.run(&["down", "--simulate", "-t", "minimal"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // What it removed was simulated, and its first and last lines say so.
    let first = r.stderr.lines().next().unwrap_or_default();
    let last = r.stderr.lines().last().unwrap_or_default();
    assert!(first.contains("on the SIMULATED lab"), "{}", r.stderr);
    assert!(last.ends_with("(SIMULATED lab)"), "{}", r.stderr);
    let r = cli.run(&["down", "--simulate", "-t", "minimal"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The lab is forgotten: its state folder is gone, lock included.
    let left: Vec<String> = std::fs::read_dir(cli.dir.path().join("minimal/simulated"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    assert!(
        !left
            .iter()
            .any(|f| f == "journal.jsonl" || f == "sim-world.json" || f == "owned.jsonl"),
        "{left:?}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn verify_writes_junit_with_a_case_per_spoke_and_check() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    let junit = cli.dir.path().join("verify.xml");
    let r = cli.run(&["verify", "--simulate", "--junit", junit.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let xml = std::fs::read_to_string(&junit).unwrap();
    for case in [
        "cluster1/properties",
        "cluster2/access-providers",
        "cluster1/credentials",
        "cluster2/conditions",
    ] {
        assert!(
            xml.contains(&format!("name=\"{case}\"")),
            "{case} missing: {xml}"
        );
    }
    assert!(xml.contains("failures=\"0\""), "{xml}");
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn diagnose_writes_a_bundle_without_secrets() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    let out = cli.dir.path().join("bundle.tar.gz");
    let r = cli.run(&["diagnose", "--simulate", "--out", out.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Its last words say whose objects the bundle holds.
    assert!(
        r.stdout
            .trim_end()
            .ends_with("of the SIMULATED lab (a test double, not real clusters)"),
        "{}",
        r.stdout
    );
    let mut names = Vec::new();
    let mut all = String::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&out).unwrap(),
    ));
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        names.push(e.path().unwrap().display().to_string());
        std::io::Read::read_to_string(&mut e, &mut all).unwrap();
    }
    for want in [
        "journal.jsonl",
        "topology.yaml",
        "clusters/hub/ManagedCluster.json",
        "clusters/hub/ClusterProfile.json",
        "clusters/cluster1/ClusterProperty.json",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(want)),
            "{want} not in {names:?}"
        );
    }
    // Every token the simulated lab minted, and every synced credential, must be absent.
    let world = cli.world();
    let tokens: Vec<&str> = world
        .match_indices("sim-token-")
        .map(|(i, _)| world[i..].split('"').next().unwrap())
        .collect();
    assert!(!tokens.is_empty(), "the simulated lab minted tokens");
    for t in tokens {
        assert!(!all.contains(t), "token {t} leaked into the bundle");
    }
}
