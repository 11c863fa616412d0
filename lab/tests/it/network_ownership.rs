//! The kind Docker network, on the real Docker engine: `down` removes the network `up` created once no
//! container uses it, keeps it while one does, and never removes a network that was there before `up`.
//!
//! `kind` and `helm` are shell scripts: the fake kind fails every create, so `up` creates the network (its
//! `network` step runs before the creates) and no node container joins it. The network is the test's own
//! (`KIND_EXPERIMENTAL_DOCKER_NETWORK`), never the machine's `kind`.

use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectNetworkOptions, StartContainerOptions,
};

use crate::common::FakeKindLab;
use crate::docker::{Cleanup, docker_with_test_image, engine};

/// A lab named `net<what><pid>x<n>` with the fake kind that fails every create.
fn lab(what: &str) -> FakeKindLab {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        % 100_000;
    let tag = format!("net{what}{}x{nanos}", std::process::id());
    FakeKindLab::new(&tag, &format!("{tag}-hub"), &format!("{tag}-spoke"))
}

/// The ID of network `name`, or `None` when there is none.
async fn network_id(d: &ocm_lab::backend::docker::Docker, name: &str) -> Option<String> {
    match d
        .client()
        .inspect_network(name, None::<InspectNetworkOptions>)
        .await
    {
        Ok(n) => n.id,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => None,
        Err(e) => panic!("inspect network {name}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_test_image,
    ignore = "needs a Docker engine and busybox-static (the test image), missing when the tests were built"
)]
async fn down_removes_the_network_up_created_once_no_container_uses_it() {
    let (d, image) = docker_with_test_image().await;
    let mut cleanup = Cleanup::new(&d);
    let lab = lab("own");
    cleanup.networks.push(lab.network.clone());

    // `up` creates the network, and records it with its ID, before the (failing) creates.
    let up = lab.run("up");
    assert_ne!(up.code, 0, "the fake kind fails every create: {up:?}");
    let id = network_id(&d, &lab.network)
        .await
        .unwrap_or_else(|| panic!("up created no network {}: {up:?}", lab.network));
    assert!(
        lab.owned_log().contains(&format!(
            "{{\"op\":\"create-network\",\"name\":\"{}\",\"id\":\"{id}\"}}",
            lab.network
        )),
        "{}",
        lab.owned_log()
    );

    // A container someone else attached keeps it through `down`, which says so and still succeeds.
    let user = format!("{}-user", lab.tag);
    cleanup.containers.push(user.clone());
    d.client()
        .create_container(
            Some(CreateContainerOptionsBuilder::default().name(&user).build()),
            ContainerCreateBody {
                image: Some(image.clone()),
                cmd: Some(vec!["/bin/sleep".into(), "300".into()]),
                host_config: Some(HostConfig {
                    network_mode: Some(lab.network.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    d.client()
        .start_container(&user, None::<StartContainerOptions>)
        .await
        .unwrap();
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(
        down.stderr.contains(&format!(
            "kept Docker network {}: still used by {user}",
            lab.network
        )),
        "{down:?}"
    );
    assert_eq!(network_id(&d, &lab.network).await, Some(id.clone()));

    // Once the container is gone, the next `down` removes the network and the record says so.
    d.client()
        .remove_container(
            &user,
            Some(
                bollard::query_parameters::RemoveContainerOptionsBuilder::default()
                    .force(true)
                    .build(),
            ),
        )
        .await
        .unwrap();
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert!(
        down.stderr.contains(&format!(
            "removed Docker network {} (created by this lab)",
            lab.network
        )),
        "{down:?}"
    );
    assert_eq!(network_id(&d, &lab.network).await, None, "{down:?}");
    // The record no longer holds it (a `down` that leaves nothing removes the record altogether).
    let record = lab.owned_log();
    assert!(
        !record.contains(&id) || record.contains("\"op\":\"remove-network\""),
        "{record}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    ocm_lab_tests_no_docker,
    ignore = "needs a Docker engine, none answered when the tests were built"
)]
async fn down_never_removes_a_network_that_was_there_before_up() {
    let d = engine().await;
    let mut cleanup = Cleanup::new(&d);
    let lab = lab("foreign");
    cleanup.networks.push(lab.network.clone());
    d.client()
        .create_network(NetworkCreateRequest {
            name: lab.network.clone(),
            driver: Some("bridge".to_owned()),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = network_id(&d, &lab.network).await.expect("created");

    let up = lab.run("up");
    assert_ne!(up.code, 0, "{up:?}");
    assert!(
        !lab.owned_log().contains("create-network"),
        "{}",
        lab.owned_log()
    );
    let down = lab.run("down");
    assert_eq!(down.code, 0, "{down:?}");
    assert_eq!(
        network_id(&d, &lab.network).await,
        Some(before),
        "down removed a network it did not create: {down:?}"
    );
    assert!(!down.stderr.contains("Docker network"), "{down:?}");
}

#[test]
#[cfg_attr(
    not(feature = "simulate"),
    ignore = "needs the simulated lab: built without feature `simulate`"
)]
fn down_on_the_simulated_lab_removes_the_simulated_network_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let run =
        |args: &[&str]| crate::common::ocm_lab_env(args, &[("OCM_LAB_STATE_DIR", dir.path())]);
    let up = run(&["up", "-t", "minimal", "--simulate"]);
    assert_eq!(up.code, 0, "{up:?}");
    let log = dir.path().join("minimal/simulated/owned.jsonl");
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains("\"op\":\"create-network\",\"name\":\"kind\""),
    );
    let down = run(&["down", "-t", "minimal", "--simulate"]);
    assert_eq!(down.code, 0, "{down:?}");
    assert!(
        down.stderr
            .contains("removed Docker network kind (created by this lab)"),
        "{down:?}"
    );
}
