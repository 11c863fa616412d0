//! The import rules ARCHITECTURE.md states: a module of the product (`lab/core/src`, `lab/src`) imports only
//! from its own layer or the layers below it, and only `lab/src/simulate.rs` knows the simulated lab. The arrows that still point up are listed there and allowed here by name, so a new
//! one (or an old one coming back, like `actions -> engine` or `workflow -> actions`) fails this test.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The layers of ARCHITECTURE.md's code map, bottom first.
const LAYERS: &[&[&str]] = &[
    &["diag", "text", "embedded", "patch", "state"],
    &["topology", "charts"],
    &["backend"],
    &["verify"],
    &["workflow"],
    &["step"],
    &["actions", "exercise"],
    &["engine"],
    &["cli", "run", "commands", "error", "images", "simulate"],
];

/// Upward arrows ARCHITECTURE.md names ("Which way imports point"), as (importer, imported).
const KNOWN_UPWARD: &[(&str, &str)] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a line of code names through `crate::` (comments skipped).
fn crate_imports(line: &str) -> Vec<String> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    let ident = |s: &str| -> String {
        s.trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            found.extend(group.split(',').map(ident));
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

#[test]
fn imports_point_down_the_layers_except_the_known_upward_arrows() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for src in [lab.join("core/src"), lab.join("src")] {
        let mut here = Vec::new();
        rust_files(&src, &mut here);
        files.extend(here.into_iter().map(|f| (src.clone(), f)));
    }
    let mut unknown_modules = BTreeSet::new();
    let mut upward = BTreeSet::new();
    let mut seen_known = BTreeSet::new();
    for (src, file) in &files {
        let rel = file.strip_prefix(src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let module = first.trim_end_matches(".rs");
        if matches!(module, "lib" | "main") {
            continue;
        }
        let Some(from) = layer_of(module) else {
            unknown_modules.insert(module.to_owned());
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for target in crate_imports(line) {
                let Some(to) = layer_of(&target) else {
                    unknown_modules.insert(target);
                    continue;
                };
                if to <= from || target == module {
                    continue;
                }
                if KNOWN_UPWARD.contains(&(module, target.as_str())) {
                    seen_known.insert((module.to_owned(), target));
                } else {
                    upward.insert(format!("{}:{}: {module} -> {target}", rel.display(), n + 1));
                }
            }
        }
    }
    assert!(
        unknown_modules.is_empty(),
        "modules missing from ARCHITECTURE.md's layers (and LAYERS here): {unknown_modules:?}"
    );
    assert!(
        upward.is_empty(),
        "imports that point up the layers (see ARCHITECTURE.md):\n{}",
        upward.into_iter().collect::<Vec<_>>().join("\n")
    );
    // A known arrow that is gone should leave the list (and ARCHITECTURE.md) too.
    for (from, to) in KNOWN_UPWARD {
        assert!(
            seen_known.contains(&((*from).to_owned(), (*to).to_owned())),
            "{from} -> {to} no longer points up: remove it from ARCHITECTURE.md and KNOWN_UPWARD"
        );
    }
}

#[test]
fn crate_imports_reads_paths_and_groups_and_skips_comments() {
    assert_eq!(
        crate_imports("use crate::engine::{Outputs, RunCtx};"),
        ["engine"]
    );
    assert_eq!(
        crate_imports("use crate::{embedded, plan_out};"),
        ["embedded", "plan_out"]
    );
    assert!(crate_imports("/// See [`crate::sim`].").is_empty());
}

/// The simulated lab sits beside the product: no product module names it but the `--simulate` wiring.
#[test]
fn only_the_simulate_wiring_knows_the_simulated_lab() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&lab.join("core/src"), &mut files);
    rust_files(&lab.join("src"), &mut files);
    let wiring = lab.join("src/simulate.rs");
    let naming: Vec<String> = files
        .iter()
        .filter(|f| **f != wiring)
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .any(|l| !l.trim_start().starts_with("//") && l.contains("ocm_lab_sim"))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        naming.is_empty(),
        "product modules naming the simulated lab: {naming:?}"
    );
    let core = std::fs::read_to_string(lab.join("core/Cargo.toml")).unwrap();
    assert!(
        !core.contains("ocm-lab-sim"),
        "the core depends on the simulated lab"
    );
}
