//! `ocm-lab diagnose`: a bundle for a bug report. The journal, the topology, the resolved plan, and on every
//! cluster the lab's OCM objects (with their conditions) and the events of the OCM namespaces, all with
//! secrets redacted: Secret data, tokens, kubeconfigs and private keys never leave the machine ([`run`], at
//! the end).

use std::io::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::backend::ClusterApi;
use crate::step::RunCtx;
use crate::topology::Role;

/// Kinds collected from the hub: (apiVersion, kind).
const HUB_KINDS: &[(&str, &str)] = &[
    ("operator.open-cluster-management.io/v1", "ClusterManager"),
    ("cluster.open-cluster-management.io/v1", "ManagedCluster"),
    (
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSet",
    ),
    (
        "cluster.open-cluster-management.io/v1beta2",
        "ManagedClusterSetBinding",
    ),
    ("cluster.open-cluster-management.io/v1beta1", "Placement"),
    (
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
    ),
    (
        "addon.open-cluster-management.io/v1alpha1",
        "ClusterManagementAddOn",
    ),
    (
        "addon.open-cluster-management.io/v1alpha1",
        "ManagedClusterAddOn",
    ),
    ("multicluster.x-k8s.io/v1alpha1", "ClusterProfile"),
    (
        "authentication.open-cluster-management.io/v1beta1",
        "ManagedServiceAccount",
    ),
    (
        "proxy.open-cluster-management.io/v1alpha1",
        "ManagedProxyConfiguration",
    ),
    ("work.open-cluster-management.io/v1", "ManifestWork"),
    ("certificates.k8s.io/v1", "CertificateSigningRequest"),
];

/// Kinds collected from every spoke.
const SPOKE_KINDS: &[(&str, &str)] = &[
    ("operator.open-cluster-management.io/v1", "Klusterlet"),
    ("about.k8s.io/v1alpha1", "ClusterProperty"),
    (
        "cluster.open-cluster-management.io/v1alpha1",
        "ClusterClaim",
    ),
];

/// Namespaces whose Deployments, Events and Secrets (redacted) are collected.
const OCM_NAMESPACES: &[&str] = &[
    "open-cluster-management",
    "open-cluster-management-hub",
    "open-cluster-management-agent",
    "open-cluster-management-agent-addon",
    "open-cluster-management-addon",
    "open-cluster-management-cluster-proxy",
];

/// Keys whose values are secrets wherever they appear.
const SECRET_KEYS: &[&str] = &[
    "token",
    "password",
    "kubeconfig",
    "bootstrapHubKubeConfig",
    "tls.key",
    "client-key-data",
    "ca.key",
];

/// Replaces secret material in an object, in place. Secrets keep their keys, never their values.
pub fn redact(v: &mut Value) {
    let is_secret = v["kind"] == "Secret";
    if is_secret {
        for field in ["data", "stringData"] {
            if let Some(m) = v.get_mut(field).and_then(Value::as_object_mut) {
                for (_, val) in m.iter_mut() {
                    let len = val.as_str().map_or(0, str::len);
                    *val = json!(format!("<redacted: {len} bytes>"));
                }
            }
        }
    }
    // The last-applied annotation would hold a Secret's data in clear.
    if let Some(a) = v
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
    redact_walk(v);
}

fn redact_walk(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, val) in m.iter_mut() {
                if SECRET_KEYS.contains(&k.as_str()) && val.is_string() {
                    *val = json!("<redacted>");
                } else {
                    redact_walk(val);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(redact_walk),
        Value::String(s) if s.contains("eyJ") => *s = redact_jwts(s),
        _ => {}
    }
}

/// Replaces every JWT inside a string (service account tokens: three base64url parts, the first a JSON
/// header, so they start with `eyJ`), wherever it appears: alone, after `Bearer `, in a log line.
pub fn redact_jwts(s: &str) -> String {
    let is_jwt_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '=');
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("eyJ") {
        out.push_str(&rest[..i]);
        let candidate = &rest[i..];
        let end = candidate
            .find(|c: char| !is_jwt_char(c))
            .unwrap_or(candidate.len());
        let word = &candidate[..end];
        if word.split('.').count() == 3 && word.len() > 40 {
            out.push_str("<redacted>");
        } else {
            out.push_str(word);
        }
        // `end` is at least 3: the `eyJ` prefix is made of token characters.
        rest = &candidate[end..];
    }
    out.push_str(rest);
    out
}

async fn collect_kind(
    api: &dyn ClusterApi,
    (api_version, kind): (&str, &str),
    namespace: Option<&str>,
) -> Option<Vec<Value>> {
    if !api.served(api_version, kind).await.unwrap_or(false) {
        return None;
    }
    let mut items = api.list(api_version, kind, namespace, None).await.ok()?;
    items.iter_mut().for_each(redact);
    Some(items)
}

/// Gathers the bundle's files: `(path in the archive, contents)`.
pub async fn gather(ctx: &RunCtx, topology_text: &str) -> Vec<(String, Vec<u8>)> {
    let lab = &ctx.lab;
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    let pretty = |v: &Value| serde_json::to_vec_pretty(v).expect("JSON serializes");
    files.push(("topology.yaml".into(), topology_text.as_bytes().to_vec()));
    files.push(("lab.json".into(), pretty(&json!(lab))));
    // The state files, under their own names: the journal, what the lab believes it owns (cluster names
    // and node container IDs; no secrets), and the last verification (as it is, damaged or not).
    for path in [
        ctx.state.journal(),
        ctx.state.owned_log(),
        ctx.state.last_verification(),
    ] {
        if let (Ok(bytes), Some(name)) = (std::fs::read(&path), path.file_name()) {
            files.push((name.to_string_lossy().into_owned(), bytes));
        }
    }
    let mut summary = Vec::new();
    for c in lab.clusters() {
        let dir = format!("clusters/{}", c.name);
        let api = match ctx.api(&c.name).await {
            Ok(api) => api,
            Err(e) => {
                summary
                    .push(json!({"cluster": c.name, "reachable": false, "error": e.to_string()}));
                continue;
            }
        };
        let version = api.version().await.ok();
        summary
            .push(json!({"cluster": c.name, "reachable": version.is_some(), "version": version}));
        let kinds = if c.role == Role::Hub {
            HUB_KINDS
        } else {
            SPOKE_KINDS
        };
        // A self-joined hub also runs a klusterlet.
        let kinds: Vec<(&str, &str)> = kinds
            .iter()
            .copied()
            .chain(if c.role == Role::Hub && lab.hub.self_join {
                SPOKE_KINDS.to_vec()
            } else {
                vec![]
            })
            .collect();
        for (api_version, kind) in kinds {
            if let Some(items) = collect_kind(api.as_ref(), (api_version, kind), None).await {
                files.push((format!("{dir}/{kind}.json"), pretty(&json!(items))));
            }
        }
        for ns in OCM_NAMESPACES {
            for (api_version, kind) in
                [("apps/v1", "Deployment"), ("v1", "Event"), ("v1", "Secret")]
            {
                if let Some(items) = collect_kind(api.as_ref(), (api_version, kind), Some(ns)).await
                    && !items.is_empty()
                {
                    files.push((format!("{dir}/{ns}/{kind}.json"), pretty(&json!(items))));
                }
            }
        }
    }
    files.push(("clusters.json".into(), pretty(&json!(summary))));
    files
}

/// Writes the files as a gzipped tarball (mode 0600: it describes the lab, even redacted).
pub fn write_tarball(path: &Path, root: &str, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let file = opts.open(path)?;
    let gz = flate2::write::GzEncoder::new(file, flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for (name, data) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, format!("{root}/{name}"), data.as_slice())?;
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    gz.finish()?.sync_all()
}

/// The bundle's file name when `--out` is not given: a simulated lab's says so.
fn default_name(lab: &str, simulated: bool) -> String {
    if simulated {
        format!("ocm-lab-{lab}-SIMULATED-diagnostics.tar.gz")
    } else {
        format!("ocm-lab-{lab}-diagnostics.tar.gz")
    }
}

/// `ocm-lab diagnose`: read-only, so it takes no lock (it is most useful while something hangs).
pub fn run(
    args: &crate::cli::DiagnoseArgs,
    host: &crate::topology::Host,
) -> Result<(), crate::error::Error> {
    use super::runner::{Purpose, open_backends, runtime};
    use crate::error::Error;
    use crate::step::events::Events;
    let run = crate::cli::RunArgs::from(args);
    let (loaded, _, patches) = super::inputs(&run.lab, host)?;
    let lab = loaded.lab;
    let state = crate::state::StateDir::for_run(&lab.name, run.simulate)?;
    let rt = runtime()?;
    let opened = open_backends(&rt, &run, &state, Purpose::Look, &lab)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_name(&lab.name, run.simulate).into());
    let files = rt.block_on(async {
        let (events, _rx) = Events::channel();
        let ctx = RunCtx::new(
            lab.clone(),
            opened.backends.clone(),
            state.clone(),
            patches,
            events,
            tokio_util::sync::CancellationToken::new(),
        );
        gather(&ctx, &loaded.text).await
    });
    rt.shutdown_background();
    let root = format!("ocm-lab-{}-diagnostics", lab.name);
    write_tarball(&out, &root, &files).map_err(|source| Error::WriteFile {
        path: out.display().to_string(),
        source,
    })?;
    // What a person reads last says whose objects the bundle holds.
    let sim = if run.simulate {
        " of the SIMULATED lab (a test double, not real clusters)"
    } else {
        ""
    };
    super::stdout(&format!(
        "wrote {} ({}, secrets redacted){sim}\n",
        out.display(),
        crate::text::count(files.len(), "file", "files")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_tokens_and_kubeconfigs_are_redacted() {
        let jwt = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlc2lnbmF0dXJl";
        let mut secret = json!({"kind": "Secret", "metadata": {"name": "x", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": jwt}},
            "data": {"token": "dG9rZW4=", "ca.crt": "Y2E="}});
        redact(&mut secret);
        let text = secret.to_string();
        assert!(!text.contains("dG9rZW4=") && !text.contains(jwt), "{text}");
        assert!(text.contains("ca.crt"), "keys are kept: {text}");
        let mut other = json!({"kind": "ConfigMap", "data": {"note": format!("Bearer {jwt}"), "raw": jwt, "kubeconfig": "apiVersion: v1"}});
        redact(&mut other);
        let text = other.to_string();
        assert!(
            !text.contains(jwt) && !text.contains("apiVersion: v1"),
            "{text}"
        );
        assert!(text.contains("Bearer <redacted>"), "{text}");
    }
}
