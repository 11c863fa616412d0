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

/// One product file as a module: its crate (`core` or `lab`) and its module path (`["actions", "kube"]`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Module {
    krate: &'static str,
    path: Vec<String>,
}

/// Every product file by its module, and its text with comments and test modules left out.
fn product_modules() -> std::collections::BTreeMap<Module, (PathBuf, String)> {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = std::collections::BTreeMap::new();
    for (krate, src) in [("core", lab.join("core/src")), ("lab", lab.join("src"))] {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let rel = file.strip_prefix(&src).unwrap().with_extension("");
            let mut path: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_str().unwrap().to_owned())
                .collect();
            if matches!(path.last().map(String::as_str), Some("mod" | "lib")) {
                path.pop();
            }
            if path == ["main"] {
                continue;
            }
            let text = code_of(&std::fs::read_to_string(&file).unwrap());
            out.insert(Module { krate, path }, (file, text));
        }
    }
    out
}

/// The code of a file: line comments removed, up to its `#[cfg(test)]` module, as one line.
fn code_of(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = match line.find("//") {
            // `//` in a string (`https://`) is not a comment: keep the line when a quote precedes it.
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push(' ');
    }
    out
}

/// The paths a use tree names, from the text just after a prefix such as `crate::`: `a::b`,
/// `a::{b, c::d}`, `{a, b::{c}}`.
fn use_paths(rest: &str) -> Vec<Vec<String>> {
    fn tree(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
        let mut path = prefix.to_vec();
        let mut i = 0;
        let b = s.as_bytes();
        loop {
            while i < b.len() && b[i] == b' ' {
                i += 1;
            }
            if i < b.len() && b[i] == b'{' {
                i += 1;
                loop {
                    i += tree(&s[i..], &path, out);
                    while i < b.len() && b[i] == b' ' {
                        i += 1;
                    }
                    match b.get(i) {
                        Some(b',') => i += 1,
                        Some(b'}') => return i + 1,
                        _ => return i,
                    }
                    while i < b.len() && b[i] == b' ' {
                        i += 1;
                    }
                    if b.get(i) == Some(&b'}') {
                        return i + 1;
                    }
                }
            }
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            if i > start {
                path.push(s[start..i].to_owned());
            }
            if s[i..].starts_with("::") {
                i += 2;
                continue;
            }
            if path.len() > prefix.len() {
                out.push(path);
            }
            return i;
        }
    }
    let mut out = Vec::new();
    tree(rest, &[], &mut out);
    out
}

/// The files a product file imports, through `crate::`, `super::`, `self::` and `ocm_lab_core::` paths.
/// A path to an item a module file re-exports from a child (`pub use child::{Item}`) leads to the child.
fn file_imports(
    modules: &std::collections::BTreeMap<Module, (PathBuf, String)>,
    from: &Module,
) -> BTreeSet<Module> {
    let text = &modules[from].1;
    let mut found = BTreeSet::new();
    for prefix in ["crate::", "super::", "self::", "ocm_lab_core::"] {
        for (i, _) in text.match_indices(prefix) {
            let before = text[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let (krate, mut base) = match prefix {
                "crate::" => (from.krate, Vec::new()),
                "ocm_lab_core::" => ("core", Vec::new()),
                "self::" => (from.krate, from.path.clone()),
                _ => {
                    let mut p = from.path.clone();
                    p.pop();
                    (from.krate, p)
                }
            };
            let mut rest = &text[i + prefix.len()..];
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            for path in use_paths(rest) {
                let mut full = base.clone();
                full.extend(path);
                if let Some(m) = resolve(modules, krate, &full)
                    && m != *from
                {
                    found.insert(m);
                }
            }
        }
    }
    found
}

/// The file a path leads to: the longest module prefix, then through a re-export to a child.
fn resolve(
    modules: &std::collections::BTreeMap<Module, (PathBuf, String)>,
    krate: &'static str,
    full: &[String],
) -> Option<Module> {
    // `lab` re-exports the whole core (`pub use ocm_lab_core::*`): a path it does not define is the core's.
    let krate = match full.first() {
        Some(first)
            if krate == "lab"
                && !modules.contains_key(&Module {
                    krate,
                    path: vec![first.clone()],
                }) =>
        {
            "core"
        }
        _ => krate,
    };
    let n = (0..=full.len()).rev().find(|n| {
        modules.contains_key(&Module {
            krate,
            path: full[..*n].to_vec(),
        })
    })?;
    let module = Module {
        krate,
        path: full[..n].to_vec(),
    };
    let Some(item) = full.get(n) else {
        return Some(module);
    };
    // `pub use child::{…, Item, …}` in the module file: the item lives in the child.
    let text = &modules[&module].1;
    for (i, _) in text.match_indices("pub use ") {
        for path in use_paths(&text[i + "pub use ".len()..]) {
            if path.last() == Some(item) && path.len() > 1 {
                let mut child = module.path.clone();
                child.push(path[0].clone());
                let child = Module { krate, path: child };
                if modules.contains_key(&child) {
                    return Some(child);
                }
            }
        }
    }
    Some(module)
}

/// The circles of a graph: its strongly connected components of more than one node (Tarjan).
fn circles(graph: &std::collections::BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Walk<'a> {
        graph: &'a std::collections::BTreeMap<Module, BTreeSet<Module>>,
        index: std::collections::HashMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, (n, n));
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.index[w].1.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                } else if self.on_stack.contains(w) {
                    let low = self.index[w].0.min(self.index[v].1);
                    self.index.get_mut(v).unwrap().1 = low;
                }
            }
            if self.index[v].0 == self.index[v].1 {
                let mut scc = Vec::new();
                loop {
                    let w = self.stack.pop().unwrap();
                    self.on_stack.remove(w);
                    scc.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: Default::default(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

fn module_name(m: &Module) -> String {
    let root = if m.krate == "core" { "core" } else { "lab" };
    format!("{root}:{}", m.path.join("/"))
}

/// No two files of the product import each other, directly or around a circle: every `use crate::…`,
/// `super::…` and `ocm_lab_core::…` path is an arrow from one file to another.
#[test]
fn no_circle_between_product_files() {
    let modules = product_modules();
    let graph: std::collections::BTreeMap<Module, BTreeSet<Module>> = modules
        .keys()
        .map(|m| (m.clone(), file_imports(&modules, m)))
        .collect();
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "files that import each other, around a circle:\n{}",
        found
            .iter()
            .map(|c| {
                let names: Vec<String> = c.iter().map(module_name).collect();
                let arrows: Vec<String> = c
                    .iter()
                    .flat_map(|a| {
                        graph[a]
                            .iter()
                            .filter(|b| c.contains(b))
                            .map(move |b| format!("{} -> {}", module_name(a), module_name(b)))
                    })
                    .collect();
                format!("{{{}}}\n    {}", names.join(", "), arrows.join("\n    "))
            })
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn use_paths_reads_trees_and_circles_are_found() {
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        use_paths("engine::{Outputs, RunCtx};"),
        [s(&["engine", "Outputs"]), s(&["engine", "RunCtx"])]
    );
    assert_eq!(
        use_paths("{a::b, c::{d, e::f}} ;"),
        [s(&["a", "b"]), s(&["c", "d"]), s(&["c", "e", "f"])]
    );
    assert_eq!(
        use_paths("backend::docker::kind_network()"),
        [s(&["backend", "docker", "kind_network"])]
    );
    let m = |p: &str| Module {
        krate: "core",
        path: vec![p.to_owned()],
    };
    let graph = [
        (m("a"), BTreeSet::from([m("b")])),
        (m("b"), BTreeSet::from([m("c")])),
        (m("c"), BTreeSet::from([m("a")])),
        (m("d"), BTreeSet::from([m("a")])),
    ]
    .into_iter()
    .collect();
    assert_eq!(circles(&graph), [vec![m("a"), m("b"), m("c")]]);
}

/// The longest a function of the product may be, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 100;

/// A function of the product that is longer than `MAX_FN_LINES`.
#[derive(Debug, PartialEq)]
struct LongFn {
    at: String,
    name: String,
    lines: usize,
}

/// Every function (free, in an `impl`, or a trait's default body; nested ones too) of one source text that spans
/// more than `limit` lines, leaving out `#[cfg(test)]` items: they are tests, not the product.
fn long_fns(file: &str, text: &str, limit: usize) -> Vec<LongFn> {
    use syn::visit::Visit;

    struct Walk<'a> {
        file: &'a str,
        limit: usize,
        found: Vec<LongFn>,
    }
    fn is_test(attrs: &[syn::Attribute]) -> bool {
        attrs.iter().any(|a| {
            a.path().is_ident("cfg")
                && a.parse_args::<syn::Meta>()
                    .is_ok_and(|m| m.path().is_ident("test"))
        })
    }
    impl Walk<'_> {
        fn measure(&mut self, sig: &syn::Signature, block: &syn::Block) {
            let first = sig.fn_token.span.start().line;
            let last = block.brace_token.span.close().end().line;
            let lines = last - first + 1;
            if lines > self.limit {
                self.found.push(LongFn {
                    at: format!("{}:{first}", self.file),
                    name: sig.ident.to_string(),
                    lines,
                });
            }
        }
    }
    impl<'ast> Visit<'ast> for Walk<'_> {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            if !is_test(&m.attrs) {
                syn::visit::visit_item_mod(self, m);
            }
        }
        fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
            if !is_test(&i.attrs) {
                syn::visit::visit_item_impl(self, i);
            }
        }
        fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
            if !is_test(&f.attrs) {
                self.measure(&f.sig, &f.block);
                syn::visit::visit_item_fn(self, f);
            }
        }
        fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
            if !is_test(&f.attrs) {
                self.measure(&f.sig, &f.block);
                syn::visit::visit_impl_item_fn(self, f);
            }
        }
        fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
            if let Some(block) = &f.default {
                self.measure(&f.sig, block);
            }
            syn::visit::visit_trait_item_fn(self, f);
        }
    }
    let parsed = syn::parse_file(text).unwrap_or_else(|e| panic!("{file} does not parse: {e}"));
    let mut walk = Walk {
        file,
        limit,
        found: Vec::new(),
    };
    walk.visit_file(&parsed);
    walk.found
}

#[test]
fn no_function_of_the_product_is_over_a_hundred_lines() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut long = Vec::new();
    let mut files = 0;
    for src in ["core/src", "src"] {
        let mut here = Vec::new();
        rust_files(&lab.join(src), &mut here);
        here.sort();
        for file in here {
            let text = std::fs::read_to_string(&file).unwrap();
            let name = file.strip_prefix(lab).unwrap().display().to_string();
            long.extend(long_fns(&format!("lab/{name}"), &text, MAX_FN_LINES));
            files += 1;
        }
    }
    assert!(files > 80, "only {files} product files found");
    long.sort_by_key(|f| std::cmp::Reverse(f.lines));
    let listing: Vec<String> = long
        .iter()
        .map(|f| format!("{:5} lines  {}  {}", f.lines, f.at, f.name))
        .collect();
    assert!(
        long.is_empty(),
        "{} product functions are over {MAX_FN_LINES} lines; split each into well-named smaller ones:\n{}",
        long.len(),
        listing.join("\n")
    );
}

#[test]
fn long_fns_measures_every_kind_of_function_and_skips_tests() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n);
    let text = format!(
        "pub fn free() {{\n{}}}\n\
         struct S;\n\
         impl S {{\n    async fn method(&self) {{\n{}    }}\n    fn short() {{}}\n}}\n\
         trait T {{\n    fn provided() {{\n        let s = \"}}}}\";\n{}    }}\n}}\n\
         fn outer() {{\n    fn inner() {{\n{}    }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{}    }}\n}}\n",
        body(9),
        body(9),
        body(8),
        body(9),
        body(20),
    );
    let found = long_fns("x.rs", &text, 10);
    let names: Vec<(&str, usize)> = found.iter().map(|f| (f.name.as_str(), f.lines)).collect();
    assert_eq!(
        names,
        [
            ("free", 11),
            ("method", 11),
            ("provided", 11),
            ("outer", 13),
            ("inner", 11)
        ]
    );
    assert_eq!(found[0].at, "x.rs:1");
    assert!(long_fns("x.rs", &text, 13).is_empty());
}
