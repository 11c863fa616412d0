//! Crash safety: a real `ocm-lab up --simulate` child is SIGKILLed right after each step boundary of the
//! default lab in turn (the test-only `OCM_LAB_CRASH_POINT=n`), and every time the next `up` finishes and
//! `verify` passes: whatever a step changed is durable before the journal says it is done.

use crate::resume::Sandbox;

#[test]
fn a_kill_at_every_step_boundary_of_up_leaves_a_lab_that_up_and_verify_finish() {
    let boundaries = crate::common::plan(&crate::common::lab("default"))
        .steps
        .len();
    // The children mostly wait on each other's simulated controllers, not the CPU: a few at a time.
    let next = std::sync::atomic::AtomicUsize::new(1);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if n > boundaries {
                        break;
                    }
                    let s = Sandbox::new();
                    s.killed_after(&["up", "--simulate"], n);
                    for args in [&["up", "--simulate"], &["verify", "--simulate"]] {
                        let r = s.run(args);
                        if r.code != Some(0) {
                            failures.lock().unwrap().push(format!(
                                "killed after boundary {n}: `ocm-lab {}` failed:\n{}",
                                args.join(" "),
                                r.stderr
                            ));
                            break;
                        }
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "{} of {boundaries} kills left a lab that does not recover:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
