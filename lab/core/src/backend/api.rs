//! Typed access to a cluster: [`Api<K>`] reads, writes and waits on objects of kind `K`, shaped like
//! kube-rs's `Api<K>` (`Api::all`, `Api::namespaced`), on top of the [`ClusterApi`] trait, which the real
//! adapter and the simulated lab implement on JSON. What crosses the trait is JSON; what the lab reads
//! and writes is `K`.

use std::marker::PhantomData;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DynamicObject, NamespaceResourceScope, PartialObjectMeta};
use serde::de::DeserializeOwned;
use serde::{Deserialize as _, Serialize};
use serde_json::Value;

use super::kinds::Kind;
use super::{ClusterApi, Condition, KubeError, ObjectRef, WaitError};

/// Objects of kind `K` on one cluster, in one namespace or cluster-wide.
pub struct Api<'a, K> {
    client: &'a dyn ClusterApi,
    namespace: Option<String>,
    kind: PhantomData<fn() -> K>,
}

impl<K> Clone for Api<'_, K> {
    fn clone(&self) -> Self {
        Api {
            client: self.client,
            namespace: self.namespace.clone(),
            kind: PhantomData,
        }
    }
}

/// Reads `K` from the JSON the trait returns. A failure means the server holds an object the lab's type
/// of that kind cannot describe: named, never retried.
fn decode<K: Kind + DeserializeOwned>(r: &ObjectRef, obj: Value) -> Result<K, KubeError> {
    serde_json::from_value(obj).map_err(|e| KubeError::Decode {
        object: r.to_string(),
        detail: e.to_string(),
    })
}

impl<'a, K: Kind + DeserializeOwned + 'static> Api<'a, K> {
    /// Cluster-scoped objects, or (for a namespaced kind) the objects of every namespace.
    pub fn all(client: &'a dyn ClusterApi) -> Self {
        Api {
            client,
            namespace: None,
            kind: PhantomData,
        }
    }

    /// The objects of a namespaced kind in `namespace`.
    pub fn namespaced(client: &'a dyn ClusterApi, namespace: &str) -> Self
    where
        K: kube::Resource<Scope = NamespaceResourceScope>,
    {
        Api {
            client,
            namespace: Some(namespace.to_owned()),
            kind: PhantomData,
        }
    }

    /// In `namespace` when one is given, else as [`Api::all`]: for code generic over namespaced and
    /// cluster-scoped kinds.
    pub fn within(client: &'a dyn ClusterApi, namespace: Option<&str>) -> Self {
        Api {
            client,
            namespace: namespace.map(str::to_owned),
            kind: PhantomData,
        }
    }

    /// The reference of object `name` here.
    pub fn object_ref(&self, name: &str) -> ObjectRef {
        ObjectRef::to::<K>(self.namespace.as_deref(), name)
    }

    /// Whether the cluster serves `K` now (discovery).
    pub async fn served(&self) -> Result<bool, KubeError> {
        self.client
            .served(&K::api_version(&()), &K::kind(&()))
            .await
    }

    pub async fn get(&self, name: &str) -> Result<Option<K>, KubeError> {
        let r = self.object_ref(name);
        match self.client.get(&r).await? {
            Some(obj) => decode(&r, obj).map(Some),
            None => Ok(None),
        }
    }

    /// The objects here, optionally filtered by a label selector.
    pub async fn list(&self, labels: Option<&str>) -> Result<Vec<K>, KubeError> {
        let items = self
            .client
            .list(
                &K::api_version(&()),
                &K::kind(&()),
                self.namespace.as_deref(),
                labels,
            )
            .await?;
        let r = self.object_ref("");
        items.into_iter().map(|o| decode(&r, o)).collect()
    }

    /// As [`Api::list`], each object as its metadata only (the API server's PartialObjectMetadata list).
    pub async fn list_metadata(
        &self,
        labels: Option<&str>,
    ) -> Result<Vec<PartialObjectMeta<K>>, KubeError> {
        let items = self
            .client
            .list_metadata(
                &K::api_version(&()),
                &K::kind(&()),
                self.namespace.as_deref(),
                labels,
            )
            .await?;
        let r = self.object_ref("");
        items
            .into_iter()
            .map(|o| {
                serde_json::from_value(o).map_err(|e| KubeError::Decode {
                    object: r.to_string(),
                    detail: e.to_string(),
                })
            })
            .collect()
    }

    /// Deletes; `false` when it did not exist.
    pub async fn delete(&self, name: &str) -> Result<bool, KubeError> {
        self.client.delete(&self.object_ref(name)).await
    }

    /// A JSON merge patch of object `name`.
    pub async fn merge_patch(&self, name: &str, patch: &Value) -> Result<(), KubeError> {
        self.client.merge_patch(&self.object_ref(name), patch).await
    }

    /// Watches object `name` until `cond` holds or `timeout` passes; returns the object as it then was
    /// (`None`: gone, for a condition a missing object satisfies).
    pub async fn wait(
        &self,
        name: &str,
        cond: &Condition<K>,
        timeout: Duration,
    ) -> Result<Option<K>, WaitError> {
        let r = self.object_ref(name);
        match self.client.wait(&r, &cond.on_json(), timeout).await? {
            Value::Null => Ok(None),
            obj => Ok(Some(decode(&r, obj)?)),
        }
    }
}

impl<K: Kind + DeserializeOwned + Serialize + 'static> Api<'_, K> {
    /// Server-side apply of `obj` (field manager `ocm-lab`, force, Strict field validation).
    pub async fn apply(&self, obj: &K) -> Result<(), KubeError> {
        let json = serde_json::to_value(obj).map_err(|e| KubeError::Decode {
            object: K::kind(&()).into_owned(),
            detail: e.to_string(),
        })?;
        self.client.apply(&json).await
    }
}

/// The metadata of the objects of a kind known only at run time (`apiVersion`, `kind`: a table's entry),
/// as [`Api::list_metadata`] gives them for a kind known at compile time.
pub async fn list_metadata_of(
    client: &dyn ClusterApi,
    (api_version, kind): (&str, &str),
    namespace: Option<&str>,
    labels: Option<&str>,
) -> Result<Vec<ObjectMeta>, KubeError> {
    let items = client
        .list_metadata(api_version, kind, namespace, labels)
        .await?;
    let decode = |o: Value| {
        PartialObjectMeta::<DynamicObject>::deserialize(o)
            .map(|p| p.metadata)
            .map_err(|e| KubeError::Decode {
                object: format!("{kind} ({api_version})"),
                detail: e.to_string(),
            })
    };
    items.into_iter().map(decode).collect()
}

/// A wait for one object of any kind: its reference and the condition on its JSON. Built from a typed
/// condition with [`Wait::on`], so lists of waits on different kinds share one type.
#[derive(Debug, Clone)]
pub struct Wait {
    pub object: ObjectRef,
    pub condition: Condition,
}

impl Wait {
    /// Wait for object `name` of kind `K` (in `namespace`) until `condition`.
    pub fn on<K: Kind + DeserializeOwned + 'static>(
        namespace: Option<&str>,
        name: &str,
        condition: Condition<K>,
    ) -> Self {
        Wait {
            object: ObjectRef::to::<K>(namespace, name),
            condition: condition.on_json(),
        }
    }
}
