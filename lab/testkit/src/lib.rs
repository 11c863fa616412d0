//! Test support for ocm-lab, kept out of the product: only the tests of the `ocm-lab` crate depend on it.
//!
//! [`crdschema`] validates objects offline against the schemas of upstream CustomResourceDefinitions; the
//! integration tests use it to check that what ocm-lab writes would be accepted by an API server.

pub mod crdschema;
