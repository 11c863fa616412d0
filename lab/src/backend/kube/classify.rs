//! Turns kube-rs errors into [`BackendError`]s: what the API server said, whether a retry may help, and
//! what the user can do.
//!
//! | what                                                        | transience |
//! |-------------------------------------------------------------|------------|
//! | HTTP 500 "field not declared in schema" (SSA unknown field) | permanent  |
//! | HTTP 409, 410, 429, other 5xx                               | transient  |
//! | HTTP 403 "… because it is being terminated"                 | transient  |
//! | other HTTP 4xx (400, 401, 403, 404, 422, …)                 | permanent  |
//! | connection refused or reset, timeouts, broken streams       | transient  |
//! | TLS certificate verification, auth plugins, bad requests    | permanent  |

use std::error::Error as StdError;

use ::kube::core::Status;

use crate::backend::BackendError;

/// What server-side apply says about a field the CRD's schema does not have (OCM-FACTS §10).
const NOT_IN_SCHEMA: &str = ": field not declared in schema";

/// The field paths an API server message says are not declared in the schema, in order, without
/// duplicates: `.spec.proxyAgent.additionalValues` from
/// `failed to create typed patch object (…): .spec.proxyAgent.additionalValues: field not declared in schema`.
pub fn undeclared_fields(message: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut rest = message;
    while let Some(i) = rest.find(NOT_IN_SCHEMA) {
        let path = rest[..i].rsplit(char::is_whitespace).next().unwrap_or("");
        if !path.is_empty() && !out.iter().any(|p| p == path) {
            out.push(path.to_owned());
        }
        rest = &rest[i + NOT_IN_SCHEMA.len()..];
    }
    out
}

/// Classifies an error from a request to the API server at `server`.
pub fn classify(err: ::kube::Error, server: &str) -> BackendError {
    match err {
        ::kube::Error::Api(status) => classify_status(&status),
        ::kube::Error::HyperError(_)
        | ::kube::Error::Service(_)
        | ::kube::Error::ReadEvents(_)
        | ::kube::Error::LinesCodecMaxLineLengthExceeded => connection(&err, server),
        ::kube::Error::Auth(_) => BackendError::permanent(format!(
            "failed to authenticate to the API server at {server}: {}",
            chain(&err)
        ))
        .with_help("the kubeconfig's user credentials cannot be used: regenerate the kubeconfig"),
        ::kube::Error::UpgradeConnection(_) => BackendError::transient(format!(
            "failed to open a streaming connection to the API server at {server}: {}",
            chain(&err)
        )),
        other => BackendError::permanent(chain(&other)),
    }
}

/// Classifies an error a watch stream reported.
pub fn classify_watch(err: ::kube::runtime::watcher::Error, server: &str) -> BackendError {
    use ::kube::runtime::watcher::Error as W;
    match err {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => classify(e, server),
        W::WatchError(status) => classify_status(&status),
        e @ W::NoResourceVersion => BackendError::permanent(e.to_string()),
    }
}

/// Classifies a `Status` the API server answered with.
pub fn classify_status(s: &Status) -> BackendError {
    let code = s.code;
    let msg = if s.message.is_empty() {
        s.reason.clone()
    } else {
        s.message.clone()
    };
    let fields = undeclared_fields(&msg);
    if !fields.is_empty() {
        // kubernetes#122480: server-side apply reports a field the schema lacks as a 500, whatever
        // fieldValidation says. Retrying sends the same object again and fails the same way.
        let list = fields
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let (noun, verb) = if fields.len() == 1 {
            ("field", "is")
        } else {
            ("fields", "are")
        };
        return BackendError::permanent(format!(
            "{noun} {list} {verb} not declared in the schema the cluster has for this kind \
             (HTTP {code}: {msg})"
        ))
        .with_help(
            "the object sets a field the installed CRD does not define: remove it, or patch the chart \
             that renders it (charts-patches/); retrying cannot help",
        );
    }
    match code {
        409 => BackendError::transient(format!("conflict (HTTP 409): {msg}")),
        410 => BackendError::transient(format!("gone (HTTP 410): {msg}")),
        429 => BackendError::transient(format!(
            "the API server is throttling requests (HTTP 429): {msg}"
        )),
        500..=599 => BackendError::transient(format!("the API server failed (HTTP {code}): {msg}")),
        401 => BackendError::permanent(format!("unauthorized (HTTP 401): {msg}")).with_help(
            "the API server does not accept the kubeconfig's credentials: regenerate the kubeconfig \
             (kind: `kind export kubeconfig --name <cluster>`)",
        ),
        403 if msg.contains("because it is being terminated") => {
            BackendError::transient(format!("forbidden (HTTP 403): {msg}"))
        }
        403 => BackendError::permanent(format!("forbidden (HTTP 403): {msg}"))
            .with_help("the kubeconfig's user lacks the RBAC permission for this request"),
        404 => BackendError::permanent(format!("not found (HTTP 404): {msg}")),
        0 => BackendError::permanent(msg),
        _ => BackendError::permanent(format!("rejected (HTTP {code}): {msg}")),
    }
}

/// An error below HTTP: the server could not be reached, or the connection broke.
fn connection(err: &::kube::Error, server: &str) -> BackendError {
    let text = chain(err);
    // kube-rs prefixes its variant's name; the rest says what happened.
    let text = ["ServiceError: ", "HyperError: "]
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .map_or(text.clone(), str::to_owned);
    let lower = text.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        return BackendError::permanent(format!(
            "failed to verify the TLS certificate of the API server at {server}: {text}"
        ))
        .with_help(
            "the kubeconfig's certificate-authority data does not match the server: regenerate the \
             kubeconfig for this cluster",
        );
    }
    BackendError::transient(format!(
        "failed to reach the API server at {server}: {text}"
    ))
    .with_help(
        "check that the cluster is running (for kind: `docker ps` lists its control-plane container) and \
         that the kubeconfig's server address is reachable from this machine",
    )
}

/// An error and its sources, each once: kube-rs errors often repeat their source in their own text.
pub fn chain(err: &dyn StdError) -> String {
    let mut out = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !t.is_empty() && !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, message: &str) -> Status {
        Status::failure(message, "").with_code(code)
    }

    #[test]
    fn finds_one_undeclared_field() {
        let m = "failed to create typed patch object (/cluster-proxy; proxy.open-cluster-management.io/v1alpha1, \
                 Kind=ManagedProxyConfiguration): .spec.proxyAgent.additionalValues: field not declared in schema";
        assert_eq!(
            undeclared_fields(m),
            vec![".spec.proxyAgent.additionalValues"]
        );
    }

    #[test]
    fn finds_several_undeclared_fields() {
        // fixtures/recorded/6-ssa-field-validation/05-ssa-strict.hostname-port-and-additionalValues.
        let m = "failed to create typed patch object (/cluster-proxy; proxy.open-cluster-management.io/v1alpha1, \
                 Kind=ManagedProxyConfiguration): errors:\n  .spec.proxyAgent.additionalValues: field not declared \
                 in schema\n  .spec.proxyServer.entrypoint.hostname.port: field not declared in schema";
        assert_eq!(
            undeclared_fields(m),
            vec![
                ".spec.proxyAgent.additionalValues",
                ".spec.proxyServer.entrypoint.hostname.port"
            ]
        );
        let e = classify_status(&status(500, m));
        assert!(!e.is_transient());
        assert!(e.message.starts_with(
            "fields `.spec.proxyAgent.additionalValues`, `.spec.proxyServer.entrypoint.hostname.port` are not declared"
        ));
    }

    #[test]
    fn classifies_statuses() {
        let transient = [409, 410, 429, 500, 502, 503, 504];
        for code in transient {
            assert!(classify_status(&status(code, "x")).is_transient(), "{code}");
        }
        for code in [400, 401, 403, 404, 422] {
            let e = classify_status(&status(code, "the server said so"));
            assert!(!e.is_transient(), "{code}");
            assert!(e.message.contains("the server said so"), "{code}");
        }
        let terminating = status(
            403,
            "namespaces \"x\" is forbidden: unable to create new content in namespace x because it is being terminated",
        );
        assert!(classify_status(&terminating).is_transient());
    }

    #[test]
    fn chain_does_not_repeat_sources() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = ::kube::Error::ReadEvents(io);
        assert_eq!(chain(&e), "Error reading events stream: connection refused");
        let b = classify(e, "https://127.0.0.1:6443");
        assert!(b.is_transient());
        assert!(b.message.contains("https://127.0.0.1:6443"));
    }
}
