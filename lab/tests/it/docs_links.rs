//! The user guide's links hold: every relative link in the README and `docs/` names a file of the repository,
//! and a link to a heading (`file.md#anchor`, `#anchor`) names a heading that file has, spelt as GitHub spells
//! heading anchors. Links to other sites are not followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::common::root;

/// The Markdown files whose links are checked: the README and every page of `docs/`.
fn guide_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// A Markdown line without its inline code spans (a `[x](y)` inside backticks is not a link).
fn without_code_spans(line: &str) -> String {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, part)| part)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `(line number, target)` of every inline link `[text](target)` outside fenced code blocks.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let line = without_code_spans(line);
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            out.push((n + 1, rest[..end].trim().to_string()));
            rest = &rest[end..];
        }
    }
    out
}

/// The anchor GitHub gives a heading: lower case, punctuation other than `-` and `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// What is wrong with one link of `file`, if anything.
fn broken(file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap().join(path)
    };
    if !dest.exists() {
        return Some(format!("`{target}`: no file {}", dest.display()));
    }
    let fragment = fragment?;
    if dest.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let text = std::fs::read_to_string(&dest).unwrap();
    (!anchors(&text).contains(fragment)).then(|| {
        format!(
            "`{target}`: {} has no heading `#{fragment}`",
            dest.display()
        )
    })
}

fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    links(&text)
        .into_iter()
        .filter_map(|(line, target)| {
            broken(file, &target).map(|why| format!("{}:{line}: {why}", file.display()))
        })
        .collect()
}

#[test]
fn every_relative_link_in_the_readme_and_the_guide_names_a_file_and_heading_that_exist() {
    let files = guide_files();
    // The guide is there at all, and its pages link to each other.
    assert!(
        files.iter().any(|f| f.ends_with("docs/README.md")),
        "no docs/README.md among {files:?}"
    );
    let checked: usize = files
        .iter()
        .map(|f| links(&std::fs::read_to_string(f).unwrap()).len())
        .sum();
    assert!(
        checked > 50,
        "only {checked} links found: the scan is broken"
    );
    let broken: Vec<String> = files.iter().flat_map(|f| broken_links(f)).collect();
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_link_check_catches_a_missing_file_and_a_missing_heading() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n\n## The `reset` step\n",
    )
    .unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Page\n\nSee [other](other.md), [its step](other.md#the-reset-step), [here](#page),\n\
         [gone](gone.md), [no heading](other.md#nothing), [web](https://example.com/x.md) and\n\
         `[code](not-a-link.md)`.\n\n```md\n[fenced](fenced.md)\n```\n",
    )
    .unwrap();
    let broken = broken_links(&page);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].contains("`gone.md`: no file"), "{broken:?}");
    assert!(
        broken[1].contains("`other.md#nothing`") && broken[1].contains("no heading"),
        "{broken:?}"
    );
}

#[test]
fn anchors_are_spelt_as_github_spells_them() {
    assert_eq!(
        anchor(" Registry mirrors and a local registry (`spec.registry`)"),
        "registry-mirrors-and-a-local-registry-specregistry"
    );
    assert_eq!(anchor(" `ocm-lab consumer`"), "ocm-lab-consumer");
    assert_eq!(
        anchor(" What `reset` removes and what it keeps"),
        "what-reset-removes-and-what-it-keeps"
    );
}
