//! Crash safety: a real `ocm-lab up --simulate --output json` child is SIGKILLed from outside right after
//! each step boundary of the default lab in turn (the n-th `step-finished` event it prints), and every time
//! the next `up` finishes and `verify` passes: the journal only records, the ownership record holds only
//! what was seen to succeed, and the next `up` observes the lab and converges from it.

use crate::resume::Sandbox;

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_kill_at_every_step_boundary_of_up_leaves_a_lab_that_up_and_verify_finish() {
    let boundaries = crate::common::plan(&crate::common::lab("default"))
        .steps
        .len();
    // The children mostly wait on each other's simulated controllers, not the CPU: a few at a time.
    let next = std::sync::atomic::AtomicUsize::new(1);
    let failures = std::sync::Mutex::new(Vec::new());
    let landed = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if n > boundaries {
                        break;
                    }
                    let s = Sandbox::new();
                    // Near the end, the run may finish before the kill lands: then it must have
                    // finished well, and the commands after it still run.
                    if s.kill_after(&["up", "--simulate"], n).signal.is_some() {
                        landed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
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
    let landed = landed.into_inner();
    println!("{landed} of {boundaries} kills landed before the run ended");
    assert!(
        landed * 2 >= boundaries,
        "only {landed} of {boundaries} kills landed before the run ended"
    );
    assert!(
        failures.is_empty(),
        "{} of {boundaries} kills left a lab that does not recover:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
