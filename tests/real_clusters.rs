//! `hack/real-clusters` keeps `sim`'s contract: three clusters with
//! `--register` are ready within a minute, kubectl sees the kwok nodes with
//! their GPUs and home sees its members, every component reports the
//! pinned Kubernetes release, and SIGTERM leaves no process behind.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // pid (comm) state ppid …: comm may hold spaces, so read after ')'.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            children.push(child);
        }
    }
    children
}

fn kubectl_json(kubeconfig: &Path, args: &[&str]) -> Value {
    let output = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .args(["-o", "json"])
        .output()
        .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("kubectl prints JSON")
}

/// The release hack/kube pins (`k8s.io/kubernetes vX.Y.Z` in its go.mod).
fn pinned_release() -> String {
    let go_mod =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/kube/go.mod"))
            .expect("hack/kube/go.mod");
    go_mod
        .lines()
        .find_map(|l| l.trim().strip_prefix("k8s.io/kubernetes v"))
        .map(|v| format!("v{}", v.trim()))
        .expect("hack/kube pins k8s.io/kubernetes")
}

#[test]
fn three_registered_clusters_start_within_a_minute_and_stop_without_a_trace() {
    let dir = std::env::temp_dir().join(format!("real-clusters-contract-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Built before the clock starts: the minute is for starting, not building.
    let build = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/build-kube"))
        .status()
        .expect("hack/build-kube runs (needs Go 1.26)");
    assert!(build.success(), "hack/build-kube failed");
    let started = Instant::now();
    let mut launcher =
        Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("hack/real-clusters"))
            .args([
                "--clusters",
                "3",
                "--register",
                "--gpus-per-node",
                "8",
                "--kubeconfig-dir",
            ])
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("hack/real-clusters starts");
    while !dir.join("ready").exists() {
        assert!(
            launcher.try_wait().expect("launcher status").is_none(),
            "hack/real-clusters exited early; logs in {}",
            dir.join("logs").display()
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not ready within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("three clusters ready in {:.1?}", started.elapsed());

    let ready = std::fs::read_to_string(dir.join("ready")).expect("ready");
    let names: Vec<&str> = ready
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["home", "member-1", "member-2"], "{ready}");
    let release = pinned_release();
    for component in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let output = Command::new(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/kube/bin")
                .join(component),
        )
        .arg("--version")
        .output()
        .expect("the component runs");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("Kubernetes {release}"),
            "{component} --version"
        );
    }
    for name in &names {
        let version = kubectl_json(&dir.join(format!("{name}.kubeconfig")), &["version"]);
        assert_eq!(
            version["serverVersion"]["gitVersion"], release,
            "{name}'s /version through kubectl version: {version}"
        );
        let nodes = kubectl_json(&dir.join(format!("{name}.kubeconfig")), &["get", "nodes"]);
        let items = nodes["items"].as_array().expect("nodes");
        assert_eq!(items.len(), 4, "{name}: 4 nodes by default");
        for node in items {
            let node_name = node["metadata"]["name"].as_str().unwrap_or_default();
            assert!(
                node_name.starts_with(&format!("{name}-node-")),
                "{node_name}"
            );
            assert_eq!(
                node["status"]["capacity"]["nvidia.com/gpu"], "8",
                "{node_name}: the GPUs asked for"
            );
            let ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            assert!(ready, "{node_name} is Ready (kwok)");
        }
    }
    let members = kubectl_json(&dir.join("home.kubeconfig"), &["get", "memberclusters"]);
    let registered: Vec<&str> = members["items"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .collect();
    assert_eq!(registered, ["member-1", "member-2"]);

    let components = children_of(launcher.id());
    assert!(
        components.len() > 3 * 4,
        "etcd, then per cluster an API server, a controller manager, a scheduler and kwok: {components:?}"
    );
    let stopping = Instant::now();
    // SIGTERM, as a user's `kill` or Ctrl-C's neighbour sends it.
    let signalled = Command::new("kill")
        .args(["-TERM", &launcher.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(signalled.success());
    let status = launcher.wait().expect("launcher exits");
    assert!(status.success(), "a clean stop: {status}");
    eprintln!("stopped in {:.1?}", stopping.elapsed());
    let left: Vec<u32> = components
        .into_iter()
        .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
        .collect();
    assert!(left.is_empty(), "processes left behind: {left:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
