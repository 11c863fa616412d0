//! `existing.joinEndpoint`: the hub API server URL spokes join with (their bootstrap kubeconfig's
//! server). Validated as an https URL; shown in the plan's bootstrap kubeconfig; used by the join in the
//! simulated lab (a test double), where it defaults to the server of the hub's kubeconfig context.

use base64::Engine as _;
use ocm_lab::backend::ObjectRef;
use serde_json::Value;

use crate::engine::{Harness, failure};
use crate::existing_lifecycle::{Shape, api, topology};

const HUB_EXISTING: &str =
    "existing: {kubeconfig: /nonexistent/hub.kubeconfig, context: their-hub}";

fn with_hub_existing(existing: &str) -> String {
    let text = topology(Shape::Hub);
    assert!(text.contains(HUB_EXISTING));
    text.replacen(HUB_EXISTING, existing, 1)
}

#[test]
fn a_join_endpoint_that_is_not_an_https_url_is_an_error_at_its_line() {
    for (url, why) in [
        (
            "http://hub.example.com:6443",
            "it must start with `https://`",
        ),
        (
            "https://hub.example.com:6443/api",
            "an API server URL has no path",
        ),
        ("https://:6443", "it names no host"),
        ("https://hub.example.com:http", "`http` is not a port"),
        ("https://[::1]:http", "`http` is not a port"),
        ("https://[::1", "an IPv6 address needs its closing `]`"),
        ("https://[::1]x", "it holds characters no host has"),
        (
            "https://::1:6443",
            "an IPv6 address goes in brackets: `https://[::1]:6443`",
        ),
        ("https://[]:6443", "it names no host"),
    ] {
        let text = with_hub_existing(&format!(
            "existing: {{context: their-hub, joinEndpoint: \"{url}\"}}"
        ));
        let errors = crate::common::topology_errors(&text);
        assert_eq!(
            errors,
            [format!(
                "spec.hub.existing.joinEndpoint: `{url}` is not an https URL: {why}"
            )],
            "{url}"
        );
        let line = text
            .lines()
            .position(|l| l.contains("joinEndpoint"))
            .unwrap()
            + 1;
        let e = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &text).unwrap_err();
        let rendered = ocm_lab::render(&e);
        assert!(
            rendered.contains(&format!("t.yaml:{line}:")),
            "{url}: no location in\n{rendered}"
        );
    }
    for url in [
        "https://hub.example.com:6443",
        "https://hub.example.com",
        "https://10.0.0.1:6443",
        "https://[::1]:6443",
        "https://[::1]",
        "https://[fd00::2]/",
    ] {
        assert!(
            crate::common::topology_errors(&with_hub_existing(&format!(
                "existing: {{context: their-hub, joinEndpoint: \"{url}\"}}"
            )))
            .is_empty(),
            "{url}"
        );
    }
}

#[test]
fn the_plan_shows_the_join_endpoint_in_the_bootstrap_kubeconfig() {
    let lab = |text: &str| {
        ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", text)
            .unwrap()
            .lab
    };
    let explicit = lab(&with_hub_existing(
        "existing: {context: their-hub, joinEndpoint: \"https://hub.example.com:6443/\"}",
    ));
    let template = ocm_lab::charts::bootstrap_kubeconfig_template(&explicit);
    assert!(
        template.contains("    server: https://hub.example.com:6443\n"),
        "{template}"
    );
    let default = lab(&with_hub_existing("existing: {context: their-hub}"));
    let template = ocm_lab::charts::bootstrap_kubeconfig_template(&default);
    assert!(
        template.contains("server: <the server of context `their-hub` in the hub's kubeconfig"),
        "{template}"
    );
    let kind = lab(&topology(Shape::Spokes));
    assert!(
        ocm_lab::charts::bootstrap_kubeconfig_template(&kind)
            .contains("server: https://hub-control-plane:6443\n")
    );
}

/// The server of the bootstrap kubeconfig the lab wrote on `spoke`.
async fn bootstrap_server(h: &Harness, spoke: &str) -> String {
    let secret = api(h, spoke)
        .await
        .get(&ObjectRef::new(
            "v1",
            "Secret",
            Some("open-cluster-management-agent"),
            "bootstrap-hub-kubeconfig",
        ))
        .await
        .unwrap()
        .expect("bootstrap Secret");
    let text = base64::engine::general_purpose::STANDARD
        .decode(secret["data"]["kubeconfig"].as_str().unwrap())
        .unwrap();
    let kc: Value = serde_saphyr::from_slice(&text).unwrap();
    kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn harness(text: &str, endpoint: &str) -> Harness {
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", text)
        .unwrap()
        .lab;
    let h = Harness::new(lab);
    h.sim.with_world(|w| {
        w.add_foreign_cluster("hub");
        w.set_endpoint("hub", endpoint);
    });
    h
}

#[tokio::test(start_paused = true)]
async fn simulated_spokes_join_an_existing_hub_at_its_join_endpoint() {
    let url = "https://hub.example.com:6443";
    let h = harness(
        &with_hub_existing(&format!(
            "existing: {{kubeconfig: /nonexistent/hub.kubeconfig, context: their-hub, joinEndpoint: \"{url}\"}}"
        )),
        url,
    );
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    for spoke in ["cluster1", "cluster2"] {
        assert_eq!(bootstrap_server(&h, spoke).await, url);
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_join_endpoint_simulated_spokes_join_at_the_server_of_the_hubs_kubeconfig_context()
 {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("hub.kubeconfig");
    let url = "https://api.hub.example.net:443";
    let lab_text = with_hub_existing(&format!(
        "existing: {{kubeconfig: {}, context: their-hub}}",
        kubeconfig.display()
    ));
    let h = harness(&lab_text, url);
    let ca = h.sim.with_world(|w| w.ca_pem("hub").to_owned());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: theirs\n  cluster:\n    server: {url}\n    certificate-authority-data: {}\ncontexts:\n- name: their-hub\n  context: {{cluster: theirs, user: admin}}\nusers:\n- name: admin\n  user: {{token: not-a-real-token}}\ncurrent-context: their-hub\n",
            base64::engine::general_purpose::STANDARD.encode(ca)
        ),
    )
    .unwrap();
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    assert_eq!(bootstrap_server(&h, "cluster1").await, url);
}

/// An existing hub whose kubeconfig reaches it at `server`, with no `joinEndpoint`; `cluster_info`: whether
/// its `kube-public/cluster-info` (which a kind hub has, naming `https://hub-control-plane:6443`) stays.
fn loopback_hub(dir: &std::path::Path, server: &str, cluster_info: bool) -> Harness {
    let kubeconfig = dir.join("hub.kubeconfig");
    let lab_text = with_hub_existing(&format!(
        "existing: {{kubeconfig: {}, context: their-hub}}",
        kubeconfig.display()
    ));
    let lab = ocm_lab::topology::load_str(&crate::common::host(), "t.yaml", &lab_text)
        .unwrap()
        .lab;
    let h = Harness::new(lab);
    h.sim.with_world(|w| {
        w.add_foreign_cluster("hub");
        if !cluster_info {
            w.delete_object(
                "hub",
                &ObjectRef::new("v1", "ConfigMap", Some("kube-public"), "cluster-info"),
            );
        }
    });
    let ca = h.sim.with_world(|w| w.ca_pem("hub").to_owned());
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: theirs\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\ncontexts:\n- name: their-hub\n  context: {{cluster: theirs, user: admin}}\nusers:\n- name: admin\n  user: {{token: not-a-real-token}}\ncurrent-context: their-hub\n",
            base64::engine::general_purpose::STANDARD.encode(ca)
        ),
    )
    .unwrap();
    h
}

/// A kind hub used as `existing:` is reached at `https://127.0.0.1:<port>` (kind's port forward on this
/// machine): its spokes join at its cluster-info's address instead, as OCM's recipe for kind hubs does.
#[tokio::test(start_paused = true)]
async fn spokes_of_an_existing_hub_at_a_loopback_address_join_at_its_cluster_info() {
    for server in [
        "https://127.0.0.1:40123",
        "https://localhost:6443",
        "https://[::1]:6443",
    ] {
        let dir = tempfile::tempdir().unwrap();
        let h = loopback_hub(dir.path(), server, true);
        let (res, _) = h.run("up").await;
        assert!(res.ok, "{server}: {}", failure(&res));
        assert_eq!(
            bootstrap_server(&h, "cluster1").await,
            "https://hub-control-plane:6443",
            "{server}"
        );
    }
}

/// Without a cluster-info to fall back on, `up` stops in preflight and names `joinEndpoint`, before
/// anything is created, instead of the spokes' joins timing out.
#[tokio::test(start_paused = true)]
async fn an_existing_hub_at_a_loopback_address_without_cluster_info_is_refused_in_preflight() {
    let dir = tempfile::tempdir().unwrap();
    let h = loopback_hub(dir.path(), "https://127.0.0.1:40123", false);
    let (res, _) = h.run("up").await;
    assert!(!res.ok);
    let (step, e) = res.failed.clone().unwrap();
    assert_eq!(step, "preflight", "{}", failure(&res));
    assert!(e.message.contains("127.0.0.1:40123"), "{}", e.message);
    assert!(
        e.help
            .unwrap_or_default()
            .contains("spec.hub.existing.joinEndpoint"),
        "{}",
        e.message
    );
    assert!(
        h.sim.with_world(|w| w.releases("cluster1")).is_empty(),
        "nothing was installed"
    );
}

#[test]
fn loopback_addresses_are_told_from_reachable_ones() {
    use ocm_lab::actions::is_loopback_url;
    for url in [
        "https://127.0.0.1:6443",
        "https://127.1.2.3",
        "https://localhost:6443",
        "https://LOCALHOST",
        "https://[::1]:6443",
    ] {
        assert!(is_loopback_url(url), "{url}");
    }
    for url in [
        "https://hub-control-plane:6443",
        "https://10.0.0.1:6443",
        "https://[fd00::2]:6443",
        "https://localhost.example.com:6443",
    ] {
        assert!(!is_loopback_url(url), "{url}");
    }
}
