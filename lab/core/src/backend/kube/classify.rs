//! Turns kube-rs errors into [`KubeError`]s: what the API server said, whether a retry may help, and
//! what the user can do.
//!
//! | what                                                        | transience |
//! |-------------------------------------------------------------|------------|
//! | HTTP 500 "field not declared in schema" (SSA unknown field) | permanent  |
//! | HTTP 409, 410, 429, other 5xx                               | transient  |
//! | HTTP 403 "… because it is being terminated"                 | transient  |
//! | HTTP 403 from the ManagedCluster webhook: `cluster namespace "<c>" is terminating` | transient |
//! | other HTTP 4xx (400, 401, 403, 404, 422, …)                 | permanent  |
//! | connection refused or reset, timeouts, broken streams       | transient  |
//! | TLS certificate verification, auth plugins, bad requests    | permanent  |

use std::error::Error as StdError;

use ::kube::core::Status;

use super::{ForbiddenCause, KubeError};

/// What server-side apply says about a field the CRD's schema does not have (kubernetes/kubernetes#122480).
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
pub fn classify(err: ::kube::Error, server: &str) -> KubeError {
    match err {
        ::kube::Error::Api(status) => classify_status(&status),
        ::kube::Error::HyperError(_)
        | ::kube::Error::Service(_)
        | ::kube::Error::ReadEvents(_)
        | ::kube::Error::LinesCodecMaxLineLengthExceeded => connection(&err, server),
        ::kube::Error::Auth(_) => KubeError::Auth {
            server: server.to_owned(),
            detail: chain(&err),
        },
        ::kube::Error::UpgradeConnection(_) => KubeError::Stream {
            server: server.to_owned(),
            detail: chain(&err),
        },
        other => KubeError::Client {
            detail: chain(&other),
        },
    }
}

/// Classifies an error a watch stream reported.
pub fn classify_watch(err: ::kube::runtime::watcher::Error, server: &str) -> KubeError {
    use ::kube::runtime::watcher::Error as W;
    match err {
        W::InitialListFailed(e) | W::WatchStartFailed(e) | W::WatchFailed(e) => classify(e, server),
        W::WatchError(status) => classify_status(&status),
        e @ W::NoResourceVersion => KubeError::Client {
            detail: e.to_string(),
        },
    }
}

/// Classifies a `Status` the API server answered with. The server's message is read here, once: a 403
/// becomes a [`ForbiddenCause`], a schema rejection the fields it names.
pub fn classify_status(s: &Status) -> KubeError {
    let code = s.code;
    let message = if s.message.is_empty() {
        s.reason.clone()
    } else {
        s.message.clone()
    };
    let fields = undeclared_fields(&message);
    if !fields.is_empty() {
        // kubernetes#122480: server-side apply reports a field the schema lacks as a 500, whatever
        // fieldValidation says. Retrying sends the same object again and fails the same way.
        return KubeError::UndeclaredFields {
            code,
            fields,
            message,
        };
    }
    match code {
        409 => KubeError::Conflict { message },
        410 => KubeError::Gone { message },
        429 => KubeError::Throttled { message },
        500..=599 => KubeError::ServerFailed { code, message },
        401 => KubeError::Unauthorized { message },
        403 => {
            let cause = if message.contains("because it is being terminated") {
                ForbiddenCause::NamespaceTerminating
            } else if cluster_namespace_terminating(s) {
                ForbiddenCause::ClusterNamespaceTerminating
            } else {
                ForbiddenCause::Denied
            };
            KubeError::Forbidden { message, cause }
        }
        404 => KubeError::NotFound { message },
        _ => KubeError::Rejected { code, message },
    }
}

/// The ManagedCluster validating webhook's answer to an accept (`hubAcceptsClient: true`) while namespace
/// `<cluster>` on the hub is Terminating, after a `reset` or `down`: reason `Forbidden`, message
/// `admission webhook "managedclustervalidators…" denied the request: cluster namespace "<c>" is
/// terminating` (open-cluster-management-io/ocm v1.3.1
/// `pkg/registration/webhook/v1/managedcluster_validating.go`). It passes once the namespace is gone, unlike an
/// RBAC 403, whose message says `User "…" cannot <verb> resource …`.
fn cluster_namespace_terminating(s: &Status) -> bool {
    let reason_ok = s.reason.is_empty() || s.reason == "Forbidden";
    reason_ok
        && s.message.contains("cluster namespace")
        && s.message.contains("is terminating")
        && !s.message.contains(" cannot ")
}

/// An error below HTTP: the server could not be reached, or the connection broke.
fn connection(err: &::kube::Error, server: &str) -> KubeError {
    let text = chain(err);
    // kube-rs prefixes its variant's name; the rest says what happened.
    let text = ["ServiceError: ", "HyperError: "]
        .iter()
        .find_map(|p| text.strip_prefix(p))
        .map_or(text.clone(), str::to_owned);
    let lower = text.to_lowercase();
    let server = server.to_owned();
    // Below HTTP there is no status: the client's own error text is all there is to tell a TLS failure
    // (permanent) from a connection that broke (transient).
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        return KubeError::Tls {
            server,
            detail: text,
        };
    }
    KubeError::Unreachable {
        server,
        detail: text,
    }
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
        assert!(e.to_string().starts_with(
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
            assert!(e.to_string().contains("the server said so"), "{code}");
        }
        let terminating = status(
            403,
            "namespaces \"x\" is forbidden: unable to create new content in namespace x because it is being terminated",
        );
        assert!(classify_status(&terminating).is_transient());
    }

    fn forbidden(message: &str) -> Status {
        Status::failure(message, "Forbidden").with_code(403)
    }

    #[test]
    fn the_managedcluster_webhook_403_for_a_terminating_namespace_is_transient() {
        // open-cluster-management-io/ocm v1.3.1 `pkg/registration/webhook/v1/managedcluster_validating.go`: the
        // accept is denied until the old cluster namespace is gone.
        let e = classify_status(&forbidden(
            "admission webhook \"managedclustervalidators.admission.cluster.open-cluster-management.io\" \
             denied the request: cluster namespace \"cluster1\" is terminating",
        ));
        assert!(e.is_transient(), "{e:?}");
        assert!(
            e.to_string()
                .contains("cluster namespace \"cluster1\" is terminating")
        );
        assert!(e.help().is_some_and(|h| h.contains("Terminating")));
    }

    #[test]
    fn an_rbac_403_stays_permanent() {
        for m in [
            "managedclusters.register.open-cluster-management.io \"cluster1\" is forbidden: User \
             \"system:serviceaccount:default:lab\" cannot update resource \"managedclusters/accept\" in API \
             group \"register.open-cluster-management.io\" at the cluster scope",
            // A webhook that denies for another reason is not waited out either.
            "admission webhook \"managedclustervalidators.admission.cluster.open-cluster-management.io\" \
             denied the request: user \"lab\" cannot update the HubAcceptsClient field",
        ] {
            let e = classify_status(&forbidden(m));
            assert!(!e.is_transient(), "{m}");
            assert!(e.help().is_some_and(|h| h.contains("RBAC")), "{m}");
        }
    }

    #[test]
    fn a_webhook_not_ready_yet_is_transient_and_a_422_is_not() {
        // What the API server answers while the webhook's Deployment has no ready endpoint (failurePolicy: Fail).
        let unready = Status::failure(
            "Internal error occurred: failed calling webhook \
             \"managedclustersetbindingvalidators.admission.cluster.open-cluster-management.io\": failed to \
             call webhook: Post \"https://cluster-manager-registration-webhook.open-cluster-management-hub.svc:9443/\
             validate-cluster-open-cluster-management-io-v1beta2-managedclustersetbinding?timeout=10s\": dial tcp \
             10.96.1.2:9443: connect: connection refused",
            "InternalError",
        )
        .with_code(500);
        assert!(classify_status(&unready).is_transient());
        let invalid = Status::failure(
            "ManagedClusterSetBinding.cluster.open-cluster-management.io \"x\" is invalid: spec.clusterSet: \
             Invalid value: \"y\": must match the name",
            "Invalid",
        )
        .with_code(422);
        assert!(!classify_status(&invalid).is_transient());
    }

    #[test]
    fn chain_does_not_repeat_sources() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = ::kube::Error::ReadEvents(io);
        assert_eq!(chain(&e), "Error reading events stream: connection refused");
        let b = classify(e, "https://127.0.0.1:6443");
        assert!(b.is_transient());
        assert!(b.to_string().contains("https://127.0.0.1:6443"));
    }
}
