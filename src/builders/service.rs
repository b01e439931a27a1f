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
}
