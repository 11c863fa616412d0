//! Ownership you can prove, on the real Docker engine: a cluster is the lab's only after the lab saw its own
//! `kind create` succeed and recorded the node containers' IDs. A container that merely looks like one of
//! the lab's nodes (by name or kind label) is someone else's, and `down`, `reset` and `up` leave it alone.
//!
//! `kind` and `helm` are shell scripts (`OCM_LAB_KIND`, `OCM_LAB_HELM`): the fake kind logs every call and
//! fails every create, as a name clash or a broken node image would. Without Docker (or busybox-static for
//! the test image) the test is ignored, with the reason (`lab/build.rs`).

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{CreateContainerOptionsBuilder, StartContainerOptions};

use crate::docker::{Cleanup, docker_with_test_image, exists};

use crate::common::FakeKindLab as Lab;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn a_look_alike_made_after_a_failed_create_survives_down_reset_and_a_second_up() {
    let (d, image) = docker_with_test_image().await;
    let mut cleanup = Cleanup::new(&d);
    let tag = format!("own{}x{}", std::process::id(), rand_suffix());
    let (hub, spoke) = (format!("{tag}-hub"), format!("{tag}-spoke"));
    let lab = Lab::new(&tag, &hub, &spoke);
    cleanup.networks.push(lab.network.clone());

    // 1. `up`: preflight passes, the creates fail. The intents are withdrawn: nothing became the lab's.
    let up = lab.run("up");
    assert_ne!(up.code, 0, "up with a failing kind must fail: {up:?}");
    assert!(
        up.stdout
            .contains("the fake kind of this test fails every create")
            || up
                .stderr
                .contains("the fake kind of this test fails every create"),
        "{up:?}"
    );
    let creates = lab
        .kind_calls()
        .iter()
        .filter(|c| c.starts_with("create cluster"))
        .count();
    assert!(
        creates >= 1,
        "kind create was tried: {:?}",
        lab.kind_calls()
    );
    let record = lab.owned_log();
    assert!(
        record.contains(&format!("{{\"op\":\"intend-cluster\",\"name\":\"{hub}\"}}"))
            && record.contains(&format!(
                "{{\"op\":\"withdraw-cluster\",\"name\":\"{hub}\"}}"
            ))
            && !record.contains("confirm-cluster"),
        "{record}"
    );

    // 2. Someone else then makes containers named like the hub's nodes: the control plane unlabelled,
    //    a worker with kind's cluster label.
    let foreign = format!("{hub}-control-plane");
    let worker = format!("{hub}-worker");
    for (name, labels) in [
        (&foreign, vec![]),
        (
            &worker,
            vec![("io.x-k8s.kind.cluster".to_owned(), hub.clone())],
        ),
    ] {
        cleanup.containers.push(name.clone());
        d.client()
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(name).build()),
                ContainerCreateBody {
                    image: Some(image.clone()),
                    cmd: Some(vec!["/bin/sleep".into(), "300".into()]),
                    labels: Some(labels.into_iter().collect()),
                    host_config: Some(HostConfig::default()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        d.client()
            .start_container(name, None::<StartContainerOptions>)
            .await
            .unwrap();
    }

    // 3. `down` leaves it alone, says so, and still succeeds.
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(
        down.stderr
            .contains(&format!("{hub}: not ours, left alone")),
        "{down:?}"
    );
    for c in [&foreign, &worker] {
        assert!(exists(&d, c).await, "down removed {c}");
    }
    assert!(
        !lab.kind_calls().iter().any(|c| c.starts_with("delete")),
        "down ran kind delete: {:?}",
        lab.kind_calls()
    );

    // 4. `reset` leaves it alone.
    let reset = lab.run("reset");
    for c in [&foreign, &worker] {
        assert!(exists(&d, c).await, "reset removed {c}: {reset:?}");
    }

    // 5. `doctor` and a second `up` stop in preflight naming it, and kind is not asked to create again.
    let doctor = lab.run("doctor");
    assert_ne!(doctor.code, 0, "{doctor:?}");
    assert!(
        doctor
            .stdout
            .contains(&format!("{foreign} (unlabelled) for cluster `{hub}`")),
        "{doctor:?}"
    );
    let again = lab.run("up");
    assert_ne!(again.code, 0, "{again:?}");
    let text = format!("{}{}", again.stdout, again.stderr);
    assert!(
        text.contains("preflight") && text.contains(&format!("{foreign} (unlabelled)")),
        "{again:?}"
    );
    assert!(
        text.contains(&format!("docker rm -f {foreign}")),
        "{again:?}"
    );
    assert_eq!(
        lab.kind_calls()
            .iter()
            .filter(|c| c.starts_with("create cluster"))
            .count(),
        creates,
        "the second up ran kind create: {:?}",
        lab.kind_calls()
    );
    for c in [&foreign, &worker] {
        assert!(exists(&d, c).await, "up removed {c}");
    }
    assert!(
        text.contains(&format!("{worker} (labelled io.x-k8s.kind.cluster={hub})")),
        "{again:?}"
    );
    eprintln!(
        "--- down:\n{}{}\n--- second up:\n{}",
        down.stdout, down.stderr, text
    );
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 100_000
}

/// A damaged line in the middle of the ownership record stops `up` with an error that names the command
/// that recovers; that command works, and the lab comes up again.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_damaged_ownership_record_names_a_down_that_works_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let run =
        |args: &[&str]| crate::common::ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", dir.path())]);
    let up = run(&["up", "-t", "minimal", "--simulate"]);
    assert_eq!(up.code, 0, "{up:?}");
    let log = dir.path().join("minimal/simulated/owned.jsonl");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("confirm-cluster"), "{text}");
    // Garbage after the first line (a disk error, a bad hand edit).
    let (first, rest) = text.split_once('\n').unwrap();
    std::fs::write(&log, format!("{first}\n\u{1}#garbage\n{rest}")).unwrap();

    let again = run(&["up", "-t", "minimal", "--simulate"]);
    assert_ne!(again.code, 0, "{again:?}");
    assert!(again.stderr.contains("damaged at line 2"), "{again:?}");
    let recover = "ocm-lab down -t minimal --simulate";
    assert!(again.stderr.contains(recover), "{again:?}");

    let down = run(&["down", "-t", "minimal", "--simulate"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(down.stderr.contains("skipping damaged line 2"), "{down:?}");
    assert!(!log.exists(), "down starts a new record");
    let up = run(&["up", "-t", "minimal", "--simulate"]);
    assert_eq!(up.code, 0, "{up:?}");
}

/// The simulated lab, through the engine: look-alikes by name or label stop `up` in preflight before any
/// `kind create`, and `down` leaves them alone.
#[tokio::test(start_paused = true)]
async fn simulated_look_alikes_stop_up_and_survive_down() {
    use crate::engine::{Harness, failure};
    let h = Harness::new(crate::common::lab("minimal"));
    h.sim.with_world(|w| {
        w.add_container("mini-hub-control-plane", None, true);
        w.add_foreign_cluster("mini-spoke");
    });
    let (res, _) = h.run("up").await;
    let (step, e) = res.failed.clone().expect("up fails");
    assert_eq!(step, "preflight", "{}", failure(&res));
    assert!(
        e.message
            .contains("mini-hub-control-plane (unlabelled) for cluster `mini-hub`")
            && e.message.contains(
                "mini-spoke-control-plane (labelled io.x-k8s.kind.cluster=mini-spoke) for cluster `mini-spoke`"
            ),
        "{}",
        failure(&res)
    );
    assert!(
        e.help
            .unwrap_or_default()
            .contains("docker rm -f mini-hub-control-plane mini-spoke-control-plane"),
        "{}",
        failure(&res)
    );
    assert!(
        !h.sim.calls().iter().any(|c| c.verb == "kind.create"),
        "kind create ran"
    );
    // `doctor --simulate` names them too.
    let findings = ocm_lab::commands::doctor::check(
        &h.lab,
        &h.sim.backends(),
        None,
        &h.state,
        &Ok(Vec::new()),
        &Default::default(),
    )
    .await;
    assert!(ocm_lab::commands::doctor::failed(&findings));
    let clash = findings.iter().find(|f| f.check == "clusters").unwrap();
    assert!(
        clash.detail.contains("mini-hub-control-plane (unlabelled)"),
        "{clash:?}"
    );
    // And kind itself could not have made the hub: Docker refuses the container name.
    let e = h
        .sim
        .backends()
        .kind
        .create(&ocm_lab::backend::CreateCluster {
            name: "mini-hub".into(),
            image: "kindest/node:v1.36.1".into(),
            kubeconfig: h.state.kubeconfig("mini-hub"),
            registries: Default::default(),
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("is already in use"), "{e}");
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    let left = h.sim.with_world(|w| w.container_names());
    assert_eq!(
        left,
        ["mini-hub-control-plane", "mini-spoke-control-plane"],
        "down left both alone"
    );
}

/// The worst case on the simulated lab: the lab's hub is deleted behind its back and someone else
/// creates a cluster of the same name. `down` deletes the lab's spoke and leaves the new hub alone.
#[tokio::test(start_paused = true)]
async fn down_leaves_a_same_named_cluster_someone_else_made_later() {
    use crate::engine::{Harness, failure};
    let h = Harness::new(crate::common::lab("minimal"));
    let (res, _) = h.run("up").await;
    assert!(res.ok, "{}", failure(&res));
    // As `kubeconfig.merge` records them on a real lab (the simulated lab never touches kubeconfigs).
    h.state
        .update_contexts(|c| c.extend(["kind-mini-hub".to_owned(), "kind-mini-spoke".to_owned()]))
        .unwrap();
    h.sim.backends().kind.delete("mini-hub").await.unwrap();
    h.sim.with_world(|w| w.add_foreign_cluster("mini-hub"));
    let (res, _) = h.run("down").await;
    assert!(res.ok, "{}", failure(&res));
    let left = h.sim.with_world(|w| w.container_names());
    assert_eq!(
        left,
        ["mini-hub-control-plane"],
        "only the foreign hub is left"
    );
    let owned = h.state.owned().unwrap();
    assert!(owned.clusters.is_empty());
    // The other cluster's context is theirs now: the lab no longer claims it, so prune keeps it.
    assert_eq!(owned.contexts, ["kind-mini-spoke"]);
}

/// A run killed while appending to the ownership record leaves a torn last line: the next command cuts it
/// off with one warning, and the record stays whole from then on.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn a_torn_last_ownership_line_is_cut_off_once_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let run =
        |args: &[&str]| crate::common::ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", dir.path())]);
    assert_eq!(run(&["up", "-t", "minimal", "--simulate"]).code, 0);
    let log = dir.path().join("minimal/simulated/owned.jsonl");
    let whole = std::fs::read_to_string(&log).unwrap();
    std::fs::write(&log, format!("{whole}{{\"op\":\"intend-clu")).unwrap();

    let again = run(&["up", "-t", "minimal", "--simulate"]);
    assert_eq!(again.code, 0, "{again:?}");
    let warnings: Vec<&str> = again
        .stderr
        .lines()
        .filter(|l| l.contains("torn last line"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", again.stderr);
    let after = std::fs::read_to_string(&log).unwrap();
    assert!(
        after.starts_with(&whole) && after.ends_with('\n'),
        "{after}"
    );
    assert!(!after.contains("intend-clu\""), "{after}");
    let down = run(&["down", "-t", "minimal", "--simulate"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(!down.stderr.contains("torn"), "{down:?}");
}

/// A bug report about ownership needs the record: `diagnose` puts it in the bundle.
#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn diagnose_bundles_the_ownership_record() {
    let dir = tempfile::tempdir().unwrap();
    let run =
        |args: &[&str]| crate::common::ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", dir.path())]);
    assert_eq!(run(&["up", "-t", "minimal", "--simulate"]).code, 0);
    let out = dir.path().join("bundle.tar.gz");
    let r = run(&[
        "diagnose",
        "-t",
        "minimal",
        "--simulate",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(
        std::fs::File::open(&out).unwrap(),
    ));
    let mut record = None;
    for e in archive.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().ends_with("owned.jsonl") {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut e, &mut text).unwrap();
            record = Some(text);
        }
    }
    let record = record.expect("owned.jsonl in the bundle");
    assert!(
        record.contains("\"op\":\"confirm-cluster\",\"name\":\"mini-hub\""),
        "{record}"
    );
}
