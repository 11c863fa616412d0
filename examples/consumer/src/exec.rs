//! The client-go credential plugin protocol, from the client's side.
//!
//! kubernetes/client-go v0.35.3 (the version cluster-inventory-api v0.1.2 builds with)
//! `plugin/pkg/client/auth/exec/exec.go` `refreshCredsLocked`: the client runs the configured command with its
//! args, its env added to the client's own, and `KUBERNETES_EXEC_INFO` holding an `ExecCredential` of the
//! configured `apiVersion` whose `spec.interactive` says whether the plugin may prompt and whose `spec.cluster`
//! (only with `provideClusterInfo: true`) describes the cluster (`rest/exec.go` `ConfigToExecCluster`: server,
//! CA data, proxy URL, and the exec extension as `config`). The plugin answers on stdout with an
//! `ExecCredential` of the same `apiVersion` carrying `status.token` (or a client certificate and key) and an
//! optional `status.expirationTimestamp`; a nonzero exit is a failure. client-go caches the credential until
//! that timestamp and runs the plugin again after it.
//!
//! Where this differs from client-go, on purpose: the plugin gets a deadline ([`PLUGIN_TIMEOUT`]) and is killed
//! after it; its stderr is kept (a tail, for the error) rather than passed through; and a credential that has
//! already expired when it arrives is an error ([`Error::Expired`]) rather than something to send and run the
//! plugin again for on every request.

use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Error;
use crate::provider::Access;

/// The API versions of `ExecCredential` client-go speaks (`exec.go` `apiVersions`; v1alpha1 is gone).
pub const API_VERSIONS: [&str; 2] = [
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
];
/// How long the plugin may take to answer.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How much of the plugin's stderr an error keeps.
const STDERR_TAIL: usize = 600;

/// What a plugin returned. The token is not shown by `Debug`.
#[derive(Clone, PartialEq)]
pub enum Credential {
    Token {
        token: String,
        expires: Option<Timestamp>,
    },
    /// PEM client certificate and key.
    ClientCertificate {
        certificate: String,
        key: String,
        expires: Option<Timestamp>,
    },
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Token { expires, .. } => f
                .debug_struct("Token")
                .field("token", &"<redacted>")
                .field("expires", expires)
                .finish(),
            Credential::ClientCertificate { expires, .. } => f
                .debug_struct("ClientCertificate")
                .field("key", &"<redacted>")
                .field("expires", expires)
                .finish(),
        }
    }
}

impl Credential {
    pub fn expires(&self) -> Option<Timestamp> {
        match self {
            Credential::Token { expires, .. } | Credential::ClientCertificate { expires, .. } => {
                *expires
            }
        }
    }
}

/// The `KUBERNETES_EXEC_INFO` a client sends for `access`: never interactive (`BuildConfigFromCP` forces
/// `interactiveMode: Never`), and with `spec.cluster` only under `provideClusterInfo`. `spec.cluster.server` is
/// the provider's server, as the profile gives it.
pub fn exec_info(access: &Access) -> Value {
    let mut spec = json!({ "interactive": false });
    if access.exec.provide_cluster_info {
        let mut cluster = json!({ "server": access.server });
        if let Some(ca) = &access.ca_data {
            // `[]byte` in Go, so base64 in JSON: the provider's text as it is.
            cluster["certificate-authority-data"] = json!(ca);
        }
        if let Some(proxy) = &access.proxy_url {
            cluster["proxy-url"] = json!(proxy);
        }
        if let Some(config) = &access.exec_extension {
            cluster["config"] = config.clone();
        }
        spec["cluster"] = cluster;
    }
    json!({ "apiVersion": access.exec.api_version, "kind": "ExecCredential", "spec": spec })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<Status>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    expiration_timestamp: Option<String>,
    #[serde(default)]
    token: String,
    #[serde(default)]
    client_certificate_data: String,
    #[serde(default)]
    client_key_data: String,
}

/// Runs the plugin of `access` once and returns its credential, valid at `now`.
pub async fn credential(access: &Access, now: Timestamp) -> Result<Credential, Error> {
    let exec = &access.exec;
    if !API_VERSIONS.contains(&exec.api_version.as_str()) {
        return Err(Error::PluginApiVersion {
            command: exec.command.clone(),
            configured: exec.api_version.clone(),
            returned: None,
        });
    }
    let info = serde_json::to_string(&exec_info(access)).expect("JSON values serialize");
    let mut command = tokio::process::Command::new(&exec.command);
    command
        .args(&exec.args)
        .envs(exec.env.iter().map(|e| (&e.name, &e.value)))
        .env("KUBERNETES_EXEC_INFO", info)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::PluginMissing {
                command: exec.command.clone(),
                hint: exec.install_hint.clone(),
            }
        } else {
            Error::PluginStart {
                command: exec.command.clone(),
                source,
            }
        }
    })?;
    let output = tokio::time::timeout(PLUGIN_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| Error::PluginTimeout {
            command: exec.command.clone(),
            after: PLUGIN_TIMEOUT,
        })?
        .map_err(|source| Error::PluginStart {
            command: exec.command.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::PluginFailed {
            command: exec.command.clone(),
            status: output.status.code(),
            stderr: tail(&output.stderr),
        });
    }
    parse(&exec.command, &exec.api_version, &output.stdout, now)
}

/// Reads a plugin's stdout as client-go does, and refuses a credential that expired before `now`.
pub fn parse(
    command: &str,
    api_version: &str,
    stdout: &[u8],
    now: Timestamp,
) -> Result<Credential, Error> {
    let bad = |why: String| Error::PluginAnswer {
        command: command.to_owned(),
        why,
    };
    let answer: Answer = serde_json::from_slice(stdout)
        .map_err(|e| bad(format!("its output is not an ExecCredential: {e}")))?;
    if answer.api_version.as_deref() != Some(api_version) {
        return Err(Error::PluginApiVersion {
            command: command.to_owned(),
            configured: api_version.to_owned(),
            returned: Some(answer.api_version.unwrap_or_default()),
        });
    }
    if answer.kind.as_deref() != Some("ExecCredential") {
        return Err(bad(format!(
            "it returned kind {:?}, not ExecCredential",
            answer.kind.unwrap_or_default()
        )));
    }
    let status = answer
        .status
        .ok_or_else(|| bad("it returned no status field".into()))?;
    let expires = status
        .expiration_timestamp
        .map(|t| {
            t.parse::<Timestamp>().map_err(|e| {
                bad(format!(
                    "its expirationTimestamp {t:?} is not RFC 3339: {e}"
                ))
            })
        })
        .transpose()?;
    if let Some(at) = expires
        && at <= now
    {
        return Err(Error::Expired {
            command: command.to_owned(),
            at: at.to_string(),
        });
    }
    if status.client_certificate_data.is_empty() != status.client_key_data.is_empty() {
        return Err(bad(
            "it returned only a client certificate or only a key, not both".into(),
        ));
    }
    if !status.token.is_empty() {
        Ok(Credential::Token {
            token: status.token,
            expires,
        })
    } else if !status.client_certificate_data.is_empty() {
        Ok(Credential::ClientCertificate {
            certificate: status.client_certificate_data,
            key: status.client_key_data,
            expires,
        })
    } else {
        Err(bad(
            "it returned neither a token nor a client certificate and key".into(),
        ))
    }
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let text = text.trim();
    let start = text
        .char_indices()
        .rev()
        .nth(STDERR_TAIL)
        .map_or(0, |(i, _)| i);
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "client.authentication.k8s.io/v1";

    fn now() -> Timestamp {
        "2026-06-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn a_token_with_a_future_expiry_is_a_credential_and_its_debug_hides_the_token() {
        let out = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "status":{"token":"s3cret","expirationTimestamp":"2026-06-01T01:00:00Z"}}"#;
        let c = parse("p", V1, out, now()).unwrap();
        assert_eq!(c.expires(), Some("2026-06-01T01:00:00Z".parse().unwrap()));
        assert!(matches!(&c, Credential::Token { token, .. } if token == "s3cret"));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn an_expired_credential_is_an_error_naming_when_it_expired() {
        let out = br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
            "status":{"token":"t","expirationTimestamp":"2026-05-31T23:59:59Z"}}"#;
        let e = parse("cp-creds", V1, out, now()).unwrap_err();
        assert!(matches!(e, Error::Expired { .. }), "{e}");
        assert!(e.to_string().contains("2026-05-31T23:59:59Z"), "{e}");
    }

    #[test]
    fn answers_client_go_refuses_are_refused() {
        let cases: [(&[u8], &str); 6] = [
            (b"not json", "not an ExecCredential"),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential","status":{"token":"t"}}"#,
                "plugin returned version client.authentication.k8s.io/v1beta1",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"}"#,
                "no status field",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{}}"#,
                "neither a token nor",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"clientKeyData":"k"}}"#,
                "not both",
            ),
            (
                br#"{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"tomorrow"}}"#,
                "not RFC 3339",
            ),
        ];
        for (out, want) in cases {
            let e = parse("p", V1, out, now()).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn the_stderr_tail_keeps_the_end() {
        let long = format!("{}END", "x".repeat(2000));
        let t = tail(long.as_bytes());
        assert!(
            t.ends_with("END") && t.len() <= STDERR_TAIL + 1,
            "{}",
            t.len()
        );
    }
}
