//! The lab's local registry container on the Docker Engine API, as kind's local-registry guide runs it
//! (kubernetes-sigs/kind v0.32.0 `site/static/examples/kind-with-registry.sh`): `registry:3` published on
//! `127.0.0.1:<port>` (container port 5000), restarted always, and on the kind network so the nodes reach it as
//! `<name>:5000`. Unlike the rest of this backend it pulls its image when the engine lacks it: the registry is
//! what makes later pulls local.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, HostConfig, NetworkConnectRequest, PortBinding, RestartPolicy,
    RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, InspectContainerOptions,
    StartContainerOptions,
};
use futures::StreamExt;

use super::DockerError;
use super::{Docker, status};
use crate::backend::RegistryContainer;

type Result<T, E = DockerError> = std::result::Result<T, E>;

impl Docker {
    /// [`crate::backend::ContainerRuntime::ensure_registry`].
    pub(super) async fn run_registry(&self, spec: &RegistryContainer) -> Result<(String, bool)> {
        match self
            .client
            .inspect_container(&spec.name, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => {
                let labels = c
                    .config
                    .as_ref()
                    .and_then(|c| c.labels.clone())
                    .unwrap_or_default();
                if let Some((k, v)) = spec.labels.iter().find(|(k, v)| labels.get(*k) != Some(v)) {
                    return Err(DockerError::ForeignRegistry {
                        name: spec.name.clone(),
                        host: self.host.clone(),
                        label: format!("{k}={v}"),
                    });
                }
                let id = c.id.clone().unwrap_or_else(|| spec.name.clone());
                if !c.state.as_ref().and_then(|s| s.running).unwrap_or(false) {
                    self.client
                        .start_container(&id, None::<StartContainerOptions>)
                        .await
                        .map_err(|e| {
                            self.err(&format!("start the registry container {}", spec.name), e)
                        })?;
                }
                let on_network = c
                    .network_settings
                    .and_then(|n| n.networks)
                    .is_some_and(|n| n.contains_key(&spec.network));
                if !on_network {
                    self.connect_registry(spec, &id).await?;
                }
                Ok((id, false))
            }
            Err(e) if status(&e) == Some(404) => {
                self.create_registry(spec).await.map(|id| (id, true))
            }
            Err(e) => Err(self.err(&format!("inspect container {}", spec.name), e)),
        }
    }

    async fn connect_registry(&self, spec: &RegistryContainer, id: &str) -> Result<()> {
        self.client
            .connect_network(
                &spec.network,
                NetworkConnectRequest {
                    container: id.to_owned(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| {
                self.err(
                    &format!(
                        "connect the registry container {} to network {}",
                        spec.name, spec.network
                    ),
                    e,
                )
            })
    }

    async fn create_registry(&self, spec: &RegistryContainer) -> Result<String> {
        self.pull_if_missing(&spec.image).await?;
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: spec.command.clone(),
            labels: Some(spec.labels.clone().into_iter().collect()),
            host_config: Some(HostConfig {
                port_bindings: Some(HashMap::from([(
                    "5000/tcp".to_owned(),
                    Some(vec![PortBinding {
                        host_ip: Some("127.0.0.1".to_owned()),
                        host_port: Some(spec.host_port.to_string()),
                    }]),
                )])),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ALWAYS),
                    maximum_retry_count: None,
                }),
                network_mode: Some(spec.network.clone()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let id = self
            .client
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::default()
                        .name(&spec.name)
                        .build(),
                ),
                body,
            )
            .await
            .map_err(|e| {
                self.err(
                    &format!(
                        "create the registry container {} from {}",
                        spec.name, spec.image
                    ),
                    e,
                )
            })?
            .id;
        if let Err(e) = self
            .client
            .start_container(&id, None::<StartContainerOptions>)
            .await
        {
            // Nothing half-made is left behind: a container that cannot start goes again.
            let _ = super::remove_container(&self.client, &id).await;
            let err = self.err(&format!("start the registry container {}", spec.name), e);
            // The daemon says a port is taken only in its message text (as `docker run` shows it).
            let taken = matches!(&err, DockerError::Daemon { message, .. }
                if message.contains("port is already allocated") || message.contains("address already in use"));
            if taken {
                return Err(DockerError::PortTaken {
                    port: spec.host_port,
                    source: Box::new(err),
                });
            }
            return Err(err);
        }
        Ok(id)
    }

    /// Pulls `image` unless the engine has it.
    async fn pull_if_missing(&self, image: &str) -> Result<()> {
        if self.image_present(image).await? {
            return Ok(());
        }
        tracing::info!(image, "pulling the local registry's image");
        let mut progress = self.client.create_image(
            Some(
                CreateImageOptionsBuilder::default()
                    .from_image(image)
                    .build(),
            ),
            None,
            None,
        );
        while let Some(p) = progress.next().await {
            if let Err(e) = p {
                return Err(DockerError::PullFailed {
                    image: image.to_owned(),
                    source: Box::new(self.err(&format!("pull {image}"), e)),
                });
            }
        }
        Ok(())
    }
}
