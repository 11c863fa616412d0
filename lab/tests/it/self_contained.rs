//! The product stands on its own: its sources and the files the binary embeds cite upstream sources
//! (repository, path, version) directly, never documents a clone does not have (the fact sheets and design
//! notes that sat beside the repository while it was written) nor the project's issue numbers.

use std::path::{Path, PathBuf};

use crate::common::root;

/// The names of the documents that are not part of the repository. Spelt in pieces so that this file does
/// not match the search it implements.
fn outside_documents() -> Vec<String> {
    vec![
        concat!("FAC", "TS").to_string(),
        concat!("../", "shared").to_string(),
        concat!("DESIGN", ".md").to_string(),
        concat!("STACK", ".md").to_string(),
        concat!("STYLE", ".md").to_string(),
    ]
}

/// What a line refers to that a clone cannot follow: an outside document, a section sign pointing into one
/// (`§4.1`; an RFC's section, `RFC 3986 §3.2.2`, is fine), or an issue of this project (the word followed by
/// a number; an upstream issue is written `owner/repo#N`).
fn outside_references(line: &str) -> Vec<String> {
    let mut found: Vec<String> = outside_documents()
        .into_iter()
        .filter(|doc| line.contains(doc.as_str()))
        .collect();
    let lower = line.to_lowercase();
    for (i, _) in lower.match_indices("issue ") {
        let rest = &lower[i + "issue ".len()..];
        if rest
            .trim_start_matches('#')
            .starts_with(|c: char| c.is_ascii_digit())
        {
            found.push(line[i..].chars().take(16).collect());
        }
    }
    for (i, _) in line.match_indices('§') {
        let after_digit = line[i + '§'.len_utf8()..].starts_with(|c: char| c.is_ascii_digit());
        let rfc = line[..i]
            .trim_end()
            .rsplit(' ')
            .nth(1)
            .is_some_and(|w| w.ends_with("RFC"));
        if after_digit && !rfc {
            found.push(line[i..].chars().take(8).collect());
        }
    }
    found
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn the_product_cites_upstream_sources_not_documents_a_clone_lacks_nor_issue_numbers() {
    let root = root();
    let mut paths = Vec::new();
    // The three product crates, and what the binary embeds.
    for dir in [
        "lab/src",
        "lab/core/src",
        "lab/sim/src",
        "workflows",
        "topologies",
        "charts-patches",
    ] {
        files(&root.join(dir), &mut paths);
    }
    assert!(
        paths.len() > 100,
        "only {} files found: the walk is broken",
        paths.len()
    );
    let mut refs = Vec::new();
    for path in &paths {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (n, line) in text.lines().enumerate() {
            for what in outside_references(line) {
                let rel = path.strip_prefix(&root).unwrap_or(path);
                refs.push(format!(
                    "{}:{}: `{what}` in: {}",
                    rel.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        refs.is_empty(),
        "references a clone cannot follow (cite the upstream repository, path and version instead):\n{}",
        refs.join("\n")
    );
}

#[test]
fn outside_references_are_found_and_upstream_citations_pass() {
    let issue = format!("({} 13 item 4)", "issue");
    let planted = [
        format!(
            "/// The hub webhook ({}-OCM-ROUND2 §7.5).",
            concat!("FAC", "TS")
        ),
        format!(
            "// Reads {}/fixtures at run time.",
            concat!("..", "/shared")
        ),
        format!("//! The chart cache {issue}: fetched once."),
        format!("/// {} 11's worst case.", "Issue"),
        "/// Set membership (§9.10): exclusive.".to_string(),
        format!("/// See {} \"Verification\".", concat!("DESIGN", ".md")),
    ];
    for line in &planted {
        assert!(!outside_references(line).is_empty(), "not caught: {line}");
    }
    for line in [
        "/// (open-cluster-management-io/ocm v1.3.1 `pkg/registration/webhook/v1/managedcluster_validating.go`).",
        "// An IPv6 address is bracketed (`https://[::1]:6443`, RFC 3986 §3.2.2).",
        "// `content digest … not found`, kubernetes-sigs/kind#3795.",
        "/// The issues a reviewer raised: 3 of them.",
    ] {
        assert_eq!(outside_references(line), Vec::<String>::new(), "{line}");
    }
}
