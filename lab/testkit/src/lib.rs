//! Test support for ocm-lab, kept out of the product: only the tests of the `ocm-lab` crate depend on it.
//!
//! [`contracts`] holds the command-line contracts of helm and kind per supported version, which the tests'
//! stand-in binaries enforce. [`crdschema`] validates objects offline against the schemas of upstream CustomResourceDefinitions; the
//! integration tests use it to check that what ocm-lab writes would be accepted by an API server.

pub mod contracts;
pub mod crdschema;

/// The text of a topology with `n` spokes named `spoke-<i>`, each with the properties `properties(i)`
/// renders (a YAML flow mapping's body, e.g. `region: r-1`), all in one set bound in two namespaces, with
/// both addons and one ManagedServiceAccount: the fleet the benchmarks and the scale tests use.
pub fn fleet_topology(name: &str, n: usize, properties: impl Fn(usize) -> String) -> String {
    let spokes: String = (0..n)
        .map(|i| {
            format!(
                "    - name: spoke-{i}\n      properties: {{{}}}\n",
                properties(i)
            )
        })
        .collect();
    let members: Vec<String> = (0..n).map(|i| format!("spoke-{i}")).collect();
    format!(
        "apiVersion: ocm-lab.open-cluster-management.io/v1alpha1
kind: Topology
metadata: {{name: {name}}}
spec:
  hub: {{name: hub, featureGates: [ClusterProfile]}}
  spokes:
{spokes}  clusterSets:
    - name: fleet
      clusters: [{}]
      bindTo: [cluster-inventory, open-cluster-management-addon]
  addons:
    cluster-proxy: {{clusterSet: fleet}}
    managed-serviceaccount: {{clusterSet: fleet}}
  serviceAccounts:
    - name: reader
  verify: {{namespaces: [cluster-inventory], checks: [properties, access-providers, credentials, conditions]}}
",
        members.join(", ")
    )
}
