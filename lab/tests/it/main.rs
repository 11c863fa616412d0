//! Integration tests, compiled into one binary (one link instead of one per file).

mod cli_sim;
mod common;
mod crdschema;
mod docker;
mod engine;
mod hub_webhooks;
mod kube_api;
mod lifecycle;
mod patch_files;
mod plan;
mod recorded_objects;
mod sim;
mod sim_certs;
mod tools;
mod topology;
mod up_hazards;
mod verify_hops;
mod workflow;
