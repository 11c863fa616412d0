//! `up` on a lab that is up: no mutating call (tested in `engine`), and a bounded
//! number of reads per spoke, counted in the simulated lab's call log: the `kube.*` calls the simulated
//! API servers received (Docker and kind calls are not API reads and are left out).

use std::collections::BTreeMap;

use crate::engine::Harness;

/// API calls that change something; every other `kube.*` call is a read.
const MUTATING: &[&str] = &[
    "kube.apply",
    "kube.merge-patch",
    "kube.delete",
    "kube.approve-csr",
    "kube.token-request",
];

/// The shape of `benches/up_sim.rs`: `n` spokes with two properties each, one set bound in two
/// namespaces, both addons, a managed service account per spoke.
fn topology(n: usize) -> ocm_lab::topology::Lab {
    let text =
        ocm_lab_testkit::fleet_topology(&format!("reads-{n}"), n, |i| format!("region: r-{i}"));
    ocm_lab::topology::load_str(&crate::common::host(), "reads.yaml", &text)
        .expect("valid topology")
        .lab
}

/// API reads of the second `up`, per cluster.
async fn second_up_reads(n: usize) -> BTreeMap<String, usize> {
    let h = Harness::new(topology(n));
    let (r, _) = h.run("up").await;
    assert!(r.ok, "first up: {:?}", r.failed);
    let before = h.sim.calls().len();
    let mutations = h.sim.mutations();
    let (r, _) = h.run("up").await;
    assert!(r.ok, "second up: {:?}", r.failed);
    assert_eq!(h.sim.mutations(), mutations, "a second up mutates nothing");
    let mut reads = BTreeMap::new();
    for c in h.sim.calls()[before..]
        .iter()
        .filter(|c| c.verb.starts_with("kube."))
    {
        assert!(
            !MUTATING.contains(&c.verb.as_str()),
            "a mutating call on a lab that is up: {c:?}"
        );
        *reads.entry(c.cluster.clone()).or_insert(0) += 1;
    }
    reads
}

/// Reads a second `up` may make on each spoke's own API server (28 measured when written).
const SPOKE_READS: usize = 32;
/// Reads a second `up` may add on the hub for each more spoke (20 measured when written).
const HUB_READS_PER_SPOKE: usize = 24;
/// Reads in all per more spoke (48 measured when written).
const READS_PER_SPOKE: usize = 56;

#[tokio::test(start_paused = true)]
async fn up_on_a_lab_that_is_up_makes_a_bounded_number_of_reads_per_spoke() {
    let (small, large) = (2, 6);
    let a = second_up_reads(small).await;
    let b = second_up_reads(large).await;
    let spoke_reads = |m: &BTreeMap<String, usize>| -> Vec<usize> {
        m.iter()
            .filter(|(c, _)| c.starts_with("spoke-"))
            .map(|(_, n)| *n)
            .collect()
    };
    let hub = |m: &BTreeMap<String, usize>| -> usize {
        m.iter()
            .filter(|(c, _)| !c.starts_with("spoke-"))
            .map(|(_, n)| *n)
            .sum()
    };
    let (total_a, total_b): (usize, usize) = (a.values().sum(), b.values().sum());
    let per_spoke = (total_b - total_a) / (large - small);
    let hub_per_spoke = hub(&b).saturating_sub(hub(&a)) / (large - small);
    let max_on_spoke = spoke_reads(&b).into_iter().max().unwrap_or(0);
    println!(
        "simulated lab, second up: {total_a} reads with {small} spokes, {total_b} with {large}: \
         {per_spoke} reads per spoke ({max_on_spoke} at most on a spoke's API server, {hub_per_spoke} on the hub)"
    );
    assert!(
        per_spoke <= READS_PER_SPOKE,
        "each spoke adds {per_spoke} reads (bound {READS_PER_SPOKE}): {a:?} → {b:?}"
    );
    assert_eq!(spoke_reads(&b).len(), large, "every spoke was read: {b:?}");
    assert!(
        max_on_spoke <= SPOKE_READS,
        "a spoke's API server got {max_on_spoke} reads (bound {SPOKE_READS}): {b:?}"
    );
    assert!(
        hub_per_spoke <= HUB_READS_PER_SPOKE,
        "each spoke adds {hub_per_spoke} reads on the hub (bound {HUB_READS_PER_SPOKE}): {a:?} → {b:?}"
    );
    // Spokes are alike: each one costs the same, so the count is linear in the spokes.
    let spokes = spoke_reads(&b);
    assert!(
        spokes.iter().max() == spokes.iter().min(),
        "spokes differ in reads: {b:?}"
    );
}
