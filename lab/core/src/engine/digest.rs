//! Input digests: what a step will do, as one sha256, so a resumed run carries a finished step over only
//! when it would do exactly the same thing again.
//!
//! A step's digest covers its action (name and the version of the code that runs it), its rendered
//! `with`, the objects it applies, its chart (name, version, values and the patches that apply, by
//! content), the definition of the cluster it targets, the lab's pinned versions and the tool versions.
//! Actions whose behaviour depends on more of the lab than their own inputs (joining, accepting, waiting
//! for addons, merging kubeconfigs, …) also cover a digest of the whole lab, so any topology edit runs
//! them again; only `docker.network`, `manifest.apply`, `kube.wait` and `chart.install` are fully
//! described by their own inputs.

use std::collections::BTreeMap;

use serde::Serialize;
use sha2::{Digest as _, Sha256};

use crate::charts::ChartPlan;
use crate::patch::PatchSet;
use crate::topology::{Cluster, Lab, LabVersions};
use crate::workflow::PlannedStep;
use crate::workflow::plan::{self, Manifests};

/// Bumped whenever what an action does for the same inputs changes in a way a resume must not skip.
const ACTIONS_REVISION: u32 = 1;

/// Actions fully described by their own inputs: the lab digest is left out of theirs.
const SELF_DESCRIBED: &[&str] = &[
    "docker.network",
    "manifest.apply",
    "kube.wait",
    "chart.install",
];

/// Actions that only observe: never carried over, they run again on every resume.
const OBSERVE_ONLY: &[&str] = &["lab.preflight", "verify.lab"];

/// Whether a step only observes the lab (preflight, verification): such a step is never carried over.
pub fn observe_only(step: &PlannedStep) -> bool {
    OBSERVE_ONLY.contains(&step.uses.as_str())
}

/// Computes the digests of a plan's steps against one lab.
pub struct Digester<'a> {
    lab: &'a Lab,
    patches: &'a PatchSet,
    tools: &'a BTreeMap<String, String>,
    /// sha256 of the whole lab, computed once.
    lab_digest: String,
}

#[derive(Serialize)]
struct Inputs<'a> {
    revision: u32,
    ocm_lab: &'static str,
    uses: &'a str,
    with: &'a plan::Inputs,
    #[serde(skip_serializing_if = "Manifests::is_empty")]
    objects: &'a Manifests,
    #[serde(skip_serializing_if = "Option::is_none")]
    chart: Option<&'a ChartPlan>,
    /// The applicable chart patches, by content (their `Debug` text: every field, in order).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    patches: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster: Option<&'a Cluster>,
    versions: &'a LabVersions,
    tools: &'a BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lab: Option<&'a str>,
}

impl<'a> Digester<'a> {
    /// `tools` holds the versions of the external tools the run uses (empty for the simulated lab).
    pub fn new(lab: &'a Lab, patches: &'a PatchSet, tools: &'a BTreeMap<String, String>) -> Self {
        let lab_digest = sha256_json(lab);
        Digester {
            lab,
            patches,
            tools,
            lab_digest,
        }
    }

    /// The digest of one step instance (sha256, hex).
    pub fn step(&self, step: &PlannedStep) -> String {
        let patches = step
            .chart
            .iter()
            .flat_map(|c| &c.patches)
            .map(|p| {
                self.patches
                    .all()
                    .iter()
                    .find(|cp| cp.name == p.name)
                    .map_or_else(|| format!("{p:?}"), |cp| format!("{cp:?}"))
            })
            .collect();
        let inputs = Inputs {
            revision: ACTIONS_REVISION,
            ocm_lab: env!("CARGO_PKG_VERSION"),
            uses: &step.uses,
            with: &step.with,
            objects: &step.objects,
            chart: step.chart.as_deref(),
            patches,
            cluster: step
                .cluster()
                .or(step.chart.as_ref().map(|c| c.cluster.as_str()))
                .and_then(|c| self.lab.cluster(c)),
            versions: &self.lab.versions,
            tools: self.tools,
            lab: (!SELF_DESCRIBED.contains(&step.uses.as_str())).then_some(&self.lab_digest),
        };
        sha256_json(&inputs)
    }
}

fn sha256_json(value: &impl Serialize) -> String {
    let bytes = serde_json::to_vec(value).expect("plans and labs serialize");
    hex::encode(Sha256::digest(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab(text: &str) -> Lab {
        crate::topology::load_str("t.yaml", text).unwrap().lab
    }

    fn digests(lab: &Lab) -> BTreeMap<String, String> {
        let patches = PatchSet::embedded().unwrap();
        let plan = crate::workflow::plan::plan(
            lab,
            &crate::workflow::Sources::embedded(),
            &crate::actions::Registry,
            &patches,
            "up",
        )
        .unwrap();
        let tools = BTreeMap::new();
        let d = Digester::new(lab, &patches, &tools);
        plan.steps
            .iter()
            .map(|s| (s.id.clone(), d.step(s)))
            .collect()
    }

    #[test]
    fn a_topology_edit_changes_the_digests_of_the_steps_it_touches_and_only_those() {
        let text = crate::embedded::topology("default").unwrap();
        let before = digests(&lab(text));
        assert_eq!(before, digests(&lab(text)), "digests are stable");
        let edited = text.replacen("region: eu-west-1", "region: eu-north-1", 1);
        assert_ne!(edited, text, "the default topology names region eu-west-1");
        let after = digests(&lab(&edited));
        let changed: Vec<&String> = before.keys().filter(|k| before[*k] != after[*k]).collect();
        assert!(
            changed.iter().any(|k| k.starts_with("properties[")),
            "{changed:?}"
        );
        // Steps fully described by their own inputs, and unaffected by the edit, are carried over.
        assert!(!changed.contains(&&"network".to_owned()), "{changed:?}");
        assert!(!changed.contains(&&"hub-manager".to_owned()), "{changed:?}");
    }
}
