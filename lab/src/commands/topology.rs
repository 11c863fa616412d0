//! `ocm-lab topology check|schema|list|show`: topology files, touching no lab.

use super::{document, stdout, warn};
use crate::cli::TopologyCommand;
use crate::embedded;
use crate::error::Error;
use crate::topology;

pub fn run(command: &TopologyCommand, host: &topology::Host) -> Result<(), Error> {
    match command {
        TopologyCommand::Check {
            topology,
            topology_flag,
            output,
        } => check(
            topology
                .as_deref()
                .or(topology_flag.as_deref())
                .expect("clap requires FILE|NAME or -t"),
            output.output,
            host,
        ),
        TopologyCommand::Schema => stdout(&format!(
            "{}\n",
            serde_json::to_string_pretty(&topology::json_schema()).expect("schemas serialize")
        )),
        TopologyCommand::List { output } => list(output.output, host),
        TopologyCommand::Show {
            name,
            topology_flag,
        } => {
            let name = name
                .as_deref()
                .or(topology_flag.as_deref())
                .unwrap_or("default");
            show(name, host)
        }
    }
}

/// `topology show`: an embedded topology's text.
fn show(name: &str, host: &topology::Host) -> Result<(), Error> {
    match embedded::topology(name) {
        Some(text) => stdout(text),
        None => Err(topology::load_arg(host, Some(name)).err().map_or_else(
            || unreachable!("a missing embedded topology fails to load"),
            Error::from,
        )),
    }
}

/// `topology check`: every problem with its location, or a one-line summary of the lab.
fn check(topology: &str, output: crate::cli::Output, host: &topology::Host) -> Result<(), Error> {
    let loaded = topology::load_arg(host, Some(topology))?;
    warn(&loaded);
    let lab = &loaded.lab;
    let checks: Vec<&str> = lab.verify.checks.iter().map(|c| c.as_str()).collect();
    let result = serde_json::json!({
        "file": loaded.origin,
        "ok": true,
        "lab": lab.name,
        "hub": lab.hub.cluster.name,
        "spokes": lab.spokes.iter().map(|s| &s.cluster.name).collect::<Vec<_>>(),
        "clusterSets": lab.cluster_sets.iter().map(|s| &s.name).collect::<Vec<_>>(),
        "bindings": lab.bindings.len(),
        "checks": checks,
        "warnings": loaded.warnings.len(),
    });
    document(output, &result, || {
        use crate::text::count;
        format!(
            "{}: ok: lab `{}`, hub `{}`, {}, {}, {}, checks: {}\n",
            loaded.origin,
            lab.name,
            lab.hub.cluster.name,
            count(lab.spokes.len(), "spoke", "spokes"),
            count(lab.cluster_sets.len(), "set", "sets"),
            count(lab.bindings.len(), "binding", "bindings"),
            checks.join(", ")
        )
    })
}

/// `topology list`: the embedded topologies and their descriptions.
fn list(output: crate::cli::Output, host: &topology::Host) -> Result<(), Error> {
    let list: Vec<serde_json::Value> = embedded::TOPOLOGIES
        .iter()
        .map(|(name, text)| {
            let desc = topology::load_str(host, name, text)
                .ok()
                .and_then(|l| l.lab.description)
                .unwrap_or_default();
            let lab = topology::load_str(host, name, text)
                .map(|l| l.lab.name)
                .unwrap_or_default();
            serde_json::json!({"name": name, "lab": lab, "description": desc})
        })
        .collect();
    // The lab a topology makes is named by its `metadata.name`, which is what state folders, kube
    // contexts and messages say: `default` makes the lab `sandbox`, so the list says both.
    document(output, &list, || {
        let mut out = format!("{:<10} {:<10} {}\n", "TOPOLOGY", "LAB", "DESCRIPTION");
        for t in &list {
            let name = t["name"].as_str().unwrap_or_default();
            let lab = t["lab"].as_str().unwrap_or_default();
            let desc = t["description"].as_str().unwrap_or_default();
            out.push_str(&format!("{name:<10} {lab:<10} {desc}\n"));
        }
        out
    })
}
