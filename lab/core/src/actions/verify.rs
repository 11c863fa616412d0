//! `verify.lab`: gathers what the clusters report and evaluates it with [`crate::verify`].

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use super::ActionError;
use super::{ActionResult, StepCtx, outputs};
use crate::backend::kinds::multicluster::ClusterPropertySpec;
use crate::backend::kinds::{
    ClusterProfile, ClusterProperty, HasConditions, Kind, ManagedCluster, ManagedClusterSetBinding,
    Secret,
};
use crate::backend::{Api, ClusterApi, Condition, KubeError, WaitError};
use crate::step::events::{Event, ResultStatus};
use crate::step::retry::Backoff;
use crate::topology::{Check, LAB_LABEL, Lab, Property};
use crate::verify::{self, CheckResult, PROBE_PROPERTY, PropertyEvidence};

/// The (spoke, namespace) pairs verification expects a ClusterProfile for: spokes that are members of a
/// set bound in a verified namespace.
pub fn expected_profiles(lab: &Lab) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ns in &lab.verify.namespaces {
        for s in &lab.spokes {
            let member = lab.bindings.iter().filter(|b| &b.namespace == ns).any(|b| {
                lab.cluster_sets
                    .iter()
                    .any(|set| set.name == b.cluster_set && set.members.contains(&s.cluster.name))
            });
            if member {
                out.push((s.cluster.name.clone(), ns.clone()));
            }
        }
    }
    out
}

/// How often a check that waits looks at the whole chain again, to end at once when the diagnosis
/// turned permanent (waiting for the profile itself is a watch, not this poll).
const RECHECK: Duration = Duration::from_secs(5);
/// The first and the longest pause between two `reachable` requests.
const REACH_BACKOFF: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(5));

/// What one spoke's checks share: the step, the hub, what to check and the spoke's own clock.
struct SpokeRun<'a, 'c> {
    ctx: &'a StepCtx<'c>,
    hub: &'a dyn ClusterApi,
    hub_served: bool,
    checks: &'a [Check],
    spoke: &'a str,
    /// When this spoke's checks must end: its own start plus the verify timeout.
    deadline: tokio::time::Instant,
}

/// The inputs of `verify.lab`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VerifyInputs {
    /// The checks to run, as a list or a comma-separated text (absent or empty: the topology's).
    #[serde(default, deserialize_with = "checks")]
    pub checks: Option<Vec<Check>>,
    /// Whether to write a probe ClusterProperty unique to the run (default true).
    #[serde(default, deserialize_with = "crate::workflow::catalog::flag")]
    pub probe: Option<bool>,
}

/// Checks written as a YAML list or as the comma-separated text a template renders.
fn checks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<Check>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Checks {
        List(Vec<Check>),
        Text(String),
    }
    let text = match Option::<Checks>::deserialize(d)? {
        None => return Ok(None),
        Some(Checks::List(l)) => return Ok(Some(l)),
        Some(Checks::Text(t)) => t,
    };
    text.split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| {
            Check::ALL
                .into_iter()
                .find(|k| k.as_str() == c)
                .ok_or_else(|| {
                    let all: Vec<&str> = Check::ALL.iter().map(|k| k.as_str()).collect();
                    serde::de::Error::custom(format!(
                        "unknown check `{c}`; checks: {}",
                        all.join(", ")
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Runs the lab's checks. With input `probe: "false"` no probe property is written (`up` uses that: its own
/// ClusterProperty objects were just written, and a second `up` must change nothing).
///
/// Spokes are checked concurrently, each with its own clock: a spoke's deadline and latencies start when
/// its own checks start, so a slow or failing spoke never shows in another's numbers. A check whose
/// diagnosis cannot change by waiting (`CheckResult::permanent`) ends at once.
pub async fn run(ctx: &StepCtx<'_>) -> ActionResult {
    let lab = &ctx.run.lab;
    let inputs: VerifyInputs = ctx.inputs()?;
    let probe = inputs.probe.unwrap_or(true);
    let checks: Vec<Check> = inputs
        .checks
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| lab.verify.checks.clone());
    let hub = ctx.run.api(&lab.hub.cluster.name).await?;
    let budget = lab.verify.timeout.min(ctx.timeout());
    let pairs = expected_profiles(lab);
    let probe_value = format!("run-{}", ctx.run.run_id);
    let hub_served = Api::<ClusterProfile>::all(hub.as_ref()).served().await?;
    // Spokes in topology order, each with the namespaces it should have a profile in.
    let mut spokes: Vec<(&str, Vec<&str>)> = Vec::new();
    for s in &lab.spokes {
        let nss: Vec<&str> = pairs
            .iter()
            .filter(|(sp, _)| *sp == s.cluster.name)
            .map(|(_, ns)| ns.as_str())
            .collect();
        if !nss.is_empty() {
            spokes.push((s.cluster.name.as_str(), nss));
        }
    }
    let outcomes = futures::future::join_all(spokes.iter().map(|(spoke, nss)| {
        let run = SpokeRun {
            ctx,
            hub: hub.as_ref(),
            hub_served,
            checks: &checks,
            spoke,
            deadline: tokio::time::Instant::now() + budget,
        };
        let probe_value = probe_value.as_str();
        async move { run.all(nss, probe.then_some(probe_value)).await }
    }))
    .await;
    let mut results: Vec<CheckResult> = Vec::new();
    let mut probed = 0;
    let mut first_error = None;
    for o in outcomes {
        match o {
            Ok((rs, wrote)) => {
                results.extend(rs);
                probed += usize::from(wrote);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if checks.contains(&Check::Consumer) && first_error.is_none() {
        // After the other checks: by then the profiles and synced Secrets they waited for are there.
        let deadline = tokio::time::Instant::now() + budget;
        match consumer(ctx, hub.as_ref(), &pairs, deadline).await {
            Ok(rs) => results.extend(rs),
            Err(e) => first_error = Some(e),
        }
    }
    save_report(ctx, &results);
    if let Some(e) = first_error {
        return Err(e);
    }
    let failed: Vec<&CheckResult> = results.iter().filter(|r| !r.ok).collect();
    if let Some(first) = failed.first() {
        let permanent = failed.iter().filter(|r| r.permanent).count();
        let mut err = ActionError::permanent(format!(
            "{} of {} checks failed{}; first: {} for {} in {}: {}",
            failed.len(),
            results.len(),
            if permanent > 0 {
                format!(" ({permanent} permanently: not waited for)")
            } else {
                String::new()
            },
            first.check,
            first.spoke,
            first.namespace,
            first.detail
        ));
        if let Some(next) = &first.next {
            err = err.with_help(next.clone());
        }
        return Err(err);
    }
    // Writing and deleting the probe is a change, even though the lab ends as it was.
    Ok((
        probed > 0,
        outputs([("checks", json!(results.len())), ("probes", json!(probed))]),
    ))
}

/// The `consumer` check in every verified namespace the topology syncs a ManagedServiceAccount to: one Pod
/// per namespace reaches all of its spokes.
async fn consumer(
    ctx: &StepCtx<'_>,
    hub: &dyn ClusterApi,
    pairs: &[(String, String)],
    deadline: tokio::time::Instant,
) -> Result<Vec<CheckResult>, ActionError> {
    let lab = &ctx.run.lab;
    let mut results = Vec::new();
    for ns in &lab.verify.namespaces {
        if verify::consumer::synced_accounts(lab, ns).is_empty() {
            continue;
        }
        let spokes: Vec<&str> = pairs
            .iter()
            .filter(|(_, n)| n == ns)
            .map(|(s, _)| s.as_str())
            .collect();
        if spokes.is_empty() {
            continue;
        }
        for r in super::consumer_check::check(ctx, hub, ns, &spokes, deadline).await? {
            emit(ctx, &r);
            results.push(r);
        }
    }
    Ok(results)
}

impl SpokeRun<'_, '_> {
    fn lab(&self) -> &Lab {
        &self.ctx.run.lab
    }

    fn spoke_context(&self) -> &str {
        self.lab()
            .cluster(self.spoke)
            .map_or("", |c| c.context.as_str())
    }

    fn hub_context(&self) -> &str {
        self.lab().hub.cluster.context.as_str()
    }

    /// Every check of this spoke in every namespace; `Ok((results, whether a probe was written))`. The
    /// probe is removed again whatever the checks found.
    async fn all(
        &self,
        namespaces: &[&str],
        probe_value: Option<&str>,
    ) -> Result<(Vec<CheckResult>, bool), ActionError> {
        let mut probed = false;
        if self.checks.contains(&Check::Properties)
            && let Some(value) = probe_value
        {
            let api = self.ctx.run.api(self.spoke).await?;
            let properties = Api::<ClusterProperty>::all(api.as_ref());
            if properties.served().await? {
                properties
                    .apply(&probe_object(&self.lab().name, value))
                    .await?;
                probed = true;
            }
        }
        // The spoke's clock starts once its probe is written: latencies are the time to see it.
        let clock = tokio::time::Instant::now();
        let mut results = Vec::new();
        let checked = async {
            for ns in namespaces {
                self.namespace(
                    ns,
                    probed.then_some(probe_value).flatten(),
                    clock,
                    &mut results,
                )
                .await?;
            }
            Ok::<(), ActionError>(())
        }
        .await;
        if probed {
            let api = self.ctx.run.api(self.spoke).await?;
            Api::<ClusterProperty>::all(api.as_ref())
                .delete(PROBE_PROPERTY)
                .await?;
        }
        checked?;
        Ok((results, probed))
    }

    fn emit_push(&self, results: &mut Vec<CheckResult>, r: CheckResult) {
        emit(self.ctx, &r);
        results.push(r);
    }

    /// The checks of one (spoke, namespace) pair.
    async fn namespace(
        &self,
        ns: &str,
        probe_value: Option<&str>,
        clock: tokio::time::Instant,
        results: &mut Vec<CheckResult>,
    ) -> Result<(), ActionError> {
        let spoke = self.spoke;
        let hub = self.hub;
        if self.checks.contains(&Check::Properties) {
            let r = self.properties_of(ns, probe_value, clock).await?;
            self.emit_push(results, r);
        }
        // When no ClusterProfile can appear at all, the checks that read one fail at once, saying why.
        let blocker = self.profile_blocker(ns).await?;
        let blocked = |check: Check| {
            blocker.as_ref().map(|(hop, why, next)| {
                CheckResult::failed(
                    check,
                    spoke,
                    ns,
                    *hop,
                    format!("ClusterProfile {ns}/{spoke} cannot appear: {why}"),
                    Some(next.clone()),
                )
                .permanent()
            })
        };
        let profiles = Api::<ClusterProfile>::namespaced(hub, ns);
        let profile = if self.hub_served {
            profiles.get(spoke).await?
        } else {
            None
        };
        if self.checks.contains(&Check::AccessProviders) {
            let r = match blocked(Check::AccessProviders) {
                Some(r) => r,
                None => self.access_providers(ns, &profiles, &profile).await?,
            };
            self.emit_push(results, r);
        }
        let profile = if self.hub_served && profile.is_some() {
            profiles.get(spoke).await?.or(profile)
        } else {
            profile
        };
        if self.checks.contains(&Check::Reachable) {
            let r = match blocked(Check::Reachable) {
                Some(r) => r,
                None => self.reachable(ns, profile.as_ref()).await?,
            };
            self.emit_push(results, r);
        }
        if self.checks.contains(&Check::Credentials) {
            let accounts: Vec<&str> = self
                .lab()
                .service_accounts
                .iter()
                .filter(|a| a.cluster == spoke && a.sync_to_cluster_profile)
                .map(|a| a.name.as_str())
                .collect();
            for sa in accounts {
                let r = match blocked(Check::Credentials) {
                    Some(r) => r,
                    None => self.credential(ns, sa).await?,
                };
                self.emit_push(results, r);
            }
        }
        if self.checks.contains(&Check::Conditions) {
            let r = match blocked(Check::Conditions) {
                Some(r) => r,
                None => self.conditions(ns, &profiles, &profile).await?,
            };
            self.emit_push(results, r);
        }
        Ok(())
    }

    /// The properties check of `ns`: the spoke's properties, and the probe's when one is set.
    async fn properties_of(
        &self,
        ns: &str,
        probe_value: Option<&str>,
        clock: tokio::time::Instant,
    ) -> Result<CheckResult, ActionError> {
        let mut expected: Vec<Property> = self
            .lab()
            .spoke(self.spoke)
            .map(|s| s.properties.clone())
            .unwrap_or_default();
        if let Some(v) = probe_value {
            expected.push(Property {
                name: PROBE_PROPERTY.into(),
                value: v.to_owned(),
            });
        }
        self.properties(ns, &expected, clock, probe_value.is_some())
            .await
    }

    /// The access-providers check of `ns`, waiting for cluster-proxy's provider while the profile lacks it.
    async fn access_providers(
        &self,
        ns: &str,
        profiles: &Api<'_, ClusterProfile>,
        profile: &Option<ClusterProfile>,
    ) -> Result<CheckResult, ActionError> {
        let spoke = self.spoke;
        // cluster-proxy requeues every minute while its serving cert is missing
        // (open-cluster-management-io/cluster-proxy v0.10.0
        // `pkg/proxyserver/controllers/clusterprofile_controller.go`): wait.
        let profile = match &profile {
            Some(_) => wait_quietly(profiles, spoke, has_provider(), self.deadline)
                .await?
                .or(profile.clone()),
            None => None,
        };
        let proxy_ns = self
            .lab()
            .addons
            .cluster_proxy
            .as_ref()
            .map_or("", |p| p.namespace.as_str());
        Ok(verify::access_provider(
            spoke,
            ns,
            profile.as_ref(),
            proxy_ns,
        ))
    }

    /// The credentials check of service account `sa` in `ns`: its synced Secret holds a token.
    async fn credential(&self, ns: &str, sa: &str) -> Result<CheckResult, ActionError> {
        let (spoke, hub) = (self.spoke, self.hub);
        let secrets = Api::<Secret>::namespaced(hub, ns);
        let token = Condition::<Secret>::new("a Secret with a token", |o| {
            o.and_then(verify::token).is_some_and(|t| !t.is_empty())
        });
        let name = format!("{spoke}-{sa}");
        let found = wait_quietly(&secrets, &name, token, self.deadline).await?;
        Ok(verify::credential(spoke, ns, sa, found.as_ref()))
    }

    /// The conditions check of `ns`, waiting for the profile's ControlPlaneHealthy and Joined.
    async fn conditions(
        &self,
        ns: &str,
        profiles: &Api<'_, ClusterProfile>,
        profile: &Option<ClusterProfile>,
    ) -> Result<CheckResult, ActionError> {
        let spoke = self.spoke;
        let healthy =
            Condition::<ClusterProfile>::new("ControlPlaneHealthy and Joined True", |o| {
                o.is_some_and(|p| {
                    p.condition_true("ControlPlaneHealthy") && p.condition_true("Joined")
                })
            });
        let profile = match &profile {
            Some(_) => wait_quietly(profiles, spoke, healthy, self.deadline)
                .await?
                .or(profile.clone()),
            None => None,
        };
        Ok(verify::conditions(
            spoke,
            ns,
            profile.as_ref(),
            self.hub_context(),
            self.spoke_context(),
        ))
    }

    /// Why no ClusterProfile for this spoke can ever appear in `ns`, when that is so: the hub gate is
    /// off, or no binding for a set holding the spoke exists there (open-cluster-management-io/ocm v1.3.1
    /// `pkg/registration/hub/clusterprofile/`).
    async fn profile_blocker(
        &self,
        ns: &str,
    ) -> Result<Option<(verify::Hop, String, String)>, ActionError> {
        if !self.hub_served {
            return Ok(Some((
                verify::Hop::HubGateOff,
                "the hub serves no ClusterProfile kind".into(),
                "enable the hub registration gate `ClusterProfile` on the ClusterManager (spec.hub.featureGates)".into(),
            )));
        }
        let (bound, exists) = binding_state(self.hub, self.lab(), self.spoke, ns).await?;
        if !bound && !exists {
            return Ok(Some((
                verify::Hop::NoBoundBinding,
                format!(
                    "no ManagedClusterSetBinding in `{ns}` for a set holding `{}`",
                    self.spoke
                ),
                format!(
                    "{} get managedclustersetbindings -n {ns}; bind the spoke's set there",
                    verify::kubectl(self.hub_context())
                ),
            )));
        }
        Ok(None)
    }

    /// The properties check: waits (a watch) until the profile lists every expected property, looking at
    /// the whole chain every [`RECHECK`] so that a permanent diagnosis ends the check at once.
    async fn properties(
        &self,
        ns: &str,
        expected: &[Property],
        clock: tokio::time::Instant,
        probe_included: bool,
    ) -> Result<CheckResult, ActionError> {
        let (hub, spoke) = (self.hub, self.spoke);
        let pass = || {
            let latency = clock.elapsed().as_millis() as u64;
            CheckResult {
                check: Check::Properties,
                spoke: spoke.into(),
                namespace: ns.into(),
                ok: true,
                detail: format!(
                    "{}{}",
                    crate::text::count(expected.len(), "property", "properties"),
                    if probe_included {
                        ", probe included"
                    } else {
                        ""
                    }
                ),
                hop: None,
                next: None,
                latency_ms: Some(latency),
                permanent: false,
            }
        };
        let want = expected.to_vec();
        let profiles = Api::<ClusterProfile>::namespaced(hub, ns);
        let cond = Condition::<ClusterProfile>::new(
            format!(
                "{} in status.properties",
                crate::text::count(want.len(), "property", "properties")
            ),
            move |o| o.is_some_and(|p| verify::has_properties(p, &want)),
        );
        loop {
            if self.hub_served
                && profiles
                    .get(spoke)
                    .await?
                    .is_some_and(|p| verify::has_properties(&p, expected))
            {
                return Ok(pass());
            }
            // A spoke that does not answer for a moment is no diagnosis yet: look again until the deadline.
            let now = tokio::time::Instant::now();
            match self.diagnose_properties(ns, expected).await {
                Ok(r) if r.ok => return Ok(pass()),
                Ok(r) if r.permanent || now >= self.deadline => return Ok(r),
                Ok(_) => {}
                Err(e) if e.is_transient() && now < self.deadline => {}
                Err(e) => return Err(e),
            }
            let slice = RECHECK.min(self.deadline.saturating_duration_since(now));
            match profiles.wait(spoke, &cond, slice).await {
                Ok(_) => return Ok(pass()),
                Err(crate::backend::WaitError::Timeout { .. }) => {}
                // A wait that failed at once must not make this loop spin.
                Err(crate::backend::WaitError::Backend(e)) if e.is_transient() => {
                    tokio::time::sleep(slice).await;
                }
                Err(crate::backend::WaitError::Backend(e)) => return Err(e.into()),
            }
        }
    }

    /// Gathers the evidence along the chain and says which hop broke.
    async fn diagnose_properties(
        &self,
        ns: &str,
        expected: &[Property],
    ) -> Result<CheckResult, ActionError> {
        let (hub, spoke) = (self.hub, self.spoke);
        let spoke_api = self.ctx.run.api(spoke).await?;
        let properties = Api::<ClusterProperty>::all(spoke_api.as_ref());
        let spoke_served = properties.served().await?;
        let spoke_props = if spoke_served {
            properties.list(None).await?
        } else {
            Vec::new()
        };
        let mc = Api::<ManagedCluster>::all(hub).get(spoke).await?;
        let (bound, binding_exists) = binding_state(hub, self.lab(), spoke, ns).await?;
        let profile = if self.hub_served {
            Api::<ClusterProfile>::namespaced(hub, ns)
                .get(spoke)
                .await?
        } else {
            None
        };
        let ev = PropertyEvidence {
            spoke_context: self.spoke_context(),
            hub_context: self.hub_context(),
            spoke_crd_served: spoke_served,
            spoke_properties: &spoke_props,
            managed_cluster: mc.as_ref(),
            hub_crd_served: self.hub_served,
            bound,
            binding_exists,
            profile: profile.as_ref(),
        };
        Ok(verify::diagnose_properties(spoke, ns, expected, &ev))
    }
}

fn probe_object(lab: &str, value: &str) -> ClusterProperty {
    let spec = ClusterPropertySpec {
        value: value.to_owned(),
    };
    let mut probe = ClusterProperty::new(PROBE_PROPERTY, spec);
    probe.metadata.labels = Some([(LAB_LABEL.to_owned(), lab.to_owned())].into());
    probe
}

fn has_provider() -> Condition<ClusterProfile> {
    Condition::new("an open-cluster-management access provider", |o| {
        o.and_then(|p: &ClusterProfile| p.status.as_ref())
            .is_some_and(|s| s.access_provider(verify::PROVIDER).is_some())
    })
}

/// Waits until `cond` or the deadline, returning what it last saw instead of failing: the evaluation says
/// what is wrong.
async fn wait_quietly<K: Kind + serde::de::DeserializeOwned + 'static>(
    api: &Api<'_, K>,
    name: &str,
    cond: Condition<K>,
    deadline: tokio::time::Instant,
) -> Result<Option<K>, ActionError> {
    let left = deadline
        .saturating_duration_since(tokio::time::Instant::now())
        .max(Duration::from_millis(1));
    match api.wait(name, &cond, left).await {
        Ok(v) => Ok(v),
        Err(WaitError::Timeout { last, object, .. }) => {
            let last = last.map(serde_json::from_value).transpose();
            last.map_err(|e| {
                let object = object.to_string();
                KubeError::Decode {
                    object,
                    detail: e.to_string(),
                }
                .into()
            })
        }
        Err(WaitError::Backend(e)) => Err(e.into()),
    }
}

/// `(bound, exists)`: whether a Bound binding, and whether any binding, for a set holding `spoke` exists in
/// `ns` (read from the hub, not the topology).
async fn binding_state(
    hub: &dyn ClusterApi,
    lab: &Lab,
    spoke: &str,
    ns: &str,
) -> Result<(bool, bool), ActionError> {
    let api = Api::<ManagedClusterSetBinding>::namespaced(hub, ns);
    if !api.served().await? {
        return Ok((false, false));
    }
    let bindings = api.list(None).await?;
    let sets_of_spoke: Vec<&str> = lab
        .cluster_sets
        .iter()
        .filter(|s| s.members.iter().any(|m| m == spoke))
        .map(|s| s.name.as_str())
        .collect();
    let for_spoke: Vec<&ManagedClusterSetBinding> = bindings
        .iter()
        .filter(|b| {
            let set = b.spec.cluster_set.as_str();
            sets_of_spoke.contains(&set) || set == "global"
        })
        .collect();
    Ok((
        for_spoke.iter().any(|b| b.condition_true("Bound")),
        !for_spoke.is_empty(),
    ))
}

fn emit(ctx: &StepCtx<'_>, r: &CheckResult) {
    let latency = r
        .latency_ms
        .map(|l| format!(" in {l}ms"))
        .unwrap_or_default();
    let detail = match (&r.hop, &r.next) {
        (Some(_), Some(next)) => format!("{} → {next}", r.detail),
        _ => format!("{}{latency}", r.detail),
    };
    ctx.run.events.emit(Event::Result {
        check: r.check.to_string(),
        subject: format!("{} in {}", r.spoke, r.namespace),
        status: if r.ok {
            ResultStatus::Pass
        } else {
            ResultStatus::Fail
        },
        detail,
        hop: r.hop.map(verify::Hop::name),
        permanent: r.permanent,
    });
}

/// Hands this run's results to the run (the command prints them and writes `--junit` from the run's
/// result), and keeps them as the last verification for `status` and `diagnose`.
fn save_report(ctx: &StepCtx<'_>, results: &[CheckResult]) {
    ctx.run.record_verification(results);
    let report = verify::report::LastVerification {
        run: ctx.run.run_id.clone(),
        at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        simulated: ctx.run.backends.simulated,
        ok: results.iter().all(|r| r.ok),
        results: results.to_vec(),
    };
    // A blocking write, deliberately kept: once per verification, after every check has finished.
    if let Err(e) = ctx.run.state.save_last_verification(&report) {
        tracing::warn!("{e}");
    }
}

impl SpokeRun<'_, '_> {
    /// The reachable check: a request through the access provider really reaches the spoke. The provider's
    /// server resolves only inside the hub, so its Service is port-forwarded and the request goes to
    /// `localhost` (a SAN of the serving certificate), verified with the provider's CA, authenticated with
    /// the spoke's synced ManagedServiceAccount token; `GET /<spoke>/version` must answer what the spoke's
    /// own `/version` answers (open-cluster-management-io/cluster-proxy v0.10.0
    /// `pkg/proxyserver/controllers/clusterprofile_controller.go`, `pkg/userserver/user_server.go`,
    /// `pkg/serviceproxy/service_proxy.go`).
    ///
    /// The addon's `Available` does not mean the tunnel is up (open-cluster-management-io/cluster-proxy v0.10.0
    /// `cmd/addon-agent/main.go`), so a 400 (the user server cannot open its tunnel to the proxy server), a 502
    /// (`No agent available`: the spoke's proxy agent is not connected yet), a 503/504 and a transient error
    /// are retried with backoff until the spoke's deadline; giving up reports the last status and body
    /// (open-cluster-management-io/cluster-proxy v0.10.0 `pkg/userserver/user_server.go`).
    async fn reachable(
        &self,
        ns: &str,
        profile: Option<&ClusterProfile>,
    ) -> Result<CheckResult, ActionError> {
        use base64::Engine as _;
        let spoke = self.spoke;
        let lab = self.lab();
        let fail = |hop, detail: String, next: Option<String>| {
            CheckResult::failed(Check::Reachable, spoke, ns, hop, detail, next)
        };
        let provider = profile
            .and_then(|p| p.status.as_ref())
            .and_then(|s| s.access_provider(verify::PROVIDER))
            .map(|e| &e.cluster);
        let Some(provider) = provider else {
            return Ok(fail(
                verify::Hop::NoAccessProvider,
                "no access provider to go through".into(),
                None,
            ));
        };
        let server = provider.server.as_deref().unwrap_or_default();
        // https://cluster-proxy-addon-user.<namespace>:9092/<spoke>
        let Some((service, namespace, port, prefix)) = parse_user_server(server) else {
            return Ok(fail(
                verify::Hop::BadAccessProvider,
                format!("cannot read the user server's Service from {server}"),
                None,
            ));
        };
        let ca = provider
            .certificate_authority_data
            .as_deref()
            .and_then(|d| {
                base64::engine::general_purpose::STANDARD
                    .decode(d.trim())
                    .ok()
            })
            .unwrap_or_default();
        let account = lab
            .service_accounts
            .iter()
            .find(|a| a.cluster == spoke && a.sync_to_cluster_profile);
        let msa = account.map_or("<msa>", |a| a.name.as_str());
        let Some(token) = self
            .synced_token(ns, account.map(|a| a.name.as_str()))
            .await?
        else {
            return Ok(fail(
                verify::Hop::NoSyncedCredential,
                format!("no synced token in `{ns}` to authenticate with"),
                Some("the credentials check says why".into()),
            ));
        };
        let expected = self.ctx.run.api(spoke).await?.version().await?;
        let path = format!("{prefix}/version");
        let via = UserServer {
            namespace: &namespace,
            service: &service,
            port,
            ca: &ca,
        };
        let reply = self.request_through(&via, &path, &token).await;
        Ok(self.reach_result(ns, &path, &expected, &via, msa, reply))
    }

    /// The synced ManagedServiceAccount token of service account `account` in `ns`, when there is one.
    async fn synced_token(
        &self,
        ns: &str,
        account: Option<&str>,
    ) -> Result<Option<crate::backend::Secret>, ActionError> {
        let secret = match account {
            Some(a) => {
                Api::<Secret>::namespaced(self.hub, ns)
                    .get(&format!("{}-{a}", self.spoke))
                    .await?
            }
            None => None,
        };
        Ok(secret
            .as_ref()
            .and_then(verify::token)
            .and_then(|t| String::from_utf8(t.to_vec()).ok())
            .filter(|t| !t.is_empty())
            .map(crate::backend::Secret::new))
    }

    /// `GET path` through the user server, retried with backoff until the spoke's deadline while the answer
    /// says the tunnel is not up yet; the last answer, its latency, and how long it took when retried.
    async fn request_through(
        &self,
        via: &UserServer<'_>,
        path: &str,
        token: &crate::backend::Secret,
    ) -> Reply {
        let hub = self.hub;
        let first = tokio::time::Instant::now();
        let mut policy = Backoff::new(REACH_BACKOFF.0, REACH_BACKOFF.1).until(self.deadline);
        let mut attempts = 0u32;
        let (answer, latency) = loop {
            attempts += 1;
            let started = tokio::time::Instant::now();
            let answer = hub
                .get_via_service(via.namespace, via.service, via.port, path, via.ca, token)
                .await;
            let latency = started.elapsed().as_millis() as u64;
            let again = match &answer {
                Ok((status, _)) => matches!(status, 400 | 502..=504),
                Err(e) => e.is_transient(),
            };
            match again.then(|| policy.pause()).flatten() {
                Some(pause) => tokio::time::sleep(pause).await,
                None => break (answer, latency),
            }
        };
        let tried = if attempts > 1 {
            format!(
                " (after {attempts} attempts over {}s)",
                first.elapsed().as_secs()
            )
        } else {
            String::new()
        };
        Reply {
            answer,
            latency,
            tried,
        }
    }

    /// The reachable check's result from the proxied `/version` answer.
    fn reach_result(
        &self,
        ns: &str,
        path: &str,
        expected: &str,
        via: &UserServer<'_>,
        msa: &str,
        reply: Reply,
    ) -> CheckResult {
        let Reply {
            answer,
            latency,
            tried,
        } = reply;
        let spoke = self.spoke;
        let namespace = via.namespace;
        let fail = |hop, detail: String, next: Option<String>| {
            CheckResult::failed(Check::Reachable, spoke, ns, hop, detail, next)
        };
        let body_of = |body: &str| -> String { body.trim().chars().take(200).collect() };
        let spoke_ctx = verify::kubectl(self.spoke_context());
        let hub_ctx = verify::kubectl(self.hub_context());
        match answer {
            Ok((200, body)) => self.version_answer(ns, path, &body, expected, &tried, latency),
            Ok((401, _)) | Ok((403, _)) => fail(
                verify::Hop::NotReachable,
                format!(
                    "GET {path} was refused (unauthorized) with the synced ManagedServiceAccount token"
                ),
                Some(format!(
                    "check that the token in Secret {ns}/{spoke}-{msa} is current and the service proxy on {spoke} runs"
                )),
            ),
            Ok((502, body)) => fail(
                verify::Hop::ProxyAgentNotConnected,
                format!(
                    "GET {path} still answered HTTP 502{tried}: {}: the cluster-proxy agent on {spoke} holds no tunnel to the hub's proxy server",
                    body_of(&body)
                ),
                Some(format!(
                    "{spoke_ctx} -n open-cluster-management-cluster-proxy get pods; look at the proxy-agent container's logs (it dials the hub's proxy-server entrypoint)"
                )),
            ),
            Ok((400, body)) => fail(
                verify::Hop::ProxyServerUnreachable,
                format!(
                    "GET {path} still answered HTTP 400{tried}: {}: the user server cannot reach the proxy server on the hub",
                    body_of(&body)
                ),
                Some(format!(
                    "{hub_ctx} -n {namespace} get pods; check the cluster-proxy proxy-server and the user server's logs"
                )),
            ),
            Ok((status, body)) => fail(
                verify::Hop::NotReachable,
                format!(
                    "GET {path} answered HTTP {status}{tried}: {}",
                    body_of(&body)
                ),
                Some(format!(
                    "check the cluster-proxy agent on {spoke} ({spoke_ctx} -n open-cluster-management-cluster-proxy get pods) and the proxy server on the hub"
                )),
            ),
            Err(e) => fail(
                verify::Hop::NotReachable,
                format!("the request did not get through{tried}: {e}"),
                Some(format!(
                    "{hub_ctx} -n {namespace} get pods,svc; the user server needs its serving cert and enableServiceProxy"
                )),
            ),
        }
    }

    /// A 200 answer: it must be the spoke's own version.
    fn version_answer(
        &self,
        ns: &str,
        path: &str,
        body: &str,
        expected: &str,
        tried: &str,
        latency: u64,
    ) -> CheckResult {
        let spoke = self.spoke;
        let fail = |hop, detail: String, next: Option<String>| {
            CheckResult::failed(Check::Reachable, spoke, ns, hop, detail, next)
        };
        let hub_ctx = verify::kubectl(self.hub_context());
        let got = serde_json::from_str::<Value>(body)
            .ok()
            .and_then(|v| v["gitVersion"].as_str().map(str::to_owned));
        if got.as_deref() == Some(expected) {
            CheckResult {
                check: Check::Reachable,
                spoke: spoke.into(),
                namespace: ns.into(),
                ok: true,
                detail: format!(
                    "GET {path} through cluster-proxy answered {expected}, as {spoke} does{tried}"
                ),
                hop: None,
                next: None,
                latency_ms: Some(latency),
                permanent: false,
            }
        } else {
            fail(
                verify::Hop::WrongCluster,
                format!(
                    "GET {path} answered {}, but {spoke} is {expected}",
                    got.unwrap_or_else(|| "something that is not a version".into())
                ),
                Some(format!(
                    "check the ManagedProxyServiceResolver and cluster names on the hub: {hub_ctx} get managedproxyserviceresolvers"
                )),
            )
        }
    }
}

/// The last answer of the proxied request, its latency in milliseconds, and ` (after N attempts over Ms)` when
/// it was retried.
struct Reply {
    answer: Result<(u16, String), KubeError>,
    latency: u64,
    tried: String,
}

/// Where the user server's Service is, and the CA its serving certificate is verified with.
struct UserServer<'a> {
    namespace: &'a str,
    service: &'a str,
    port: u16,
    ca: &'a [u8],
}

/// `(service, namespace, port, path prefix)` from a user server URL.
fn parse_user_server(server: &str) -> Option<(String, String, u16, String)> {
    let rest = server.strip_prefix("https://")?;
    let (hostport, path) = rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p));
    let (host, port) = hostport
        .rsplit_once(':')
        .map_or((hostport, 443), |(h, p)| (h, p.parse().unwrap_or(443)));
    let (service, namespace) = host.split_once('.')?;
    let namespace = namespace
        .trim_end_matches(".svc")
        .trim_end_matches(".svc.cluster.local");
    Some((
        service.to_owned(),
        namespace.to_owned(),
        port,
        format!("/{}", path.trim_end_matches('/')),
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_server_url_names_service_namespace_port_and_cluster() {
        assert_eq!(
            super::parse_user_server(
                "https://cluster-proxy-addon-user.open-cluster-management-addon:9092/cluster1"
            ),
            Some((
                "cluster-proxy-addon-user".into(),
                "open-cluster-management-addon".into(),
                9092,
                "/cluster1".into()
            ))
        );
        assert_eq!(super::parse_user_server("http://x"), None);
    }
}
