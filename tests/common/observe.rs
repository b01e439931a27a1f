//! Helpers for the observability tests: the whole system started as
//! subprocesses in one call ([`start`] for `sim` + `run`, [`start_demo`]
//! for `demo --keep`), a tiny HTTP client for
//! `/metrics`, `/healthz`, `/readyz`, the simulator's `/_sim/` paths and
//! Prometheus's API, a real Prometheus server, `promtool`, and the metric
//! names a PromQL expression reads.
//!
//! Include with `#[path = "common/observe.rs"] mod observe;`.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long startup steps may take on a busy 2-core machine.
pub const STARTUP: Duration = Duration::from_secs(60);

/// A child process, killed (SIGKILL) when dropped.
pub struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Process {
    /// SIGTERM, then waits (at most `STARTUP`) for the exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status()
            .expect("kill runs");
        assert!(sent.success(), "SIGTERM sent");
        let deadline = Instant::now() + STARTUP;
        loop {
            if let Ok(Some(status)) = self.0.try_wait() {
                return status;
            }
            assert!(Instant::now() < deadline, "no exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }

    /// Panics with `what` when the process has exited.
    pub fn check_alive(&mut self, what: &str, log: &Path) {
        if let Ok(Some(status)) = self.0.try_wait() {
            panic!(
                "{what} exited early ({status}); its log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }
}

/// How to start the system.
#[derive(Debug, Clone)]
pub struct Start {
    /// Simulated clusters: `home`, `member-1`, … (all but home registered).
    pub clusters: usize,
    /// Partition home before the controller starts (its informers cannot sync).
    pub partition_home: bool,
    /// More arguments for `run`.
    pub run_args: Vec<String>,
}

impl Default for Start {
    fn default() -> Self {
        Start {
            clusters: 3,
            partition_home: false,
            run_args: Vec::new(),
        }
    }
}

/// The running system: simulated clusters and the controller, with a
/// private temp dir (kubeconfigs, logs). Dropping it kills the controller,
/// then the clusters.
pub struct System {
    controller: Process,
    /// The `sim` process (None when the demo runs the clusters in-process,
    /// or on clusters that another owner runs).
    sim: Option<Process>,
    pub dir: PathBuf,
    /// Where the clusters' admin kubeconfigs are (the controller's own is
    /// `dir/home.kubeconfig`).
    kubeconfigs: PathBuf,
    /// What keeps shared clusters this system's while it runs.
    _turn: Option<Box<dyn std::any::Any + Send>>,
    /// Where the controller serves /metrics, /healthz and /readyz.
    pub metrics: SocketAddr,
    /// Cluster name → `host:port` of its API server.
    pub clusters: BTreeMap<String, String>,
}

/// Starts `sim --clusters N --register` and `run` against its home cluster,
/// and returns once the controller serves its metrics.
pub async fn start(options: Start) -> System {
    let dir = std::env::temp_dir().join(format!("tfjob-observe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let sim_log = std::fs::File::create(dir.join("sim.log")).expect("sim log");
    let mut sim = Process(
        Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
            .args(["sim", "--register", "--clusters"])
            .arg(options.clusters.to_string())
            .arg("--kubeconfig-dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(sim_log)
            .spawn()
            .expect("tfjob-federator sim starts"),
    );
    let deadline = Instant::now() + STARTUP;
    let ready = loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("ready"))
            && !text.is_empty()
        {
            break text;
        }
        sim.check_alive("sim", &dir.join("sim.log"));
        assert!(Instant::now() < deadline, "sim wrote no ready file");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let clusters: BTreeMap<String, String> = ready
        .lines()
        .filter_map(|line| {
            let (name, url) = line.split_once(char::is_whitespace)?;
            Some((
                name.to_string(),
                url.trim().trim_start_matches("http://").to_string(),
            ))
        })
        .collect();
    if options.partition_home {
        set_partitioned(&clusters["home"], true).await;
    }
    let (controller, metrics) = start_run(&dir, "controller.log", &options.run_args).await;
    System {
        controller,
        sim: Some(sim),
        kubeconfigs: dir.clone(),
        dir,
        metrics,
        clusters,
        _turn: None,
    }
}

/// `run` against clusters another owner runs: the controller with
/// `controller_kubeconfig`, the test with the admin kubeconfigs in
/// `kubeconfigs`; `turn` is held as long as the system lives.
pub async fn start_on(
    controller_kubeconfig: &Path,
    kubeconfigs: &Path,
    run_args: &[String],
    turn: Box<dyn std::any::Any + Send>,
) -> System {
    let dir = std::env::temp_dir().join(format!("tfjob-observe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    std::fs::copy(controller_kubeconfig, dir.join("home.kubeconfig"))
        .expect("the controller's kubeconfig");
    let (controller, metrics) = start_run(&dir, "controller.log", run_args).await;
    System {
        controller,
        sim: None,
        dir,
        kubeconfigs: kubeconfigs.to_path_buf(),
        metrics,
        clusters: BTreeMap::new(),
        _turn: Some(turn),
    }
}

/// Starts `demo --keep` submitting the jobs of `jobs_yaml`, with its
/// metrics on `metrics` (chosen by the caller, so a Prometheus can scrape it
/// from the start), and returns once it serves them. Its output goes to
/// `demo.out`, its JSON log (info) to `controller.log`.
pub async fn start_demo(jobs_yaml: &str, metrics: SocketAddr) -> System {
    let dir = std::env::temp_dir().join(format!("tfjob-observe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml).expect("write jobs");
    let log = std::fs::File::create(dir.join("controller.log")).expect("demo log");
    let out = std::fs::File::create(dir.join("demo.out")).expect("demo output");
    let mut demo = Process(
        Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
            .args(["--log-format", "json", "demo", "--keep", "--metrics-addr"])
            .arg(metrics.to_string())
            .arg("--kubeconfig-dir")
            .arg(&dir)
            .arg("-f")
            .arg(&jobs)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .spawn()
            .expect("tfjob-federator demo starts"),
    );
    let deadline = Instant::now() + STARTUP;
    let announced = format!("Metrics on http://{metrics}/metrics");
    while !std::fs::read_to_string(dir.join("demo.out"))
        .unwrap_or_default()
        .contains(&announced)
    {
        demo.check_alive("the demo", &dir.join("demo.out"));
        assert!(Instant::now() < deadline, "the demo did not serve metrics");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let clusters = std::fs::read_dir(&dir)
        .expect("the demo's kubeconfig dir")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".kubeconfig")?
                .to_string();
            let text = std::fs::read_to_string(&path).ok()?;
            let server = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("server: "))?;
            Some((name, server.trim_start_matches("http://").to_string()))
        })
        .collect();
    System {
        controller: demo,
        sim: None,
        kubeconfigs: dir.clone(),
        dir,
        metrics,
        clusters,
        _turn: None,
    }
}

/// A `run` against the home cluster of `dir`, with `extra` arguments and its
/// JSON log (info) in `dir/log`; returns once it serves its metrics.
pub async fn start_run(dir: &Path, log: &str, extra: &[String]) -> (Process, SocketAddr) {
    let log_path = dir.join(log);
    let log = std::fs::File::create(&log_path).expect("controller log");
    let mut controller = Process(
        Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
            .args([
                "--log-format",
                "json",
                "run",
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg("--kubeconfig")
            .arg(dir.join("home.kubeconfig"))
            .args(extra)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("tfjob-federator run starts"),
    );
    let deadline = Instant::now() + STARTUP;
    let metrics = loop {
        if let Some(addr) = logged_metrics_addr(&log_path) {
            break addr;
        }
        controller.check_alive("the controller", &log_path);
        assert!(
            Instant::now() < deadline,
            "the controller did not log its metrics address"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    (controller, metrics)
}

/// The `addr` the controller logged when it began serving metrics.
fn logged_metrics_addr(log: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(log)
        .ok()?
        .lines()
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

/// `PUT /_sim/faults {"partitioned": …}` on a simulated cluster.
pub async fn set_partitioned(cluster: &str, partitioned: bool) {
    let body = serde_json::json!({ "partitioned": partitioned }).to_string();
    let (status, answer) = http(cluster, "PUT", "/_sim/faults", Some(&body)).await;
    assert_eq!(status, 200, "PUT /_sim/faults answered {answer}");
}

impl System {
    /// `GET path` on the controller's metrics server.
    pub async fn get(&self, path: &str) -> (u16, String) {
        http(&self.metrics.to_string(), "GET", path, None).await
    }

    /// The current `/metrics` text; fails unless it answers 200.
    pub async fn scrape(&self) -> String {
        let (status, body) = self.get("/metrics").await;
        assert_eq!(status, 200, "/metrics answered {status}: {body}");
        body
    }

    /// The admin kubeconfig of `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> String {
        std::fs::read_to_string(self.kubeconfigs.join(format!("{cluster}.kubeconfig")))
            .unwrap_or_else(|e| panic!("{cluster}.kubeconfig: {e}"))
    }

    /// Panics (with its log) if the first controller has exited.
    pub fn check_controller_alive(&mut self) {
        let log = self.dir.join("controller.log");
        self.controller.check_alive("the controller", &log);
    }

    /// Kills the first controller (SIGKILL: no chance to clean up).
    pub fn kill_controller(&mut self) {
        self.controller.kill();
    }

    /// Stops the first controller with SIGTERM; its exit status.
    pub fn terminate_controller(&mut self) -> std::process::ExitStatus {
        self.controller.terminate()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("controller.log")).unwrap_or_default()
    }
}

impl Drop for System {
    fn drop(&mut self) {
        // The controller first, so it does not log the clusters vanishing.
        self.controller.kill();
        if let Some(sim) = &mut self.sim {
            sim.kill();
        }
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "--- controller log ({}), last {} lines ---\n{}",
                self.dir.display(),
                tail.len(),
                tail.join("\n")
            );
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

// ---------------------------------------------------------------- HTTP

/// One HTTP/1.0 request (so answers come whole, never chunked) to
/// `host:port`; returns the status code and the body.
pub async fn http(addr: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let body = body.unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&answer).to_string())
    };
    let answer = tokio::time::timeout(Duration::from_secs(30), attempt)
        .await
        .unwrap_or_else(|_| panic!("{method} http://{addr}{path} timed out"))
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"));
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{method} {path}: no HTTP answer: {answer:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no status in {head:?}"));
    (status, body.to_string())
}

/// `path` with `query` form-encoded.
pub fn with_query(path: &str, query: &[(&str, &str)]) -> String {
    let encoded = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(query)
        .finish();
    format!("{path}?{encoded}")
}

// ---------------------------------------------------------------- Prometheus

/// A free port on 127.0.0.1 (it may be taken again before it is used; the
/// callers retry).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn binary(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not on PATH: install Debian's prometheus package (.ci/run does)")
        })
}

/// A Prometheus server scraping one target every second, its data in a
/// temp dir; killed when dropped.
pub struct Prometheus {
    process: Process,
    pub addr: String,
    dir: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.process.kill();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl Prometheus {
    pub async fn start(target: SocketAddr) -> Prometheus {
        let dir = std::env::temp_dir().join(format!("tfjob-prometheus-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("prometheus temp dir");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: tfjob-federator\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .expect("write prometheus.yml");
        // A port taken between picking and binding makes Prometheus exit: try another.
        for _ in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            let log = dir.join("prometheus.log");
            let mut process = Process(
                Command::new(binary("prometheus"))
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.join("data").display()
                    ))
                    .arg(format!("--web.listen-address={addr}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(&log).expect("prometheus log"))
                    .spawn()
                    .expect("prometheus starts"),
            );
            let deadline = Instant::now() + STARTUP;
            loop {
                if let Ok(Some(_)) = process.0.try_wait() {
                    break;
                }
                if let Ok(Ok(_)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio::net::TcpStream::connect(&addr),
                )
                .await
                {
                    let (status, _) = http(&addr, "GET", "/-/ready", None).await;
                    if status == 200 {
                        return Prometheus { process, addr, dir };
                    }
                }
                assert!(
                    Instant::now() < deadline,
                    "Prometheus did not get ready; its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        panic!("Prometheus could not be started on a free port");
    }

    /// An instant query: the result vector, or the error Prometheus gave.
    pub async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let path = with_query("/api/v1/query", &[("query", expr)]);
        let (status, body) = http(&self.addr, "GET", &path, None).await;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("HTTP {status}: {e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(format!(
                "HTTP {status}: {}: {}",
                answer["errorType"], answer["error"]
            ));
        }
        Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }

    /// The single value of a scalar-like query (sum(...)), if any.
    pub async fn value(&self, expr: &str) -> Option<f64> {
        let result = self.query(expr).await.ok()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }
}

/// `promtool check metrics` on a scrape: its exit success and everything it printed.
pub fn promtool_check(scrape: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new(binary("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs");
    child
        .stdin
        .take()
        .expect("promtool stdin")
        .write_all(scrape.as_bytes())
        .expect("feed promtool");
    let output = child.wait_with_output().expect("promtool finishes");
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

// ---------------------------------------------------------------- scrape and PromQL

/// Sample counts per metric family in a scrape (`_bucket`, `_sum` and
/// `_count` count for their histogram).
pub fn samples_per_metric(scrape: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for line in scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line
            .split(|c: char| c == '{' || c.is_whitespace())
            .next()
            .unwrap_or_default();
        *out.entry(family(name).to_string()).or_default() += 1;
    }
    out
}

/// A series name without the histogram/summary suffix.
pub fn family(name: &str) -> &str {
    ["_bucket", "_sum", "_count"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
}

/// The value of the sample `series` (name with labels, exactly as exported).
pub fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Words that are PromQL syntax, not metric names.
const KEYWORDS: [&str; 12] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "atan2",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names a PromQL expression selects: identifiers that are not
/// functions, aggregations or keywords, outside label matchers, ranges,
/// strings and label lists.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut labels_next = false;
    let mut i = 0;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    // Index just past the string that starts at `start`.
    let string_end = |start: usize| {
        let mut j = start + 1;
        while j < chars.len() && chars[j] != chars[start] {
            j += if chars[j] == '\\' { 2 } else { 1 };
        }
        j + 1
    };
    // Index just past the bracket that closes the one at `start`, skipping strings.
    let close = |start: usize, open: char, shut: char| {
        let mut depth = 0;
        let mut j = start;
        while j < chars.len() {
            match chars[j] {
                '"' | '\'' | '`' => {
                    j = string_end(j);
                    continue;
                }
                c if c == open => depth += 1,
                c if c == shut => {
                    depth -= 1;
                    if depth == 0 {
                        return j + 1;
                    }
                }
                _ => {}
            }
            j += 1;
        }
        chars.len()
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '{' {
            i = close(i, '{', '}');
        } else if c == '[' {
            i = close(i, '[', ']');
        } else if c == '(' && labels_next {
            labels_next = false;
            i = close(i, '(', ')');
        } else if c == '"' || c == '\'' || c == '`' {
            i = string_end(i);
        } else if c.is_ascii_digit() || c == '.' || c == '$' {
            // Numbers, durations (5m) and dashboard variables are no names.
            i += 1;
            while i < chars.len() && (ident(chars[i]) || chars[i] == '.') {
                i += 1;
            }
        } else if ident(c) {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let after: String = chars[i..].iter().collect();
            let after = after.trim_start();
            // A call, or an aggregation with its grouping first (`sum by (le) (…)`).
            let applied = after.starts_with('(')
                || ["by", "without"].iter().any(|k| {
                    after
                        .strip_prefix(k)
                        .is_some_and(|rest| rest.trim_start().starts_with('('))
                });
            if KEYWORDS.contains(&word.as_str()) {
                labels_next = LABEL_LISTS.contains(&word.as_str());
            } else if !applied {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// One query of a dashboard panel.
#[derive(Debug, Clone)]
pub struct PanelQuery {
    pub row: String,
    pub panel: String,
    pub expr: String,
}

/// Every panel query of a Grafana dashboard, with its row (rows open or collapsed).
pub fn dashboard_queries(dashboard: &Value) -> Vec<PanelQuery> {
    fn walk(panels: &[Value], row: &mut String, out: &mut Vec<PanelQuery>) {
        for panel in panels {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            if panel["type"] == "row" {
                *row = title;
                let nested = panel["panels"].as_array().cloned().unwrap_or_default();
                walk(&nested, row, out);
                continue;
            }
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push(PanelQuery {
                        row: row.clone(),
                        panel: title.clone(),
                        expr: expr.to_string(),
                    });
                }
            }
        }
    }
    let mut out = Vec::new();
    let panels = dashboard["panels"].as_array().cloned().unwrap_or_default();
    walk(&panels, &mut String::new(), &mut out);
    out
}

#[test]
fn metric_names_skip_functions_labels_ranges_and_keywords() {
    let names = |e: &str| metric_names(e).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"histogram_quantile(0.99, sum by (le, verb) (rate(a_seconds_bucket{verb!="watch", cluster=~"$cluster"}[$__rate_interval])))"#
        ),
        ["a_seconds_bucket"]
    );
    assert_eq!(
        names(r#"1 - sum(x{r="a b {c}"}) by (cluster) / on (cluster) group_left(k) y offset 5m"#),
        ["x", "y"]
    );
    assert_eq!(names("sum(rate(c_total[1m])) or vector(0)"), ["c_total"]);
    assert_eq!(names("up == bool 1 and z"), ["up", "z"]);
}

#[test]
fn families_drop_histogram_suffixes() {
    let scrape =
        "# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_sum 0\nh_count 0\ng{a=\"b\"} 2\n";
    let counts = samples_per_metric(scrape);
    assert_eq!(counts["h"], 3);
    assert_eq!(counts["g"], 1);
    assert_eq!(sample(scrape, "g{a=\"b\"}"), Some(2.0));
}
