//! Per-cluster CAs in the simulated lab: every simulated cluster has its own CA and
//! serving certificates, everything that carries a CA carries the right cluster's, and a join with
//! another cluster's CA fails as it would against real clusters.

use ocm_lab::backend::ObjectRef;
use ocm_lab::step::events::Event;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::engine::{Harness, failure};

fn b64(text: &str) -> String {
    use base64::Engine as _;
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .expect("base64"),
    )
    .expect("utf-8 PEM")
}

/// The DER certificates of a PEM bundle, in order.
fn ders(pem_text: &str) -> Vec<Vec<u8>> {
    pem::parse_many(pem_text)
        .expect("PEM")
        .into_iter()
        .filter(|p| p.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect()
}

/// Verifies a presented chain (leaf first) for `name` with `ca_pem` as the only trust anchor, the way a
/// TLS client (rustls/webpki) does.
fn verify(chain_pem: &str, ca_pem: &str, name: &str) -> Result<(), String> {
    let chain = ders(chain_pem);
    let ca = ders(ca_pem);
    let ca_der = CertificateDer::from(ca[0].as_slice());
    let anchor = webpki::anchor_from_trusted_cert(&ca_der).map_err(|e| e.to_string())?;
    let leaf = CertificateDer::from(chain[0].as_slice());
    let ee = webpki::EndEntityCert::try_from(&leaf).map_err(|e| e.to_string())?;
    let intermediates: Vec<CertificateDer<'_>> = chain[1..]
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    ee.verify_for_usage(
        &[webpki::ring::ECDSA_P256_SHA256],
        &[anchor],
        &intermediates,
        UnixTime::now(),
        webpki::KeyUsage::server_auth(),
        None,
        None,
    )
    .map_err(|e| e.to_string())?;
    ee.verify_is_valid_for_subject_name(&ServerName::try_from(name).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

fn kubeconfig_ca(text: &str) -> String {
    let kc: Value = serde_saphyr::from_str(text).expect("kubeconfig YAML");
    b64(kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("certificate-authority-data"))
}

fn get(h: &Harness, cluster: &str, r: &ObjectRef) -> Value {
    h.sim
        .object(cluster, r)
        .unwrap_or_else(|| panic!("{cluster} has no {r}"))
}

#[tokio::test(start_paused = true)]
async fn every_simulated_cluster_has_its_own_ca_and_every_ca_carrier_names_the_right_one() {
    let h = Harness::default_lab();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "{}", failure(&r));
    let hub = h.lab.hub.cluster.name.clone();
    let clusters: Vec<String> = h.lab.clusters().map(|c| c.name.clone()).collect();
    let cas: Vec<String> = h
        .sim
        .with_world(|w| clusters.iter().map(|c| w.ca_pem(c).to_owned()).collect());
    for (i, a) in cas.iter().enumerate() {
        assert_eq!(ders(a).len(), 1, "{}: one CA certificate", clusters[i]);
        for b in &cas[i + 1..] {
            assert_ne!(ders(a), ders(b), "two simulated clusters share a CA");
        }
    }
    for (c, ca) in clusters.iter().zip(&cas) {
        // The API server's certificate chains to its own CA only, under the names clients use.
        let serving = h.sim.with_world(|w| w.apiserver_cert_pem(c).to_owned());
        verify(&serving, ca, "localhost").unwrap();
        verify(&serving, ca, &format!("{c}-control-plane")).unwrap();
        for (other, other_ca) in clusters.iter().zip(&cas).filter(|(o, _)| *o != c) {
            assert!(
                verify(&serving, other_ca, "localhost").is_err(),
                "{c}'s API server verified with {other}'s CA"
            );
        }
        // kubeadm's cluster-info, kube-root-ca.crt and the kubeconfig the lab wrote.
        let info = get(
            &h,
            c,
            &ObjectRef::new("v1", "ConfigMap", Some("kube-public"), "cluster-info"),
        );
        assert_eq!(
            &kubeconfig_ca(info["data"]["kubeconfig"].as_str().unwrap()),
            ca,
            "{c} cluster-info"
        );
        let root = get(
            &h,
            c,
            &ObjectRef::new("v1", "ConfigMap", Some("kube-public"), "kube-root-ca.crt"),
        );
        assert_eq!(root["data"]["ca.crt"].as_str(), Some(ca.as_str()));
        let kubeconfig = std::fs::read_to_string(h.state.kubeconfig(c)).unwrap();
        assert_eq!(&kubeconfig_ca(&kubeconfig), ca, "{c} kubeconfig");
    }

    for (spoke, spoke_ca) in clusters.iter().zip(&cas).filter(|(c, _)| **c != hub) {
        // The managed-serviceaccount token is for the spoke's API server: the spoke's CA, in the token
        // Secret and in its copy next to the ClusterProfile.
        let token = get(
            &h,
            &hub,
            &ObjectRef::new("v1", "Secret", Some(spoke), "inventory-reader"),
        );
        assert_eq!(&b64(token["data"]["ca.crt"].as_str().unwrap()), spoke_ca);
        let synced = get(
            &h,
            &hub,
            &ObjectRef::new(
                "v1",
                "Secret",
                Some("cluster-inventory"),
                &format!("{spoke}-inventory-reader"),
            ),
        );
        assert_eq!(&b64(synced["data"]["ca.crt"].as_str().unwrap()), spoke_ca);
        // The access provider points at the hub's user server: its CA bundle is the hub's.
        let profile = get(
            &h,
            &hub,
            &ObjectRef::new(
                "multicluster.x-k8s.io/v1alpha1",
                "ClusterProfile",
                Some("cluster-inventory"),
                spoke,
            ),
        );
        let provider = &profile["status"]["accessProviders"][0]["cluster"];
        let bundle = b64(provider["certificate-authority-data"].as_str().unwrap());
        let presented = get(
            &h,
            &hub,
            &ObjectRef::new(
                "v1",
                "Secret",
                Some("open-cluster-management-addon"),
                "cluster-proxy-user-serving-cert",
            ),
        );
        let chain = b64(presented["data"]["tls.crt"].as_str().unwrap());
        // Signed by the hub's cluster-proxy CA, which the bundle carries (as the real one does:
        // fixtures/recorded/8-access-providers-and-agent-loss/), not by any cluster's own CA.
        assert_eq!(ders(&bundle), ders(&chain));
        let proxy_ca = pem::encode(&pem::Pem::new("CERTIFICATE", ders(&bundle)[1].clone()));
        verify(
            &chain,
            &proxy_ca,
            "cluster-proxy-addon-user.open-cluster-management-addon",
        )
        .unwrap();
        verify(&chain, &proxy_ca, "localhost").unwrap();
        for (c, ca) in clusters.iter().zip(&cas) {
            assert!(!ders(&bundle).contains(&ders(ca)[0]), "{c}'s CA");
            assert!(verify(&chain, ca, "localhost").is_err(), "{c}'s CA");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_join_with_another_clusters_ca_fails_naming_the_unknown_authority() {
    let h = Harness::default_lab();
    let plan = crate::common::plan_workflow(&h.lab, "up");
    let mut created = plan.clone();
    created
        .steps
        .retain(|s| s.id == "preflight" || s.id == "network" || s.id.starts_with("create["));
    let (r, _) = h.run_plan(&created, CancellationToken::new(), |_| {}).await;
    assert!(r.ok, "{}", failure(&r));
    // A wrong-CA bug: the hub's cluster-info carries cluster1's CA instead of the hub's.
    let hub = h.lab.hub.cluster.name.clone();
    let info_ref = ObjectRef::new("v1", "ConfigMap", Some("kube-public"), "cluster-info");
    h.sim.with_world(|w| {
        let wrong = w.ca_pem("cluster1").to_owned();
        let mut info = w.get_object(&hub, &info_ref).unwrap();
        let text = info["data"]["kubeconfig"].as_str().unwrap().to_owned();
        let right = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(w.ca_pem(&hub))
        };
        let wrong = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(wrong)
        };
        assert!(text.contains(&right));
        info["data"]["kubeconfig"] = Value::from(text.replace(&right, &wrong));
        w.put_object(&hub, info).unwrap();
    });
    let (r, events) = h.run_plan(&plan, CancellationToken::new(), |_| {}).await;
    assert!(!r.ok);
    let (step, _) = r.failed.clone().unwrap();
    assert!(step.starts_with("join["), "{step}: {}", failure(&r));
    // The agent says why on its Klusterlet, as the real one does.
    let klusterlet = get(
        &h,
        "cluster1",
        &ObjectRef::new(
            "operator.open-cluster-management.io/v1",
            "Klusterlet",
            None,
            "klusterlet",
        ),
    );
    let degraded = klusterlet["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "HubConnectionDegraded")
        .expect("HubConnectionDegraded");
    assert_eq!(degraded["status"], "True");
    let msg = degraded["message"].as_str().unwrap();
    assert!(
        msg.contains("x509: certificate signed by unknown authority"),
        "{msg}"
    );
    assert!(!events.iter().any(
        |e| matches!(&e.event, Event::StepFinished { step, .. } if step.starts_with("accept["))
    ));
}
