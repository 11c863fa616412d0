//! The Kubernetes kinds the lab reads and writes, as Rust types: the built-in kinds from `k8s-openapi`
//! (compiled for the oldest API the lab supports, v1.33), OCM's kinds ([`ocm`]) and SIG Multicluster's
//! ([`multicluster`]) as `kube::CustomResource` types holding only the fields the lab reads or writes
//! (serde ignores the rest when reading; what the lab writes it builds whole).
//!
//! Reads, writes and waits go through [`super::api::Api`], generic over the kind; conditions are read
//! through [`HasConditions`], whatever the kind's condition type is.

pub mod multicluster;
pub mod ocm;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition as MetaCondition;
use kube::core::{GroupVersionKind, Resource};
use serde::Deserialize;
use serde_json::Value;

pub use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
pub use k8s_openapi::api::apps::v1::Deployment;
pub use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
pub use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, ServiceAccount};
pub use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
pub use multicluster::{ClusterProfile, ClusterProperty};
pub use ocm::{
    ClusterManager, Klusterlet, ManagedCluster, ManagedClusterAddOn, ManagedClusterSet,
    ManagedClusterSetBinding, ManagedProxyConfiguration, ManagedServiceAccount, ManifestWork,
    Placement,
};

/// A kind the lab knows at compile time: its group, version and kind come from the type.
pub trait Kind: Resource<DynamicType = ()> {}
impl<K: Resource<DynamicType = ()>> Kind for K {}

/// `apiVersion` and `kind` of `K`.
pub fn gvk<K: Kind>() -> GroupVersionKind {
    GroupVersionKind::gvk(&K::group(&()), &K::version(&()), &K::kind(&()))
}

/// One entry of an object's `status.conditions`, whatever the kind's own condition type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct ConditionView<'a> {
    #[serde(rename = "type", borrow)]
    pub type_: &'a str,
    /// `True`, `False` or `Unknown`.
    #[serde(default, borrow)]
    pub status: &'a str,
    #[serde(default, borrow)]
    pub reason: Option<&'a str>,
    #[serde(default, borrow)]
    pub message: Option<&'a str>,
}

/// A kind whose status carries conditions (kube-runtime's `conditions` read them per kind the same way).
pub trait HasConditions {
    /// The object's `status.conditions`, in order.
    fn conditions(&self) -> Vec<ConditionView<'_>>;

    /// Condition `type_`, if the object has it.
    fn condition(&self, type_: &str) -> Option<ConditionView<'_>> {
        self.conditions().into_iter().find(|c| c.type_ == type_)
    }

    /// The status (`True`, `False`, `Unknown`) of condition `type_`.
    fn condition_status(&self, type_: &str) -> Option<&str> {
        self.condition(type_).map(|c| c.status)
    }

    /// Whether condition `type_` is `True`.
    fn condition_true(&self, type_: &str) -> bool {
        self.condition_status(type_) == Some("True")
    }
}

/// A metav1 Condition as a view.
fn view(c: &MetaCondition) -> ConditionView<'_> {
    ConditionView {
        type_: &c.type_,
        status: &c.status,
        reason: Some(&c.reason),
        message: Some(&c.message),
    }
}

/// The conditions of an object whose kind is known only at run time (a `kube.wait` step's), read from its
/// JSON: `status.conditions[]` with `type`, `status`, `reason` and `message`, as every kind following the
/// API conventions writes them.
impl HasConditions for Value {
    fn conditions(&self) -> Vec<ConditionView<'_>> {
        #[derive(Deserialize)]
        struct Object<'a> {
            #[serde(default, borrow)]
            status: Option<Status<'a>>,
        }
        #[derive(Deserialize)]
        struct Status<'a> {
            #[serde(default, borrow)]
            conditions: Vec<ConditionView<'a>>,
        }
        Object::deserialize(self)
            .ok()
            .and_then(|o| o.status)
            .map(|s| s.conditions)
            .unwrap_or_default()
    }
}

/// Conditions of kinds whose status holds `conditions: Vec<metav1::Condition>`.
macro_rules! metav1_conditions {
    ($($kind:ty),* $(,)?) => {$(
        impl HasConditions for $kind {
            fn conditions(&self) -> Vec<ConditionView<'_>> {
                self.status.iter().flat_map(|s| s.conditions.iter().map(view)).collect()
            }
        }
    )*};
}
metav1_conditions!(
    ManagedCluster,
    ClusterManager,
    Klusterlet,
    ManagedClusterSetBinding,
    ManagedClusterAddOn,
    ClusterProfile,
);

/// Conditions of built-in kinds whose status holds `conditions: Option<Vec<…Condition>>` with optional
/// `reason` and `message` (apps/v1 `DeploymentCondition`, apiextensions/v1
/// `CustomResourceDefinitionCondition`, certificates/v1 `CertificateSigningRequestCondition`).
macro_rules! builtin_conditions {
    ($($kind:ty),* $(,)?) => {$(
        impl HasConditions for $kind {
            fn conditions(&self) -> Vec<ConditionView<'_>> {
                let all = self.status.iter().flat_map(|s| s.conditions.iter().flatten());
                all.map(|c| ConditionView {
                    type_: &c.type_,
                    status: &c.status,
                    reason: c.reason.as_deref(),
                    message: c.message.as_deref(),
                })
                .collect()
            }
        }
    )*};
}
builtin_conditions!(
    Deployment,
    CustomResourceDefinition,
    CertificateSigningRequest
);

/// An object's name (empty when it has none: objects the API server returns always have one).
pub fn name_of<K: Resource>(obj: &K) -> &str {
    obj.meta().name.as_deref().unwrap_or_default()
}

/// The value of label `key` on an object.
pub fn label<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Whether an object has an owner (its owner's controller or the garbage collector manages it).
pub fn has_owner(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .as_ref()
        .is_some_and(|r| !r.is_empty())
}
