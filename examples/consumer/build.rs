//! Sets `ocm_lab_tests_no_fixtures` when `../shared/fixtures` (objects recorded from a real lab) is not
//! beside the checkout, as in a clone from GitHub: the test that reads it is then reported as ignored, with
//! the reason, by `cargo test`. `OCM_LAB_REQUIRE_FIXTURES=1` (set by `.ci/run`) keeps it running, and
//! failing without them. Only the tests read the cfg.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ocm_lab_tests_no_fixtures)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=OCM_LAB_REQUIRE_FIXTURES");
    let manifest =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let fixtures = manifest.join("../../../shared/fixtures");
    if fixtures.is_dir() {
        println!("cargo::rerun-if-changed={}", fixtures.display());
    } else if std::env::var("OCM_LAB_REQUIRE_FIXTURES").as_deref() != Ok("1") {
        println!("cargo::rustc-cfg=ocm_lab_tests_no_fixtures");
    }
}
