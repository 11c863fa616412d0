//! The version catalog: which chart versions ocm-lab knows, and which Helm value keys each one needs.
//!
//! A topology names versions, never raw Helm keys. The keys that turn the ClusterProfile features on were
//! renamed between chart releases (open-cluster-management-io/cluster-proxy v0.10.0 `charts/cluster-proxy/`;
//! open-cluster-management-io/cluster-proxy PR #274), and Helm silently ignores a key a chart does not read, so
//! a version this catalog does not know is an error rather than a guess.

use std::fmt;

/// The Helm repository that publishes every OCM chart (open-cluster-management-io/helm-charts `README.md`).
pub const OCM_HELM_REPO: &str = "https://open-cluster-management.io/helm-charts";

/// kind's default node image for kind v0.32.0 (kubernetes-sigs/kind v0.32.0
/// `pkg/apis/config/defaults/image.go`).
pub const DEFAULT_KIND_NODE_IMAGE: &str =
    "kindest/node:v1.36.1@sha256:3489c7674813ba5d8b1a9977baea8a6e553784dab7b84759d1014dbd78f7ebd5";

/// Node images whose digests we know (kind release notes). Others are allowed with a warning.
pub const KNOWN_KIND_NODE_IMAGES: &[&str] = &[
    DEFAULT_KIND_NODE_IMAGE,
    "kindest/node:v1.35.0@sha256:452d707d4862f52530247495d180205e029056831160e22870e37e3f6c1ac31f",
];

/// The oldest kind release that supports node images of each Kubernetes minor version (kind's
/// `pkg/apis/config/defaults/image.go` and release notes at each tag): v0.32.0 is the first to write kubeadm's
/// `v1beta4` config, which Kubernetes 1.36 needs (kind@v0.32.0 `pkg/cluster/internal/kubeadm/config.go`);
/// v0.31.0 is the first with 1.35 images; v0.30.0 the first with 1.34 images. Older minors work with any kind
/// ocm-lab accepts (v0.27.0+).
pub const KIND_FOR_NODE_MINOR: &[(u64, &str)] = &[(36, "0.32.0"), (35, "0.31.0"), (34, "0.30.0")];
/// The kind for node images older than every row of [`KIND_FOR_NODE_MINOR`] (ocm-lab's minimum).
pub const KIND_FOR_OLDER_NODES: &str = "0.27.0";

/// sha256 digests of the kind and helm downloads ocm-lab may fetch (`backend::tools::PINNED`), as
/// `(tool, version, os, arch, sha256)`. A download is used only when it hashes to this digest *and*
/// the `.sha256sum` file published next to it agrees; a release or platform missing here falls back to
/// the published file alone, with a warning. Only digests read from the upstream release notes or from
/// at least two independent public repositories that pin the same file are listed; none was computed
/// here (there is no network where this was written).
///
/// Sources:
/// - helm v3.19.0 (all four): the "Installation and Upgrading" list of the helm/helm v3.19.0 GitHub
///   release notes (each file with its `.sha256sum` digest), matched by a public Makefile pinning
///   `helm_<os>_<arch>_SHA256SUM` for the same four files.
/// - kind v0.32.0 linux/amd64: pinned to the same digest by four unrelated public repositories'
///   tool-install scripts and CI workflows (`kind-linux-amd64` from the v0.32.0 release, checked with
///   `sha256sum -c`).
/// - kind v0.32.0 darwin/arm64: the same digest in two unrelated public repositories (a bootstrap
///   document that checks it against the release's `.sha256sum`, and a pins table).
///
/// Not pinned (found in one repository only, so not corroborated): kind v0.32.0 linux/arm64 and
/// darwin/amd64. Those downloads use the published `.sha256sum` alone and say so.
pub const TOOL_DIGESTS: &[(&str, &str, &str, &str, &str)] = &[
    (
        "helm",
        "3.19.0",
        "linux",
        "amd64",
        "a7f81ce08007091b86d8bd696eb4d86b8d0f2e1b9f6c714be62f82f96a594496",
    ),
    (
        "helm",
        "3.19.0",
        "linux",
        "arm64",
        "440cf7add0aee27ebc93fada965523c1dc2e0ab340d4348da2215737fc0d76ad",
    ),
    (
        "helm",
        "3.19.0",
        "darwin",
        "amd64",
        "09a108c0abda42e45af172be65c49125354bf7cd178dbe10435e94540e49c7b9",
    ),
    (
        "helm",
        "3.19.0",
        "darwin",
        "arm64",
        "31513e1193da4eb4ae042eb5f98ef9aca7890cfa136f4707c8d4f70e2115bef6",
    ),
    (
        "kind",
        "0.32.0",
        "linux",
        "amd64",
        "50030de23cf40a18505f20426f6a8506bedf13c6e509244bd1fa9463721b0f54",
    ),
    (
        "kind",
        "0.32.0",
        "darwin",
        "arm64",
        "dca67911095a110c2b5c36e26df6cac860c602033e456c0db47be498cdef1ebb",
    ),
];

/// The pinned digest of `tool` `version` for `os`/`arch`, if [`TOOL_DIGESTS`] has one.
pub const fn tool_digest(tool: &str, version: &str, os: &str, arch: &str) -> Option<&'static str> {
    let mut i = 0;
    while i < TOOL_DIGESTS.len() {
        let (t, v, o, a, d) = TOOL_DIGESTS[i];
        if const_eq(t, tool) && const_eq(v, version) && const_eq(o, os) && const_eq(a, arch) {
            return Some(d);
        }
        i += 1;
    }
    None
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The Kubernetes version a node image's tag names: `kindest/node:v1.36.1@sha256:…` → `1.36.1`.
pub fn node_image_version(image: &str) -> Option<semver::Version> {
    let name = image.split('@').next().unwrap_or(image);
    // The tag follows the last `:` after the last `/` (a registry host may carry a port).
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.rsplit_once(':')?.1;
    semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The oldest kind that can create clusters of `image`, and why. Newer minors than the catalog knows
/// need at least the newest kind it knows. A tag that names no version asks for nothing beyond
/// [`KIND_FOR_OLDER_NODES`].
pub fn kind_for_node_image(image: &str) -> (semver::Version, String) {
    let parse = |v: &str| semver::Version::parse(v).expect("catalog versions are semver");
    let Some(k8s) = node_image_version(image) else {
        return (
            parse(KIND_FOR_OLDER_NODES),
            format!("the node image {image} names no Kubernetes version"),
        );
    };
    let (newest_minor, newest_kind) = KIND_FOR_NODE_MINOR[0];
    let kind = if k8s.major == 1 && k8s.minor > newest_minor {
        newest_kind
    } else {
        KIND_FOR_NODE_MINOR
            .iter()
            .find(|(minor, _)| k8s.major == 1 && k8s.minor == *minor)
            .map_or(KIND_FOR_OLDER_NODES, |(_, kind)| kind)
    };
    (
        parse(kind),
        format!("node image {image} (Kubernetes {k8s}) needs kind v{kind} or newer"),
    )
}

/// A chart the lab installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Chart {
    ClusterManager,
    Klusterlet,
    ClusterProxy,
    ManagedServiceaccount,
}

impl Chart {
    /// The chart's name in the OCM Helm repository.
    pub fn name(self) -> &'static str {
        match self {
            Chart::ClusterManager => "cluster-manager",
            Chart::Klusterlet => "klusterlet",
            Chart::ClusterProxy => "cluster-proxy",
            Chart::ManagedServiceaccount => "managed-serviceaccount",
        }
    }
}

impl fmt::Display for Chart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What the catalog knows about one OCM release (cluster-manager and klusterlet charts share it).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OcmRelease {
    pub version: &'static str,
    /// Image tag the charts default to (`.Chart.AppVersion`, open-cluster-management-io/ocm v1.3.1
    /// `deploy/*/chart/*/templates/_helpers.tpl`).
    pub image_tag: &'static str,
}

/// What the catalog knows about one cluster-proxy chart release.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProxyRelease {
    pub version: &'static str,
    /// The value that turns on the ClusterProfile access provider controller in the addon manager.
    /// 0.10.0: `featureGates.clusterProfileAccessProvider`; 0.11.0: `featureGates.clusterProfile`
    /// (open-cluster-management-io/cluster-proxy PR #274, v0.11.0 `charts/cluster-proxy/values.yaml`).
    pub access_provider_gate_key: &'static str,
    /// API version of the ClusterManagementAddOn the chart renders (v1alpha1 in 0.10.0, v1beta1 in 0.11.0).
    pub cma_api_version: &'static str,
}

/// What the catalog knows about one managed-serviceaccount chart release.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MsaRelease {
    pub version: &'static str,
    /// The value that turns on the ClusterProfile credential syncer
    /// (open-cluster-management-io/managed-serviceaccount v0.10.0 `charts/managed-serviceaccount/values.yaml`).
    pub cred_syncer_gate_key: &'static str,
}

pub const OCM_RELEASES: &[OcmRelease] = &[OcmRelease {
    version: "1.3.1",
    image_tag: "v1.3.1",
}];

pub const CLUSTER_PROXY_RELEASES: &[ClusterProxyRelease] = &[
    ClusterProxyRelease {
        version: "0.10.0",
        access_provider_gate_key: "featureGates.clusterProfileAccessProvider",
        cma_api_version: "addon.open-cluster-management.io/v1alpha1",
    },
    ClusterProxyRelease {
        version: "0.11.0",
        access_provider_gate_key: "featureGates.clusterProfile",
        cma_api_version: "addon.open-cluster-management.io/v1beta1",
    },
];

pub const MSA_RELEASES: &[MsaRelease] = &[MsaRelease {
    version: "0.10.0",
    cred_syncer_gate_key: "featureGates.clusterProfileCredSyncer",
}];

/// Where an image a chart names runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImageRuns {
    /// On the cluster the chart is installed on.
    Release,
    /// There, and on every cluster the addon's manager deploys its agent to.
    AddonAgents,
}

/// One image a pinned chart version runs (no chart pins a digest: every image is `repository:tag`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ChartImage {
    /// The image without its tag ([`ChartImage::reference`] adds it).
    pub repository: &'static str,
    pub runs: ImageRuns,
    /// The upstream file that names it, for `images list -o json`.
    pub source: &'static str,
}

/// The images each pinned chart version runs, with ocm-lab's values (which set no image). The tag is
/// `v<chart version>` for every chart: cluster-manager and klusterlet default `images.tag` to
/// `.Chart.AppVersion` (v1.3.1, helm-charts `charts/cluster-manager-1.3.1.tgz!templates/_helpers.tpl`), the
/// addons to `print "v" .Chart.Version`. `images list`, the doctor, `node-images` and `bundle save` read
/// this table; a test checks it against the simulated lab's chart models and the e2e workflow against
/// `helm template` of the real charts.
pub fn chart_images(chart: Chart, version: &str) -> Option<&'static [ChartImage]> {
    use ImageRuns::{AddonAgents, Release};
    const fn image(repository: &'static str, runs: ImageRuns, source: &'static str) -> ChartImage {
        ChartImage {
            repository,
            runs,
            source,
        }
    }
    // helm-charts charts/cluster-manager-1.3.1.tgz: the operator (templates/operator.yaml) and the
    // ClusterManager's `*ImagePullSpec`s (templates/cluster_manager.yaml), which the operator deploys
    // (ocm v1.3.1 manifests/cluster-manager/management).
    const CLUSTER_MANAGER: &[ChartImage] = &[
        image(
            "quay.io/open-cluster-management/registration-operator",
            Release,
            "cluster-manager templates/operator.yaml",
        ),
        image(
            "quay.io/open-cluster-management/registration",
            Release,
            "cluster-manager templates/cluster_manager.yaml registrationImagePullSpec",
        ),
        image(
            "quay.io/open-cluster-management/work",
            Release,
            "cluster-manager templates/cluster_manager.yaml workImagePullSpec",
        ),
        image(
            "quay.io/open-cluster-management/placement",
            Release,
            "cluster-manager templates/cluster_manager.yaml placementImagePullSpec",
        ),
        image(
            "quay.io/open-cluster-management/addon-manager",
            Release,
            "cluster-manager templates/cluster_manager.yaml addOnManagerImagePullSpec",
        ),
    ];
    // helm-charts charts/klusterlet-1.3.1.tgz: the operator and the Klusterlet's pull specs
    // (templates/klusterlet.yaml); Default mode runs the registration and work agents.
    const KLUSTERLET: &[ChartImage] = &[
        image(
            "quay.io/open-cluster-management/registration-operator",
            Release,
            "klusterlet templates/operator.yaml",
        ),
        image(
            "quay.io/open-cluster-management/registration",
            Release,
            "klusterlet templates/klusterlet.yaml registrationImagePullSpec",
        ),
        image(
            "quay.io/open-cluster-management/work",
            Release,
            "klusterlet templates/klusterlet.yaml workImagePullSpec",
        ),
    ];
    // helm-charts charts/cluster-proxy-0.10.0.tgz templates/manager-deployment.yaml (manager, user server)
    // and templates/managedproxyconfiguration.yaml (proxy server; proxy agent on the spokes,
    // cluster-proxy v0.10.0 pkg/proxyagent/agent/agent.go); 0.11.0 the same through its
    // charts/cluster-proxy-common/templates/_images.tpl.
    const CLUSTER_PROXY: &[ChartImage] = &[image(
        "quay.io/open-cluster-management/cluster-proxy",
        AddonAgents,
        "cluster-proxy templates/manager-deployment.yaml, templates/managedproxyconfiguration.yaml proxyAgent.image",
    )];
    // helm-charts charts/managed-serviceaccount-0.10.0.tgz templates/manager-deployment.yaml (`image` and
    // `--agent-image-name`; the agent, managed-serviceaccount v0.10.0
    // pkg/addon/manager/manifests/templates/deployment.yaml).
    const MSA: &[ChartImage] = &[image(
        "quay.io/open-cluster-management/managed-serviceaccount",
        AddonAgents,
        "managed-serviceaccount templates/manager-deployment.yaml --agent-image-name",
    )];
    match (chart, version) {
        (Chart::ClusterManager, "1.3.1") => Some(CLUSTER_MANAGER),
        (Chart::Klusterlet, "1.3.1") => Some(KLUSTERLET),
        (Chart::ClusterProxy, "0.10.0" | "0.11.0") => Some(CLUSTER_PROXY),
        (Chart::ManagedServiceaccount, "0.10.0") => Some(MSA),
        _ => None,
    }
}

impl ChartImage {
    /// The image as chart `version` names it: the tag is `v<version>` (`…/work:v1.3.1`).
    pub fn reference(&self, version: &str) -> String {
        format!("{}:v{version}", self.repository)
    }
}

/// The references of every image chart `version` runs, or `None` when the catalog does not pin it.
pub fn chart_image_references(
    chart: Chart,
    version: &str,
) -> Option<std::collections::BTreeSet<String>> {
    Some(
        chart_images(chart, version)?
            .iter()
            .map(|i| i.reference(version))
            .collect(),
    )
}

pub const DEFAULT_OCM: &str = "1.3.1";
pub const DEFAULT_CLUSTER_PROXY: &str = "0.10.0";
pub const DEFAULT_MSA: &str = "0.10.0";

/// Finds `version` in a catalog table, or says which versions are known.
pub fn lookup<'a, T>(
    table: &'a [T],
    version: &str,
    version_of: impl Fn(&T) -> &'static str,
) -> Result<&'a T, Vec<&'static str>> {
    table
        .iter()
        .find(|r| version_of(r) == version)
        .ok_or_else(|| table.iter().map(version_of).collect())
}

pub fn ocm(version: &str) -> Result<&'static OcmRelease, Vec<&'static str>> {
    lookup(OCM_RELEASES, version, |r| r.version)
}

pub fn cluster_proxy(version: &str) -> Result<&'static ClusterProxyRelease, Vec<&'static str>> {
    lookup(CLUSTER_PROXY_RELEASES, version, |r| r.version)
}

pub fn msa(version: &str) -> Result<&'static MsaRelease, Vec<&'static str>> {
    lookup(MSA_RELEASES, version, |r| r.version)
}

/// Hub registration feature gates known to OCM v1.3.1 (api@v1.3.0 `feature/feature.go`,
/// `DefaultHubRegistrationFeatureGates`). Unknown names are reported as warnings with a suggestion.
pub const HUB_REGISTRATION_GATES: &[&str] = &[
    "DefaultClusterSet",
    "ClusterProfile",
    "ResourceCleanup",
    "ManagedClusterAutoApproval",
    "V1beta1CSRAPICompatibility",
    "ClusterImporter",
];

/// Spoke registration feature gates (api@v1.3.0 `DefaultSpokeRegistrationFeatureGates`).
pub const SPOKE_REGISTRATION_GATES: &[&str] = &[
    "ClusterProperty",
    "ClusterClaim",
    "AddonManagement",
    "V1beta1CSRAPICompatibility",
    "MultipleHubs",
];

#[cfg(test)]
mod tests {

    #[test]
    fn every_pinned_tool_digest_is_lowercase_sha256_of_a_known_download() {
        for (tool, version, os, arch, digest) in TOOL_DIGESTS {
            assert_eq!(digest.len(), 64, "{tool} {version} {os}/{arch}");
            assert!(
                digest
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{tool} {version} {os}/{arch}: {digest}"
            );
            assert_eq!(tool_digest(tool, version, os, arch), Some(*digest));
        }
        assert_eq!(tool_digest("helm", "3.19.0", "windows", "amd64"), None);
    }

    use super::*;

    #[test]
    fn gate_keys_follow_the_chart_rename() {
        assert_eq!(
            cluster_proxy("0.10.0").unwrap().access_provider_gate_key,
            "featureGates.clusterProfileAccessProvider"
        );
        assert_eq!(
            cluster_proxy("0.11.0").unwrap().access_provider_gate_key,
            "featureGates.clusterProfile"
        );
        assert_eq!(
            msa("0.10.0").unwrap().cred_syncer_gate_key,
            "featureGates.clusterProfileCredSyncer"
        );
    }

    #[test]
    fn unknown_versions_list_the_known_ones() {
        assert_eq!(
            cluster_proxy("0.9.0").unwrap_err(),
            vec!["0.10.0", "0.11.0"]
        );
        assert_eq!(ocm("1.2.0").unwrap_err(), vec!["1.3.1"]);
    }

    #[test]
    fn each_node_minor_needs_its_kind() {
        let v = |s: &str| semver::Version::parse(s).unwrap();
        let kind = |image: &str| kind_for_node_image(image).0;
        assert_eq!(kind(DEFAULT_KIND_NODE_IMAGE), v("0.32.0"));
        assert_eq!(kind(KNOWN_KIND_NODE_IMAGES[1]), v("0.31.0"));
        assert_eq!(kind("kindest/node:v1.34.3"), v("0.30.0"));
        assert_eq!(kind("kindest/node:v1.33.7@sha256:ab"), v("0.27.0"));
        assert_eq!(kind("kindest/node:v1.37.0"), v("0.32.0"));
        assert_eq!(
            kind("localhost:5000/kindest/node:v1.35.0"),
            v("0.31.0"),
            "a registry port is not a tag"
        );
        assert_eq!(kind("my/node:latest"), v("0.27.0"));
        assert!(
            kind_for_node_image(DEFAULT_KIND_NODE_IMAGE)
                .1
                .contains("Kubernetes 1.36.1) needs kind v0.32.0")
        );
    }

    #[test]
    fn defaults_are_in_the_catalog() {
        assert!(ocm(DEFAULT_OCM).is_ok());
        assert!(cluster_proxy(DEFAULT_CLUSTER_PROXY).is_ok());
        assert!(msa(DEFAULT_MSA).is_ok());
    }
}
