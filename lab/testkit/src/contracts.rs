//! The command-line contracts of the outside tools ocm-lab runs (helm and kind), per supported version:
//! the subcommands and flags ocm-lab uses, how many positional arguments each subcommand takes, and what
//! the tool prints when a command line breaks the contract. Every row cites the upstream file, at that
//! version's tag, that defines it.
//!
//! The tests' stand-in binaries start with [`Contract::guard`], a POSIX `sh` function generated from the
//! table, so a stand-in refuses exactly what the real version refuses: an unknown flag, a flag without its
//! value, too many or too few arguments, an unknown subcommand. A flag that ocm-lab does not use is not in
//! the table and is refused too: adding a flag to the product means adding its row here, read from the
//! upstream source of every supported version.
//!
//! Both tools parse their command lines with spf13/cobra and spf13/pflag (helm v3.19–v4.2: cobra v1.10.2,
//! pflag v1.0.10; kind v0.27–v0.32: cobra v1.8.0, pflag v1.0.5, per each tag's `go.mod`). pflag's
//! `flag.go` words the flag errors (`unknown flag: --%s`, `flag needs an argument: %s`, `unknown
//! shorthand flag: %q in -%s`); helm prints a returned error as `Error: <error>` (cobra's default, with
//! `SilenceUsage: true` in helm's `root.go`) and exits 1; kind prints `ERROR: <error>` and exits 1
//! (kubernetes-sigs/kind `cmd/kind/app/main.go`).

/// Which tool a contract describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Helm,
    Kind,
}

/// How many positional arguments a subcommand takes, as its cobra `Args:` validator says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Args {
    /// helm's `require.NoArgs`: `"helm list" accepts no arguments`.
    HelmNone,
    /// helm's `require.ExactArgs(n)`: `"helm upgrade" requires 2 arguments`.
    HelmExact(usize),
    /// helm's `require.MinimumNArgs(n)`: `"helm uninstall" requires at least 1 argument`.
    HelmAtLeast(usize),
    /// cobra's own `cobra.NoArgs` (kind): `unknown command "x" for "kind create cluster"`.
    CobraNone,
}

/// One flag: its long name, its one-letter shorthand, and whether it takes a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flag {
    pub long: &'static str,
    pub short: Option<char>,
    pub takes_value: bool,
    /// The upstream file defining the flag at this version (`owner/repo@tag:path`).
    pub cite: String,
}

/// One subcommand ocm-lab runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The words after the binary's name: `["get", "values"]`.
    pub path: &'static [&'static str],
    /// cobra's `UseLine()`: what the tool prints after `Usage:` in an argument-count error.
    pub use_line: &'static str,
    pub args: Args,
    /// The flags of this subcommand (the tool's global flags are in [`Contract::global`]).
    pub flags: Vec<Flag>,
    /// The upstream file defining the subcommand at this version.
    pub cite: String,
}

/// One version of one tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contract {
    pub tool: Tool,
    /// The version, without the `v`: `4.2.4`.
    pub version: &'static str,
    /// Flags every subcommand accepts (helm's `pkg/cli/environment.go`, kind's root persistent flags).
    pub global: Vec<Flag>,
    pub commands: Vec<Command>,
}

/// The helm versions ocm-lab supports and the tests run against: the one `ocm-lab` downloads (v3.19.0),
/// the newest 3.x (v3.20.2), the first 4.x (v4.0.0), and the newest 4.x (v4.2.4).
pub const HELM_VERSIONS: &[&str] = &["3.19.0", "3.20.2", "4.0.0", "4.2.4"];

/// The kind versions the catalog can pick (`topology::catalog::KIND_FOR_NODE_MINOR` and
/// `KIND_FOR_OLDER_NODES`): v0.27.0 for older node images, v0.30.0, v0.31.0, and v0.32.0 (also the one
/// `ocm-lab` downloads).
pub const KIND_VERSIONS: &[&str] = &["0.27.0", "0.30.0", "0.31.0", "0.32.0"];

fn flag(long: &'static str, short: Option<char>, takes_value: bool, cite: &str) -> Flag {
    Flag {
        long,
        short,
        takes_value,
        cite: cite.to_owned(),
    }
}

/// The contract of helm `version` (one of [`HELM_VERSIONS`]).
///
/// # Panics
/// On a version that is not in [`HELM_VERSIONS`].
pub fn helm(version: &'static str) -> Contract {
    assert!(
        HELM_VERSIONS.contains(&version),
        "no helm contract for {version}"
    );
    let major4 = version.starts_with('4');
    // Helm 4 moved the commands from `cmd/helm` to `pkg/cmd`.
    let at = |file: &str| {
        let dir = if major4 { "pkg/cmd" } else { "cmd/helm" };
        format!("helm/helm@v{version}:{dir}/{file}")
    };
    let env = format!("helm/helm@v{version}:pkg/cli/environment.go");
    // `addValueOptionsFlags`, `addChartPathOptionsFlags`, `bindPostRenderFlag`, `bindOutputFlag`.
    let flags_go = at("flags.go");
    let chart_flags = || {
        vec![
            flag("values", Some('f'), true, &flags_go),
            flag("repo", None, true, &flags_go),
            flag("version", None, true, &flags_go),
            flag("post-renderer", None, true, &flags_go),
            flag("post-renderer-args", None, true, &flags_go),
        ]
    };
    let mut template = chart_flags();
    template.push(flag("include-crds", None, false, &at("template.go")));
    let mut upgrade = chart_flags();
    for long in ["install", "create-namespace", "skip-crds", "labels"] {
        upgrade.push(flag(long, None, long == "labels", &at("upgrade.go")));
    }
    let mut list = vec![
        flag("filter", Some('f'), true, &at("list.go")),
        flag("selector", Some('l'), true, &at("list.go")),
        flag("output", Some('o'), true, &flags_go),
    ];
    if !major4 {
        // Helm 4 lists releases of every status by default and has no `--all` (helm commit 8a73d979,
        // "fix: make helm list show all by default"; `pkg/action/list.go` `SetStateMask` defaults to
        // `ListAll` there, to `ListDeployed | ListFailed` in v3).
        list.push(flag("all", Some('a'), false, &at("list.go")));
    }
    Contract {
        tool: Tool::Helm,
        version,
        global: vec![
            flag("namespace", Some('n'), true, &env),
            flag("kubeconfig", None, true, &env),
            flag("kube-context", None, true, &env),
        ],
        commands: vec![
            Command {
                path: &["version"],
                use_line: "helm version [flags]",
                args: Args::HelmNone,
                flags: vec![flag("template", None, true, &at("version.go"))],
                cite: at("version.go"),
            },
            Command {
                path: &["template"],
                use_line: "helm template [NAME] [CHART] [flags]",
                // `require.MinimumNArgs(1)` (the release name is optional, the chart is not).
                args: Args::HelmAtLeast(1),
                flags: template,
                cite: at("template.go"),
            },
            Command {
                path: &["upgrade"],
                use_line: "helm upgrade [RELEASE] [CHART] [flags]",
                args: Args::HelmExact(2),
                flags: upgrade,
                cite: at("upgrade.go"),
            },
            Command {
                path: &["list"],
                use_line: "helm list [flags]",
                args: Args::HelmNone,
                flags: list,
                cite: at("list.go"),
            },
            Command {
                path: &["get", "values"],
                use_line: "helm get values RELEASE_NAME [flags]",
                args: Args::HelmExact(1),
                flags: vec![flag("output", Some('o'), true, &flags_go)],
                cite: at("get_values.go"),
            },
            Command {
                path: &["uninstall"],
                use_line: "helm uninstall RELEASE_NAME [...] [flags]",
                args: Args::HelmAtLeast(1),
                flags: vec![],
                cite: at("uninstall.go"),
            },
        ],
    }
}

/// The contract of kind `version` (one of [`KIND_VERSIONS`]). The subcommands ocm-lab uses and their
/// flags are the same in all of them.
///
/// # Panics
/// On a version that is not in [`KIND_VERSIONS`].
pub fn kind(version: &'static str) -> Contract {
    assert!(
        KIND_VERSIONS.contains(&version),
        "no kind contract for {version}"
    );
    let at = |file: &str| format!("kubernetes-sigs/kind@v{version}:pkg/cmd/kind/{file}");
    let create = at("create/cluster/createcluster.go");
    let delete = at("delete/cluster/deletecluster.go");
    let kubeconfig = at("get/kubeconfig/kubeconfig.go");
    Contract {
        tool: Tool::Kind,
        version,
        global: vec![
            flag("verbosity", Some('v'), true, &at("root.go")),
            flag("quiet", Some('q'), false, &at("root.go")),
        ],
        commands: vec![
            Command {
                path: &["version"],
                use_line: "kind version [flags]",
                args: Args::CobraNone,
                flags: vec![],
                cite: at("version/version.go"),
            },
            Command {
                path: &["create", "cluster"],
                use_line: "kind create cluster [flags]",
                args: Args::CobraNone,
                flags: vec![
                    flag("name", Some('n'), true, &create),
                    flag("config", None, true, &create),
                    flag("image", None, true, &create),
                    flag("retain", None, false, &create),
                    flag("wait", None, true, &create),
                    flag("kubeconfig", None, true, &create),
                ],
                cite: create.clone(),
            },
            Command {
                path: &["delete", "cluster"],
                use_line: "kind delete cluster [flags]",
                args: Args::CobraNone,
                flags: vec![
                    flag("name", Some('n'), true, &delete),
                    flag("kubeconfig", None, true, &delete),
                ],
                cite: delete.clone(),
            },
            Command {
                path: &["get", "clusters"],
                use_line: "kind get clusters [flags]",
                args: Args::CobraNone,
                flags: vec![],
                cite: at("get/clusters/clusters.go"),
            },
            Command {
                path: &["get", "kubeconfig"],
                use_line: "kind get kubeconfig [flags]",
                args: Args::CobraNone,
                flags: vec![
                    flag("name", Some('n'), true, &kubeconfig),
                    flag("internal", None, false, &kubeconfig),
                ],
                cite: kubeconfig.clone(),
            },
        ],
    }
}

impl Contract {
    /// The binary's name.
    pub fn name(&self) -> &'static str {
        match self.tool {
            Tool::Helm => "helm",
            Tool::Kind => "kind",
        }
    }

    /// What the tool prints before an error (helm: cobra's default; kind: `cmd/kind/app/main.go`).
    pub fn error_prefix(&self) -> &'static str {
        match self.tool {
            Tool::Helm => "Error: ",
            Tool::Kind => "ERROR: ",
        }
    }

    /// What the version command ocm-lab runs prints: `helm version --template '{{.Version}}'` prints
    /// the bare version (helm `pkg/version/version.go`, `v` + semver, no newline from the template);
    /// `kind version` prints `kind v<version> <go> <os>/<arch>` (kind `pkg/cmd/kind/version/version.go`
    /// `DisplayVersion`; the Go version here is illustrative).
    pub fn version_stdout(&self) -> String {
        match self.tool {
            Tool::Helm => format!("v{}", self.version),
            Tool::Kind => format!("kind v{} go1.24.3 linux/amd64\n", self.version),
        }
    }

    /// The subcommand at `path`.
    pub fn command(&self, path: &[&str]) -> Option<&Command> {
        self.commands.iter().find(|c| c.path == path)
    }

    /// A POSIX `sh` function `contract_check` that checks its arguments against this contract and, where
    /// the real tool would refuse them, prints the tool's error on stderr and exits 1. A stand-in script
    /// includes it and runs `contract_check "$@"` first.
    pub fn guard(&self) -> String {
        let mut spec = String::new();
        for c in &self.commands {
            let (kind, n) = match c.args {
                Args::HelmNone => ("none", 0),
                Args::HelmExact(n) => ("exact", n),
                Args::HelmAtLeast(n) => ("min", n),
                Args::CobraNone => ("cobra-none", 0),
            };
            let path = c.path.join(".");
            spec.push_str(&format!("cmd {path}|{kind}|{n}|{}\n", c.use_line));
            for f in &c.flags {
                spec.push_str(&flag_line(&path, f));
            }
        }
        for f in &self.global {
            spec.push_str(&flag_line("*", f));
        }
        GUARD
            .replace("@SPEC@", &spec)
            .replace("@PREFIX@", self.error_prefix())
            .replace("@NAME@", self.name())
    }
}

fn flag_line(path: &str, f: &Flag) -> String {
    format!(
        "flag {path}|{}|{}|{}\n",
        f.long,
        f.short.map(String::from).unwrap_or_default(),
        u8::from(f.takes_value)
    )
}

/// The checker: finds the subcommand (the leading words that name one), then parses the rest as pflag
/// does (`--name=value`, `--name value`, `-n value`, `-nvalue`, a lone `-` and everything after `--` are
/// arguments), then counts the arguments as the subcommand's cobra `Args:` does.
const GUARD: &str = r#"
contract_spec() {
cat <<'CONTRACT_SPEC'
@SPEC@CONTRACT_SPEC
}
contract_fail() { printf '%s%s\n' '@PREFIX@' "$1" >&2; exit 1; }
contract_flag() {
  # $1: path, $2: field (2 long, 3 short), $3: name; prints the flag's line.
  contract_spec | awk -F'|' -v p="flag $1" -v g='flag *' -v f="$2" -v n="$3" '($1 == p || $1 == g) && $f == n { print; exit }'
}
contract_check() {
  cpath=''
  while [ $# -gt 0 ]; do
    case "$1" in -*) break ;; esac
    cand="${cpath:+$cpath.}$1"
    if contract_spec | awk -F'|' -v c="$cand" '{ split($1, w, " "); if (w[1] == "cmd" && (w[2] == c || index(w[2], c ".") == 1)) found = 1 } END { exit !found }'; then
      cpath="$cand"; shift
    else
      break
    fi
  done
  cline=$(contract_spec | awk -F'|' -v c="cmd $cpath" '$1 == c { print; exit }')
  if [ -z "$cline" ]; then
    shown=$(printf '%s' "$cpath" | tr '.' ' ')
    contract_fail "unknown command \"$1\" for \"@NAME@${shown:+ $shown}\""
  fi
  npos=0; first=''
  while [ $# -gt 0 ]; do
    a="$1"; shift
    case "$a" in
      --) npos=$((npos + $#)); [ -n "$first" ] || first="$1"; break ;;
      --*=*)
        name="${a%%=*}"; name="${name#--}"
        [ -n "$(contract_flag "$cpath" 2 "$name")" ] || contract_fail "unknown flag: --$name" ;;
      --*)
        name="${a#--}"
        line=$(contract_flag "$cpath" 2 "$name")
        [ -n "$line" ] || contract_fail "unknown flag: --$name"
        case "$line" in *'|1')
          [ $# -gt 0 ] || contract_fail "flag needs an argument: $a"
          shift ;;
        esac ;;
      -?*)
        c=$(printf '%s' "$a" | cut -c2); rest=$(printf '%s' "$a" | cut -c3-)
        line=$(contract_flag "$cpath" 3 "$c")
        [ -n "$line" ] || contract_fail "unknown shorthand flag: '$c' in $a"
        case "$line" in *'|1')
          if [ -z "$rest" ]; then
            [ $# -gt 0 ] || contract_fail "flag needs an argument: '$c' in $a"
            shift
          fi ;;
        esac ;;
      *) npos=$((npos + 1)); [ -n "$first" ] || first="$a" ;;
    esac
  done
  kind=$(printf '%s' "$cline" | cut -d'|' -f2)
  n=$(printf '%s' "$cline" | cut -d'|' -f3)
  use=$(printf '%s' "$cline" | cut -d'|' -f4)
  cmdpath="@NAME@ $(printf '%s' "$cpath" | tr '.' ' ')"
  if [ "$n" = 1 ]; then word=argument; else word=arguments; fi
  case "$kind" in
    none) [ "$npos" -eq 0 ] || contract_fail "\"$cmdpath\" accepts no arguments

Usage:  $use" ;;
    exact) [ "$npos" -eq "$n" ] || contract_fail "\"$cmdpath\" requires $n $word

Usage:  $use" ;;
    min) [ "$npos" -ge "$n" ] || contract_fail "\"$cmdpath\" requires at least $n $word

Usage:  $use" ;;
    cobra-none) [ "$npos" -eq 0 ] || contract_fail "unknown command \"$first\" for \"$cmdpath\"" ;;
  esac
}
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_helm_3_has_list_all() {
        for v in HELM_VERSIONS {
            let c = helm(v);
            let list = c.command(&["list"]).unwrap();
            let has = list.flags.iter().any(|f| f.long == "all");
            assert_eq!(has, v.starts_with('3'), "{v}");
            assert!(
                list.cite.starts_with(&format!("helm/helm@v{v}:")),
                "{}",
                list.cite
            );
        }
    }

    #[test]
    fn kind_cites_each_version() {
        for v in KIND_VERSIONS {
            let c = kind(v);
            for cmd in &c.commands {
                assert!(cmd.cite.contains(&format!("@v{v}:")), "{}", cmd.cite);
            }
        }
    }
}
