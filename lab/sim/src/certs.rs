//! Simulation test data: certificates for the simulated clusters, made when a cluster is created.
//!
//! Each simulated cluster gets its own CA (a self-signed ECDSA P-256 certificate, like kubeadm's
//! `kubernetes` CA) and an API server serving certificate it signs, and cluster-proxy's user server gets
//! a serving certificate from its hub's CA. So a CA taken from the wrong cluster fails verification the
//! way it would against real clusters. Certificates are made with `rcgen` (on `ring`, already in the
//! tree through kube/rustls). They protect nothing: every one names its simulated cluster in its
//! organisation (`O=ocm-lab simulated cluster <name>`).

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256,
};
use serde::{Deserialize, Serialize};

/// A simulated cluster's CA: its certificate and (simulation-only) key, and the API server's serving
/// certificate it issued.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterCa {
    /// The simulated cluster it belongs to (named in every certificate's organisation).
    pub cluster: String,
    /// The CA's common name (`kubernetes` for a cluster's own CA, as kubeadm names it).
    #[serde(default = "kubernetes")]
    pub cn: String,
    /// The CA certificate, PEM: what kubeconfigs, `cluster-info` and `kube-root-ca.crt` carry.
    pub cert_pem: String,
    /// PKCS#8 of the CA key, base64 (simulation only; saved with the world, mode 0600).
    key_pkcs8: String,
    /// The API server's serving certificate (CN `kube-apiserver`), signed by the CA, PEM.
    pub apiserver_pem: String,
}

fn kubernetes() -> String {
    "kubernetes".to_owned()
}

/// A certificate and its key, PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

/// `CN=<cn>, O=ocm-lab simulated cluster <cluster>`, valid from an hour ago for ten years, for `sans`
/// (DNS names and IP addresses): a CA (keyCertSign, cRLSign) when `ca`, else a serving certificate.
fn params(cn: &str, cluster: &str, sans: Vec<String>, ca: bool) -> CertificateParams {
    let mut p = CertificateParams::new(sans).expect("valid DNS names and addresses");
    p.distinguished_name.push(
        DnType::OrganizationName,
        format!("ocm-lab simulated cluster {cluster}"),
    );
    p.distinguished_name.push(DnType::CommonName, cn);
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(10 * 365);
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    if ca {
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages
            .extend([KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign]);
    } else {
        p.key_usages.push(KeyUsagePurpose::KeyEncipherment);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        p.use_authority_key_identifier_extension = true;
    }
    p
}

fn new_key() -> KeyPair {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).expect("ring generates a P-256 key")
}

impl ClusterCa {
    /// A new CA for simulated cluster `cluster` and its API server's serving certificate (names as
    /// kubeadm gives them on kind: `kubernetes…`, `<cluster>-control-plane`, `localhost`, 127.0.0.1).
    pub fn new(cluster: &str) -> Self {
        let mut ca = Self::authority(cluster, "kubernetes");
        let names = "kubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.cluster.local localhost";
        let dns: Vec<String> = (names.split(' ').map(str::to_owned))
            .chain([format!("{cluster}-control-plane")])
            .collect();
        ca.apiserver_pem = ca.issue("kube-apiserver", &dns, &[[127, 0, 0, 1]]).cert_pem;
        ca
    }

    /// A CA named `cn` on simulated cluster `cluster`, without an API server certificate (cluster-proxy's
    /// own `open-cluster-management:cluster-proxy` CA, for one).
    pub fn authority(cluster: &str, cn: &str) -> Self {
        let key = new_key();
        let cert = params(cn, cluster, Vec::new(), true).self_signed(&key);
        ClusterCa {
            cluster: cluster.to_owned(),
            cn: cn.to_owned(),
            cert_pem: cert.expect("rcgen signs with a P-256 key").pem(),
            key_pkcs8: super::util::b64_encode(&key.serialize_der()),
            apiserver_pem: String::new(),
        }
    }

    /// A serving certificate for `dns`/`ips`, signed by this CA: `cert_pem` is the leaf followed by the
    /// CA (the bundle a server presents).
    pub fn issue(&self, cn: &str, dns: &[String], ips: &[[u8; 4]]) -> Issued {
        let pkcs8 = super::util::b64_decode(&self.key_pkcs8).expect("base64 written by ClusterCa");
        let ca_key = KeyPair::try_from(pkcs8).expect("a P-256 PKCS#8 key made by rcgen");
        let issuer = Issuer::new(params(&self.cn, &self.cluster, Vec::new(), true), ca_key);
        let key = new_key();
        let sans = (dns.iter().cloned())
            .chain(
                ips.iter()
                    .map(|ip| std::net::Ipv4Addr::from(*ip).to_string()),
            )
            .collect();
        let leaf = params(cn, &self.cluster, sans, false).signed_by(&key, &issuer);
        Issued {
            cert_pem: leaf.expect("rcgen signs with a P-256 key").pem() + &self.cert_pem,
            key_pem: key.serialize_pem(),
        }
    }
}
