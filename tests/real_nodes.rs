//! Real nodes on the real ground (`hack/real-clusters --real-nodes`,
//! docs/src/testing/real-nodes.md): every cluster gets a node run by a
//! kubelet of the pinned release with containerd and runc, beside kwok's
//! fake nodes or alone. Shown with the real clients: the node's own report
//! of its runtime and version, a pod of the locally built python image run
//! by containerd, `kubectl logs` and `kubectl exec` through the kubelet,
//! that the launcher leaves no process, mount, cgroup or network namespace
//! of a node behind when it stops; and names across clusters as on a
//! clusterset: CoreDNS answers `<svc>.<ns>.svc.clusterset.local` once the
//! Service is exported, and the pod behind it is reached by that name.
//! Real TensorFlow on real nodes is `tests/tensorflow.rs`.

#[macro_use]
mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::real::{self, Launcher, client_from_file, container_id};
use common::sim_kube::set_faults;
use common::wait::eventually;
use k8s_openapi::api::core::v1::{Node, Pod, Service, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

const CLUSTERS: [&str; 3] = ["home", "member-1", "member-2"];

/// A pod for the real node: it asks for it by label and tolerates its
/// taint (beside kwok's nodes the real one takes no other pod).
fn python_on_real_node(name: &str, program: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"node.tfjob-federator.dev/kind": "real"},
            "tolerations": [{"key": "node.tfjob-federator.dev/real", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{
                "name": "main",
                "image": "localhost/tfjob-federator/python:3",
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", program],
            }],
        },
    }))
    .expect("a pod")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// What of the launcher's nodes is left on the host: network namespaces
/// named after its pid, processes naming a node's folder, mounts below it,
/// and the nodes' cgroup roots.
fn leftovers(pid: u32, work: &str) -> Vec<String> {
    let mut found = Vec::new();
    let netns = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    let prefix = format!("rc{pid}-node");
    found.extend(
        String::from_utf8_lossy(&netns.stdout)
            .lines()
            .filter(|line| line.starts_with(&prefix))
            .map(|line| format!("network namespace {line}")),
    );
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline"))
            && String::from_utf8_lossy(&cmdline).contains(work)
        {
            found.push(format!(
                "process {}: {}",
                entry.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    found.extend(
        mounts
            .lines()
            .filter(|line| line.contains(work))
            .map(|line| format!("mount {line}")),
    );
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_gets_a_real_node_that_runs_pods() {
    let mut launcher = Launcher::start(&["--clusters", "3", "--register", "--real-nodes"]).await;
    let pid = launcher.pid();
    let mut node_slots = Vec::new();
    for cluster in CLUSTERS {
        let client = client_from_file(&launcher.kubeconfig(cluster)).await;
        let nodes: Api<Node> = Api::all(client);
        let node = nodes
            .get(&format!("{cluster}-node"))
            .await
            .unwrap_or_else(|e| panic!("{cluster} has a real node: {e}"));
        let info = node
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .expect("node info");
        assert!(
            info.container_runtime_version.starts_with("containerd://"),
            "{cluster}: the runtime is containerd: {}",
            info.container_runtime_version
        );
        assert_eq!(info.kubelet_version, "v1.37.2", "{cluster}: the kubelet");
        assert!(
            tfjob_core::capacity::node_ready(&node),
            "{cluster}-node is Ready"
        );
        let pod_cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone());
        assert!(
            pod_cidr.as_deref().is_some_and(|c| c.ends_with("/24")),
            "{cluster}-node has a pod CIDR from node-ipam: {pod_cidr:?}"
        );
        node_slots.push(pod_cidr.unwrap_or_default());
        // Beside kwok's four nodes the real one is tainted.
        let all = nodes.list(&Default::default()).await.expect("nodes");
        assert_eq!(
            all.items.len(),
            5,
            "{cluster}: four kwok nodes and the real one"
        );
    }
    let mut distinct = node_slots.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        3,
        "each cluster's pods have addresses of their own: {node_slots:?}"
    );

    // A pod of the python image on member-1's real node, with `kubectl logs`
    // and `kubectl exec` through its kubelet.
    let member = client_from_file(&launcher.kubeconfig("member-1")).await;
    let ns = real::test_namespace(&member, "real-nodes").await;
    let pods: Api<Pod> = Api::namespaced(member.clone(), &ns);
    let program =
        "import sys, time; print('python', sys.version_info[0], flush=True); time.sleep(600)";
    let pod = create_until_phase(&pods, python_on_real_node("python", program), "Running").await;
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some("member-1-node")
    );
    let id = container_id(&pod);
    assert!(id.starts_with("containerd://"), "run by containerd: {id:?}");
    let kubeconfig = launcher.kubeconfig("member-1");
    let logs = eventually("the pod's log line", Duration::from_secs(20), async || {
        let logs = kubectl(&kubeconfig, &["logs", "-n", &ns, "python"]);
        logs.contains("python 3").then_some(logs)
    })
    .await;
    assert_eq!(logs.trim(), "python 3");
    let answer = kubectl(
        &kubeconfig,
        &[
            "exec",
            "-n",
            &ns,
            "python",
            "--",
            "python3",
            "-c",
            "print(6 * 7)",
        ],
    );
    assert_eq!(answer.trim(), "42", "kubectl exec runs in the container");

    // A pod that exits: its code is the process's own.
    let exited = create_until_phase(
        &pods,
        python_on_real_node("exits", "import sys; sys.exit(3)"),
        "Failed",
    )
    .await;
    let code = exited
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.state?.terminated)
        .map(|t| t.exit_code)
        .expect("the container's exit code");
    assert_eq!(code, 3, "the container's exit code");

    // Stopped, the launcher leaves nothing of its nodes behind.
    let log =
        std::fs::read_to_string(launcher.dir.with_extension("log")).expect("the launcher's log");
    let work = log
        .lines()
        .find_map(|line| line.split("real-clusters: work in ").nth(1))
        .expect("the launcher names its work folder")
        .trim()
        .to_string();
    assert!(
        !leftovers(pid, &work).is_empty(),
        "while it runs the nodes' processes and mounts are seen"
    );
    let status = launcher.terminate();
    assert!(status.success(), "the launcher stops cleanly: {status}");
    let left = leftovers(pid, &work);
    assert!(left.is_empty(), "left behind: {left:#?}");
    assert!(!Path::new(&work).exists(), "the work folder is removed");
}

/// The client of the clusterset test: it asks for NAME until it resolves
/// (saying so each time it does not), connects by that name, and reports
/// what its resolver files hold and whether PRIVATE resolves.
const CLIENT: &str = r#"
import os, socket, time
name, private = os.environ["NAME"], os.environ["PRIVATE"]
while True:
    try:
        address = socket.gethostbyname(name)
        break
    except OSError:
        print("unresolved", flush=True)
        time.sleep(0.2)
print("resolved", address, flush=True)
print("got", socket.create_connection((name, 2222)).recv(64).decode(), flush=True)
print("nameserver", [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")], flush=True)
print("hosts name clusterset", "clusterset" in open("/etc/hosts").read(), flush=True)
try:
    socket.gethostbyname(private)
    print("private resolved", flush=True)
except OSError:
    print("private unresolved", flush=True)
"#;

/// Answers one connection with the cluster it runs in and the caller's
/// address.
const SERVER: &str = r#"
import socket
server = socket.socket()
server.bind(("0.0.0.0", 2222))
server.listen()
while True:
    connection, (peer, _) = server.accept()
    print("from", peer, flush=True)
    connection.sendall(b"hello from member-2")
    connection.close()
"#;

/// Connects to ADDRESS:2222 once, within 3 s, and says what came of it.
const PROBE: &str = r#"
import os, socket
try:
    print("got", socket.create_connection((os.environ["ADDRESS"], 2222), timeout=3).recv(64).decode(), flush=True)
except OSError as error:
    print("unreachable:", error, flush=True)
"#;

/// Creates the pod and returns its log once it succeeded.
async fn run_to_end(pods: &Api<Pod>, pod: Pod) -> String {
    let name = pod.metadata.name.clone().expect("a name");
    create_until_phase(pods, pod, "Succeeded").await;
    log_of(pods, &name).await
}

/// Creates the pod and returns it once it reached `phase`.
async fn create_until_phase(pods: &Api<Pod>, pod: Pod, phase: &str) -> Pod {
    let name = pod.metadata.name.clone().expect("a name");
    pods.create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    eventually(
        &format!("{name} to be {phase}"),
        Duration::from_secs(60),
        async || {
            let pod = pods.get(&name).await.ok()?;
            let reached = pod.status.as_ref()?.phase.as_deref() == Some(phase);
            reached.then_some(pod)
        },
    )
    .await
}

fn with_env(mut pod: Pod, env: &[(&str, &str)]) -> Pod {
    let container = &mut pod.spec.as_mut().expect("spec").containers[0];
    container.env = Some(
        env.iter()
            .map(|(name, value)| {
                serde_json::from_value(json!({"name": name, "value": value})).expect("env")
            })
            .collect(),
    );
    pod
}

async fn log_of(pods: &Api<Pod>, name: &str) -> String {
    pods.logs(name, &Default::default())
        .await
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_reaches_a_service_exported_from_another_cluster_by_its_clusterset_name() {
    // The real node alone: it takes every pod, untainted.
    let launcher = Launcher::start(&["--clusters", "3", "--real-nodes", "--nodes", "0"]).await;
    let member_1 = client_from_file(&launcher.kubeconfig("member-1")).await;
    let member_2 = client_from_file(&launcher.kubeconfig("member-2")).await;
    let ns = real::test_namespace(&member_2, "clusterset").await;
    real::apply(
        &member_1,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    let accounts: Api<ServiceAccount> = Api::namespaced(member_1.clone(), &ns);
    eventually(
        "member-1's default ServiceAccount",
        Duration::from_secs(30),
        async || accounts.get_opt("default").await.ok().flatten(),
    )
    .await;
    let on_1: Api<Pod> = Api::namespaced(member_1.clone(), &ns);
    let on_2: Api<Pod> = Api::namespaced(member_2.clone(), &ns);

    // On member-2: a server behind two headless Services, `web` to be
    // exported and `private` never.
    for service in ["web", "private"] {
        real::apply(
            &member_2,
            &json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": service, "namespace": ns},
                "spec": {"clusterIP": "None", "selector": {"app": "server"}, "ports": [{"name": "tf", "port": 2222}]}}),
        )
        .await;
    }
    let server_ip = create_until_phase(&on_2, python_on_real_node("server", SERVER), "Running")
        .await
        .status
        .and_then(|s| s.pod_ip)
        .expect("the server's address");

    // On member-1: a client that asks for the name before it is exported.
    let name = format!("web.{ns}.svc.clusterset.local");
    let private = format!("private.{ns}.svc.clusterset.local");
    on_1.create(
        &PostParams::default(),
        &with_env(
            python_on_real_node("client", CLIENT),
            &[("NAME", &name), ("PRIVATE", &private)],
        ),
    )
    .await
    .expect("the client");
    eventually(
        "the client to find no such name",
        Duration::from_secs(60),
        async || {
            log_of(&on_1, "client")
                .await
                .contains("unresolved")
                .then_some(())
        },
    )
    .await;
    let service_import = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ServiceImport"),
        "serviceimports",
    );
    let imports: Api<DynamicObject> = Api::namespaced_with(member_1.clone(), &ns, &service_import);
    assert!(
        imports.get_opt("web").await.expect("imports").is_none(),
        "no import before the export"
    );
    real::apply(
        &member_2,
        &json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
            "metadata": {"name": "web", "namespace": ns}}),
    )
    .await;
    let done = eventually(
        "the client to finish",
        Duration::from_secs(60),
        async || {
            let pod = on_1.get("client").await.ok()?;
            (pod.status?.phase.as_deref() == Some("Succeeded")).then_some(())?;
            Some(log_of(&on_1, "client").await)
        },
    )
    .await;
    let import = imports.get("web").await.expect("the import exists now");
    assert_eq!(import.data["spec"]["type"], "Headless", "{import:?}");
    // The exporting cluster imports its own export too: the name resolves
    // in every cluster of the set.
    let imports_on_2: Api<DynamicObject> =
        Api::namespaced_with(member_2.clone(), &ns, &service_import);
    assert!(
        imports_on_2
            .get_opt("web")
            .await
            .expect("imports")
            .is_some()
    );

    let dns_ip = Api::<Service>::namespaced(member_1.clone(), "kube-system")
        .get("kube-dns")
        .await
        .expect("member-1's DNS Service")
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("a cluster IP");
    assert!(
        done.contains(&format!("resolved {server_ip}\n")),
        "the name is the server's pod: {done}"
    );
    assert!(
        done.contains("got hello from member-2\n"),
        "connected by the name: {done}"
    );
    assert!(
        done.contains(&format!("nameserver ['{dns_ip}']\n")),
        "the pod asks its cluster's DNS Service ({dns_ip}): {done}"
    );
    assert!(
        done.contains("hosts name clusterset False\n"),
        "no clusterset name in /etc/hosts: {done}"
    );
    assert!(
        done.contains("private unresolved\n"),
        "an unexported Service has no clusterset name: {done}"
    );
    let client_ip = on_1
        .get("client")
        .await
        .expect("the client")
        .status
        .and_then(|s| s.pod_ip)
        .expect("the client's address");
    let served = log_of(&on_2, "server").await;
    assert!(
        served.contains(&format!("from {client_ip}\n")),
        "the server sees the client's own pod address: {served}"
    );

    // Partitioned, member-2 is cut off from member-1's pods as well as
    // from its users; healed, it is reached again.
    let probe = |name: &str| {
        with_env(
            python_on_real_node(name, PROBE),
            &[("ADDRESS", server_ip.as_str())],
        )
    };
    set_faults(&member_2, json!({"partitioned": true})).await;
    let cut = run_to_end(&on_1, probe("probe-cut")).await;
    set_faults(&member_2, json!({"partitioned": false})).await;
    assert!(
        cut.contains("unreachable"),
        "partitioned, member-2's pod is out of reach: {cut}"
    );
    let healed = run_to_end(&on_1, probe("probe-healed")).await;
    assert!(
        healed.contains("got hello from member-2"),
        "healed, it is reached again: {healed}"
    );

    // Withdrawn, the export takes its import and copies with it.
    Api::<DynamicObject>::namespaced_with(
        member_2.clone(),
        &ns,
        &tfjob_federator::builders::service_export_resource(),
    )
    .delete("web", &Default::default())
    .await
    .expect("the export is deleted");
    eventually("the import to go", Duration::from_secs(30), async || {
        imports.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
}
