//! What a user reads for each kind of broken topology file: one error per mistake, located, in words about
//! the file (never the parser library's advice to its programmer), and the schema file the topologies name.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{default_with, ocm_lab, root, topology_errors};

/// Runs `ocm-lab topology check <name>` in `dir`, so that messages hold the relative name only.
fn check_in(dir: &Path, name: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
        .args(["topology", "check", name])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .output()
        .expect("ocm-lab runs");
    (
        out.status.code().expect("not killed by a signal"),
        String::from_utf8(out.stderr).expect("utf-8 stderr"),
    )
}

/// Writes `bytes` as `lab.yaml` in a new folder and checks it.
fn check_bytes(bytes: &[u8]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lab.yaml"), bytes).unwrap();
    check_in(dir.path(), "lab.yaml")
}

const MINIMAL: &str = include_str!("../../../topologies/minimal.yaml");

fn minimal_with(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "minimal topology lacks {from:?}");
    MINIMAL.replacen(from, to, 1)
}

/// Advice serde-saphyr gives the programmer using it, which means nothing to someone editing a topology.
const LIBRARY_ADVICE: &[&str] = &[
    "DuplicateKeyPolicy",
    "Options",
    "from_str_multiple",
    "weak recursion",
    "budget breached",
    "Option<String>",
    "at line ",
];

/// Every broken file a user could write, with its snapshot name.
fn broken_files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("null_value", minimal_with("region: local", "gpus: ~").into_bytes()),
        (
            "duplicate_key",
            minimal_with("region: local", "region: local\n        region: eu").into_bytes(),
        ),
        ("two_documents", format!("{MINIMAL}---\n{MINIMAL}").into_bytes()),
        ("empty_file", b"\n".to_vec()),
        ("recursive_alias", b"spec:\n  spokes: &s [*s]\n".to_vec()),
        (
            "no_spokes",
            b"apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata: {name: x}\nspec:\n  hub: {name: h, featureGates: [ClusterProfile]}\n  spokes: []\n".to_vec(),
        ),
        (
            "property_name",
            minimal_with("region: local", "Region_X: local").into_bytes(),
        ),
        ("invalid_utf8", {
            let mut b = minimal_with("region: local", "region: caf").into_bytes();
            let at = b.windows(11).position(|w| w == b"region: caf").unwrap() + 11;
            b.insert(at, 0xe9);
            b
        }),
    ]
}

#[test]
fn each_broken_file_gives_one_located_error_in_plain_words() {
    for (name, bytes) in broken_files() {
        let (code, stderr) = check_bytes(&bytes);
        assert_eq!(code, 2, "{name}: {stderr}");
        for advice in LIBRARY_ADVICE {
            assert!(
                !stderr.contains(advice),
                "{name}: leaks parser-library text {advice:?}:\n{stderr}"
            );
        }
        assert!(
            stderr.contains("lab.yaml:"),
            "{name}: no file:line:col location:\n{stderr}"
        );
        assert!(
            stderr.contains("1 problem found"),
            "{name}: one mistake, one error:\n{stderr}"
        );
        insta::assert_snapshot!(format!("topology_message_{name}"), stderr);
    }
}

#[test]
fn invalid_utf8_is_located_and_gives_no_command_line_hint() {
    let mut bytes = b"apiVersion: x\nkind: Topology\nmetadata:\n  name: caf".to_vec();
    bytes.push(0xe9);
    bytes.extend_from_slice(b"\n");
    let (code, stderr) = check_bytes(&bytes);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("byte 0xe9 on line 4, column 12"),
        "{stderr}"
    );
    assert!(stderr.contains("[lab.yaml:4:12]"), "{stderr}");
    assert!(!stderr.contains("--topology"), "{stderr}");
}

#[test]
fn a_missing_file_names_the_os_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let (code, stderr) = check_in(dir.path(), "missing.yaml");
    assert_eq!(code, 2);
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
    insta::assert_snapshot!("topology_message_missing_file", stderr);
}

#[test]
fn an_oversized_topology_is_refused_by_its_size_before_parsing() {
    // 5 MB of one long list: parsing it would breach serde-saphyr's node budget after seconds of work.
    let mut text =
        String::from("apiVersion: x\nkind: Topology\nmetadata: {name: big}\nspec:\n  x: [");
    text.push_str(&"1,".repeat(2_500_000));
    text.push_str("1]\n");
    let (code, stderr) = check_bytes(text.as_bytes());
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(
            "topology lab.yaml is 5000066 bytes; a topology file holds at most 1048576 bytes"
        ),
        "{stderr}"
    );
    assert!(
        !stderr.contains("budget") && !stderr.contains("Nodes"),
        "{stderr}"
    );
    // The largest lab a workshop would plausibly write stays far below the limit.
    let spokes: String = (0..2000)
        .map(|i| format!("    - name: cluster{i}\n      labels: {{env: dev}}\n      properties:\n        region: us-east-1\n        tier.lab.example.com: gold\n"))
        .collect();
    assert!(spokes.len() < 400 * 1024, "{}", spokes.len());
}

#[test]
fn a_wrong_chart_version_on_two_addons_gives_two_errors_not_a_cascade() {
    let text = default_with(
        "    cluster-proxy:\n      version: 0.10.0",
        "    cluster-proxy:\n      version: 0.9.0",
    )
    .replace(
        "    managed-serviceaccount:\n      version: 0.10.0",
        "    managed-serviceaccount:\n      version: 0.9.0",
    );
    let errors = topology_errors(&text);
    assert_eq!(
        errors,
        [
            "spec.addons.cluster-proxy.version: cluster-proxy chart version `0.9.0` is not in the version catalog",
            "spec.addons.managed-serviceaccount.version: managed-serviceaccount chart version `0.9.0` is not in the version catalog",
        ],
    );
}

#[test]
fn an_addon_on_an_unknown_set_is_one_error_not_one_per_service_account_cluster() {
    let text = default_with(
        "      version: 0.10.0\n      clusterSet: sandbox-fleet\n      credentialSync",
        "      version: 0.10.0\n      clusterSet: sandbox-flet\n      credentialSync",
    );
    let errors = topology_errors(&text);
    assert_eq!(
        errors,
        ["spec.addons.managed-serviceaccount.clusterSet: no cluster set named `sandbox-flet`"],
    );
}

#[test]
fn unquoted_numbers_and_booleans_in_properties_are_taken_as_written() {
    for (written, value) in [
        ("4", "4"),
        ("1.50", "1.50"),
        ("true", "true"),
        ("0x1F", "0x1F"),
        ("\"4\"", "4"),
    ] {
        let text = minimal_with("region: local", &format!("gpus: {written}"));
        let loaded = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text)
            .unwrap_or_else(|e| panic!("{written}: {}", ocm_lab::render(&e)));
        let p = &loaded.lab.spokes[0].properties[0];
        assert_eq!((p.name.as_str(), p.value.as_str()), ("gpus", value));
    }
}

#[test]
fn every_diagnostic_code_has_one_style() {
    let (_, invalid) = check_bytes(minimal_with("region: local", "Region_X: local").as_bytes());
    let dir = tempfile::tempdir().unwrap();
    let (_, missing) = check_in(dir.path(), "missing.yaml");
    let unknown = ocm_lab(&["topology", "check", "no-such-embedded-name"]).stderr;
    for out in [invalid, missing, unknown] {
        let code = out.lines().next().unwrap_or_default();
        assert!(
            code.starts_with("ocm_lab::") && !code.contains('-'),
            "codes are ocm_lab::snake_case paths: {out}"
        );
    }
    // And in the source: no code in another style.
    let diag = std::fs::read_to_string(root().join("lab/core/src/diag.rs")).unwrap();
    assert!(!diag.contains("\"ocm-lab::"));
}

/// The `$schema` modeline of the shipped topologies names `topology.schema.json` at the repository root.
#[test]
fn the_shipped_schema_file_is_what_topology_schema_prints() {
    let r = ocm_lab(&["topology", "schema"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let printed: Value = serde_json::from_str(&r.stdout).unwrap();
    let path = root().join("topology.schema.json");
    let shipped = std::fs::read_to_string(&path).unwrap_or_default();
    let shipped: Value = serde_json::from_str(&shipped).unwrap_or(Value::Null);
    assert!(
        shipped == printed,
        "{} differs from `ocm-lab topology schema`; regenerate it: \
         cargo run -q -- topology schema > topology.schema.json",
        path.display()
    );
    let modeline = "# yaml-language-server: $schema=https://raw.githubusercontent.com/ocm-lab/ocm-lab/main/topology.schema.json";
    for (name, text) in ocm_lab::embedded::TOPOLOGIES {
        assert!(
            text.contains(modeline),
            "topologies/{name}.yaml lacks the modeline"
        );
    }
}

/// A generated topology with a mistake on every one of 20,000 spokes: the answer shows the first
/// `diag::SHOWN` with a snippet each and counts the rest in one line (rendering every one re-read the file
/// from the top per error: quadratic, no answer within minutes).
#[test]
fn twenty_thousand_errors_show_the_first_twenty_and_count_the_rest() {
    let mut text = String::from(
        "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1\nkind: Topology\nmetadata:\n  name: big\nspec:\n  hub:\n    name: hub\n  spokes:\n",
    );
    for i in 0..20_000 {
        text.push_str(&format!("    - name: Bad_Spoke_{i}\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("big.yaml"), &text).unwrap();
    let (code, out) = check_in(dir.path(), "big.yaml");
    assert_eq!(code, 2, "{out}");
    let shown = ocm_lab::diag::SHOWN;
    assert_eq!(out.matches("is not a valid name").count(), shown, "{out}");
    assert!(out.contains("big.yaml: 20000 problems found"), "{out}");
    assert!(out.contains("`Bad_Spoke_19` is not a valid name"), "{out}");
    assert!(!out.contains("`Bad_Spoke_20` is not a valid name"), "{out}");
    // Every error but the shown ones is counted (a warning of the file may come with them).
    let more = out
        .split("and ")
        .find_map(|s| s.split(" more problems").next()?.parse::<usize>().ok());
    assert!(
        more.is_some_and(|n| n >= 20_000 - shown),
        "no `and N more problems` line: {more:?}\n{}",
        &out[out.len().saturating_sub(600)..]
    );
    assert!(
        out.len() < 20_000,
        "the answer is bounded: {} bytes",
        out.len()
    );
}
