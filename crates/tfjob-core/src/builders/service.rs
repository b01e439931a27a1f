//! A replica's headless service, `<job>-<type>-<index>`, which gives the
//! replica the stable DNS name `TF_CONFIG` lists. It exposes only
//! `tfjob-port` and selects the replica's pod by job uid, type and index.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{
    BuildError, JobRef, TF_PORT_NAME, parse_template, replica_labels, replica_selector,
    replica_spec, tf_port,
};
use crate::api::{ReplicaKey, TensorFlowTrainingJob};
use kube::core::{ApiResource, DynamicObject};

/// Builds the service of replica `key`; `owner` only on the home cluster.
pub fn build_service(
    job: &TensorFlowTrainingJob,
    key: ReplicaKey,
    epoch: u64,
    owner: Option<OwnerReference>,
) -> Result<Service, BuildError> {
    let job_ref = JobRef::of(job)?;
    let template = parse_template(key.replica_type, replica_spec(job, key)?)?;
    let port = tf_port(&template);
    Ok(Service {
        metadata: ObjectMeta {
            name: Some(key.object_name(job_ref.name)),
            namespace: Some(job_ref.namespace.to_string()),
            labels: Some(replica_labels(job, key, epoch)?),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_string()),
            selector: Some(replica_selector(job, key)?),
            ports: Some(vec![ServicePort {
                name: Some(TF_PORT_NAME.to_string()),
                port,
                target_port: Some(IntOrString::Int(port)),
                protocol: Some("TCP".to_string()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    })
}

/// The MCS API type that exports a service to the other clusters of a clusterset.
pub fn service_export_resource() -> ApiResource {
    ApiResource {
        group: "multicluster.x-k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "multicluster.x-k8s.io/v1alpha1".into(),
        kind: "ServiceExport".into(),
        plural: "serviceexports".into(),
    }
}

/// The ServiceExport of a created service: same name and labels, owned by
/// the service (same cluster), so it goes when the service goes.
pub fn build_service_export(service: &Service) -> Option<DynamicObject> {
    let name = service.metadata.name.clone()?;
    let owner = OwnerReference {
        api_version: "v1".into(),
        kind: "Service".into(),
        name: name.clone(),
        uid: service.metadata.uid.clone()?,
        ..Default::default()
    };
    let mut export = DynamicObject::new(&name, &service_export_resource());
    export.metadata.namespace = service.metadata.namespace.clone();
    export.metadata.labels = service.metadata.labels.clone();
    export.metadata.owner_references = Some(vec![owner]);
    Some(export)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ReplicaType;
    use crate::builders::owner_reference;
    use crate::builders::test_support::*;

    #[test]
    fn headless_service_per_replica() {
        let job = chief_workers_ps();
        let key = ReplicaKey::new(ReplicaType::Ps, 0);
        let owner = owner_reference(&job).expect("owner");
        let service = build_service(&job, key, 1, Some(owner)).expect("service");
        let value = serde_json::to_value(&service).expect("json");
        assert_eq!(value["metadata"]["name"], "mnist-ps-0");
        assert_eq!(value["metadata"]["namespace"], "team-a");
        assert_eq!(
            value["metadata"]["labels"]["federation.tfjob.io/placement-epoch"],
            "1"
        );
        assert_eq!(value["metadata"]["ownerReferences"][0]["uid"], UID);
        assert_eq!(
            value["spec"],
            json!({
                "clusterIP": "None",
                "selector": {
                    "federation.tfjob.io/job-uid": UID,
                    "federation.tfjob.io/replica-index": "0",
                    "federation.tfjob.io/replica-type": "ps",
                },
                "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222, "protocol": "TCP"}],
            })
        );
        let remote = build_service(&job, key, 1, None).expect("service");
        assert_eq!(remote.metadata.owner_references, None);
    }

    #[test]
    fn service_export_is_owned_by_its_service() {
        let mut service = Service::default();
        service.metadata.name = Some("j-worker-0".into());
        service.metadata.namespace = Some("ml".into());
        assert!(
            build_service_export(&service).is_none(),
            "no uid yet: not created"
        );
        service.metadata.uid = Some("u1".into());
        let export = build_service_export(&service).expect("an export");
        assert_eq!(
            export.types.as_ref().map(|t| t.kind.as_str()),
            Some("ServiceExport")
        );
        assert_eq!(export.metadata.namespace.as_deref(), Some("ml"));
        let owner = &export.metadata.owner_references.expect("owned")[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Service", "u1"));
    }
}
