//! Simulation test data: certificates for the simulated clusters, made when a cluster is created.
//!
//! Each simulated cluster gets its own CA (a self-signed ECDSA P-256 certificate, like kubeadm's
//! `kubernetes` CA) and an API server serving certificate it signs, and cluster-proxy's user server gets
//! a serving certificate from its hub's CA. So a CA taken from the wrong cluster fails verification the
//! way it would against real clusters. Certificates are built here as DER with `ring`,
//! which is already in the tree through kube/rustls. They protect nothing: every one names its
//! simulated cluster in its organisation (`O=ocm-lab simulated cluster <name>`).

use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
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

const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const OID_ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
const OID_CN: &[u8] = &[0x55, 0x04, 0x03];
const OID_O: &[u8] = &[0x55, 0x04, 0x0a];
const OID_SKI: &[u8] = &[0x55, 0x1d, 0x0e];
const OID_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
const OID_BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const OID_AKI: &[u8] = &[0x55, 0x1d, 0x23];
const OID_EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
const OID_SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

/// One DER element.
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    der(0x30, &parts.concat())
}

fn oid(o: &[u8]) -> Vec<u8> {
    der(0x06, o)
}

fn octets(b: &[u8]) -> Vec<u8> {
    der(0x04, b)
}

fn bits(b: &[u8]) -> Vec<u8> {
    der(0x03, &[&[0u8][..], b].concat())
}

fn utf8(s: &str) -> Vec<u8> {
    der(0x0c, s.as_bytes())
}

/// `CN=<cn>, O=<org>`.
fn name(cn: &str, org: &str) -> Vec<u8> {
    let rdn = |o: &[u8], v: &str| der(0x31, &seq(&[oid(o), utf8(v)]));
    seq(&[rdn(OID_O, org), rdn(OID_CN, cn)])
}

/// UTCTime (years 1950-2049) of a Unix time.
fn utc_time(unix: u64) -> Vec<u8> {
    let t = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(unix),
    )
    .to_string();
    // 2026-11-25T16:40:00Z → 261125164000Z
    let digits: String = t.chars().filter(char::is_ascii_digit).collect();
    der(0x17, format!("{}Z", &digits[2..14]).as_bytes())
}

fn key_id(public_key: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, public_key).as_ref()[..20].to_vec()
}

fn pem_text(tag: &str, der: &[u8]) -> String {
    pem::encode_config(
        &pem::Pem::new(tag, der.to_vec()),
        pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF),
    )
}

/// A serving certificate's names: DNS names and IPv4 addresses.
type Sans<'a> = (&'a [String], &'a [[u8; 4]]);

struct Key {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
}

fn new_key(rng: &SystemRandom) -> Key {
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, rng)
        .expect("ring generates a P-256 key");
    load_key(pkcs8.as_ref().to_vec(), rng)
}

fn load_key(pkcs8: Vec<u8>, rng: &SystemRandom) -> Key {
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &pkcs8, rng)
        .expect("a P-256 PKCS#8 key made by ring");
    Key { pair, pkcs8 }
}

/// A certificate `CN=<cn>, O=<org>` for `subject_key`: a CA signed by itself when `leaf` is `None`, else a
/// serving certificate for those names signed by `issuer` (its key and name). DER.
fn certificate(
    (cn, org): (&str, &str),
    leaf: Option<(Sans<'_>, &Key, &[u8])>,
    subject_key: &Key,
    rng: &SystemRandom,
) -> Vec<u8> {
    let (signer, issuer_name) =
        leaf.map_or((subject_key, name(cn, org)), |(_, k, n)| (k, n.to_vec()));
    // A positive 16-byte INTEGER.
    let mut serial = [0u8; 16];
    rng.fill(&mut serial).expect("system randomness");
    serial[0] = serial[0] & 0x7f | 0x40;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let sig_alg = seq(&[oid(OID_ECDSA_SHA256)]);
    let public = subject_key.pair.public_key().as_ref();
    let spki = seq(&[seq(&[oid(OID_EC_PUBLIC_KEY), oid(OID_P256)]), bits(public)]);
    let critical = der(0x01, &[0xff]);
    let ext = |o: &[u8], critical: &[u8], value: Vec<u8>| {
        seq(&[oid(o), critical.to_vec(), octets(&value)])
    };
    // basicConstraints, then keyUsage: digitalSignature|keyCertSign|cRLSign for a CA,
    // digitalSignature|keyEncipherment for a leaf.
    let (ca_flag, usage) = match leaf {
        None => (
            seq(std::slice::from_ref(&critical)),
            der(0x03, &[0x01, 0x86]),
        ),
        Some(_) => (seq(&[]), der(0x03, &[0x05, 0xa0])),
    };
    let mut exts = vec![
        ext(OID_BASIC_CONSTRAINTS, &critical, ca_flag),
        ext(OID_KEY_USAGE, &critical, usage),
        ext(OID_SKI, &[], octets(&key_id(public))),
    ];
    if let Some(((dns, ips), ..)) = leaf {
        exts.push(ext(OID_EXT_KEY_USAGE, &[], seq(&[oid(OID_SERVER_AUTH)])));
        let aki = key_id(signer.pair.public_key().as_ref());
        exts.push(ext(OID_AKI, &[], seq(&[der(0x80, &aki)])));
        let names: Vec<Vec<u8>> = (dns.iter().map(|d| der(0x82, d.as_bytes())))
            .chain(ips.iter().map(|ip| der(0x87, ip)))
            .collect();
        if !names.is_empty() {
            exts.push(ext(OID_SAN, &[], seq(&names)));
        }
    }
    let tbs = seq(&[
        der(0xa0, &der(0x02, &[2])),
        der(0x02, &serial),
        sig_alg.clone(),
        issuer_name,
        seq(&[
            utc_time(now.saturating_sub(3600)),
            utc_time(now + 10 * 365 * 86400),
        ]),
        name(cn, org),
        spki,
        der(0xa3, &seq(&exts)),
    ]);
    let sig = signer
        .pair
        .sign(rng, &tbs)
        .expect("ring signs with a P-256 key");
    seq(&[tbs, sig_alg, bits(sig.as_ref())])
}

/// The organisation every simulated certificate names, so none can pass for a real one.
fn org(cluster: &str) -> String {
    format!("ocm-lab simulated cluster {cluster}")
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
        let rng = SystemRandom::new();
        let key = new_key(&rng);
        let org = org(cluster);
        let ca = certificate((cn, &org), None, &key, &rng);
        ClusterCa {
            cluster: cluster.to_owned(),
            cn: cn.to_owned(),
            cert_pem: pem_text("CERTIFICATE", &ca),
            key_pkcs8: super::util::b64_encode(&key.pkcs8),
            apiserver_pem: String::new(),
        }
    }

    /// A serving certificate for `dns`/`ips`, signed by this CA: `cert_pem` is the leaf followed by the
    /// CA (the bundle a server presents).
    pub fn issue(&self, cn: &str, dns: &[String], ips: &[[u8; 4]]) -> Issued {
        let rng = SystemRandom::new();
        let ca_key = load_key(
            super::util::b64_decode(&self.key_pkcs8).expect("base64 written by ClusterCa::new"),
            &rng,
        );
        let org = org(&self.cluster);
        let issuer = name(&self.cn, &org);
        let key = new_key(&rng);
        let leaf = certificate((cn, &org), Some(((dns, ips), &ca_key, &issuer)), &key, &rng);
        Issued {
            cert_pem: format!("{}{}", pem_text("CERTIFICATE", &leaf), self.cert_pem),
            key_pem: pem_text("PRIVATE KEY", &key.pkcs8),
        }
    }
}
