//! Damaged state files: each is damaged on purpose, the command the message suggests is run as the
//! message says, and the lab must be usable again (`up --simulate`, then `verify --simulate`, pass).

use serde_json::Value;

use crate::resume::{Ended, Sandbox};

/// The `ocm-lab …` commands a message quotes in backticks, in order, each once (the step's line and the
/// final error both carry the help).
fn suggested_commands(text: &str) -> Vec<Vec<String>> {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut commands: Vec<Vec<String>> = Vec::new();
    for c in flat.split('`').skip(1).step_by(2) {
        let c: Vec<String> = c.split(' ').map(str::to_owned).collect();
        if c[0] == "ocm-lab" && !commands.contains(&c[1..].to_vec()) {
            commands.push(c[1..].to_vec());
        }
    }
    commands
}

fn usable(s: &Sandbox, topology: &[&str]) {
    for verb in ["up", "verify"] {
        let mut args = vec![verb, "--simulate"];
        args.extend_from_slice(topology);
        s.ok(&args);
    }
}

fn run_all(s: &Sandbox, commands: &[Vec<String>]) {
    for c in commands {
        let args: Vec<&str> = c.iter().map(String::as_str).collect();
        s.ok(&args);
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_damaged_simulated_world_names_down_then_up_and_those_commands_recover() {
    let s = Sandbox::new();
    let topology = s.topology(ocm_lab::embedded::topology("minimal").unwrap());
    let t = topology.to_str().unwrap();
    s.ok(&["up", "--simulate", "-t", t]);
    let world = s.dir.path().join("minimal/simulated/sim-world.json");
    std::fs::write(&world, b"{\"networks\": {\"kind\": \xff").unwrap();

    let r = s.run(&["up", "--simulate", "-t", t]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("sim-world.json"), "{}", r.stderr);
    assert!(!r.stderr.contains("docker ps"), "{}", r.stderr);
    let commands = suggested_commands(&r.stderr);
    assert_eq!(
        commands,
        [
            vec!["down", "-t", t, "--simulate"],
            vec!["up", "-t", t, "--simulate"]
        ],
        "{}",
        r.stderr
    );
    run_all(&s, &commands);
    usable(&s, &["-t", t]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_simulated_cluster_that_is_gone_points_at_down_and_up_not_docker() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    let path = s.state().join("sim-world.json");
    let mut world: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    world["containers"]["hub-control-plane"]["running"] = Value::Bool(false);
    std::fs::write(&path, serde_json::to_vec(&world).unwrap()).unwrap();

    let r = s.run(&["verify", "--simulate"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("connection refused")
            && r.stderr
                .contains("rebuild the simulated lab with `ocm-lab down --simulate`"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("docker start"), "{}", r.stderr);
    assert!(!r.stderr.contains("docker ps"), "{}", r.stderr);
    // Observed, not waited out: the stopped node container makes the failure permanent at once.
    assert!(
        r.stderr
            .contains("node container `hub-control-plane` is stopped, as Docker reports"),
        "{}",
        r.stderr
    );
    let commands = suggested_commands(&r.stderr);
    assert_eq!(
        commands,
        [vec!["down", "--simulate"], vec!["up", "--simulate"]],
        "{}",
        r.stderr
    );
    run_all(&s, &commands);
    usable(&s, &[]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_journal_that_cannot_be_read_is_moved_aside_and_the_run_starts_a_new_one() {
    let s = Sandbox::new();
    s.killed_after(&["up", "--simulate"], 10);
    let journal = s.state().join("journal.jsonl");
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes.splice(20..20, *b"\xff\xfe not json \n");
    std::fs::write(&journal, &bytes).unwrap();

    let r = s.run(&["up", "--simulate", "--output", "json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("is damaged") && r.stderr.contains("journal.jsonl.damaged"),
        "one warning says what happened: {}",
        r.stderr
    );
    let journal_text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        journal_text.starts_with("{\"type\":\"run-started\""),
        "the run wrote a new journal: {journal_text}"
    );
    assert_eq!(
        std::fs::read(s.state().join("journal.jsonl.damaged")).unwrap(),
        bytes,
        "the damaged journal is kept for a post-mortem"
    );
    usable(&s, &[]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_torn_journal_line_is_dropped_and_never_glued_to_the_next_entry() {
    let s = Sandbox::new();
    s.killed_after(&["up", "--simulate"], 10);
    let journal = s.state().join("journal.jsonl");
    let kept = std::fs::read_to_string(&journal).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&journal)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"type\":\"step-done\",\"run\":\"x").unwrap();
    drop(f);

    let r: Ended = s.run(&["up", "--simulate", "--output", "json"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stderr.contains("torn line"), "{}", r.stderr);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.starts_with(&kept) && text[kept.len()..].starts_with("{\"type\":\"run-started\""),
        "the lines before the torn one are kept, and the next run's start on a line of their own:\n{text}"
    );
    for line in text.lines() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("journal line is not JSON ({e}): {line}"));
    }
    usable(&s, &[]);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_garbage_lock_file_is_ignored_and_replaced() {
    let s = Sandbox::new();
    s.ok(&["up", "--simulate"]);
    let lock = s.state().join("lock");
    std::fs::write(&lock, b"\xff\x00 pid 999999 holds this \xfe").unwrap();
    usable(&s, &[]);
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(text.contains("`ocm-lab verify`"), "{text}");
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_garbage_last_verification_is_named_by_status_and_the_verify_it_suggests_replaces_it() {
    let s = Sandbox::new();
    let topology = s.topology(ocm_lab::embedded::topology("minimal").unwrap());
    let t = topology.to_str().unwrap();
    s.ok(&["up", "--simulate", "-t", t]);
    let last = s
        .dir
        .path()
        .join("minimal/simulated/last-verification.json");
    std::fs::write(&last, b"{\"checks\": [\xff").unwrap();

    let r = s.run(&["status", "--simulate", "-t", t]);
    assert!(
        r.stdout.contains("UNREADABLE") && r.stdout.contains("last-verification.json"),
        "{}{}",
        r.stdout,
        r.stderr
    );
    let commands = suggested_commands(&r.stdout);
    assert_eq!(commands.len(), 1, "{}", r.stdout);
    assert_eq!(commands[0][0], "verify", "{}", r.stdout);
    run_all(&s, &commands);
    let after = s.run(&["status", "--simulate", "-t", t]);
    assert!(!after.stdout.contains("UNREADABLE"), "{}", after.stdout);
    assert!(
        serde_json::from_slice::<Value>(&std::fs::read(&last).unwrap()).is_ok(),
        "verify wrote a readable report"
    );
    usable(&s, &["-t", t]);
}
