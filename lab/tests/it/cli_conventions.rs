//! Command-line conventions a kind, kubectl or Helm user expects: shell completions, `-o json|yaml`,
//! options only where they apply, environment variables and exit codes in `--help`, and documented commands
//! that still parse.

use std::path::Path;

use clap::{CommandFactory, Parser, error::ErrorKind};
use ocm_lab::cli::{AFTER_LONG_HELP, Cli, Output};
use serde_json::Value;

use crate::common::{ocm_lab, ocm_lab_env, root};

fn parse(line: &str) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(line.split_whitespace())
}

// ---- completions ----

#[test]
fn completions_are_printed_for_each_shell_and_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let r = ocm_lab(&["completions", shell]);
        assert_eq!(r.code, 0, "{shell}: {}", r.stderr);
        for word in [
            "ocm-lab",
            "up",
            "verify",
            "reset",
            "topology",
            "completions",
        ] {
            assert!(
                r.stdout.contains(word),
                "{shell}: the script does not mention `{word}`:\n{}",
                r.stdout
            );
        }
    }
    // Options complete too: the script knows that `up` takes `--simulate`.
    assert!(
        ocm_lab(&["completions", "bash"])
            .stdout
            .contains("--simulate")
    );
    let r = ocm_lab(&["completions", "tcsh"]);
    assert_eq!(r.code, 2, "an unknown shell is a usage error: {}", r.stderr);
}

// ---- -o / --output ----

#[test]
fn dash_o_is_the_short_form_of_output_and_yaml_is_refused_for_event_streams() {
    for line in [
        "ocm-lab status -o json",
        "ocm-lab status -o yaml",
        "ocm-lab doctor -o yaml",
        "ocm-lab plan -o yaml",
        "ocm-lab topology list -o json",
        "ocm-lab topology check minimal -o yaml",
        "ocm-lab up -o json",
        "ocm-lab verify --output json",
        "ocm-lab down -o json",
        "ocm-lab reset -o json",
    ] {
        let cli = parse(line).unwrap_or_else(|e| panic!("`{line}` does not parse: {e}"));
        let want = if line.ends_with("yaml") {
            Output::Yaml
        } else {
            Output::Json
        };
        assert_eq!(cli.output(), want, "{line}");
    }
    assert_eq!(parse("ocm-lab status").unwrap().output(), Output::Human);
    for line in [
        "ocm-lab up -o yaml",
        "ocm-lab verify -o yaml",
        "ocm-lab down -o yaml",
    ] {
        let e = parse(line).expect_err(line);
        assert_eq!(e.kind(), ErrorKind::InvalidValue, "{line}: {e}");
    }
}

#[test]
fn topology_list_honours_output_json_and_yaml() {
    let r = ocm_lab(&["topology", "list", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let list: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`topology list -o json` is not JSON ({e}):\n{}", r.stdout));
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["default", "minimal", "workshop"]);
    assert!(
        list[1]["description"]
            .as_str()
            .unwrap()
            .contains("one spoke")
    );

    let r = ocm_lab(&["topology", "list", "--output", "yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let yaml: Value = serde_saphyr::from_str(&r.stdout).expect("YAML");
    assert_eq!(yaml, list, "YAML and JSON say the same");

    let r = ocm_lab(&["topology", "list"]);
    assert!(r.stdout.starts_with("TOPOLOGY "), "{}", r.stdout);
    // The lab a topology makes is named by its metadata.name: the list says both.
    assert!(
        r.stdout
            .lines()
            .any(|l| l.split_whitespace().take(2).eq(["default", "sandbox"])),
        "{}",
        r.stdout
    );
    assert_eq!(list[0]["lab"], "sandbox", "{list}");
}

#[test]
fn topology_check_honours_output_json_and_yaml() {
    let r = ocm_lab(&["topology", "check", "minimal", "-o", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let check: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`topology check -o json` is not JSON ({e}):\n{}", r.stdout));
    assert_eq!(check["ok"], true);
    assert_eq!(check["lab"], "minimal");
    assert_eq!(check["hub"], "mini-hub");
    assert_eq!(check["spokes"], serde_json::json!(["mini-spoke"]));
    assert!(
        check["checks"]
            .as_array()
            .unwrap()
            .contains(&"properties".into())
    );

    let r = ocm_lab(&["topology", "check", "minimal", "-o", "yaml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let yaml: Value = serde_saphyr::from_str(&r.stdout).expect("YAML");
    assert_eq!(yaml, check);

    // A broken topology fails with exit 2, its diagnostics on stderr, and one document on stdout that
    // says so (never half a document).
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: nope\n").unwrap();
    let r = ocm_lab(&["topology", "check", bad.to_str().unwrap(), "-o", "json"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    let failed: Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(failed["ok"], false, "{failed}");
    assert!(
        !failed["error"]["problems"].as_array().unwrap().is_empty(),
        "{failed}"
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn status_prints_yaml_on_the_simulated_lab() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let r = ocm_lab_env(&["up", "--simulate", "-t", "minimal"], &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let r = ocm_lab_env(
        &["status", "--simulate", "-t", "minimal", "-o", "yaml"],
        &env,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let s: Value = serde_saphyr::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`status -o yaml` is not YAML ({e}):\n{}", r.stdout));
    assert_eq!(s["simulated"], true, "{}", r.stdout);
    assert_eq!(s["lab"], "minimal");
}

// ---- options belong to the commands that use them ----

#[test]
fn options_a_command_does_not_use_are_refused_by_the_parser() {
    for line in [
        "ocm-lab down --junit j.xml",
        "ocm-lab down --checks reachable",
        "ocm-lab down --no-download",
        "ocm-lab status --junit j.xml",
        "ocm-lab status --concurrency 2",
        "ocm-lab status --no-download",
        "ocm-lab verify --no-download",
        "ocm-lab diagnose --checks reachable",
        "ocm-lab diagnose -o json",
        "ocm-lab doctor --junit j.xml",
        "ocm-lab doctor --concurrency 2",
        "ocm-lab plan --no-download",
        "ocm-lab topology list --simulate",
        "ocm-lab topology schema -t minimal",
        "ocm-lab completions bash -o json",
    ] {
        let e = parse(line).expect_err(line);
        assert_eq!(e.kind(), ErrorKind::UnknownArgument, "{line}: {e}");
    }
}

/// Every leaf command of the CLI, walked from clap's command tree, with the options it takes.
fn leaf_commands() -> Vec<(String, Vec<String>)> {
    fn walk(cmd: &clap::Command, path: String, out: &mut Vec<(String, Vec<String>)>) {
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|c| c.get_name() != "help")
            .collect();
        if subs.is_empty() {
            let global = ["help", "version", "verbose", "kubeconfig", "context"];
            let mut options: Vec<String> = cmd
                .get_arguments()
                .filter(|a| !a.is_hide_set())
                .filter_map(|a| a.get_long().map(str::to_owned))
                .filter(|l| !global.contains(&l.as_str()))
                .collect();
            options.sort();
            out.push((path.clone(), options));
        }
        for sub in subs {
            let p = format!("{path} {}", sub.get_name()).trim().to_owned();
            walk(sub, p, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), String::new(), &mut out);
    out
}

/// The audit of what each command uses, walked over clap's whole command tree: a command that gains an
/// option (or a new command) fails here until this table says it uses it, and why is in each command's
/// code. `--node-image` goes only with the commands whose result depends on the node image (creating
/// clusters, or the images a lab runs); `--workflows` and `--chart-patches` only with the commands that
/// plan a workflow; `status`, `consumer` and `diagnose` read the lab and plan nothing.
#[test]
fn every_command_takes_exactly_the_options_it_uses() {
    let table: &[(&str, &str)] = &[
        (
            "up",
            "bundle checks chart-patches concurrency consumer-image junit no-download node-image output simulate timing topology workflows",
        ),
        (
            "reset",
            "bundle checks chart-patches concurrency consumer-image junit no-download node-image output simulate timing topology workflows",
        ),
        (
            "verify",
            "checks chart-patches concurrency consumer-image junit output simulate timing topology workflows",
        ),
        (
            "down",
            "chart-patches concurrency output simulate timing topology workflows",
        ),
        (
            "plan",
            "chart-patches no-charts node-image out output simulate topology workflow workflows",
        ),
        ("status", "output simulate topology watch"),
        ("dashboard", "listen port simulate topology"),
        ("consumer", "msa output service-account simulate topology"),
        (
            "doctor",
            "chart-patches no-download node-image output simulate topology workflows",
        ),
        ("diagnose", "out simulate topology"),
        ("topology check", "output topology"),
        ("topology schema", ""),
        ("topology list", "output"),
        ("topology show", "topology"),
        (
            "ci matrix",
            "node-image output runner-cpus runner-disk runner-memory topology",
        ),
        ("ci contexts", "output topology"),
        (
            "images list",
            "chart-patches node-image output topology workflows",
        ),
        (
            "bundle save",
            "chart-patches node-image out topology workflows",
        ),
        ("exercise list", "exercises output"),
        (
            "exercise start",
            "chart-patches exercises output simulate topology workflows",
        ),
        (
            "exercise check",
            "chart-patches exercises hint output simulate timeout topology workflows",
        ),
        (
            "exercise stop",
            "chart-patches output simulate topology workflows",
        ),
        ("completions", ""),
        ("__post-render", "chart chart-patches chart-version"),
    ];
    let leaves = leaf_commands();
    let named: Vec<&str> = leaves.iter().map(|(p, _)| p.as_str()).collect();
    let audited: Vec<&str> = table.iter().map(|(p, _)| *p).collect();
    assert_eq!(
        {
            let mut n = named.clone();
            n.sort();
            n
        },
        {
            let mut a = audited.clone();
            a.sort();
            a
        },
        "every command is in the audit"
    );
    for (path, options) in &leaves {
        let want = table.iter().find(|(p, _)| p == path).unwrap().1;
        let mut want: Vec<String> = want.split_whitespace().map(str::to_owned).collect();
        want.sort();
        assert_eq!(
            options, &want,
            "`ocm-lab {path}` takes exactly what it uses"
        );
    }
    // -t is the topology on every command that reads one.
    for (path, options) in &leaves {
        if options.contains(&"topology".to_owned()) {
            let words: Vec<&str> = path.split(' ').chain(["-t", "minimal", "--help"]).collect();
            let mut argv = vec!["ocm-lab"];
            argv.extend(words);
            let e = Cli::try_parse_from(&argv).expect_err("--help");
            assert_eq!(e.kind(), ErrorKind::DisplayHelp, "`{path} -t` parses: {e}");
        }
    }
}

/// Options no command uses for anything are refused by the parser (exit 2), never accepted and ignored.
#[test]
fn options_that_would_be_ignored_are_refused() {
    for line in [
        "status --node-image kindest/node:v1.35.0",
        "status --workflows w",
        "consumer ns --chart-patches p",
        "diagnose --node-image kindest/node:v1.35.0",
        "verify --node-image kindest/node:v1.35.0",
        "down --node-image kindest/node:v1.35.0",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let out = ocm_lab(&args);
        assert_eq!(out.code, 2, "{line}: {}", out.stderr);
        assert!(
            out.stderr.contains("unexpected argument"),
            "{line}: {}",
            out.stderr
        );
    }
    // `topology check` and `show` take -t like every other command (or the name as their argument).
    let out = ocm_lab(&["topology", "check", "-t", "minimal"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("lab `minimal`"), "{}", out.stdout);
    let shown = ocm_lab(&["topology", "show", "-t", "minimal"]);
    assert_eq!(
        shown.stdout,
        ocm_lab(&["topology", "show", "minimal"]).stdout
    );
    assert!(shown.stdout.contains("name: minimal"), "{}", shown.stdout);
}

/// The global `--kubeconfig` and `--context` are refused (exit 2, before anything runs) by commands that
/// read no topology, instead of being accepted and ignored.
#[test]
fn kubeconfig_and_context_are_refused_by_commands_that_read_no_clusters() {
    for line in [
        "completions bash --kubeconfig k.yaml",
        "topology list --context kind-hub",
        "ci matrix --kubeconfig k.yaml",
        "bundle save --out b.tar --context kind-hub",
        "images list --kubeconfig k.yaml",
    ] {
        let args: Vec<&str> = line.split(' ').collect();
        let out = ocm_lab(&args);
        assert_eq!(out.code, 2, "{line}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{line}: {}", out.stdout);
        assert!(out.stderr.contains("reads none"), "{line}: {}", out.stderr);
    }
    // Commands that read a topology's clusters take them.
    let out = ocm_lab(&["topology", "check", "minimal", "--kubeconfig", "k.yaml"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn each_command_takes_the_options_it_uses() {
    for line in [
        "ocm-lab up -t minimal --simulate --no-download --concurrency 2 --junit j.xml --checks properties,reachable -o json",
        "ocm-lab reset -t minimal --simulate --no-download --concurrency 2 --junit j.xml --checks properties -o json",
        "ocm-lab verify -t minimal --simulate --concurrency 2 --junit j.xml --checks properties -o json",
        "ocm-lab down -t minimal --simulate --concurrency 2 -o json",
        "ocm-lab status -t minimal --simulate -o yaml",
        "ocm-lab doctor -t minimal --no-download -o json",
        "ocm-lab diagnose -t minimal --simulate --out b.tar.gz",
        "ocm-lab plan -t minimal --out dir --workflow down -o yaml",
        "ocm-lab plan -t minimal --out dir --simulate",
        "ocm-lab plan -t minimal --out dir --no-charts",
        "ocm-lab -v status",
        "ocm-lab status -vv",
    ] {
        if let Err(e) = parse(line) {
            panic!("`{line}` does not parse: {e}");
        }
    }
}

#[test]
fn down_with_verify_options_exits_2_and_says_which_option() {
    let dir = tempfile::tempdir().unwrap();
    let junit = dir.path().join("j.xml");
    let r = ocm_lab_env(
        &[
            "down",
            "--simulate",
            "--junit",
            junit.to_str().unwrap(),
            "--checks",
            "reachable",
        ],
        &[("OCM_LAB_STATE_DIR", dir.path())],
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("unexpected argument '--junit'"),
        "{}",
        r.stderr
    );
    assert!(!junit.exists());
}

// ---- environment variables and exit codes in --help ----

/// The environment variables read by the program's source (not its tests): literal names passed to the
/// reading functions, `*_ENV` constants, every `OCM_LAB_*` literal, and RUST_LOG behind `from_default_env`.
fn env_vars_read_in(src: &Path) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut files = vec![src.to_path_buf()];
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for line in text.lines() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for (i, _) in line.match_indices('"') {
                let rest = &line[i + 1..];
                let Some(end) = rest.find('"') else { continue };
                let lit = &rest[..end];
                let is_name = !lit.is_empty()
                    && lit.starts_with(|c: char| c.is_ascii_uppercase())
                    && lit
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if !is_name {
                    continue;
                }
                let before = line[..i].trim_end();
                let reader = ["var(", "var_os(", "env_set(", "non_empty("]
                    .iter()
                    .any(|f| before.ends_with(f));
                let env_const = before.ends_with("_ENV: &str =");
                if reader || env_const || lit.starts_with("OCM_LAB_") {
                    found.insert(lit.to_owned());
                }
            }
            if line.contains("from_default_env") {
                found.insert("RUST_LOG".to_owned());
            }
            // A read whose name is not a literal must be one of the known indirections; a new one needs this
            // scan taught about it, so its variable cannot slip past the help text.
            for call in ["env::var(", "env::var_os("] {
                if let Some(i) = line.find(call) {
                    let arg = &line[i + call.len()..];
                    let known = arg.starts_with('"')
                        || ["NETWORK_ENV)", "name)", "var)", "&k)"]
                            .iter()
                            .any(|k| arg.starts_with(k));
                    assert!(
                        known,
                        "{}: environment read with a computed name: {line}",
                        p.display()
                    );
                }
            }
        }
    }
    found
}

#[test]
fn every_environment_variable_the_program_reads_is_in_the_help() {
    let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut vars = env_vars_read_in(&lab.join("src"));
    vars.extend(env_vars_read_in(&lab.join("core/src")));
    for must in [
        "OCM_LAB_STATE_DIR",
        "OCM_LAB_CACHE_DIR",
        "OCM_LAB_TOOLS_BASE_URL",
        "OCM_LAB_KIND",
        "OCM_LAB_HELM",
        "KUBECONFIG",
        "DOCKER_HOST",
        "KIND_EXPERIMENTAL_DOCKER_NETWORK",
        "RUST_LOG",
        "HOME",
    ] {
        assert!(
            vars.contains(must),
            "the source scan missed {must}: {vars:?}"
        );
    }
    let help = ocm_lab(&["--help"]);
    assert_eq!(help.code, 0);
    let missing: Vec<&String> = vars
        .iter()
        .filter(|v| !help.stdout.contains(v.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "read by ocm-lab but not in `ocm-lab --help`: {missing:?}"
    );
    // The short help points at the long one.
    assert!(ocm_lab(&["-h"]).stdout.contains("ocm-lab --help"));
}

#[test]
fn the_exit_codes_in_the_help_are_the_ones_the_program_uses() {
    use ocm_lab::error::exit;
    let help = Cli::command().render_long_help().to_string();
    assert!(help.contains("Exit codes:"), "{help}");
    for code in [
        exit::OK,
        exit::FAILURE,
        exit::INVALID_INPUT,
        exit::CANCELLED,
    ] {
        assert!(
            AFTER_LONG_HELP
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "exit code {code} is not explained in --help"
        );
    }
    // And a usage error really is exit 2, as the help says.
    assert_eq!(ocm_lab(&["up", "--no-such-option"]).code, 2);
}

// ---- documented commands still parse ----

/// Splits a shell command line into words, with quotes, up to a comment, pipe, redirection or `&&`.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '#' | '|' | '>' | '<' | ';' | '&') if !in_word || c != '#' => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// A command in the docs: where it is, its words, and whether it is prose (an inline mention, which may
/// leave out required arguments: "`ocm-lab topology check` must pass").
struct DocCommand {
    at: String,
    words: Vec<String>,
    prose: bool,
}

/// `ocm-lab …` commands in fenced shell blocks and inline code of a Markdown file. Inline alternatives
/// ("`ocm-lab topology check / schema`") become one command each.
fn markdown_commands(file: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    let mut fence: Option<bool> = None; // Some(is a shell block)
    for (n, line) in text.lines().enumerate() {
        let at = format!("{}:{}", file.display(), n + 1);
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(matches!(
                    lang.trim(),
                    "" | "sh" | "bash" | "shell" | "console" | "zsh"
                )),
            };
            continue;
        }
        match fence {
            Some(true) => {
                let cmd = trimmed.strip_prefix("$ ").unwrap_or(trimmed);
                if cmd.starts_with("ocm-lab ") || cmd == "ocm-lab" {
                    out.push(DocCommand {
                        at,
                        words: shell_words(cmd),
                        prose: false,
                    });
                }
            }
            Some(false) => {}
            None => {
                for (i, span) in line.split('`').enumerate() {
                    if i % 2 == 0 || !span.starts_with("ocm-lab ") {
                        continue;
                    }
                    let mut parts = span.split(" / ");
                    let first = shell_words(parts.next().unwrap());
                    out.push(DocCommand {
                        at: at.clone(),
                        words: first.clone(),
                        prose: true,
                    });
                    for alt in parts {
                        let mut words = first[..first.len() - 1].to_vec();
                        words.extend(shell_words(alt));
                        out.push(DocCommand {
                            at: at.clone(),
                            words,
                            prose: true,
                        });
                    }
                }
            }
        }
    }
    out
}

/// `ocm-lab …` commands in the comments of a YAML file (`#   ocm-lab up -t minimal`).
fn yaml_comment_commands(file: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let Some(comment) = line.trim_start().strip_prefix('#') else {
            continue;
        };
        let comment = comment.trim_start();
        if comment.starts_with("ocm-lab ") {
            out.push(DocCommand {
                at: format!("{}:{}", file.display(), n + 1),
                words: shell_words(comment),
                prose: false,
            });
        }
        // Inline mentions in prose comments: "(`ocm-lab doctor` checks both)".
        for (i, span) in line.split('`').enumerate() {
            if i % 2 == 1 && span.starts_with("ocm-lab ") {
                out.push(DocCommand {
                    at: format!("{}:{}", file.display(), n + 1),
                    words: shell_words(span),
                    prose: true,
                });
            }
        }
    }
    out
}

/// `ocm-lab …` commands the CI workflows run: `./target/release/ocm-lab up -t "${{ matrix.topology }}"`,
/// `ocm-lab down …` (on PATH from the repository's action), `matrix=$(ocm-lab ci matrix …)`.
fn workflow_commands(file: &Path) -> Vec<DocCommand> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with('#') {
            continue;
        }
        let code = code.strip_prefix("run: ").unwrap_or(code);
        let start = if let Some(i) = code.find("target/release/ocm-lab ") {
            Some(i + "target/release/".len())
        } else if code.starts_with("ocm-lab ") {
            Some(0)
        } else {
            code.find("$(ocm-lab ").map(|i| i + 2)
        };
        if let Some(i) = start {
            let command = &code[i..];
            // Up to the `)` that closes `$(`, outside quotes (no quoted `)` in these commands).
            let command = if code[..i].ends_with("$(") {
                command.split(')').next().unwrap_or(command)
            } else {
                command
            };
            out.push(DocCommand {
                at: format!("{}:{}", file.display(), n + 1),
                words: shell_words(command),
                prose: false,
            });
        }
    }
    out
}

fn documented_commands() -> Vec<DocCommand> {
    let root = root();
    let mut commands = markdown_commands(&root.join("README.md"));
    for dir in ["docs", "examples", "topologies"] {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for f in files {
            match f.extension().and_then(|e| e.to_str()) {
                Some("md") => commands.extend(markdown_commands(&f)),
                Some("yaml" | "yml") => commands.extend(yaml_comment_commands(&f)),
                _ => {}
            }
        }
    }
    if let Ok(dir) = std::fs::read_dir(root.join(".github/workflows")) {
        for f in dir {
            commands.extend(workflow_commands(&f.unwrap().path()));
        }
    }
    commands
}

#[test]
fn every_ocm_lab_command_in_the_docs_parses_with_the_current_cli() {
    let commands = documented_commands();
    // The scan finds the docs' commands at all (README's quick start, the user guide, a topology comment,
    // the exercises, the workflows).
    for (file, words) in [
        (
            "README.md",
            "ocm-lab verify --simulate --checks properties,access-providers",
        ),
        (
            "docs/workshops.md",
            "ocm-lab up -t workshop --bundle lab-bundle.tar",
        ),
        ("docs/commands.md", "ocm-lab completions bash"),
        (
            "existing-clusters.yaml",
            "ocm-lab topology check examples/existing-clusters.yaml",
        ),
        (
            "workshop-exercises.md",
            "ocm-lab exercise start binding-deleted -t workshop",
        ),
        ("e2e.yml", "ocm-lab down -t ${{ matrix.topology }}"),
        (
            "e2e.yml",
            "ocm-lab ci matrix --runner-memory 16GB --runner-cpus 4 --runner-disk 14GB",
        ),
    ] {
        assert!(
            commands
                .iter()
                .any(|c| c.at.contains(file) && c.words.join(" ") == words),
            "the scan did not find `{words}` in {file}"
        );
    }
    let mut broken = Vec::new();
    for c in &commands {
        match Cli::try_parse_from(&c.words) {
            Ok(_) => {}
            // `--version` and `--help` parse to what they print.
            Err(e) if matches!(e.kind(), ErrorKind::DisplayVersion | ErrorKind::DisplayHelp) => {}
            // Prose may name a command without its required arguments.
            Err(e)
                if c.prose
                    && matches!(
                        e.kind(),
                        ErrorKind::MissingRequiredArgument
                            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    ) => {}
            Err(e) => broken.push(format!("{}: `{}`: {}", c.at, c.words.join(" "), e.kind())),
        }
    }
    assert!(
        broken.is_empty(),
        "documented commands the CLI refuses:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_doc_scan_catches_a_command_the_cli_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let md = dir.path().join("x.md");
    std::fs::write(
        &md,
        "Run `ocm-lab down --junit j.xml`.\n\n```sh\nocm-lab up --simulate  # comment\nocm-lab verify --frobnicate\n```\n",
    )
    .unwrap();
    let found = markdown_commands(&md);
    let words: Vec<String> = found.iter().map(|c| c.words.join(" ")).collect();
    assert_eq!(
        words,
        [
            "ocm-lab down --junit j.xml",
            "ocm-lab up --simulate",
            "ocm-lab verify --frobnicate"
        ]
    );
    let refused: Vec<bool> = found
        .iter()
        .map(|c| Cli::try_parse_from(&c.words).is_err())
        .collect();
    assert_eq!(refused, [true, false, true]);
}

#[test]
fn shell_words_handles_quotes_comments_and_pipes() {
    assert_eq!(
        shell_words(r#"ocm-lab up -t "my lab.yaml" --output json | tee up.jsonl"#),
        ["ocm-lab", "up", "-t", "my lab.yaml", "--output", "json"]
    );
    assert_eq!(
        shell_words("ocm-lab topology show default > lab.yaml"),
        ["ocm-lab", "topology", "show", "default"]
    );
    assert_eq!(shell_words("ocm-lab up   # the lab"), ["ocm-lab", "up"]);
}

// ---- status on a lab that is not up; plurals ----

#[test]
fn status_on_a_lab_that_is_not_up_says_so_and_keeps_the_flags_in_its_advice() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    let r = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("lab `minimal` is not up"), "{}", r.stderr);
    assert!(
        r.stderr
            .contains("run `ocm-lab up -t minimal --simulate` first"),
        "{}",
        r.stderr
    );
    let r = ocm_lab_env(&["status", "-t", "minimal"], &env);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("lab `minimal` is not up")
            && r.stderr.contains("run `ocm-lab up -t minimal` first"),
        "{}",
        r.stderr
    );
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn counts_of_one_are_singular() {
    let r = ocm_lab(&["topology", "check", "minimal"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains(", 1 spoke, 1 set, "), "{}", r.stdout);
    assert!(!r.stdout.contains("(s)"), "{}", r.stdout);

    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    assert_eq!(
        ocm_lab_env(&["up", "--simulate", "-t", "minimal"], &env).code,
        0
    );
    let r = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("1 provider)"), "{}", r.stdout);
    assert!(!r.stdout.contains("1 providers"), "{}", r.stdout);
}

#[test]
fn advice_repeats_the_commands_topology_and_simulate_flags() {
    use ocm_lab::cli::{Command, RunArgs};
    let run_args = |line: &[&str]| match Cli::try_parse_from(line).unwrap().command {
        Command::Status(a) => RunArgs::from(&a),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        run_args(&["ocm-lab", "status", "-t", "minimal", "--simulate"]).command_line("up"),
        "ocm-lab up -t minimal --simulate"
    );
    assert_eq!(
        run_args(&["ocm-lab", "status"]).command_line("verify"),
        "ocm-lab verify"
    );
    // A path a shell would split is quoted, so the advice can be pasted.
    assert_eq!(
        run_args(&["ocm-lab", "status", "-t", "my lab's.yaml"]).command_line("up"),
        r"ocm-lab up -t 'my lab'\''s.yaml'"
    );
}

#[test]
fn plan_out_honours_output_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("plan");
    let r = ocm_lab(&[
        "plan",
        "-t",
        "minimal",
        "--no-charts",
        "--out",
        out.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("`plan --out -o json` is not JSON ({e}):\n{}", r.stdout));
    assert_eq!(v["lab"], "minimal");
    assert_eq!(v["dir"], out.to_str().unwrap());
    assert!(v["files"].as_u64().unwrap() > 0, "{v}");
    assert!(out.read_dir().unwrap().next().is_some(), "nothing written");
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn status_without_a_recorded_verification_advises_verify_for_the_same_lab() {
    let dir = tempfile::tempdir().unwrap();
    let env = [("OCM_LAB_STATE_DIR", dir.path())];
    assert_eq!(
        ocm_lab_env(&["up", "--simulate", "-t", "minimal"], &env).code,
        0
    );
    // Forget the verification `up` recorded, wherever the state folder keeps it.
    let mut dirs = vec![dir.path().to_path_buf()];
    let mut removed = 0;
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().unwrap() == "last-verification.json" {
                std::fs::remove_file(p).unwrap();
                removed += 1;
            }
        }
    }
    assert_eq!(removed, 1);
    let r = ocm_lab_env(&["status", "--simulate", "-t", "minimal"], &env);
    assert!(
        r.stdout
            .contains("none recorded (run `ocm-lab verify -t minimal --simulate`)"),
        "{}",
        r.stdout
    );
}

/// A `--workflows` or `--chart-patches` folder that does not exist, or holds nothing to use, is refused
/// once (exit 2, the folder named, a help that fixes it): never silently replaced by the embedded files.
#[test]
fn a_workflows_or_chart_patches_folder_that_is_missing_or_empty_is_refused_once() {
    let empty = tempfile::tempdir().unwrap();
    let empty = empty.path().to_str().unwrap();
    for (flag, dir, why) in [
        (
            "--workflows",
            "/nonexistent-ocm-lab",
            "there is no such folder",
        ),
        ("--workflows", empty, "holds no workflow files"),
        (
            "--chart-patches",
            "/nonexistent-ocm-lab",
            "failed to read patch directory",
        ),
        ("--chart-patches", empty, "holds no patch files"),
    ] {
        let out = ocm_lab(&["plan", flag, dir]);
        assert_eq!(out.code, 2, "{flag} {dir}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{flag} {dir}: {}", out.stdout);
        assert!(out.stderr.contains(why), "{flag} {dir}: {}", out.stderr);
        // The help says to drop the flag (miette may wrap the line between the two words).
        assert!(
            out.stderr.contains("drop") && out.stderr.contains(flag),
            "{}",
            out.stderr
        );
        assert_eq!(
            out.stderr.matches(why).count(),
            1,
            "said once: {}",
            out.stderr
        );
    }
}

/// `-o json` gives JSON on stdout for failures too: a topology that does not validate, and a lab that is
/// not up for `verify` and `status` (each one document with the error's code, message and exit code).
#[test]
fn output_json_prints_a_json_error_document_when_the_command_fails_before_any_output() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: ocm-lab.io/v1alpha1\n").unwrap();
    let state = dir.path().join("state");
    let env = [("OCM_LAB_STATE_DIR", state.as_path())];
    for (args, code, error_code) in [
        (
            vec!["topology", "check", bad.to_str().unwrap(), "-o", "json"],
            2,
            "ocm_lab::invalid_file",
        ),
        (vec!["verify", "-o", "json"], 1, "ocm_lab::not_up"),
        (vec!["status", "-o", "json"], 1, "ocm_lab::not_up"),
    ] {
        let out = ocm_lab_env(&args, &env);
        assert_eq!(out.code, code, "{args:?}: {}", out.stderr);
        let doc: Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{args:?}: not one JSON document ({e}): {}", out.stdout));
        assert_eq!(doc["error"]["code"], error_code, "{args:?}: {doc}");
        assert_eq!(doc["error"]["exitCode"], code, "{args:?}: {doc}");
        assert!(doc["error"]["message"].is_string(), "{args:?}: {doc}");
    }
}

/// Errors are wrapped to the terminal between words only: a `command`, a path, a URL or an image
/// reference is never broken inside (nor at a hyphen), so each can be copied from one line.
#[test]
fn rendered_errors_never_break_a_command_or_path_across_lines() {
    #[derive(Debug, thiserror::Error, miette::Diagnostic)]
    #[error(
        "failed to write /var/lib/some-very-long-folder-name/with-many-hyphenated-parts/and-more-of-them/ocm-lab-sandbox-diagnostics.tar.gz: permission denied"
    )]
    #[diagnostic(
        code(ocm_lab::test),
        help(
            "pull the node image where a registry is reachable: `docker pull kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5`, then `ocm-lab bundle save -t workshop --out /home/instructor/workshop-material/lab-bundle.tar` and see https://kind.sigs.k8s.io/docs/user/quick-start/#installation"
        )
    )]
    struct Long;
    let text = ocm_lab::render(&Long);
    for token in [
        "/var/lib/some-very-long-folder-name/with-many-hyphenated-parts/and-more-of-them/ocm-lab-sandbox-diagnostics.tar.gz:",
        "`docker pull kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5`,",
        "`ocm-lab bundle save -t workshop --out /home/instructor/workshop-material/lab-bundle.tar`",
        "https://kind.sigs.k8s.io/docs/user/quick-start/#installation",
    ] {
        assert!(
            text.lines().any(|l| l.contains(token)),
            "{token} is broken across lines:\n{text}"
        );
    }
    // And it is still wrapped: between words, at the handler's width.
    assert!(text.lines().count() > 4, "{text}");
}

/// The workshop page asks for the memory `doctor` and `up` check for the workshop topology, and says that
/// its kubectl exercises need the real lab; `--simulate`'s help says kubectl cannot reach a simulated one.
#[test]
fn the_docs_and_help_state_what_the_checks_check() {
    let lab = crate::common::lab("workshop");
    let need_mib = lab.clusters().count() as u64 * ocm_lab::commands::doctor::MIB_PER_CLUSTER;
    let gib = format!("{} GiB", need_mib as f64 / 1024.0);
    let page = std::fs::read_to_string(root().join("docs/workshop-session.md")).unwrap();
    assert!(page.contains(&gib), "the page should ask for {gib}");
    assert!(page.contains("kubectl cannot reach"), "{page}");
    let help = ocm_lab(&["up", "--help"]).stdout;
    assert!(
        help.contains("kubectl cannot reach it") && help.contains("ocm-lab status --simulate"),
        "{help}"
    );
}
