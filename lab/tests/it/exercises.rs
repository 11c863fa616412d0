//! Every shipped exercise on the SIMULATED lab (a test double, not real clusters): it breaks the default
//! lab so that `verify` names the exercise's hop; the exercise's documented fix, made with the API calls a
//! participant's kubectl makes (apply, delete, merge patch, through the simulated API server, never
//! through `exercise stop`), solves it; and `reset` heals it. Plus the command's errors.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::common::Cli;
use crate::engine::{Harness, failure};
use crate::verify_hops::saved_results;
use ocm_lab::backend::{ClusterApi, ObjectRef};
use ocm_lab::exercise::run::{self as ex_run, Verdict};
use ocm_lab::exercise::{self, Exercise};
use ocm_lab::step::RunCtx;
use ocm_lab::step::events::Events;
use ocm_lab::verify::CheckResult;

fn ctx(h: &Harness) -> RunCtx {
    let (events, _) = Events::channel();
    RunCtx::new(
        h.lab.clone(),
        h.sim.backends(),
        h.state.clone(),
        ocm_lab::patch::PatchSet::embedded().unwrap(),
        events,
        CancellationToken::new(),
    )
}

fn the(name: &str) -> Exercise {
    let all = exercise::load_all(None).unwrap();
    exercise::find(&all, name).unwrap().clone()
}

/// Runs `verify` and judges its saved report for `ex`, as `exercise check` does.
async fn check(h: &Harness, ex: &Exercise) -> Verdict {
    h.run("verify").await;
    let results: Vec<CheckResult> = saved_results(h)
        .into_iter()
        .map(|r| serde_json::from_value(r).unwrap())
        .collect();
    ex_run::judge(ex.hop, &results)
}

const SPOKE: &str = "cluster1";
const NS: &str = "cluster-inventory";

fn r(api: &str, kind: &str, ns: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef::new(api, kind, ns, name)
}

fn gates(gates: &[String]) -> Value {
    Value::Array(
        gates
            .iter()
            .map(|g| json!({"feature": g, "mode": "Enable"}))
            .collect(),
    )
}

/// One API call a participant's kubectl makes: `apply -f`, `delete`, `label`/`patch`/`scale` (a merge
/// patch), `delete -l` (a list, then a delete each).
enum Kubectl {
    Apply(Value),
    Delete(ObjectRef),
    Patch(ObjectRef, Value),
    DeleteLabelled(&'static str, &'static str, String),
}

use Kubectl::{Apply, Delete, DeleteLabelled, Patch};

const HUB_API: &str = "cluster.open-cluster-management.io/v1";
const OPERATOR_API: &str = "operator.open-cluster-management.io/v1";

fn prop(name: &str) -> ObjectRef {
    r("about.k8s.io/v1alpha1", "ClusterProperty", None, name)
}

fn deployment(ns: &str, name: &str) -> ObjectRef {
    r("apps/v1", "Deployment", Some(ns), name)
}

/// The documented fix of each exercise (its `fix:` text): the cluster, and the calls kubectl makes for it.
fn documented_fix(h: &Harness, name: &str) -> (&'static str, Vec<Kubectl>) {
    let gates_of = |list: &[String]| json!({"spec": {"registrationConfiguration": {"featureGates": gates(list)}}});
    match name {
        "binding-deleted" => (
            "hub",
            vec![Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
                "metadata": {"name": "sandbox-fleet", "namespace": NS}, "spec": {"clusterSet": "sandbox-fleet"},
            }))],
        ),
        "cluster-left-set" => (
            "hub",
            vec![Patch(
                r(HUB_API, "ManagedCluster", None, SPOKE),
                json!({"metadata": {"labels": {"cluster.open-cluster-management.io/clusterset": "sandbox-fleet"}}}),
            )],
        ),
        "spoke-gate-off" => (
            SPOKE,
            vec![Patch(
                r(OPERATOR_API, "Klusterlet", None, "klusterlet"),
                gates_of(&h.lab.spoke(SPOKE).unwrap().feature_gates),
            )],
        ),
        "hub-gate-off" => (
            "hub",
            vec![Patch(
                r(OPERATOR_API, "ClusterManager", None, "cluster-manager"),
                gates_of(&h.lab.hub.feature_gates),
            )],
        ),
        "property-deleted" => (
            SPOKE,
            vec![Apply(json!({
                "apiVersion": "about.k8s.io/v1alpha1", "kind": "ClusterProperty",
                "metadata": {"name": "region"}, "spec": {"value": "us-east-1"},
            }))],
        ),
        "spoke-only" => (
            SPOKE,
            vec![Patch(
                prop("region"),
                json!({"metadata": {"labels": {"open-cluster-management.io/spoke-only": null}}}),
            )],
        ),
        "too-many-properties" => (
            SPOKE,
            vec![DeleteLabelled(
                "about.k8s.io/v1alpha1",
                "ClusterProperty",
                format!("{}=too-many-properties", exercise::EXERCISE_LABEL),
            )],
        ),
        "property-too-long" => (SPOKE, vec![Delete(prop("notes.lab.example.com"))]),
        "agent-stopped" => (
            SPOKE,
            vec![Patch(
                deployment("open-cluster-management", "klusterlet"),
                json!({"spec": {"replicas": 1}}),
            )],
        ),
        "sync-label-dropped" => (
            "hub",
            vec![Patch(
                r(
                    "authentication.open-cluster-management.io/v1beta1",
                    "ManagedServiceAccount",
                    Some(SPOKE),
                    "inventory-reader",
                ),
                json!({"metadata": {"labels": {"authentication.open-cluster-management.io/sync-to-clusterprofile": "true"}}}),
            )],
        ),
        "user-server-scaled-down" => (
            "hub",
            vec![Patch(
                deployment("open-cluster-management-addon", "cluster-proxy-addon-user"),
                json!({"spec": {"replicas": 1}}),
            )],
        ),
        "proxy-server-scaled-down" => (
            "hub",
            vec![Patch(
                r(
                    "proxy.open-cluster-management.io/v1alpha1",
                    "ManagedProxyConfiguration",
                    None,
                    "cluster-proxy",
                ),
                json!({"spec": {"proxyServer": {"replicas": 1}}}),
            )],
        ),
        "proxy-agents-scaled-down" => (
            "hub",
            vec![Patch(
                r(
                    "proxy.open-cluster-management.io/v1alpha1",
                    "ManagedProxyConfiguration",
                    None,
                    "cluster-proxy",
                ),
                json!({"spec": {"proxyAgent": {"replicas": 1}}}),
            )],
        ),
        other => panic!("no documented fix for exercise `{other}` in this test: add one"),
    }
}

/// Makes the documented fix through the simulated API server.
async fn fix(h: &Harness, name: &str) {
    let (cluster, calls) = documented_fix(h, name);
    let api: Arc<dyn ClusterApi> = h.sim.api(cluster);
    for call in calls {
        match call {
            Apply(obj) => api.apply(&obj).await.unwrap(),
            Delete(target) => assert!(api.delete(&target).await.unwrap(), "{target} was there"),
            Patch(target, patch) => api.merge_patch(&target, &patch).await.unwrap(),
            DeleteLabelled(api_version, kind, selector) => {
                let found = api
                    .list(api_version, kind, None, Some(&selector))
                    .await
                    .unwrap();
                assert!(!found.is_empty(), "nothing labelled {selector}");
                for o in found {
                    api.delete(&ObjectRef::of(&o).unwrap()).await.unwrap();
                }
            }
        }
    }
}

/// start → verify names the hop → the documented fix → check says solved; then `stop` changes nothing
/// that matters (the lab still verifies).
async fn solve(name: &str) {
    let h = Harness::default_lab();
    let (up, _) = h.run("up").await;
    assert!(up.ok, "up: {}", failure(&up));
    let ex = the(name);
    let ctx = ctx(&h);
    let running = ex_run::start(&ctx, &ex).await.unwrap();
    assert_eq!((running.name.as_str(), running.hop), (name, ex.hop));
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(h.state.path.join("exercise.json")).unwrap())
            .unwrap();
    assert_eq!(
        file,
        json!({"name": name, "title": ex.title, "hop": ex.hop.name()})
    );
    match check(&h, &ex).await {
        Verdict::Broken { hop, .. } => assert_eq!(hop, Some(ex.hop), "{name}"),
        Verdict::Solved => panic!("{name}: verify passed on the broken lab"),
    }
    fix(&h, name).await;
    assert_eq!(
        check(&h, &ex).await,
        Verdict::Solved,
        "{name}: the documented fix did not solve it"
    );
    assert!(ex_run::stop(&ctx).await.unwrap().is_some());
    assert!(!h.state.path.join("exercise.json").exists());
    assert_eq!(
        check(&h, &ex).await,
        Verdict::Solved,
        "{name}: stop broke a solved lab"
    );
}

macro_rules! solved_by_its_documented_fix {
    ($($test:ident => $name:literal),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $test() {
            solve($name).await;
        }
    )*};
}

solved_by_its_documented_fix! {
    agent_stopped => "agent-stopped",
    binding_deleted => "binding-deleted",
    cluster_left_set => "cluster-left-set",
    spoke_gate_off => "spoke-gate-off",
    hub_gate_off => "hub-gate-off",
    property_deleted => "property-deleted",
    spoke_only => "spoke-only",
    too_many_properties => "too-many-properties",
    property_too_long => "property-too-long",
    sync_label_dropped => "sync-label-dropped",
    user_server_scaled_down => "user-server-scaled-down",
    proxy_server_scaled_down => "proxy-server-scaled-down",
    proxy_agents_scaled_down => "proxy-agents-scaled-down",
}

#[test]
fn every_shipped_exercise_is_tested_here_and_they_cover_distinct_hops() {
    let all = exercise::load_all(None).unwrap();
    let src = include_str!("exercises.rs");
    let mut hops: Vec<String> = Vec::new();
    for e in &all {
        assert!(
            src.contains(&format!("=> \"{}\"", e.name)),
            "exercise `{}` has no test",
            e.name
        );
        hops.push(e.hop.name());
    }
    hops.sort();
    hops.dedup();
    assert_eq!(
        hops.len(),
        all.len(),
        "two exercises name the same hop: {hops:?}"
    );
    assert!(all.len() >= 8);
}

// ---- the command, end to end ---------------------------------------------------------------------------

#[test]
fn list_shows_every_exercise_with_its_hop_and_json_is_one_document() {
    let cli = Cli::new();
    let r = cli.run(&["exercise", "list"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for e in exercise::load_all(None).unwrap() {
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{} ", e.name)));
        assert!(
            line.is_some_and(|l| l.contains(&e.hop.name())),
            "{}: {}",
            e.name,
            r.stdout
        );
    }
    let r = cli.run(&["exercise", "list", "-o", "json"]);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(doc.as_array().unwrap().len() >= 8);
    assert!(doc[0]["hints"].as_u64().unwrap() >= 1);
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn start_unknown_check_and_stop_without_one_running_say_what_to_do() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate", "-t", "minimal"]).code, 0);
    let r = cli.run(&[
        "exercise",
        "start",
        "binding-delete",
        "--simulate",
        "-t",
        "minimal",
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("no exercise `binding-delete`"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("did you mean `binding-deleted`?"),
        "{}",
        r.stderr
    );
    for verb in ["check", "stop"] {
        let r = cli.run(&["exercise", verb, "--simulate", "-t", "minimal"]);
        assert_eq!(r.code, 1, "{verb}: {}", r.stderr);
        assert!(
            r.stderr.contains("no exercise is running on this lab"),
            "{verb}: {}",
            r.stderr
        );
        assert!(
            r.stderr.contains("ocm-lab exercise start NAME"),
            "{verb}: {}",
            r.stderr
        );
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn an_exercise_started_from_the_command_line_is_checked_hinted_and_healed_by_reset() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    let r = cli.run(&[
        "exercise",
        "start",
        "binding-deleted",
        "--simulate",
        "-o",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let started: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(started["hop"], "no-bound-binding");
    assert!(
        started["task"]
            .as_str()
            .unwrap()
            .contains("cluster-inventory")
    );
    let again = cli.run(&["exercise", "start", "spoke-only", "--simulate"]);
    assert_eq!(again.code, 1);
    assert!(
        again
            .stderr
            .contains("exercise `binding-deleted` is running"),
        "{}",
        again.stderr
    );
    for n in 1..=2 {
        let r = cli.run(&["exercise", "check", "--hint", "--simulate"]);
        assert_eq!(r.code, 1, "{}", r.stderr);
        assert!(
            r.stdout
                .contains("Not solved yet: verify names hop `no-bound-binding`"),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains(&format!("Hint {n} of 3:")),
            "{}",
            r.stdout
        );
    }
    // `-o json`: verify's events, one JSON object a line, then the verdict.
    let r = cli.run(&["exercise", "check", "--simulate", "-o", "json"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let verdict = lines.last().unwrap();
    assert_eq!(verdict["event"], "exercise-checked");
    assert_eq!(
        (&verdict["solved"], &verdict["verdict"]),
        (&json!(false), &json!("broken"))
    );
    assert_eq!(verdict["hop"], "no-bound-binding");
    assert_eq!(
        (&verdict["hintsShown"], &verdict["hints"]),
        (&json!(2), &json!(3))
    );
    let r = cli.run(&["reset", "--simulate"]);
    assert_eq!(r.code, 0, "reset: {}", r.stderr);
    let r = cli.run(&["verify", "--simulate"]);
    assert_eq!(r.code, 0, "verify after reset: {}", r.stdout);
    let r = cli.run(&["exercise", "check", "--simulate"]);
    assert!(
        r.stderr.contains("no exercise is running"),
        "reset ended the exercise: {}",
        r.stderr
    );
}

/// start → `reset` → verify passes, for every exercise, through the command line.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn reset_heals_every_exercise() {
    let cli = Cli::new();
    assert_eq!(cli.run(&["up", "--simulate"]).code, 0);
    for e in exercise::load_all(None).unwrap() {
        let r = cli.run(&["exercise", "start", &e.name, "--simulate"]);
        assert_eq!(r.code, 0, "{}: {}", e.name, r.stderr);
        let r = cli.run(&["reset", "--simulate"]);
        assert_eq!(
            r.code, 0,
            "reset after {}: {}\n{}",
            e.name, r.stdout, r.stderr
        );
        let r = cli.run(&["verify", "--simulate"]);
        assert_eq!(r.code, 0, "verify after {} and reset: {}", e.name, r.stdout);
    }
    // `down` forgets a running exercise with the clusters it changed.
    assert_eq!(
        cli.run(&["exercise", "start", "spoke-only", "--simulate"])
            .code,
        0
    );
    let running = cli.dir.path().join("sandbox/simulated/exercise.json");
    assert!(running.exists());
    assert_eq!(cli.run(&["down", "--simulate"]).code, 0);
    assert!(!running.exists());
    assert!(
        !cli.dir
            .path()
            .join("sandbox/simulated/exercise-record.json")
            .exists()
    );
}
