//! A replica's pod: the replica template with the controller's name, labels,
//! restart policy, port, `TF_CONFIG`, run-mode command and scheduler.
//!
//! - Template labels and annotations are copied (so `sim.federation.tfjob.io/*`
//!   annotations reach the pod); the controller's labels win on a clash.
//! - `restartPolicy` is always `Never`: the controller re-creates pods.
//! - The `tensorflow` container gets a `tfjob-port` port (2222) when it names
//!   none, and `TF_CONFIG`, replacing any value the template set.
//! - Debug: the command becomes the debug command for the type (default
//!   `sleep inf`) and args are cleared. Resumed: command and args come from
//!   the type's resumeSpec where given, each independently; otherwise the
//!   template's stay. Both may drop init containers (`skipInitContainer`).
//! - T9k Scheduler: `schedulerName: t9k-scheduler` and the PodGroup labels.

use k8s_openapi::api::core::v1::{Container, ContainerPort, EnvVar, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::{
    BuildError, DEFAULT_TF_PORT, GROUP_NAME_LABEL, JobRef, QUEUE_LABEL, T9K_SCHEDULER_NAME,
    TF_CONFIG_ENV, TF_PORT_NAME, Topology, parse_template, replica_labels, replica_spec, tf_config,
};
use crate::api::{DEFAULT_DEBUG_COMMAND, ReplicaKey, TENSORFLOW_CONTAINER, TensorFlowTrainingJob};

pub use crate::lifecycle::machine::PodMode;

/// Everything a pod needs beyond the job and the replica.
#[derive(Clone, Debug)]
pub struct PodParams<'a> {
    /// Where every replica runs (for `TF_CONFIG`).
    pub topology: &'a Topology,
    /// The placement epoch that creates the pod.
    pub epoch: u64,
    pub mode: PodMode,
    /// The owner reference to the job, only on the home cluster.
    pub owner: Option<OwnerReference>,
}

/// Builds the pod of replica `key`.
pub fn build_pod(
    job: &TensorFlowTrainingJob,
    key: ReplicaKey,
    params: &PodParams<'_>,
) -> Result<Pod, BuildError> {
    let job_ref = JobRef::of(job)?;
    let template = parse_template(key.replica_type, replica_spec(job, key)?)?;
    let template_meta = template.metadata.unwrap_or_default();
    let mut pod_spec: PodSpec = template.spec.unwrap_or_default();

    let mut labels = template_meta.labels.unwrap_or_default();
    labels.extend(replica_labels(job, key, params.epoch)?);
    if let Some(t9k) = job.spec.t9k_scheduler() {
        pod_spec.scheduler_name = Some(T9K_SCHEDULER_NAME.to_string());
        labels.insert(GROUP_NAME_LABEL.to_string(), job_ref.name.to_string());
        labels.insert(QUEUE_LABEL.to_string(), t9k.queue.clone());
    }
    pod_spec.restart_policy = Some("Never".to_string());

    let tf_config = tf_config(job, key, params.topology)?;
    let main = pod_spec
        .containers
        .iter_mut()
        .find(|c| c.name == TENSORFLOW_CONTAINER)
        .ok_or(BuildError::NoTensorflowContainer(key.replica_type))?;
    ensure_tf_port(main);
    set_env(main, TF_CONFIG_ENV, tf_config);

    let mut skip_init = false;
    let run_mode = job.spec.run_mode.as_ref();
    match params.mode {
        PodMode::Normal => {}
        PodMode::Debug => {
            let debug = run_mode
                .and_then(|m| m.debug.as_ref())
                .and_then(|d| d.spec_for(key.replica_type));
            main.command = Some(
                debug
                    .and_then(|d| d.command.clone())
                    .unwrap_or_else(|| DEFAULT_DEBUG_COMMAND.map(String::from).to_vec()),
            );
            main.args = None;
            skip_init = debug.is_some_and(|d| d.skip_init_container);
        }
        PodMode::Resumed => {
            let resume = run_mode
                .and_then(|m| m.pause.as_ref())
                .and_then(|p| p.resume_spec_for(key.replica_type));
            if let Some(resume) = resume {
                if let Some(command) = &resume.command {
                    main.command = Some(command.clone());
                }
                if let Some(args) = &resume.args {
                    main.args = Some(args.clone());
                }
                skip_init = resume.skip_init_container;
            }
        }
    }
    if skip_init {
        pod_spec.init_containers = None;
    }

    Ok(Pod {
        metadata: ObjectMeta {
            name: Some(key.object_name(job_ref.name)),
            namespace: Some(job_ref.namespace.to_string()),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: params.owner.clone().map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    })
}

/// Adds the `tfjob-port` port unless the container names one.
fn ensure_tf_port(container: &mut Container) {
    let ports = container.ports.get_or_insert_with(Vec::new);
    if !ports
        .iter()
        .any(|p| p.name.as_deref() == Some(TF_PORT_NAME))
    {
        ports.push(ContainerPort {
            name: Some(TF_PORT_NAME.to_string()),
            container_port: DEFAULT_TF_PORT,
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        });
    }
}

/// Sets an environment variable, replacing every earlier definition of it
/// (the first keeps its position).
fn set_env(container: &mut Container, name: &str, value: String) {
    let env = container.env.get_or_insert_with(Vec::new);
    let var = EnvVar {
        name: name.to_string(),
        value: Some(value),
        value_from: None,
    };
    match env.iter().position(|e| e.name == name) {
        Some(first) => {
            env[first] = var;
            let mut i = 0;
            env.retain(|e| {
                i += 1;
                i - 1 == first || e.name != name
            });
        }
        None => env.push(var),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::ReplicaType;
    use crate::builders::owner_reference;
    use crate::builders::test_support::*;

    fn worker(index: i32) -> ReplicaKey {
        ReplicaKey::new(ReplicaType::Worker, index)
    }

    fn params(topology: &Topology, mode: PodMode) -> PodParams<'_> {
        PodParams {
            topology,
            epoch: 2,
            mode,
            owner: None,
        }
    }

    fn main_container(pod: &Pod) -> &Container {
        pod.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "tensorflow"))
            .expect("tensorflow container")
    }

    fn env_of<'a>(pod: &'a Pod, name: &str) -> Vec<&'a str> {
        main_container(pod)
            .env
            .iter()
            .flatten()
            .filter(|e| e.name == name)
            .filter_map(|e| e.value.as_deref())
            .collect()
    }

    #[test]
    fn pod_name_labels_annotations_and_policy() {
        let job = chief_workers_ps();
        let topology = Topology::new("home");
        let mut params = params(&topology, PodMode::Normal);
        params.owner = Some(owner_reference(&job).expect("owner"));
        let pod = build_pod(&job, worker(1), &params).expect("pod");
        let value = serde_json::to_value(&pod).expect("json");
        assert_eq!(value["metadata"]["name"], "mnist-worker-1");
        assert_eq!(value["metadata"]["namespace"], "team-a");
        assert_eq!(
            value["metadata"]["labels"],
            json!({
                "team": "vision",
                "app.kubernetes.io/managed-by": "tfjob-federator",
                "federation.tfjob.io/job-name": "mnist",
                "federation.tfjob.io/job-uid": UID,
                "federation.tfjob.io/placement-epoch": "2",
                "federation.tfjob.io/replica-index": "1",
                "federation.tfjob.io/replica-type": "worker",
            })
        );
        assert_eq!(
            value["metadata"]["annotations"],
            json!({"sim.federation.tfjob.io/run-seconds": "3"})
        );
        assert_eq!(value["metadata"]["ownerReferences"][0]["name"], "mnist");
        assert_eq!(value["spec"]["restartPolicy"], "Never");
        assert_eq!(value["spec"].get("schedulerName"), None);
        assert_eq!(value["spec"]["initContainers"][0]["name"], "fetch-data");
        let main = main_container(&pod);
        assert_eq!(
            main.command.as_deref(),
            Some(&["python".to_string(), "train.py".to_string()][..])
        );
        assert_eq!(
            serde_json::to_value(&main.ports).expect("json"),
            json!([{"name": "tfjob-port", "containerPort": 2222, "protocol": "TCP"}])
        );
        // TF_CONFIG replaces the template's stale value, other env stays.
        assert_eq!(
            env_of(&pod, "TF_CONFIG"),
            [tf_config(&job, worker(1), &topology)
                .expect("tf_config")
                .as_str()]
        );
        assert_eq!(env_of(&pod, "A"), ["1"]);
        assert_eq!(main.env.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn no_owner_off_the_home_cluster() {
        let job = chief_workers_ps();
        let topology = Topology::new("member-1");
        let pod = build_pod(&job, worker(0), &params(&topology, PodMode::Normal)).expect("pod");
        assert_eq!(pod.metadata.owner_references, None);
    }

    #[test]
    fn a_named_port_is_kept() {
        let mut worker_spec = replica("worker", 1);
        worker_spec["template"]["spec"]["containers"][0]["ports"] =
            json!([{"name": "tfjob-port", "containerPort": 4000}]);
        let job = job(json!({"replicaSpecs": [worker_spec]}));
        let topology = Topology::new("home");
        let pod = build_pod(&job, worker(0), &params(&topology, PodMode::Normal)).expect("pod");
        let ports = main_container(&pod).ports.clone().unwrap_or_default();
        assert_eq!(ports.len(), 1);
        assert_eq!(ports[0].container_port, 4000);
        assert!(env_of(&pod, "TF_CONFIG")[0].contains("mnist-worker-0.team-a.svc:4000"));
    }

    #[test]
    fn debug_mode_runs_the_debug_command() {
        let mut job = chief_workers_ps();
        let topology = Topology::new("home");
        // Types not listed get `sleep inf`.
        job.spec.run_mode = serde_json::from_value(json!({"debug": {"enabled": true,
            "replicaSpecs": [{"type": "worker", "skipInitContainer": true,
                "command": ["bash", "-c", "sleep 3600"]}]}}))
        .expect("run mode");
        let pod = build_pod(&job, worker(0), &params(&topology, PodMode::Debug)).expect("pod");
        let main = main_container(&pod);
        assert_eq!(
            main.command,
            Some(vec!["bash".into(), "-c".into(), "sleep 3600".into()])
        );
        assert_eq!(main.args, None);
        assert_eq!(
            pod.spec.as_ref().and_then(|s| s.init_containers.as_ref()),
            None
        );
        let chief = ReplicaKey::new(ReplicaType::Chief, 0);
        let pod = build_pod(&job, chief, &params(&topology, PodMode::Debug)).expect("pod");
        assert_eq!(
            main_container(&pod).command,
            Some(vec!["sleep".into(), "inf".into()])
        );
        assert_eq!(main_container(&pod).args, None);
        assert!(
            pod.spec
                .as_ref()
                .and_then(|s| s.init_containers.as_ref())
                .is_some()
        );
    }

    #[test]
    fn resumed_pods_use_resume_specs() {
        let mut job = chief_workers_ps();
        let topology = Topology::new("home");
        job.spec.run_mode = serde_json::from_value(json!({"pause": {"enabled": false,
        "resumeSpecs": [
            {"type": "worker", "command": ["python", "resume.py"], "args": ["--from", "ckpt"]},
            {"type": "ps", "args": ["--resume"]},
        ]}}))
        .expect("run mode");
        let pod = build_pod(&job, worker(1), &params(&topology, PodMode::Resumed)).expect("pod");
        let main = main_container(&pod);
        assert_eq!(
            main.command,
            Some(vec!["python".into(), "resume.py".into()])
        );
        assert_eq!(main.args, Some(vec!["--from".into(), "ckpt".into()]));
        // Only args given: the template's command stays.
        let ps = ReplicaKey::new(ReplicaType::Ps, 0);
        let pod = build_pod(&job, ps, &params(&topology, PodMode::Resumed)).expect("pod");
        let main = main_container(&pod);
        assert_eq!(main.command, Some(vec!["python".into(), "train.py".into()]));
        assert_eq!(main.args, Some(vec!["--resume".into()]));
        // No resume spec for the chief: the template's command and args.
        let chief = ReplicaKey::new(ReplicaType::Chief, 0);
        let pod = build_pod(&job, chief, &params(&topology, PodMode::Resumed)).expect("pod");
        assert_eq!(
            main_container(&pod).args,
            Some(vec!["--epochs".into(), "10".into()])
        );
    }

    #[test]
    fn t9k_scheduler_pods() {
        let mut job = chief_workers_ps();
        job.spec.scheduler =
            serde_json::from_value(json!({"t9kScheduler": {"queue": "gpu-queue", "priority": 50}}))
                .expect("scheduler");
        let topology = Topology::new("home");
        let pod = build_pod(&job, worker(0), &params(&topology, PodMode::Normal)).expect("pod");
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.scheduler_name.as_deref(), Some("t9k-scheduler"));
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(
            labels
                .get("scheduler.tensorstack.dev/group-name")
                .map(String::as_str),
            Some("mnist")
        );
        assert_eq!(
            labels
                .get("scheduler.tensorstack.dev/queue")
                .map(String::as_str),
            Some("gpu-queue")
        );
    }

    #[test]
    fn errors() {
        let job = chief_workers_ps();
        let topology = Topology::new("home");
        let evaluator = ReplicaKey::new(ReplicaType::Evaluator, 0);
        assert!(matches!(
            build_pod(&job, evaluator, &params(&topology, PodMode::Normal)),
            Err(BuildError::UnknownReplica(_))
        ));
        let mut bad = replica("worker", 1);
        bad["template"]["spec"]["containers"][0]["name"] = json!("trainer");
        let job = crate::builders::test_support::job(json!({"replicaSpecs": [bad]}));
        assert!(matches!(
            build_pod(&job, worker(0), &params(&topology, PodMode::Normal)),
            Err(BuildError::NoTensorflowContainer(ReplicaType::Worker))
        ));
        let mut bad = replica("worker", 1);
        bad["template"]["spec"]["containers"][0]["ports"] = json!([{"containerPort": "x"}]);
        let job = crate::builders::test_support::job(json!({"replicaSpecs": [bad]}));
        let error = build_pod(&job, worker(0), &params(&topology, PodMode::Normal))
            .expect_err("malformed template");
        assert_eq!(
            error.to_string(),
            "the worker template is malformed at spec.containers[0].ports[0].containerPort: \
             invalid type: string \"x\", expected i32"
        );
    }

    #[test]
    fn set_env_drops_duplicates() {
        let mut container = Container {
            env: Some(vec![
                EnvVar {
                    name: "X".into(),
                    value: Some("1".into()),
                    value_from: None,
                },
                EnvVar {
                    name: "TF_CONFIG".into(),
                    value: Some("a".into()),
                    value_from: None,
                },
                EnvVar {
                    name: "TF_CONFIG".into(),
                    value: Some("b".into()),
                    value_from: None,
                },
            ]),
            ..Container::default()
        };
        set_env(&mut container, "TF_CONFIG", "new".into());
        let env: Vec<(String, Option<String>)> = container
            .env
            .unwrap_or_default()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect();
        assert_eq!(
            env,
            [
                ("X".to_string(), Some("1".to_string())),
                ("TF_CONFIG".to_string(), Some("new".to_string()))
            ]
        );
    }
}
