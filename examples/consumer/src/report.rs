//! The report as JSON, for a program that started the consumer and reads what it found (ocm-lab's `consumer`
//! verify check reads it from the consumer Pod's `state.terminated.message`).
//!
//! The kubelet keeps at most 4096 bytes of a container's termination message
//! (kubernetes/kubernetes v1.35 `pkg/kubelet/kuberuntime/kuberuntime_container.go`, `maxMsgSize`), so a
//! detail is cut to [`DETAIL_MAX`] characters and the JSON is compact. The token is never in it.

use serde::{Deserialize, Serialize};

use crate::{Error, Hop, Report};

/// How much of an error's text a spoke's line keeps.
pub const DETAIL_MAX: usize = 240;

/// What the consumer found in one namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    /// A failure before any spoke (the hub, the provider file, no ClusterProfile): then `spokes` is empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    #[serde(default)]
    pub spokes: Vec<PodSpoke>,
}

/// One ClusterProfile's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpoke {
    pub profile: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The spoke's `gitVersion`, when it answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// Where the path broke, and what was said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    pub hop: Hop,
    /// The HTTP status the last server answered, when one did (400 and 502 for the `proxy` hop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    pub detail: String,
}

impl Failure {
    pub fn of(e: &Error) -> Self {
        let status = match e {
            Error::Spoke {
                source: kube::Error::Api(s),
                ..
            } => Some(s.code),
            _ => None,
        };
        let text = e.to_string();
        let detail = match text.char_indices().nth(DETAIL_MAX) {
            Some((i, _)) => format!("{}…", &text[..i]),
            None => text,
        };
        Failure {
            hop: e.hop(),
            status,
            detail,
        }
    }
}

impl PodReport {
    pub fn of(report: &Report) -> Self {
        PodReport {
            namespace: report.namespace.clone(),
            error: None,
            spokes: report
                .spokes
                .iter()
                .map(|s| PodSpoke {
                    profile: s.profile.clone(),
                    cluster: s.cluster.clone(),
                    server: s.server.clone(),
                    version: s.outcome.as_ref().ok().map(|a| a.version.clone()),
                    failure: s.outcome.as_ref().err().map(Failure::of),
                })
                .collect(),
        }
    }

    /// A run that failed before reaching any spoke.
    pub fn failed(namespace: &str, e: &Error) -> Self {
        PodReport {
            namespace: namespace.to_owned(),
            error: Some(Failure::of(e)),
            spokes: Vec::new(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("reports serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_detail_is_cut_and_the_json_reads_back() {
        let e = Error::PluginFailed {
            command: "/plugins/cp-creds".into(),
            status: Some(1),
            stderr: "x".repeat(2000),
        };
        let r = PodReport {
            namespace: "ns".into(),
            error: None,
            spokes: vec![PodSpoke {
                profile: "cluster1".into(),
                cluster: Some("cluster1".into()),
                server: None,
                version: None,
                failure: Some(Failure::of(&e)),
            }],
        };
        let json = r.to_json();
        assert!(json.len() < 400, "{}", json.len());
        assert!(json.contains(r#""hop":"plugin-refused""#), "{json}");
        assert_eq!(serde_json::from_str::<PodReport>(&json).unwrap(), r);
    }
}
