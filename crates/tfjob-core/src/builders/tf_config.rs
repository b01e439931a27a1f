//! `TF_CONFIG`, the environment variable through which TensorFlow learns the
//! cluster: `{"cluster":{"<type>":["<host>:<port>",…]},"task":{"type":"<type>","index":i},"environment":"cloud"}`.
//!
//! Each task's cluster is written by TensorFlow's rules for its role: a
//! training task's (chief, worker, ps) lists every training replica and no
//! evaluator, the evaluator's lists those and itself. The evaluator runs
//! no server: ParameterServerStrategy's coordinator connects to every task
//! of its cluster and would wait for it forever (tensorflow#46169; TonY
//! names the evaluator only in the evaluator's own `TF_CONFIG`, and
//! TensorFlow's cluster checks accept an evaluator missing from the
//! cluster). Keys come out in a fixed order (`cluster`, `task`,
//! `environment`; replica types sorted by name) so the value is stable
//! and comparable. Each peer's port is its own type's `tfjob-port`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{BuildError, JobRef, Topology, parse_template, replica_spec, tf_port};
use crate::api::{ReplicaKey, ReplicaType, TensorFlowTrainingJob};

/// The environment variable name.
pub const TF_CONFIG_ENV: &str = "TF_CONFIG";

#[derive(Serialize)]
struct TfConfig {
    cluster: BTreeMap<&'static str, Vec<String>>,
    task: Task,
    environment: &'static str,
}

#[derive(Serialize)]
struct Task {
    #[serde(rename = "type")]
    replica_type: &'static str,
    index: i32,
}

/// The `TF_CONFIG` value for replica `key` of `job` placed as `topology` says.
pub fn tf_config(
    job: &TensorFlowTrainingJob,
    key: ReplicaKey,
    topology: &Topology,
) -> Result<String, BuildError> {
    let job_ref = JobRef::of(job)?;
    replica_spec(job, key)?;
    // Over several clusters every task gets the same, cluster-independent
    // map: ParameterServerStrategy hands the coordinator's map to every
    // task, so a name that resolves only in the coordinator's cluster
    // would break the others.
    let clusters: std::collections::BTreeSet<&str> = ReplicaType::ALL
        .into_iter()
        .filter(|t| job.spec.replica_spec(*t).is_some())
        .flat_map(|t| (0..job.spec.replicas_of(t)).map(move |i| ReplicaKey::new(t, i)))
        .map(|peer| topology.cluster_of(peer))
        .collect();
    let spans_clusters = clusters.len() > 1 || topology.stable_addresses();
    let mut cluster = BTreeMap::new();
    for replica_type in ReplicaType::ALL {
        if replica_type == ReplicaType::Evaluator && key.replica_type != ReplicaType::Evaluator {
            continue;
        }
        let Some(spec) = job.spec.replica_spec(replica_type) else {
            continue;
        };
        let replicas = job.spec.replicas_of(replica_type);
        if replicas == 0 {
            continue;
        }
        let port = tf_port(&parse_template(replica_type, spec)?);
        let hosts = (0..replicas)
            .map(|index| {
                let peer = ReplicaKey::new(replica_type, index);
                let service = peer.object_name(job_ref.name);
                let host = if spans_clusters {
                    topology.cluster_independent_host(peer, &service, job_ref.namespace)
                } else {
                    topology.peer_host(key, peer, &service, job_ref.namespace)
                };
                format!("{host}:{port}")
            })
            .collect();
        cluster.insert(replica_type.as_str(), hosts);
    }
    let config = TfConfig {
        cluster,
        task: Task {
            replica_type: key.replica_type.as_str(),
            index: key.index,
        },
        environment: "cloud",
    };
    serde_json::to_string(&config).map_err(|source| BuildError::Serialize {
        what: "TF_CONFIG",
        source,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builders::test_support::*;

    fn key(replica_type: ReplicaType, index: i32) -> ReplicaKey {
        ReplicaKey::new(replica_type, index)
    }

    #[test]
    fn one_cluster() {
        let job = chief_workers_ps();
        let topology = Topology::new("home");
        assert_eq!(
            tf_config(&job, key(ReplicaType::Worker, 1), &topology).expect("tf_config"),
            r#"{"cluster":{"chief":["mnist-chief-0.team-a.svc:2222"],"ps":["mnist-ps-0.team-a.svc:2222"],"worker":["mnist-worker-0.team-a.svc:2222","mnist-worker-1.team-a.svc:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
        );
        assert_eq!(
            tf_config(&job, key(ReplicaType::Chief, 0), &topology).expect("tf_config"),
            r#"{"cluster":{"chief":["mnist-chief-0.team-a.svc:2222"],"ps":["mnist-ps-0.team-a.svc:2222"],"worker":["mnist-worker-0.team-a.svc:2222","mnist-worker-1.team-a.svc:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}"#
        );
    }

    #[test]
    fn split_across_two_clusters() {
        let job = chief_workers_ps();
        let mut topology = Topology::new("home");
        topology
            .assign(key(ReplicaType::Worker, 1), "member-1")
            .assign(key(ReplicaType::Ps, 0), "member-1")
            .set_address_template("member-1", "{service}.{namespace}.{cluster}.example.org");
        // Every replica by its cluster's address template: home's default
        // (MCS) name, member-1's own template, whoever asks.
        assert_eq!(
            tf_config(&job, key(ReplicaType::Worker, 1), &topology).expect("tf_config"),
            r#"{"cluster":{"chief":["mnist-chief-0.team-a.svc.clusterset.local:2222"],"ps":["mnist-ps-0.team-a.member-1.example.org:2222"],"worker":["mnist-worker-0.team-a.svc.clusterset.local:2222","mnist-worker-1.team-a.member-1.example.org:2222"]},"task":{"type":"worker","index":1},"environment":"cloud"}"#
        );
        assert_eq!(
            tf_config(&job, key(ReplicaType::Chief, 0), &topology).expect("tf_config"),
            r#"{"cluster":{"chief":["mnist-chief-0.team-a.svc.clusterset.local:2222"],"ps":["mnist-ps-0.team-a.member-1.example.org:2222"],"worker":["mnist-worker-0.team-a.svc.clusterset.local:2222","mnist-worker-1.team-a.member-1.example.org:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}"#
        );
    }

    /// TensorFlow's ParameterServerStrategy hands the coordinator's
    /// cluster to every task (a worker reaches the ps by the chief's
    /// addresses), so across clusters a cluster-local name breaks training:
    /// seen on the real clusters, ps-0 on member-2 could not resolve the
    /// chief's `mnist-ps-1.<ns>.svc`. A job over several clusters lists
    /// every replica, its own cluster's too, by its cluster's address
    /// template, the same map for every task.
    #[test]
    fn across_clusters_every_task_gets_the_same_cluster_independent_map() {
        let job = chief_workers_ps();
        let mut topology = Topology::new("home");
        topology
            .assign(key(ReplicaType::Worker, 1), "member-1")
            .assign(key(ReplicaType::Ps, 0), "member-1")
            .set_address_template("member-1", "{service}.{namespace}.{cluster}.example.org");
        let cluster_of = |task| {
            let config: serde_json::Value =
                serde_json::from_str(&tf_config(&job, task, &topology).expect("tf_config"))
                    .expect("json");
            config["cluster"].clone()
        };
        let expected = json!({
            "chief": ["mnist-chief-0.team-a.svc.clusterset.local:2222"],
            "ps": ["mnist-ps-0.team-a.member-1.example.org:2222"],
            "worker": ["mnist-worker-0.team-a.svc.clusterset.local:2222", "mnist-worker-1.team-a.member-1.example.org:2222"],
        });
        for task in [
            key(ReplicaType::Chief, 0),
            key(ReplicaType::Ps, 0),
            key(ReplicaType::Worker, 0),
            key(ReplicaType::Worker, 1),
        ] {
            assert_eq!(cluster_of(task), expected, "{task:?}");
        }
    }

    /// Under `failover: LostReplicas` a worker may move from one member to
    /// another while its peers keep running with the `TF_CONFIG` they
    /// started with: every address is the cluster-independent one, also
    /// when the replicas share one cluster, so the move changes no map.
    #[test]
    fn stable_addresses_do_not_change_when_a_replica_moves() {
        let job = chief_workers_ps();
        let config = |worker_1_on: &str| {
            let mut topology = Topology::new("member-1");
            topology
                .assign(key(ReplicaType::Worker, 1), worker_1_on)
                .use_stable_addresses();
            tf_config(&job, key(ReplicaType::Chief, 0), &topology).expect("tf_config")
        };
        let before = config("member-2");
        assert_eq!(before, config("member-1"));
        assert_eq!(
            before,
            r#"{"cluster":{"chief":["mnist-chief-0.team-a.svc.clusterset.local:2222"],"ps":["mnist-ps-0.team-a.svc.clusterset.local:2222"],"worker":["mnist-worker-0.team-a.svc.clusterset.local:2222","mnist-worker-1.team-a.svc.clusterset.local:2222"]},"task":{"type":"chief","index":0},"environment":"cloud"}"#
        );
    }

    #[test]
    fn evaluator_and_named_ports() {
        let mut ps = replica("ps", 1);
        ps["template"]["spec"]["containers"][0]["ports"] =
            json!([{"name": "tfjob-port", "containerPort": 3333}]);
        let job = job(json!({"replicaSpecs": [
            replica("worker", 1), ps, replica("evaluator", 1), replica("chief", 0)]}));
        let value: serde_json::Value = serde_json::from_str(
            &tf_config(&job, key(ReplicaType::Evaluator, 0), &Topology::new("home"))
                .expect("tf_config"),
        )
        .expect("json");
        assert_eq!(
            value,
            json!({
                "cluster": {
                    "evaluator": ["mnist-evaluator-0.team-a.svc:2222"],
                    "ps": ["mnist-ps-0.team-a.svc:3333"],
                    "worker": ["mnist-worker-0.team-a.svc:2222"],
                },
                "task": {"type": "evaluator", "index": 0},
                "environment": "cloud",
            })
        );
    }

    /// Who is listed, by role: a training task's cluster has no
    /// evaluator, the evaluator's has the training tasks and itself; on
    /// one cluster and across two alike.
    #[test]
    fn only_the_evaluator_lists_the_evaluator() {
        let job = job(json!({"replicaSpecs": [
            replica("chief", 1), replica("ps", 1), replica("worker", 2), replica("evaluator", 1)]}));
        let mut split = Topology::new("home");
        split
            .assign(key(ReplicaType::Evaluator, 0), "member-1")
            .assign(key(ReplicaType::Worker, 1), "member-1");
        let training = ["chief", "ps", "worker"];
        let with_evaluator = ["chief", "evaluator", "ps", "worker"];
        for topology in [Topology::new("home"), split] {
            for (task, listed) in [
                (key(ReplicaType::Chief, 0), &training[..]),
                (key(ReplicaType::Ps, 0), &training[..]),
                (key(ReplicaType::Worker, 1), &training[..]),
                (key(ReplicaType::Evaluator, 0), &with_evaluator[..]),
            ] {
                let config: serde_json::Value =
                    serde_json::from_str(&tf_config(&job, task, &topology).expect("tf_config"))
                        .expect("json");
                let types: Vec<&str> = config["cluster"]
                    .as_object()
                    .expect("cluster")
                    .keys()
                    .map(String::as_str)
                    .collect();
                assert_eq!(types, listed, "{task:?}");
                assert_eq!(config["task"]["type"], task.replica_type.as_str());
                assert_eq!(
                    config["cluster"]["worker"].as_array().map(Vec::len),
                    Some(2)
                );
            }
        }
    }

    #[test]
    fn unknown_replica_is_an_error() {
        let job = chief_workers_ps();
        for missing in [key(ReplicaType::Worker, 2), key(ReplicaType::Evaluator, 0)] {
            assert!(matches!(
                tf_config(&job, missing, &Topology::new("home")),
                Err(BuildError::UnknownReplica(k)) if k == missing
            ));
        }
    }
}
