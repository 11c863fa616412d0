//! `ocm-lab dashboard` and `status --watch` on the simulated lab, as a person in the room sees them: the
//! page in a real headless Chromium (driven over the DevTools protocol), the terminal view through its
//! output. A change made by another `ocm-lab` process while they run must show up.
//!
//! Without Chromium the browser test is listed as ignored, with the reason (`lab/build.rs`), unless
//! `OCM_LAB_REQUIRE_BROWSER=1` (set by `.ci/run`), which makes it run and fail. `OCM_LAB_CHROMIUM` names the
//! browser binary to use.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{default_with, ocm_lab_env};

/// How long a test waits for something to appear before it fails (generous: the machine may be busy; the
/// dashboard's own interval is half a second).
const PATIENCE: Duration = Duration::from_secs(30);

/// A simulated default lab, up, in a private state folder.
struct Lab {
    dir: tempfile::TempDir,
}

impl Lab {
    fn up() -> Self {
        let lab = Lab {
            dir: tempfile::tempdir().unwrap(),
        };
        let r = lab.run(&["up", "--simulate"]);
        assert_eq!(r.code, 0, "up --simulate: {}", r.stderr);
        lab
    }

    fn run(&self, args: &[&str]) -> crate::common::Output {
        ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", self.dir.path())])
    }

    /// Another `ocm-lab` process sets a new property on cluster1: `up` of the default topology with one
    /// more property.
    fn set_property_elsewhere(&self) {
        let topology = self.dir.path().join("more.yaml");
        std::fs::write(
            &topology,
            default_with(
                "region: us-east-1\n",
                "region: us-east-1\n        room.lab.example.com: back-row\n",
            ),
        )
        .unwrap();
        let r = self.run(&["up", "--simulate", "-t", topology.to_str().unwrap()]);
        assert_eq!(r.code, 0, "up with a new property: {}", r.stderr);
    }

    /// Starts a long-running `ocm-lab` command (stdout piped).
    fn spawn(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_ocm-lab"))
            .args(args)
            .env("OCM_LAB_STATE_DIR", self.dir.path())
            .env("NO_COLOR", "1")
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("ocm-lab starts")
    }

    /// The running exercise, as `exercise start` records it in the simulated lab's state folder.
    fn record_exercise(&self, json: &str) {
        let state = ocm_lab::state::StateDir {
            path: self.dir.path().join("sandbox/simulated"),
        };
        std::fs::write(state.exercise(), json).unwrap();
    }
}

/// Ctrl-C, and the exit status that follows.
fn interrupt(mut child: Child) -> std::process::ExitStatus {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    child.wait().unwrap()
}

/// Reads `stdout` until a line contains `needle`, returning everything read.
fn read_until(stdout: &mut BufReader<ChildStdout>, needle: &str) -> String {
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        let n = stdout.read_line(&mut line).unwrap();
        assert!(n > 0, "output ended before {needle:?}:\n{seen}");
        seen.push_str(&line);
        if line.contains(needle) {
            return seen;
        }
    }
}

/// The dashboard's printed URL.
fn dashboard_url(child: &mut Child) -> (String, BufReader<ChildStdout>) {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let text = read_until(&mut out, "http://");
    let url = text
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .to_owned();
    (url, out)
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn status_watch_redraws_when_another_process_changes_the_lab_and_exits_cleanly_on_ctrl_c() {
    let lab = Lab::up();
    let mut child = lab.spawn(&["status", "--watch", "--simulate"]);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let first = read_until(&mut out, "Last verification");
    for want in [
        "hub",
        "cluster1",
        "cluster2",
        "region=us-east-1",
        "sandbox-fleet",
    ] {
        assert!(first.contains(want), "no {want:?} in\n{first}");
    }
    assert!(!first.contains("back-row"), "{first}");
    lab.set_property_elsewhere();
    read_until(&mut out, "room.lab.example.com=back-row");
    let status = interrupt(child);
    assert_eq!(status.code(), Some(0), "Ctrl-C ends the watch cleanly");
}

/// The HTTP answer to a GET of `path` (status line, headers, body), over a plain connection.
fn http_get(url: &str, path: &str) -> String {
    let host = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut conn = std::net::TcpStream::connect(host).unwrap();
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn the_page_and_its_assets_come_from_the_dashboard_alone() {
    let lab = Lab::up();
    let mut child = lab.spawn(&["dashboard", "--simulate"]);
    let (url, _out) = dashboard_url(&mut child);
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let page = http_get(&url, "/");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(
        page.to_ascii_lowercase().contains(
            "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'"
        ),
        "the page may load nothing from elsewhere: {page}"
    );
    for asset in ["/", "/dashboard.css", "/dashboard.js"] {
        let body = http_get(&url, asset);
        let body = body.split("\r\n\r\n").nth(1).unwrap();
        for external in ["http://", "https://", "//fonts", "@import", "url("] {
            assert!(
                !body.contains(external),
                "{asset} references {external:?}: {body}"
            );
        }
    }
    let picture = http_get(&url, "/picture.json");
    assert!(picture.contains("\"simulated\":true"), "{picture}");
    assert_eq!(interrupt(child).code(), Some(0));
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn beyond_loopback_the_lab_is_shown_only_with_the_printed_token() {
    let lab = Lab::up();
    let mut child = lab.spawn(&["dashboard", "--simulate", "--listen", "0.0.0.0"]);
    let (url, _out) = dashboard_url(&mut child);
    let (base, token) = url.split_once("/?token=").expect("a token in the URL");
    assert_eq!(token.len(), 32, "128 bits, hex: {token}");
    for denied in ["/", "/picture.json", "/events", "/?token=0000"] {
        let answer = http_get(base, denied);
        assert!(answer.starts_with("HTTP/1.1 401"), "{denied}: {answer}");
    }
    let answer = http_get(base, &format!("/picture.json?token={token}"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(interrupt(child).code(), Some(0));
}

/// A headless Chromium on the DevTools protocol over a pipe (`--remote-debugging-pipe`: commands in on
/// fd 3, answers and events out on fd 4, each a JSON text ending in a NUL byte).
struct Browser {
    child: Child,
    to: std::io::PipeWriter,
    from: BufReader<std::io::PipeReader>,
    next_id: u64,
    session: Option<String>,
}

/// The browser to drive, or why there is none.
fn chromium() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("OCM_LAB_CHROMIUM") {
        return Ok(PathBuf::from(path));
    }
    [
        "chromium-headless-shell",
        "chromium",
        "chromium-browser",
        "google-chrome",
    ]
    .iter()
    .find_map(|name| which::which(name).ok())
    .ok_or_else(|| {
        "no chromium-headless-shell, chromium, chromium-browser or google-chrome on PATH \
             (Debian: apt-get install chromium-headless-shell; or set OCM_LAB_CHROMIUM)"
            .to_owned()
    })
}

impl Browser {
    fn start(binary: &Path, profile: &Path) -> Browser {
        use std::os::fd::AsRawFd;
        use std::os::unix::process::CommandExt;
        let (commands_in, to) = std::io::pipe().unwrap();
        let (from, answers_out) = std::io::pipe().unwrap();
        let (cin, aout) = (commands_in.as_raw_fd(), answers_out.as_raw_fd());
        let mut cmd = Command::new(binary);
        cmd.args([
            "--headless",
            "--remote-debugging-pipe",
            // Test containers run as root, where Chromium's sandbox cannot start.
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            // The network is off for the page: no name resolves but the dashboard's own address.
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: only dup2(2) between fork and exec; it clears close-on-exec on the new descriptors.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(cin, 3) < 0 || libc::dup2(aout, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        drop((commands_in, answers_out));
        Browser {
            child,
            to,
            from: BufReader::new(from),
            next_id: 0,
            session: None,
        }
    }

    /// Sends one command and returns its result (events in between are skipped).
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = &self.session {
            msg["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).unwrap();
        loop {
            let mut raw = Vec::new();
            let n = self.from.read_until(0, &mut raw).unwrap();
            assert!(n > 0, "chromium closed the DevTools pipe during {method}");
            raw.pop();
            let answer: Value = serde_json::from_slice(&raw).unwrap();
            if answer["id"] == id {
                assert!(answer["error"].is_null(), "{method}: {answer}");
                return answer["result"].clone();
            }
        }
    }

    /// Opens `url` in a new page of 1600×1250 CSS pixels and talks to that page from now on.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().unwrap().to_owned());
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1600, "height": 1250, "deviceScaleFactor": 1, "mobile": false}),
        );
        self.call("Page.navigate", json!({"url": url}));
    }

    /// Evaluates `expression` in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let r = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true}),
        );
        r["result"]["value"].clone()
    }

    /// The page's visible text once it contains every one of `wanted`; fails after [`PATIENCE`].
    fn wait_for_text(&mut self, wanted: &[&str]) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let text = self
                .eval("document.body ? document.body.innerText : ''")
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if wanted.iter().all(|w| text.contains(w)) {
                return text;
            }
            assert!(
                Instant::now() < deadline,
                "the page never showed all of {wanted:?}; it shows:\n{text}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn screenshot(&mut self, to: &Path) {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
#[cfg_attr(
    ocm_lab_tests_no_browser,
    ignore = "needs headless Chromium (Debian: apt-get install chromium-headless-shell; or set OCM_LAB_CHROMIUM), none found when the tests were built"
)]
fn the_page_in_chromium_draws_the_lab_and_a_property_set_elsewhere_arrives_without_a_reload() {
    let binary = chromium().unwrap_or_else(|why| panic!("{why}"));
    let lab = Lab::up();
    let lab_model = crate::common::lab("default");
    let mut dashboard = lab.spawn(&["dashboard", "--simulate"]);
    let (url, _out) = dashboard_url(&mut dashboard);
    let profile = tempfile::tempdir().unwrap();
    let mut browser = Browser::start(&binary, profile.path());
    browser.open(&url);

    let mut everything: Vec<String> = vec![lab_model.hub.cluster.name.clone(), "SIMULATED".into()];
    everything.extend(lab_model.spokes.iter().map(|s| s.cluster.name.clone()));
    everything.extend(lab_model.cluster_sets.iter().map(|s| s.name.to_string()));
    everything.extend(lab_model.namespaces.iter().cloned());
    everything.extend(["us-east-1", "eu-west-1", "open-cluster-management"].map(String::from));
    let wanted: Vec<&str> = everything.iter().map(String::as_str).collect();
    browser.wait_for_text(&wanted);
    // Each spoke has a ClusterProfile in each bound namespace.
    for ns in &lab_model.namespaces {
        for spoke in &lab_model.spokes {
            let found = browser.eval(&format!(
                "document.querySelector('[data-profile=\"{ns}/{}\"]') !== null",
                spoke.cluster.name
            ));
            assert_eq!(
                found,
                json!(true),
                "no ClusterProfile {ns}/{}",
                spoke.cluster.name
            );
        }
    }
    let external = browser.eval(
        "performance.getEntriesByType('resource').map(e => e.name).filter(n => !n.startsWith(location.origin))",
    );
    assert_eq!(
        external,
        json!([]),
        "the page loaded something from elsewhere"
    );

    // The same page, not reloaded, gets what another process changes.
    browser.eval("window.loadedOnce = true");
    lab.set_property_elsewhere();
    lab.record_exercise(r#"{"name":"gate-off","title":"Where did the properties go?","hop":"spoke-gate-off","future":1}"#);
    let text = browser.wait_for_text(&["back-row", "Where did the properties go?"]);
    assert!(
        !text.contains("spoke-gate-off"),
        "the hop to find stays off the projector: {text}"
    );
    assert_eq!(
        browser.eval("window.loadedOnce === true"),
        json!(true),
        "the page was reloaded"
    );

    // Let the highlight of what just changed show in the picture.
    let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard/dashboard.png");
    browser.screenshot(&shot);
    eprintln!("screenshot: {}", shot.display());
    drop(browser);
    assert_eq!(interrupt(dashboard).code(), Some(0));
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_binding_deleted_while_the_dashboard_runs_shows_its_namespace_unbound() {
    let lab = Lab::up();
    let mut child = lab.spawn(&["dashboard", "--simulate"]);
    let (url, _out) = dashboard_url(&mut child);
    let bound = |picture: &Value| -> Option<bool> {
        picture["namespaces"]
            .as_array()?
            .iter()
            .find(|n| n["name"] == "cluster-inventory")?["bound"]
            .as_bool()
    };
    let picture = |url: &str| -> Value {
        let answer = http_get(url, "/picture.json");
        serde_json::from_str(answer.split("\r\n\r\n").nth(1).unwrap()).unwrap()
    };
    assert_eq!(bound(&picture(&url)), Some(true));
    // As a participant's `kubectl delete managedclustersetbinding` would, in the saved simulated world.
    let world = lab.dir.path().join("sandbox/simulated/sim-world.json");
    let sim = ocm_lab_sim::SimLab::load(&world).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let deleted = rt.block_on(sim.api("hub").delete(&ocm_lab::backend::ObjectRef::new(
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
        Some("cluster-inventory"),
        "sandbox-fleet",
    )));
    assert!(deleted.unwrap(), "the binding existed");
    sim.save(&world).unwrap();
    let deadline = Instant::now() + PATIENCE;
    let last = loop {
        let p = picture(&url);
        if bound(&p) == Some(false) || Instant::now() > deadline {
            break p;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(bound(&last), Some(false), "{last:#}");
    let fleet = last["sets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "sandbox-fleet")
        .unwrap();
    assert!(
        !fleet["bindings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["namespace"] == "cluster-inventory"),
        "{fleet:#}"
    );
    assert_eq!(interrupt(child).code(), Some(0));
}
