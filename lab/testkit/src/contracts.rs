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
    /// containerd's `ctr`, as shipped in a kindest/node image ([`ctr`]).
    Ctr,
    /// cri-tools' `crictl`, as shipped in a kindest/node image ([`crictl`]).
    Crictl,
    /// The `containerd` binary itself, for `containerd config dump` ([`containerd`]).
    Containerd,
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
    /// Any number of arguments (`ctr images list` takes filters).
    Any,
    /// `ctr images import`: the first argument is the archive (`-` for stdin); without one, ctr opens
    /// `""` and fails with `open : no such file or directory`.
    CtrImportFile,
    /// `crictl pull`: without an image, `image name cannot be empty`; with more than one argument it
    /// prints the command's help and exits 0 having pulled nothing (`cli.ShowSubcommandHelp`).
    CrictlImage,
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
            Tool::Ctr => "ctr",
            Tool::Crictl => "crictl",
            Tool::Containerd => "containerd",
        }
    }

    /// What the tool prints before an error (helm: cobra's default; kind: `cmd/kind/app/main.go`).
    pub fn error_prefix(&self) -> &'static str {
        match self.tool {
            Tool::Helm => "Error: ",
            Tool::Kind => "ERROR: ",
            // containerd `cmd/ctr/main.go`: `fmt.Fprintf(os.Stderr, "ctr: %s\n", err)`.
            Tool::Ctr => "ctr: ",
            // containerd `cmd/containerd/main.go`: `fmt.Fprintf(os.Stderr, "containerd: %s\n", err)`.
            Tool::Containerd => "containerd: ",
            // cri-tools `cmd/crictl/main.go`: `logrus.Fatal(err)`, logrus's text formatter without a
            // terminal (the time is illustrative).
            Tool::Crictl => "time=\"2026-01-01T00:00:00Z\" level=fatal msg=",
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
            // ocm-lab runs no version command of the node's tools.
            Tool::Ctr | Tool::Crictl | Tool::Containerd => String::new(),
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
        if matches!(self.tool, Tool::Ctr | Tool::Crictl | Tool::Containerd) {
            return self.go_flag_guard();
        }
        let mut spec = String::new();
        for c in &self.commands {
            let (kind, n) = match c.args {
                Args::HelmNone => ("none", 0),
                Args::HelmExact(n) => ("exact", n),
                Args::HelmAtLeast(n) => ("min", n),
                Args::CobraNone => ("cobra-none", 0),
                Args::Any | Args::CtrImportFile | Args::CrictlImage => {
                    unreachable!("urfave/cli arguments in a cobra contract")
                }
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

/// The tools a kindest/node image ships, for each node image the catalog pins
/// (`topology::catalog::KNOWN_KIND_NODE_IMAGES`): the kind release whose node-image build made it, and
/// the containerd (`ctr`) and cri-tools (`crictl`) versions that release's base image installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeTools {
    /// The node image, without its digest.
    pub image: &'static str,
    /// The kind release whose `kind build node-image` built it (its release notes list the image).
    pub kind: &'static str,
    pub containerd: &'static str,
    pub crictl: &'static str,
}

impl NodeTools {
    /// Where the versions are read: the base image's `Dockerfile` at the kind tag (`ARG
    /// CONTAINERD_VERSION`, `ARG CRICTL_VERSION`); the node image is built `FROM` the base image that
    /// tag's `pkg/build/nodeimage/defaults.go` names (`DefaultBaseImage`).
    pub fn cite(&self) -> String {
        format!(
            "kubernetes-sigs/kind@v{}:images/base/Dockerfile, pkg/build/nodeimage/defaults.go",
            self.kind
        )
    }
}

/// The node images the catalog pins and the tools in them: kindest/node v1.36.1 is kind v0.32.0's
/// default (base `kindest/base:v20260601-995e8fa5`: containerd v2.3.1, crictl v1.36.0); v1.35.0 is kind
/// v0.31.0's (base `kindest/base:v20251215-d00590df`: containerd v2.2.0, crictl v1.33.0).
pub const NODE_IMAGES: &[NodeTools] = &[
    NodeTools {
        image: "kindest/node:v1.36.1",
        kind: "0.32.0",
        containerd: "2.3.1",
        crictl: "1.36.0",
    },
    NodeTools {
        image: "kindest/node:v1.35.0",
        kind: "0.31.0",
        containerd: "2.2.0",
        crictl: "1.33.0",
    },
];

/// The `ctr` versions in [`NODE_IMAGES`].
pub const CTR_VERSIONS: &[&str] = &["2.2.0", "2.3.1"];
/// The `crictl` versions in [`NODE_IMAGES`].
pub const CRICTL_VERSIONS: &[&str] = &["1.33.0", "1.36.0"];

/// The contract of containerd `version`'s `ctr` (one of [`CTR_VERSIONS`]): the global `--namespace`
/// (`-n`), `images import` with the flags kind's `LoadImageArchive` and ocm-lab pass, and `images list`
/// (`ls`). ctr parses with urfave/cli v2 (v2.27.7 in both tags' `go.mod`), which uses Go's `flag`
/// package level by level: global flags before the first command word, a command's flags before its
/// first argument, `-f` and `--f` alike, a value as `--f=v` or `--f v`.
///
/// # Panics
/// On a version that is not in [`CTR_VERSIONS`].
pub fn ctr(version: &'static str) -> Contract {
    assert!(
        CTR_VERSIONS.contains(&version),
        "no ctr contract for {version}"
    );
    let at = |file: &str| format!("containerd/containerd@v{version}:{file}");
    let main = at("cmd/ctr/app/main.go");
    let import = at("cmd/ctr/commands/images/import.go");
    let images = at("cmd/ctr/commands/images/images.go");
    let list = |word: &'static str| Command {
        path: if word == "ls" {
            &["images", "ls"]
        } else {
            &["images", "list"]
        },
        use_line: "ctr images list [flags] [<filter>, ...]",
        // The arguments are filters (`imageStore.List(ctx, filters...)`).
        args: Args::Any,
        flags: vec![],
        cite: images.clone(),
    };
    Contract {
        tool: Tool::Ctr,
        version,
        global: vec![
            flag("namespace", None, true, &main),
            flag("n", None, true, &main),
        ],
        commands: vec![
            Command {
                path: &["images", "import"],
                use_line: "ctr images import [flags] <in>",
                args: Args::CtrImportFile,
                flags: vec![
                    flag("digests", None, false, &import),
                    flag("all-platforms", None, false, &import),
                    // `commands.SnapshotterFlags`, appended to import's flags.
                    flag(
                        "snapshotter",
                        None,
                        true,
                        &at("cmd/ctr/commands/commands.go"),
                    ),
                ],
                cite: import.clone(),
            },
            list("list"),
            // `Aliases: []string{"ls"}`.
            list("ls"),
        ],
    }
}

/// The contract of the `containerd` binary of containerd `version` (one of [`CTR_VERSIONS`]): `containerd
/// config dump`, which ocm-lab runs to read the CRI's snapshotter as kind does (`cmd/containerd/command/
/// config.go` `configCommand`, urfave/cli v2 as [`ctr`]).
///
/// # Panics
/// On a version that is not in [`CTR_VERSIONS`].
pub fn containerd(version: &'static str) -> Contract {
    assert!(
        CTR_VERSIONS.contains(&version),
        "no containerd contract for {version}"
    );
    Contract {
        tool: Tool::Containerd,
        version,
        global: vec![],
        commands: vec![Command {
            path: &["config", "dump"],
            use_line: "containerd config dump [arguments...]",
            args: Args::Any,
            flags: vec![],
            cite: format!("containerd/containerd@v{version}:cmd/containerd/command/config.go"),
        }],
    }
}

/// The contract of cri-tools `version`'s `crictl` (one of [`CRICTL_VERSIONS`]): `crictl pull <image>`
/// (`cmd/crictl/image.go` `pullImageCommand`), parsed by urfave/cli v2 as [`ctr`] is.
///
/// # Panics
/// On a version that is not in [`CRICTL_VERSIONS`].
pub fn crictl(version: &'static str) -> Contract {
    assert!(
        CRICTL_VERSIONS.contains(&version),
        "no crictl contract for {version}"
    );
    let image = format!("kubernetes-sigs/cri-tools@v{version}:cmd/crictl/image.go");
    Contract {
        tool: Tool::Crictl,
        version,
        global: vec![],
        commands: vec![Command {
            path: &["pull"],
            use_line: "crictl pull [command options] NAME[:TAG|@DIGEST]",
            args: Args::CrictlImage,
            flags: vec![],
            cite: image,
        }],
    }
}

/// What `ctr images list` prints for `images` (reference, media type, digest, size, platforms,
/// labels): a header and one row each through Go's `tabwriter.NewWriter(os.Stdout, 1, 8, 1, ' ', 0)`,
/// every cell tab-terminated (containerd `cmd/ctr/commands/images/images.go`), so each column is as
/// wide as its widest cell plus one space.
pub fn ctr_images_list_output(images: &[[&str; 6]]) -> String {
    let mut rows = vec![["REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"]];
    rows.extend_from_slice(images);
    let widths: Vec<usize> = (0..6)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0) + 1)
        .collect();
    let mut out = String::new();
    for row in &rows {
        for (cell, width) in row.iter().zip(&widths) {
            out.push_str(&format!("{cell:<width$}"));
        }
        out.push('\n');
    }
    out
}

impl Contract {
    /// [`Contract::guard`] for a urfave/cli v2 tool (ctr, crictl): Go `flag` parsing per command level
    /// (golang `src/flag/flag.go` words the errors: `flag provided but not defined: -%s`, `flag needs an
    /// argument: -%s`, `bad flag syntax: %s`), the tool's own argument checks, and urfave's answer to a
    /// command word it does not know (`No help topic for '%v'`, exit 3: urfave/cli v2.27.7 `help.go`,
    /// printed and exited by `HandleExitCoder` before the tool's own error handling). The help text urfave
    /// prints on stdout with a flag error (`Incorrect Usage: …`) is not reproduced.
    fn go_flag_guard(&self) -> String {
        let mut spec = String::new();
        for c in &self.commands {
            let kind = match c.args {
                Args::Any => "any",
                Args::CtrImportFile => "ctr-import",
                Args::CrictlImage => "crictl-image",
                _ => unreachable!("a cobra argument rule in a urfave/cli contract"),
            };
            let path = c.path.join(".");
            spec.push_str(&format!("cmd {path}|{kind}|0|{}\n", c.use_line));
            for f in &c.flags {
                spec.push_str(&format!(
                    "flag {path}|{}||{}\n",
                    f.long,
                    u8::from(f.takes_value)
                ));
            }
        }
        for f in &self.global {
            spec.push_str(&format!("flag |{}||{}\n", f.long, u8::from(f.takes_value)));
        }
        let fail = match self.tool {
            Tool::Crictl => format!("{}\"%s\"\\n", self.error_prefix()),
            _ => format!("{}%s\\n", self.error_prefix()),
        };
        GO_FLAG_GUARD
            .replace("@SPEC@", &spec)
            .replace("@FAIL@", &fail.replace('\'', "'\\''"))
    }
}

const GO_FLAG_GUARD: &str = r#"
contract_spec() {
cat <<'CONTRACT_SPEC'
@SPEC@CONTRACT_SPEC
}
contract_fail() { printf '@FAIL@' "$1" >&2; exit 1; }
contract_flag() {
  contract_spec | awk -F'|' -v p="flag $1" -v n="$2" '$1 == p && $2 == n { print; exit }'
}
contract_check() {
  cpath=''
  while :; do
    while [ $# -gt 0 ]; do
      a="$1"
      case "$a" in
        --) shift; break ;;
        -) break ;;
        -*) ;;
        *) break ;;
      esac
      shift
      name="${a#-}"; name="${name#-}"
      case "$name" in ''|-*|=*) contract_fail "bad flag syntax: $a" ;; esac
      hasvalue=0
      case "$name" in *=*) name="${name%%=*}"; hasvalue=1 ;; esac
      line=$(contract_flag "$cpath" "$name")
      [ -n "$line" ] || contract_fail "flag provided but not defined: -$name"
      case "$line" in *'|1')
        if [ "$hasvalue" = 0 ]; then
          [ $# -gt 0 ] || contract_fail "flag needs an argument: -$name"
          shift
        fi ;;
      esac
    done
    [ $# -gt 0 ] || break
    cand="${cpath:+$cpath.}$1"
    if contract_spec | awk -F'|' -v c="$cand" '{ split($1, w, " "); if (w[1] == "cmd" && (w[2] == c || index(w[2], c ".") == 1)) found = 1 } END { exit !found }'; then
      cpath="$cand"; shift
    else
      break
    fi
  done
  cline=$(contract_spec | awk -F'|' -v c="cmd $cpath" '$1 == c { print; exit }')
  if [ -z "$cline" ]; then
    printf "No help topic for '%s'\n" "$1" >&2; exit 3
  fi
  kind=$(printf '%s' "$cline" | cut -d'|' -f2)
  use=$(printf '%s' "$cline" | cut -d'|' -f4)
  case "$kind" in
    ctr-import) [ $# -gt 0 ] || contract_fail "open : no such file or directory" ;;
    crictl-image)
      [ $# -gt 0 ] && [ -n "$1" ] || contract_fail "image name cannot be empty"
      if [ $# -gt 1 ]; then printf 'USAGE:\n   %s\n' "$use"; exit 0; fi ;;
  esac
}
"#;

/// A Docker Engine API version (`1.41`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ApiVersion(pub u32, pub u32);

impl ApiVersion {
    /// `1.41` → `ApiVersion(1, 41)`.
    pub fn parse(text: &str) -> Option<ApiVersion> {
        let (major, minor) = text.trim().trim_start_matches('v').split_once('.')?;
        Some(ApiVersion(major.parse().ok()?, minor.parse().ok()?))
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// One Docker Engine API endpoint ocm-lab calls through bollard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    pub method: &'static str,
    /// The path, `{}` standing for one path segment (a name or ID).
    pub path: &'static str,
    /// The query parameters bollard sends for ocm-lab's options.
    pub query: &'static [&'static str],
    /// The oldest API version that serves the endpoint with those parameters.
    pub min_api: ApiVersion,
    /// The bollard 0.21.1 method that makes the call.
    pub bollard: &'static str,
    /// The upstream source: moby's API reference and version history.
    pub cite: &'static str,
}

/// The Docker Engine API calls ocm-lab makes. bollard 0.21.1 sends them without a `/v1.xx` prefix (its
/// `Url::join` with an absolute path drops it), so the engine serves them at its own version: every row
/// must be served by the oldest engine ocm-lab meets.
pub const DOCKER_API: &[Endpoint] = &[
    Endpoint {
        method: "GET",
        path: "/_ping",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "ping",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; the daemon's liveness probe",
    },
    Endpoint {
        method: "GET",
        path: "/version",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "version",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; version and API version negotiation (`negotiate_version` too)",
    },
    Endpoint {
        method: "GET",
        path: "/info",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "info",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "GET",
        path: "/containers/json",
        query: &["all", "size", "filters"],
        min_api: MIN_ENGINE_API,
        bollard: "list_containers",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; `filters` as JSON (`label`, `network`, `name`)",
    },
    Endpoint {
        method: "POST",
        path: "/containers/create",
        query: &["name", "platform"],
        min_api: MIN_ENGINE_API,
        bollard: "create_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; bollard always sends `platform`, empty here: the parameter is API 1.41 (version-history v1.41), an older engine ignores it, and empty means the image's own platform",
    },
    Endpoint {
        method: "POST",
        path: "/containers/{}/start",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "start_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "GET",
        path: "/containers/{}/json",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "inspect_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/containers/{}/attach",
        query: &["logs", "stream", "stdin", "stdout", "stderr"],
        min_api: MIN_ENGINE_API,
        bollard: "attach_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; hijacked: the engine upgrades the connection",
    },
    Endpoint {
        method: "DELETE",
        path: "/containers/{}",
        query: &["v", "force", "link"],
        min_api: MIN_ENGINE_API,
        bollard: "remove_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "PUT",
        path: "/containers/{}/archive",
        query: &["path"],
        min_api: MIN_ENGINE_API,
        bollard: "upload_to_container",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; the body is a tar (API 1.20)",
    },
    Endpoint {
        method: "POST",
        path: "/containers/{}/exec",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "create_exec",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/exec/{}/start",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "start_exec",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; hijacked: the engine upgrades the connection",
    },
    Endpoint {
        method: "GET",
        path: "/exec/{}/json",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "inspect_exec",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; `ExitCode`",
    },
    Endpoint {
        method: "GET",
        path: "/networks",
        query: &["filters"],
        min_api: MIN_ENGINE_API,
        bollard: "list_networks",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "GET",
        path: "/networks/{}",
        query: &["verbose", "scope"],
        min_api: MIN_ENGINE_API,
        bollard: "inspect_network",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/networks/create",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "create_network",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; bollard cannot send `CheckDuplicate`; engines below API 1.44 then accept a second network of a name (version-history v1.44), which ocm-lab resolves itself",
    },
    Endpoint {
        method: "DELETE",
        path: "/networks/{}",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "remove_network",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/networks/{}/connect",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "connect_network",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "GET",
        path: "/images/{..}/json",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "inspect_image",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; an image name may hold `/`: moby routes `/images/{name:.*}/json`",
    },
    Endpoint {
        method: "POST",
        path: "/images/{..}/tag",
        query: &["repo", "tag"],
        min_api: MIN_ENGINE_API,
        bollard: "tag_image",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/images/create",
        query: &["fromImage", "tag", "platform"],
        min_api: MIN_ENGINE_API,
        bollard: "create_image",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md; the local registry's image when missing (`platform`: API 1.32)",
    },
    Endpoint {
        method: "GET",
        path: "/images/{..}/get",
        query: &[],
        min_api: MIN_ENGINE_API,
        bollard: "export_image",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
    Endpoint {
        method: "POST",
        path: "/images/load",
        query: &["quiet"],
        min_api: MIN_ENGINE_API,
        bollard: "import_image_stream",
        cite: "moby/moby@v20.10.24:api/swagger.yaml, docs/api/version-history.md",
    },
];

/// The oldest API version a Docker engine serves by default (moby `daemon/config/config.go`
/// `MinAPIVersion = "1.24"`, from v20.10 through v29; v29's clients ask for 1.44 but its daemon still
/// serves 1.24). Every endpoint and parameter ocm-lab uses is in the API by then (moby v20.10.24
/// `docs/api/version-history.md`: networks 1.21, archive upload 1.20, image load `quiet` 1.23), except
/// `platform` on container create, which bollard sends empty and an older engine ignores.
pub const MIN_ENGINE_API: ApiVersion = ApiVersion(1, 24);

/// Whether the gate forwards `method target` to an engine serving API `engine`: `Err` names the broken
/// term of the contract (an endpoint or parameter not in [`DOCKER_API`], or an engine older than the
/// row's minimum).
pub fn docker_api_allows(method: &str, target: &str, engine: ApiVersion) -> Result<(), String> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    // A `/v1.xx` prefix, should bollard send one.
    let path = match path.strip_prefix("/v") {
        Some(rest) if rest.split('/').next().and_then(ApiVersion::parse).is_some() => {
            &rest[rest.find('/').unwrap_or(rest.len())..]
        }
        _ => path,
    };
    // `{}` is one path segment; `{..}` one or more (an image name such as `kindest/node:v1.36.1`).
    let matches = |pattern: &str| {
        let want: Vec<&str> = pattern.split('/').collect();
        let got: Vec<&str> = path.split('/').collect();
        if let Some(at) = want.iter().position(|w| *w == "{..}") {
            let tail = want.len() - at - 1;
            got.len() > at + tail
                && want[..at] == got[..at]
                && want[at + 1..] == got[got.len() - tail..]
                && got[at..got.len() - tail].iter().all(|g| !g.is_empty())
        } else {
            want.len() == got.len()
                && want
                    .iter()
                    .zip(&got)
                    .all(|(w, g)| *w == "{}" && !g.is_empty() || w == g)
        }
    };
    let row = DOCKER_API
        .iter()
        .find(|e| e.method == method && matches(e.path))
        .ok_or_else(|| format!("{method} {path} is not in the Docker API contract"))?;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = pair.split('=').next().unwrap_or_default();
        if !row.query.contains(&key) {
            return Err(format!(
                "{method} {} sends query parameter `{key}`, which the contract does not list",
                row.path
            ));
        }
    }
    if engine < row.min_api {
        return Err(format!(
            "{method} {} needs API {} and the engine serves {engine}",
            row.path, row.min_api
        ));
    }
    Ok(())
}

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
