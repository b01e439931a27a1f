//! What the controller keeps of a pod it manages: identity, the labels and
//! the annotation it trusts and matches on, the phase and each container's
//! state — read straight from the pod's JSON. The spec, the rest of the
//! status, the other labels and annotations (the template's) and
//! `managedFields` are skipped: the informers of managed pods hold one per
//! replica for the replica's whole life, and a typed `Pod` is about ten
//! times the size, its labels and annotations alone a tenth of the
//! controller's heap (docs/src/benchmarks/controller.md, the heap profiles
//! of (d)).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ObjectMeta;
use serde::{Deserialize, Deserializer};

use crate::builders::{MANAGED_BY_LABEL, PLACEMENT_EPOCH_LABEL};
use crate::signing::SIGNATURE_ANNOTATION;

/// The labels of a managed pod the controller reads.
pub const READ_LABELS: [&str; 2] = [MANAGED_BY_LABEL, PLACEMENT_EPOCH_LABEL];
/// The annotations of a managed pod the controller reads.
pub const READ_ANNOTATIONS: [&str; 1] = [SIGNATURE_ANNOTATION];

/// A managed pod as observed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedPod {
    /// Name, namespace, uid, resourceVersion, creation and deletion times
    /// only: its labels and annotations are not here but in `labels` and
    /// `annotations`, the ones read.
    pub metadata: ObjectMeta,
    /// The pod's [`READ_LABELS`].
    pub labels: Kept,
    /// The pod's [`READ_ANNOTATIONS`].
    pub annotations: Kept,
    /// `status.phase`.
    pub phase: Option<String>,
    /// `status.containerStatuses`, in order.
    pub containers: Vec<ObservedContainer>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ObservedContainer {
    pub name: String,
    pub state: ContainerState,
}

/// A container's `state`: the first of terminated, waiting and running
/// that is present.
#[derive(Clone, Debug, PartialEq)]
pub enum ContainerState {
    Terminated {
        exit_code: i32,
        reason: Option<String>,
    },
    Waiting {
        reason: Option<String>,
    },
    Running,
    Unknown,
}

/// Those of a pod's labels (or annotations) whose keys the controller
/// reads, in the order of its list of them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Kept(Vec<(&'static str, Box<str>)>);

impl Kept {
    /// The entries of `map` under `keys`.
    fn of(map: Option<BTreeMap<String, String>>, keys: &[&'static str]) -> Kept {
        let mut map = map.unwrap_or_default();
        Kept(
            keys.iter()
                .filter_map(|&key| Some((key, map.remove(key)?.into_boxed_str())))
                .collect(),
        )
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| *k == key).map(|(_, v)| &**v)
    }
}

impl ObservedPod {
    /// The same pod as a typed answer (a create's, a get's) carries it.
    pub fn of(pod: &Pod) -> Result<ObservedPod, serde_json::Error> {
        // Through JSON, so that one reading of a pod serves both paths.
        serde_json::to_value(pod).and_then(serde_json::from_value)
    }

    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// The fields of a pod [`ObservedPod`] reads; `null` reads as absent.
mod wire {
    use super::*;

    #[derive(Deserialize)]
    pub struct Pod {
        pub metadata: Option<Meta>,
        pub status: Option<Status>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Meta {
        pub name: Option<String>,
        pub namespace: Option<String>,
        pub uid: Option<String>,
        pub resource_version: Option<String>,
        pub creation_timestamp: Option<Time>,
        pub deletion_timestamp: Option<Time>,
        pub labels: Option<BTreeMap<String, String>>,
        pub annotations: Option<BTreeMap<String, String>>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Status {
        pub phase: Option<String>,
        pub container_statuses: Option<Vec<Container>>,
    }

    #[derive(Deserialize)]
    pub struct Container {
        pub name: Option<String>,
        pub state: Option<State>,
    }

    #[derive(Deserialize)]
    pub struct State {
        pub terminated: Option<Terminated>,
        pub waiting: Option<Waiting>,
        pub running: Option<serde::de::IgnoredAny>,
    }

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Terminated {
        pub exit_code: Option<i32>,
        pub reason: Option<String>,
    }

    #[derive(Deserialize)]
    pub struct Waiting {
        pub reason: Option<String>,
    }
}

impl<'de> Deserialize<'de> for ObservedPod {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut pod = wire::Pod::deserialize(deserializer)?;
        let (labels, annotations) = match &mut pod.metadata {
            Some(m) => (
                Kept::of(m.labels.take(), &READ_LABELS),
                Kept::of(m.annotations.take(), &READ_ANNOTATIONS),
            ),
            None => (Kept::default(), Kept::default()),
        };
        let metadata = match pod.metadata {
            Some(m) => ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                creation_timestamp: m.creation_timestamp,
                deletion_timestamp: m.deletion_timestamp,
                ..ObjectMeta::default()
            },
            None => ObjectMeta::default(),
        };
        let (phase, containers) = match pod.status {
            Some(status) => (status.phase, status.container_statuses.unwrap_or_default()),
            None => (None, Vec::new()),
        };
        let containers = containers
            .into_iter()
            .map(|c| ObservedContainer {
                name: c.name.unwrap_or_default(),
                state: match c.state {
                    Some(wire::State {
                        terminated: Some(t),
                        ..
                    }) => ContainerState::Terminated {
                        exit_code: t.exit_code.unwrap_or_default(),
                        reason: t.reason,
                    },
                    Some(wire::State {
                        waiting: Some(w), ..
                    }) => ContainerState::Waiting { reason: w.reason },
                    Some(wire::State {
                        running: Some(_), ..
                    }) => ContainerState::Running,
                    _ => ContainerState::Unknown,
                },
            })
            .collect();
        Ok(ObservedPod {
            metadata,
            labels,
            annotations,
            phase,
            containers,
        })
    }
}

/// Makes a type that reads pods an API resource of kind Pod, so that
/// `Api<T>` lists, gets and watches pods as `T`.
macro_rules! pod_resource {
    ($type:ty) => {
        impl kube::Resource for $type {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                "Pod".into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                "".into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                "v1".into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                "pods".into()
            }
            fn meta(&self) -> &kube::core::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut kube::core::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}
pub(crate) use pod_resource;

pod_resource!(ObservedPod);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_what_a_typed_pod_holds_and_skips_the_rest() {
        let cases = [
            json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "creationTimestamp": "2026-01-01T00:00:00Z", "deletionTimestamp": "2026-01-01T00:01:00Z",
                "labels": {"a": "1", "app.kubernetes.io/managed-by": "tfjob-federator",
                    "federation.tfjob.io/placement-epoch": "3"},
                "annotations": {"s": "sig", "federation.tfjob.io/signature": "c2ln"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:containers": {}}}}]},
                "spec": {"nodeName": "n", "containers": [{"name": "tensorflow", "image": "i"}]},
                "status": {"phase": "Failed", "containerStatuses": [
                    {"name": "tensorflow", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 137, "reason": "Error"}}},
                    {"name": "side", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "ImagePullBackOff"}}},
                    {"name": "third", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                     "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}},
                    {"name": "fourth", "image": "i", "imageID": "", "ready": false, "restartCount": 0}]}}),
            json!({"metadata": {"name": "q", "labels": null}, "status": null}),
            json!({"metadata": {"name": "r"}, "status": {"phase": "Pending", "containerStatuses": null}}),
            json!({}),
        ];
        for case in &cases {
            let typed: Pod = serde_json::from_value(case.clone()).expect("a pod");
            let observed: ObservedPod = serde_json::from_value(case.clone()).expect("observed");
            assert_eq!(
                ObservedPod::of(&typed).expect("observed from typed"),
                observed,
                "{case}"
            );
            let meta = &typed.metadata;
            assert_eq!(observed.metadata.name, meta.name);
            assert_eq!(observed.metadata.namespace, meta.namespace);
            assert_eq!(observed.metadata.uid, meta.uid);
            assert_eq!(observed.metadata.resource_version, meta.resource_version);
            assert_eq!(
                observed.metadata.creation_timestamp,
                meta.creation_timestamp
            );
            assert_eq!(observed.is_deleting(), meta.deletion_timestamp.is_some());
            for (kept, read, all) in [
                (&observed.labels, &READ_LABELS[..], &meta.labels),
                (
                    &observed.annotations,
                    &READ_ANNOTATIONS[..],
                    &meta.annotations,
                ),
            ] {
                let all = all.clone().unwrap_or_default();
                for (key, value) in &all {
                    let expected = read.contains(&key.as_str()).then_some(value.as_str());
                    assert_eq!(kept.get(key), expected, "{key} in {case}");
                }
                for key in read {
                    assert_eq!(kept.get(key), all.get(*key).map(String::as_str), "{case}");
                }
            }
            assert!(observed.metadata.labels.is_none(), "not kept twice");
            assert!(observed.metadata.annotations.is_none(), "not kept twice");
            assert!(observed.metadata.managed_fields.is_none(), "skipped");
            let status = typed.status.as_ref();
            assert_eq!(observed.phase, status.and_then(|s| s.phase.clone()));
            let names: Vec<String> = status
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.name)
                .collect();
            let observed_names: Vec<String> =
                observed.containers.iter().map(|c| c.name.clone()).collect();
            assert_eq!(observed_names, names, "{case}");
        }
        let first: ObservedPod = serde_json::from_value(cases[0].clone()).expect("observed");
        assert_eq!(
            first
                .containers
                .iter()
                .map(|c| c.state.clone())
                .collect::<Vec<_>>(),
            [
                ContainerState::Terminated {
                    exit_code: 137,
                    reason: Some("Error".into())
                },
                ContainerState::Waiting {
                    reason: Some("ImagePullBackOff".into())
                },
                ContainerState::Running,
                ContainerState::Unknown,
            ]
        );
    }
}
