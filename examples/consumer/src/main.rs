//! `ocm-lab-consumer`: lists the ClusterProfiles of a namespace on the hub and, for each, talks to the spoke
//! through its access provider with the credential the provider file's exec plugin returns (for OCM,
//! managed-serviceaccount's `cp-creds`), printing the spoke's Kubernetes version and how many namespaces it
//! has. See README.md.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let args = ocm_lab_consumer::Args::parse();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(ocm_lab_consumer::run(&args));
    if let Some(path) = &args.report {
        let json = match &outcome {
            Ok(report) => ocm_lab_consumer::PodReport::of(report),
            Err(e) => ocm_lab_consumer::PodReport::failed(&args.namespace, e),
        }
        .to_json();
        if let Err(e) = std::fs::write(path, json) {
            eprintln!(
                "error: failed to write the report to {}: {e}",
                path.display()
            );
            return std::process::ExitCode::FAILURE;
        }
    }
    match outcome {
        Ok(report) => {
            print!("{}", report.text());
            if report.all_ok() {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
