//! The one harness of the controller's tests: [`Setup`] starts the clusters
//! (simulated in-process, or the real ones of `hack/real-clusters` that the
//! test binary shares), the controller with its settings, and admin clients;
//! [`Env`] is what runs, and stops it all when dropped (the controller
//! first, so that it does not log the clusters vanishing).
//!
//! On the real ground a test has the clusters to itself while it runs (a
//! controller acts on every namespace, and capacity is per cluster), cleaned
//! of what earlier tests left; the controller runs under the identity
//! `deploy/controller.yaml` ships, the members are registered with that of
//! `deploy/member-rbac.yaml`.
//!
//! A test reads and writes jobs as the crate's type ([`Typed`], the
//! operator suites, `common/operator.rs`) or as JSON ([`Json`], the
//! federation suites, `common/federation.rs`, which depend on the API, not
//! on the crate's Rust types).

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use kube::Client;
use kube::api::Api;
use kube_sim::{self as sim, NodeShape, RunningCluster, SimOptions};
use serde_json::{Value, json};
use tfjob_federator::api::MemberCluster;

use super::observe;
use super::process::Process;
use super::real::{self, Ground, client_from_file};
use super::sim_kube::set_faults;
use super::wait::eventually;

/// How long starting steps (a controller, members becoming Ready) may take
/// on a busy 2-core machine.
pub const STARTUP: Duration = Duration::from_secs(60);
/// Where the leader Lease is, as deployed.
pub const LEASE_NAMESPACE: &str = "tfjob-federator";

/// Jobs as `TensorFlowTrainingJob`.
pub struct Typed;
/// Jobs as JSON (`DynamicObject`, `serde_json::Value`).
pub struct Json;

/// What a test needs started: see the module's comment.
pub struct Setup<View = Typed> {
    ground: Ground,
    members: Vec<String>,
    node_count: Option<usize>,
    max_pods: Option<u32>,
    settings: String,
    leader_identity: Option<String>,
    own_namespace: Option<String>,
    partition_home: bool,
    identity: Option<PathBuf>,
    install_crds: bool,
    log_filter: String,
    view: PhantomData<View>,
}

impl Setup<Typed> {
    /// Home alone, its default nodes, the controller with default settings
    /// and no leader election; the test works in namespace `default`.
    pub fn on(ground: Ground) -> Setup<Typed> {
        Setup {
            ground,
            members: Vec::new(),
            node_count: None,
            max_pods: None,
            settings: String::new(),
            leader_identity: None,
            own_namespace: None,
            partition_home: false,
            identity: None,
            install_crds: true,
            log_filter: "info".to_string(),
            view: PhantomData,
        }
    }
}

impl<View> Setup<View> {
    /// Member clusters registered on home (on the real ground: `member-1`
    /// and `member-2`, the shape of `real::three_clusters`).
    pub fn members(mut self, names: &[&str]) -> Self {
        self.members = names.iter().map(|n| n.to_string()).collect();
        self
    }

    /// Nodes per cluster (4 unless set; on the real ground what the shared
    /// clusters have: 4 for home alone, 1 with members).
    pub fn nodes(mut self, count: usize) -> Self {
        self.node_count = Some(count);
        self
    }

    /// Pods per simulated node (the simulator's alone).
    pub fn max_pods(mut self, max_pods: u32) -> Self {
        self.max_pods = Some(max_pods);
        self
    }

    /// The controller's settings (YAML, `--config`).
    pub fn settings(mut self, yaml: &str) -> Self {
        self.settings = yaml.to_string();
        self
    }

    /// Leader election on, as deployed, with this replica's identity.
    pub fn leader_elect(mut self, identity: &str) -> Self {
        self.leader_identity = Some(identity.to_string());
        self
    }

    /// The controller's `RUST_LOG` (`info` unless set).
    pub fn log_filter(mut self, filter: &str) -> Self {
        self.log_filter = filter.to_string();
        self
    }

    /// The test works in a fresh namespace named after `test`.
    pub fn own_namespace(mut self, test: &str) -> Self {
        self.own_namespace = Some(test.to_string());
        self
    }

    /// Home partitioned before the controller starts (its informers cannot
    /// sync); the members are then not awaited.
    pub fn partition_home(mut self) -> Self {
        self.partition_home = true;
        self
    }

    /// On the real ground, the controller runs with this kubeconfig instead
    /// of the identity `deploy/controller.yaml` ships (the Helm chart's, in
    /// `tests/deploy.rs`).
    pub fn identity(mut self, kubeconfig: PathBuf) -> Self {
        self.identity = Some(kubeconfig);
        self
    }

    /// The CRDs on home stay as the test installed them (a Helm chart's,
    /// maybe an earlier one's) instead of this build's.
    pub fn crds_as_installed(mut self) -> Self {
        self.install_crds = false;
        self
    }

    /// Jobs read and written as JSON.
    pub fn json_jobs(self) -> Setup<Json> {
        Setup {
            ground: self.ground,
            members: self.members,
            node_count: self.node_count,
            max_pods: self.max_pods,
            settings: self.settings,
            leader_identity: self.leader_identity,
            own_namespace: self.own_namespace,
            partition_home: self.partition_home,
            identity: self.identity,
            install_crds: self.install_crds,
            log_filter: self.log_filter,
            view: PhantomData,
        }
    }

    /// Starts the clusters and the controller; returns once the controller
    /// serves its metrics and (unless home is partitioned) every member is
    /// Ready.
    pub async fn start(self) -> Env<View> {
        let dir = std::env::temp_dir().join(format!("tfjob-test-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("create the test's dir");
        let names: Vec<String> = std::iter::once("home".to_string())
            .chain(self.members.iter().cloned())
            .collect();
        assert!(
            self.ground == Ground::Real || self.identity.is_none(),
            "an identity of its own is the real ground's alone"
        );
        let (clusters, kubeconfigs, controller_kubeconfig) = match self.ground {
            Ground::Sim => self.start_simulated(&dir, &names).await,
            Ground::Real => self.take_real(&names).await,
        };
        let mut clients = BTreeMap::new();
        for (name, kubeconfig) in &kubeconfigs {
            clients.insert(name.clone(), client_from_file(kubeconfig).await);
        }
        let home = clients["home"].clone();
        if self.install_crds {
            real::install_crds(&home).await;
        }
        let namespace = match &self.own_namespace {
            Some(test) => real::test_namespace(&home, test).await,
            None => "default".to_string(),
        };
        if self.partition_home {
            set_faults(&home, json!({"partitioned": true})).await;
        }
        std::fs::write(dir.join("controller.yaml"), &self.settings)
            .expect("write the controller's settings");
        let mut env = Env {
            ground: self.ground,
            client: home,
            clients,
            namespace,
            dir,
            controller_kubeconfig,
            kubeconfigs,
            leader_identity: self.leader_identity,
            log_filter: self.log_filter,
            controller: None,
            _clusters: clusters,
            view: PhantomData,
        };
        env.start_controller().await;
        if !self.partition_home {
            let members = env.members();
            for name in &self.members {
                wait_ready(&members, name, "True").await;
            }
        }
        env
    }

    /// Simulated clusters in-process, the members registered as `join`
    /// registers them.
    async fn start_simulated(
        &self,
        dir: &Path,
        names: &[String],
    ) -> (Clusters, BTreeMap<String, PathBuf>, PathBuf) {
        let mut nodes = NodeShape::default();
        nodes.count = self.node_count.unwrap_or(nodes.count);
        nodes.max_pods = self.max_pods.unwrap_or(nodes.max_pods);
        let options = SimOptions {
            nodes,
            ..SimOptions::default()
        };
        let mut handles = Vec::new();
        for name in names {
            handles.push(
                sim::start_cluster(name, &options)
                    .await
                    .unwrap_or_else(|e| panic!("start simulated cluster {name}: {e}")),
            );
        }
        if let Some((home, members)) = handles.split_first()
            && !members.is_empty()
        {
            let members: Vec<(String, String)> = members
                .iter()
                .map(|m| (m.name.clone(), m.kubeconfig()))
                .collect();
            tfjob_federator::join::register_members(&home.kubeconfig(), &members)
                .await
                .expect("register the members");
        }
        let paths = sim::write_kubeconfigs(dir, &handles).expect("write the kubeconfigs");
        let kubeconfigs: BTreeMap<String, PathBuf> = names.iter().cloned().zip(paths).collect();
        let controller = kubeconfigs["home"].clone();
        (Clusters::Simulated(handles), kubeconfigs, controller)
    }

    /// The shared real clusters, this test's until it ends, cleaned of what
    /// earlier tests left.
    async fn take_real(&self, names: &[String]) -> (Clusters, BTreeMap<String, PathBuf>, PathBuf) {
        assert!(
            self.max_pods.is_none(),
            "the pods per node of real nodes are fixed"
        );
        let whole_ground = real::real_nodes_turn().await;
        let (clusters, node_count) = if self.members.is_empty() {
            let count = if real::on_real_nodes() {
                1
            } else {
                NodeShape::default().count
            };
            (real::one_cluster().await, count)
        } else {
            assert_eq!(
                self.members,
                ["member-1", "member-2"],
                "the shared real clusters' members"
            );
            (real::three_clusters().await, 1)
        };
        assert_eq!(
            self.node_count.unwrap_or(node_count),
            node_count,
            "the shared real clusters' nodes"
        );
        let turn = clusters.exclusive().await;
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        real::clean_slate(clusters, &names).await;
        if !self.members.is_empty() {
            real::ensure_registered(clusters).await;
        }
        let kubeconfigs = names
            .iter()
            .map(|name| (name.to_string(), clusters.kubeconfig(name)))
            .collect();
        let controller_kubeconfig = match &self.identity {
            Some(kubeconfig) => kubeconfig.clone(),
            None => clusters.controller_kubeconfig().await,
        };
        (
            Clusters::Real {
                _turn: turn,
                _whole_ground: whole_ground,
            },
            kubeconfigs,
            controller_kubeconfig,
        )
    }
}

/// What keeps the clusters running, or this test's, while it runs.
enum Clusters {
    Simulated(Vec<RunningCluster>),
    Real {
        _turn: tokio::sync::MutexGuard<'static, ()>,
        _whole_ground: Option<tokio::sync::MutexGuard<'static, ()>>,
    },
}

/// The running clusters and controller of a test (see the module's comment).
pub struct Env<View = Typed> {
    pub ground: Ground,
    /// An admin client of home.
    pub client: Client,
    /// An admin client of every cluster, by name.
    pub clients: BTreeMap<String, Client>,
    /// Where the test works.
    pub namespace: String,
    /// The test's own: the controller's settings (`controller.yaml`) and
    /// log (`controller.log`, appended to by every start), and any file a
    /// test writes.
    pub dir: PathBuf,
    /// What the controller runs with.
    pub controller_kubeconfig: PathBuf,
    /// The admin kubeconfig of every cluster, by name.
    kubeconfigs: BTreeMap<String, PathBuf>,
    leader_identity: Option<String>,
    log_filter: String,
    controller: Option<Controller>,
    _clusters: Clusters,
    view: PhantomData<View>,
}

/// One `tfjob-federator run` and where it serves `/metrics`, `/healthz`
/// and `/readyz`.
pub struct Controller {
    process: Process,
    pub metrics: SocketAddr,
}

impl Controller {
    /// SIGKILL: no chance to clean up.
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Panics, with its log, when it has exited.
    pub fn check_alive(&mut self) {
        self.process.check_alive();
    }

    /// Whether it has exited by itself.
    pub fn exited(&mut self) -> bool {
        self.process.exited().is_some()
    }
}

impl<View> Env<View> {
    /// The admin kubeconfig of `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> PathBuf {
        self.kubeconfigs[cluster].clone()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("controller.log")
    }

    /// Everything the controller logged (JSON lines), over every start.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The controller's log lines at WARN or ERROR, and any line that is
    /// not JSON.
    pub fn controller_problems(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter(|line| {
                serde_json::from_str::<Value>(line)
                    .ok()
                    .is_none_or(|v| matches!(v["level"].as_str(), Some("WARN" | "ERROR")))
            })
            .map(str::to_string)
            .collect()
    }

    /// Starts the controller (logging to `controller.log`); returns once it
    /// serves its metrics.
    pub async fn start_controller(&mut self) {
        assert!(self.controller.is_none(), "the controller already runs");
        let identity = self.leader_identity.clone();
        let controller = self
            .start_run("the controller", &self.log_path(), identity.as_deref())
            .await;
        self.controller = Some(controller);
    }

    /// Kills the controller (SIGKILL: no chance to clean up).
    pub fn kill_controller(&mut self) {
        let mut controller = self.controller.take().expect("the controller runs");
        controller.kill();
    }

    /// Kills the controller, if it runs, and starts it again.
    pub async fn restart_controller(&mut self) {
        if let Some(mut controller) = self.controller.take() {
            controller.kill();
        }
        self.start_controller().await;
    }

    /// Stops the controller with SIGTERM; its exit status.
    pub fn terminate_controller(&mut self) -> ExitStatus {
        self.controller
            .as_mut()
            .expect("the controller runs")
            .process
            .terminate()
    }

    /// Whether the controller has exited by itself (e.g. on losing its
    /// leader Lease, as it does so that only the new leader acts).
    pub fn controller_exited(&mut self) -> bool {
        self.controller.as_mut().is_some_and(Controller::exited)
    }

    /// Panics (with its log) if the controller has exited.
    pub fn check_controller_alive(&mut self) {
        self.controller
            .as_mut()
            .expect("the controller runs")
            .check_alive();
    }

    /// Another replica of the controller, with the same settings, leader
    /// election on with `identity`, logging to `<identity>.log`; returns
    /// once it serves its metrics.
    pub async fn start_replica(&self, identity: &str) -> Controller {
        let log = self.dir.join(format!("{identity}.log"));
        self.start_run(
            &format!("controller replica {identity}"),
            &log,
            Some(identity),
        )
        .await
    }

    async fn start_run(&self, what: &str, log: &Path, identity: Option<&str>) -> Controller {
        // The log is appended to (by every start and replica): what this
        // start logs comes after.
        let earlier = std::fs::metadata(log).map_or(0, |m| m.len() as usize);
        let mut command = Command::new(env!("CARGO_BIN_EXE_tfjob-federator"));
        command
            .args(["--log-format", "json", "run", "--kubeconfig"])
            .arg(&self.controller_kubeconfig)
            .arg("--config")
            .arg(self.dir.join("controller.yaml"))
            // Tests run side by side: each controller serves on a port of its own.
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("RUST_LOG", &self.log_filter);
        if let Some(identity) = identity {
            command.args([
                "--leader-elect",
                "--leader-elect-namespace",
                LEASE_NAMESPACE,
                "--leader-elect-identity",
                identity,
            ]);
        }
        let mut process = Process::spawn(what, &mut command, log);
        let metrics = eventually(&format!("{what} to serve metrics"), STARTUP, async || {
            process.check_alive();
            let text = std::fs::read_to_string(log).unwrap_or_default();
            logged_metrics_addr(text.get(earlier..).unwrap_or_default())
        })
        .await;
        Controller { process, metrics }
    }

    /// Where the controller serves `/metrics`, `/healthz` and `/readyz`.
    pub fn metrics(&self) -> SocketAddr {
        self.controller
            .as_ref()
            .expect("the controller runs")
            .metrics
    }

    /// `GET path` on the controller's metrics server.
    pub async fn get(&self, path: &str) -> (u16, String) {
        observe::get(self.metrics(), path).await
    }

    /// The current `/metrics` text; fails unless it answers 200.
    pub async fn scrape(&self) -> String {
        observe::scrape(self.metrics()).await
    }

    pub fn members(&self) -> Api<MemberCluster> {
        Api::all(self.client.clone())
    }
}

impl<View> Drop for Env<View> {
    fn drop(&mut self) {
        self.controller = None;
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(60)..];
            eprintln!(
                "--- controller log ({}), last {} lines ---\n{}",
                self.log_path().display(),
                tail.len(),
                tail.join("\n")
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The `addr` the controller logged when it began serving metrics.
fn logged_metrics_addr(log: &str) -> Option<SocketAddr> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find_map(|v| {
            let fields = v.get("fields")?;
            fields
                .get("message")?
                .as_str()?
                .contains("serving metrics")
                .then(|| fields.get("addr")?.as_str()?.parse().ok())?
        })
}

/// The status of member `name`'s Ready condition, if it has one, and the
/// member.
pub async fn ready_of(members: &Api<MemberCluster>, name: &str) -> Option<(String, MemberCluster)> {
    let member = members.get(name).await.ok()?;
    let status = member.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .find(|c| c.condition_type == "Ready")?
        .status
        .clone();
    Some((ready, member))
}

/// Waits until member `name`'s Ready condition has `status`.
pub async fn wait_ready(members: &Api<MemberCluster>, name: &str, status: &str) {
    eventually(
        &format!("{name} Ready={status}"),
        Duration::from_secs(20),
        async || {
            let (ready, _) = ready_of(members, name).await?;
            (ready == status).then_some(())
        },
    )
    .await;
}
