//! The `consumer` check's run in one namespace: set up a consumer's identity and Pod on the hub (everything
//! labelled as the lab's and the check's), wait for the Pod to end, read its report, and remove it all again.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use super::ActionError;
use crate::backend::api::Api;
use crate::backend::{ClusterApi, Condition, ObjectRef, WaitError};
use crate::step::StepCtx;
use crate::topology::Check;
use crate::verify::consumer::{self as kit, CHECK_LABEL, CHECK_SA};
use crate::verify::{CheckResult, Hop};

/// The kinds the check creates, in the order they are removed (the Pod first).
const KINDS: [(&str, &str); 5] = [
    ("v1", "Pod"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
];

/// The `consumer` results for `spokes` in namespace `ns`.
pub(super) async fn check(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    ns: &str,
    spokes: &[&str],
    deadline: tokio::time::Instant,
) -> Result<Vec<CheckResult>, ActionError> {
    let lab = &ctx.run.lab;
    let setup = kit::plan(lab, ns, None).and_then(|(msa, image)| {
        let client = lab.verify.consumer_image.clone().ok_or_else(|| {
            (
                "no consumer image to run (spec.verify.consumerImage)".to_owned(),
                "build examples/consumer into an image in the hub's nodes and name it in spec.verify.consumerImage (docs/consumer.md)".to_owned(),
            )
        })?;
        Ok((msa, image, client))
    });
    let (msa, msa_image, client_image) = match setup {
        Ok(s) => s,
        Err((why, next)) => {
            return Ok(spokes
                .iter()
                .map(|s| {
                    CheckResult::failed(
                        Check::Consumer,
                        s,
                        ns,
                        Hop::ConsumerPod,
                        why.clone(),
                        Some(next.clone()),
                    )
                    .permanent()
                })
                .collect());
        }
    };
    remove(ctx, hub, ns, deadline).await?;
    let ran = async {
        for obj in kit::check_objects(&lab.name, ns, &msa) {
            hub.apply(&obj).await?;
        }
        let pods = Api::<Pod>::namespaced(hub, ns);
        pods.apply(&kit::check_pod(&lab.name, ns, &msa_image, &client_image))
            .await?;
        let ended =
            Condition::<Pod>::new("the consumer Pod ended", |p| p.is_some_and(kit::pod_done));
        let (seen, finished) = match pods.wait(CHECK_SA, &ended, left(deadline)).await {
            Ok(p) => (p, true),
            Err(WaitError::Timeout { last, .. }) => {
                (last.and_then(|v| serde_json::from_value(v).ok()), false)
            }
            Err(WaitError::Backend(e)) => return Err(ActionError::from(e)),
        };
        let pod = seen.unwrap_or_default();
        let hub_context = lab.hub.cluster.context.as_str();
        Ok(kit::evaluate(ns, spokes, &msa, &pod, finished, hub_context))
    }
    .await;
    // Removed whatever the run found; a failure to remove is reported after the run's own.
    let removed = remove(ctx, hub, ns, deadline).await;
    let results = ran?;
    removed?;
    Ok(results)
}

fn left(deadline: tokio::time::Instant) -> Duration {
    deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_secs(1))
}

/// Deletes what the check creates in `ns` (found by its labels, so a leftover of a killed run goes too), and
/// waits for its Pod to be gone, so the next one of that name can be created.
pub(super) async fn remove(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    ns: &str,
    deadline: tokio::time::Instant,
) -> Result<usize, ActionError> {
    let selector = selector(&ctx.run.lab.name);
    let mut removed = 0;
    for (api_version, kind) in KINDS {
        for o in hub
            .list_metadata(api_version, kind, Some(ns), Some(&selector))
            .await?
        {
            let Some(r) = ObjectRef::of(&o) else { continue };
            if hub.delete(&r).await? {
                removed += 1;
            }
        }
    }
    let gone = Condition::<Pod>::new("it is gone", |o| o.is_none());
    match Api::<Pod>::namespaced(hub, ns)
        .wait(CHECK_SA, &gone, left(deadline))
        .await
    {
        Ok(_) => Ok(removed),
        Err(e) => Err(super::kube::wait_error(
            e,
            Some("the consumer check's Pod from an earlier run is still terminating"),
        )),
    }
}

/// The label selector of what the check creates for lab `lab`.
pub fn selector(lab: &str) -> String {
    format!(
        "{}={lab},{CHECK_LABEL}={}",
        crate::topology::LAB_LABEL,
        Check::Consumer.as_str()
    )
}
