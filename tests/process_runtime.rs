//! The real ground's process runtime (`hack/kube/realclusters/process.go`):
//! pods annotated `sim.federation.tfjob.io/runtime: process` run as host
//! processes, each in a network namespace of its own on the launcher's
//! bridge, names from a hosts file. Two clusters of a launcher of this
//! test's own (no controller: the pods, Services and ServiceExports are
//! written here), and system Python for the programs. It shows: exit codes
//! reach the container status, deletion gives 143 (137 for a process that
//! ignores SIGTERM), two pods listen on the same port, a `clusterset.local`
//! name resolves only for an exported Service and `<svc>.<ns>.svc` only in
//! its own cluster, env (fieldRefs, `$(VAR)`) and workingDir, `kubectl logs`,
//! and that no process, namespace or hosts file outlives the launcher.

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::real::{self, Launcher, client_from_file};
use common::wait::eventually;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::Client;
use kube::api::{Api, DynamicObject, LogParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

const PROCESS: &str = "sim.federation.tfjob.io/runtime";

/// A process pod running `python3 -c PROGRAM`, labelled `app: APP`.
fn python_pod(name: &str, app: &str, program: &str, marker: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": app}, "annotations": {PROCESS: "process"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 2,
            "containers": [{
                "name": "main", "image": "python:3.11",
                "command": ["python3", "-u", "-c"], "args": [program],
                "env": [
                    {"name": "MARKER", "value": marker},
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "GREETING", "value": "$(APP) in $(POD_NAMESPACE)"},
                ],
            }],
        },
    }))
    .expect("a pod")
}

/// Answers every connection on port 2222 with its GREETING.
const SERVER: &str = r#"
import os, socket
s = socket.socket(socket.AF_INET6)
s.bind(("::", 2222))
s.listen()
print("listening on [::]:2222 as", os.environ["POD_NAME"], flush=True)
while True:
    c, _ = s.accept()
    c.sendall(os.environ["GREETING"].encode())
    c.close()
"#;

/// Tries each name of NAMES (env, JSON) for 40 s until what is expected of
/// it holds: a greeting or "unresolved"; prints the outcome as JSON.
const CLIENT: &str = r#"
import json, os, socket, time
names = json.loads(os.environ["NAMES"])
outcome = {}
deadline = time.time() + 40
for name, expected in names.items():
    while True:
        try:
            with socket.create_connection((name, 2222), timeout=2) as c:
                got = c.recv(100).decode()
        except socket.gaierror:
            got = "unresolved"
        except OSError as e:
            got = "error: %s" % e
        if got == expected or time.time() > deadline:
            break
        time.sleep(0.2)
    outcome[name] = got
print("cwd", os.getcwd())
print(json.dumps(outcome, sort_keys=True), flush=True)
"#;

fn headless(name: &str, app: &str) -> Service {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name},
        "spec": {"clusterIP": "None", "selector": {"app": app},
            "ports": [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}]},
    }))
    .expect("a service")
}

async fn namespace_on(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).expect("a namespace"),
        )
        .await
        .expect("namespace created");
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), name);
    eventually(
        "the default ServiceAccount",
        Duration::from_secs(30),
        async || accounts.get_opt("default").await.ok().flatten(),
    )
    .await;
}

async fn wait_pod(pods: &Api<Pod>, name: &str, what: &str, test: impl Fn(&Value) -> bool) -> Value {
    eventually(
        &format!("pod {name}: {what}"),
        Duration::from_secs(60),
        async || {
            let pod = serde_json::to_value(pods.get(name).await.map_err(|e| e.to_string())?)
                .expect("JSON");
            if test(&pod) {
                Ok(pod)
            } else {
                Err(pod["status"].to_string())
            }
        },
    )
    .await
}

fn terminated_code(pod: &Value) -> Option<i64> {
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"].as_i64()
}

/// Deletes pod `name` and returns the exit code its deletion recorded (the
/// status written between the delete and the pod's removal).
async fn delete_and_watch(pods: &Api<Pod>, name: &str) -> i64 {
    let version = pods
        .get(name)
        .await
        .expect("the pod")
        .metadata
        .resource_version
        .expect("a version");
    let params = WatchParams::default().fields(&format!("metadata.name={name}"));
    let mut events = pods.watch(&params, &version).await.expect("watch").boxed();
    pods.delete(name, &Default::default())
        .await
        .expect("delete");
    let code = tokio::time::timeout(Duration::from_secs(30), async {
        let mut code = None;
        while let Some(event) = events.try_next().await.expect("watch event") {
            let deleted = matches!(event, WatchEvent::Deleted(_));
            match event {
                WatchEvent::Modified(pod) | WatchEvent::Deleted(pod) => {
                    if let Some(c) = terminated_code(&serde_json::to_value(&pod).expect("JSON")) {
                        code = Some(c);
                    }
                    if deleted {
                        break;
                    }
                }
                _ => {}
            }
        }
        code
    })
    .await
    .expect("the pod is removed within 30 s of its deletion");
    code.unwrap_or_else(|| panic!("pod {name}: no exit code recorded before its removal"))
}

/// The processes whose environment holds MARKER=marker.
fn processes_marked(marker: &str) -> Vec<u32> {
    let needle = format!("MARKER={marker}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        if environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            found.push(pid);
        }
    }
    found
}

fn namespaces_of(launcher: u32) -> Vec<String> {
    let output = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip runs");
    let prefix = format!("rc{launcher}-");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_run_in_pod_networks_with_cluster_and_clusterset_names() {
    let mut launcher = Launcher::start(&[
        "--clusters",
        "2",
        "--nodes",
        "1",
        "--process-env",
        &format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
    ])
    .await;
    let pid = launcher.pid();
    let home = client_from_file(&launcher.kubeconfig("home")).await;
    let member = client_from_file(&launcher.kubeconfig("member-1")).await;
    let ns = real::unique_name("process-runtime");
    namespace_on(&home, &ns).await;
    namespace_on(&member, &ns).await;
    let marker = ns.clone();
    let on_member: Api<Pod> = Api::namespaced(member.clone(), &ns);
    let on_home: Api<Pod> = Api::namespaced(home.clone(), &ns);
    let services: Api<Service> = Api::namespaced(member.clone(), &ns);

    // Two servers on member-1, both on port 2222, each behind a Service;
    // only one Service exported.
    for (name, app) in [("exported", "a"), ("private", "b")] {
        services
            .create(&PostParams::default(), &headless(name, app))
            .await
            .expect("service");
        on_member
            .create(
                &PostParams::default(),
                &python_pod(&format!("server-{app}"), app, SERVER, &marker),
            )
            .await
            .expect("server pod");
    }
    let exports: Api<DynamicObject> = Api::namespaced_with(
        member.clone(),
        &ns,
        &tfjob_federator::builders::service_export_resource(),
    );
    let export: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceExport",
        "metadata": {"name": "exported"},
    }))
    .expect("an export");
    let mut addresses = BTreeMap::new();
    for app in ["a", "b"] {
        let pod = wait_pod(
            &on_member,
            &format!("server-{app}"),
            "Running and Ready with an address",
            |p| {
                p["status"]["phase"] == "Running"
                    && p["status"]["podIP"]
                        .as_str()
                        .is_some_and(|ip| ip.starts_with("10.245."))
            },
        )
        .await;
        addresses.insert(
            app,
            pod["status"]["podIP"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert_ne!(
        addresses["a"], addresses["b"],
        "each pod an address of its own"
    );

    // From home: the exported name across clusters, not the private one,
    // and no `.svc` name of the other cluster.
    let svc = |name: &str, suffix: &str| format!("{name}.{ns}.{suffix}");
    let from_home = json!({
        svc("exported", "svc.clusterset.local"): format!("a in {ns}"),
        svc("private", "svc.clusterset.local"): "unresolved",
        svc("exported", "svc"): "unresolved",
    });
    // From member-1: its own cluster's names for both, on the same port.
    let from_member = json!({
        svc("exported", "svc"): format!("a in {ns}"),
        svc("private", "svc"): format!("b in {ns}"),
        svc("private", "svc.cluster.local"): format!("b in {ns}"),
        svc("exported", "svc.clusterset.local"): format!("a in {ns}"),
    });
    // The client on home starts before the Service is exported: its hosts
    // file is rewritten in place once the export exists, and it resolves
    // the name then.
    for (pods, names) in [(&on_home, &from_home), (&on_member, &from_member)] {
        let mut client = python_pod("client", "client", CLIENT, &marker);
        let container = &mut client.spec.as_mut().expect("spec").containers[0];
        container.env.as_mut().expect("env").push(
            serde_json::from_value(json!({"name": "NAMES", "value": names.to_string()}))
                .expect("env"),
        );
        container.working_dir = Some(format!("/tmp/{ns}-workdir"));
        pods.create(&PostParams::default(), &client)
            .await
            .expect("client pod");
        if exports
            .get_opt("exported")
            .await
            .expect("exports")
            .is_none()
        {
            wait_pod(pods, "client", "Running", |p| {
                p["status"]["phase"] == "Running"
            })
            .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
            exports
                .create(&PostParams::default(), &export)
                .await
                .expect("the ServiceExport CRD is installed by the launcher");
        }
        let done = wait_pod(pods, "client", "Succeeded", |p| {
            p["status"]["phase"] == "Succeeded"
        })
        .await;
        assert_eq!(terminated_code(&done), Some(0));
        let log = pods
            .logs("client", &LogParams::default())
            .await
            .expect("kubectl logs' API");
        let last = log.lines().last().unwrap_or_default();
        let outcome: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {log}"));
        assert_eq!(
            &outcome, names,
            "what the client resolved and reached: {log}"
        );
        assert!(
            log.contains(&format!("cwd /tmp/{ns}-workdir")),
            "workingDir: {log}"
        );
        let tail = pods
            .logs(
                "client",
                &LogParams {
                    tail_lines: Some(1),
                    ..Default::default()
                },
            )
            .await
            .expect("logs --tail 1");
        assert_eq!(tail.trim_end(), last);
    }
    let _ = std::fs::remove_dir_all(format!("/tmp/{ns}-workdir"));

    // An exit code reaches the container status.
    let failing = python_pod(
        "exits-7",
        "x",
        "import sys; print('bye'); sys.exit(7)",
        &marker,
    );
    on_home
        .create(&PostParams::default(), &failing)
        .await
        .expect("pod");
    let failed = wait_pod(&on_home, "exits-7", "Failed", |p| {
        p["status"]["phase"] == "Failed"
    })
    .await;
    assert_eq!(terminated_code(&failed), Some(7), "{failed}");
    assert_eq!(
        on_home
            .logs("exits-7", &LogParams::default())
            .await
            .expect("logs"),
        "bye\n"
    );
    // The same name again (as the controller re-creates a replica's pod):
    // its log is followed to its end, the first attempt's is --previous.
    on_home
        .delete("exits-7", &Default::default())
        .await
        .expect("delete");
    eventually("exits-7 gone", Duration::from_secs(30), async || {
        on_home
            .get_opt("exits-7")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let again = python_pod(
        "exits-7",
        "x",
        "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(1)",
        &marker,
    );
    on_home
        .create(&PostParams::default(), &again)
        .await
        .expect("pod");
    wait_pod(&on_home, "exits-7", "Running", |p| {
        p["status"]["phase"] != "Pending"
    })
    .await;
    let follow = LogParams {
        follow: true,
        ..Default::default()
    };
    let stream = on_home
        .log_stream("exits-7", &follow)
        .await
        .expect("logs -f");
    let mut followed = String::new();
    let mut lines = futures::AsyncBufReadExt::lines(stream);
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.try_next().await.expect("a line") {
            followed.push_str(&line);
            followed.push('\n');
        }
    })
    .await
    .expect("logs -f ends when the process does");
    assert_eq!(followed, "line 0\nline 1\nline 2\n");
    let previous = LogParams {
        previous: true,
        ..Default::default()
    };
    assert_eq!(
        on_home
            .logs("exits-7", &previous)
            .await
            .expect("logs --previous"),
        "bye\n"
    );

    // Deletion: SIGTERM gives 143; a process that ignores it is killed
    // after the grace period: 137.
    assert_eq!(delete_and_watch(&on_member, "server-b").await, 143);
    let stubborn = python_pod(
        "stubborn",
        "x",
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring SIGTERM', flush=True)\nwhile True: time.sleep(1)",
        &marker,
    );
    on_home
        .create(&PostParams::default(), &stubborn)
        .await
        .expect("pod");
    wait_pod(&on_home, "stubborn", "Running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    eventually(
        "stubborn ignores SIGTERM",
        Duration::from_secs(20),
        async || {
            let log = on_home.logs("stubborn", &LogParams::default()).await.ok()?;
            log.contains("ignoring").then_some(())
        },
    )
    .await;
    assert_eq!(delete_and_watch(&on_home, "stubborn").await, 137);

    // A pod removed at once (grace period 0) takes its process along.
    let forced_marker = format!("{marker}-forced");
    on_home
        .create(
            &PostParams::default(),
            &python_pod(
                "forced",
                "x",
                "import time; time.sleep(3600)",
                &forced_marker,
            ),
        )
        .await
        .expect("pod");
    wait_pod(&on_home, "forced", "Running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    assert!(
        !processes_marked(&forced_marker).is_empty(),
        "forced's process runs"
    );
    on_home
        .delete(
            "forced",
            &kube::api::DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .expect("delete --grace-period=0");
    eventually(
        "forced's process gone with its pod",
        Duration::from_secs(20),
        async || processes_marked(&forced_marker).is_empty().then_some(()),
    )
    .await;

    // A long-running process left; the launcher's end takes it, the
    // namespaces and the hosts files along.
    on_home
        .create(
            &PostParams::default(),
            &python_pod("sleeper", "x", "import time; time.sleep(3600)", &marker),
        )
        .await
        .expect("pod");
    wait_pod(&on_home, "sleeper", "Running", |p| {
        p["status"]["phase"] == "Running"
    })
    .await;
    let running = processes_marked(&marker);
    assert!(running.len() >= 2, "server-a and sleeper run: {running:?}");
    assert!(
        namespaces_of(pid).len() >= 3,
        "a hub and a namespace per running pod: {:?}",
        namespaces_of(pid)
    );
    let status = launcher.terminate();
    assert!(status.success(), "a clean stop: {status}");
    let left = processes_marked(&marker);
    assert!(left.is_empty(), "processes outlived the launcher: {left:?}");
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "network namespaces left"
    );
    let files: Vec<String> = std::fs::read_dir("/etc/netns")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("rc{pid}-")))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(files, Vec::<String>::new(), "/etc/netns files left");
    assert!(!Path::new(&format!("/run/netns/rc{pid}-hub")).exists());
}
