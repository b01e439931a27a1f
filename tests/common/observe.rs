//! Helpers for the observability tests: the demo (`demo --keep`) as a
//! system of its own, a tiny HTTP client for `/metrics`, `/healthz`,
//! `/readyz` and Prometheus's API, a real Prometheus server, `promtool`,
//! and the metric names a PromQL expression reads.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::process::Process;
use super::setup::STARTUP;
use super::wait::eventually;

/// `demo --keep` running: its simulated clusters and controller in one
/// process, with a private temp dir (kubeconfigs, logs).
pub struct Demo {
    process: Process,
    pub dir: PathBuf,
    /// Where it serves /metrics, /healthz and /readyz.
    pub metrics: SocketAddr,
}

/// Starts `demo --keep` submitting the jobs of `jobs_yaml`, with its
/// metrics on `metrics` (chosen by the caller, so a Prometheus can scrape it
/// from the start), and returns once it serves them. Its output goes to
/// `demo.out`, its JSON log (info) to `controller.log`.
pub async fn start_demo(jobs_yaml: &str, metrics: SocketAddr) -> Demo {
    let dir = std::env::temp_dir().join(format!("tfjob-observe-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    let jobs = dir.join("jobs.yaml");
    std::fs::write(&jobs, jobs_yaml).expect("write jobs");
    let out = dir.join("demo.out");
    let mut process = Process::spawn_split(
        "the demo",
        Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
            .args(["--log-format", "json", "demo", "--keep", "--metrics-addr"])
            .arg(metrics.to_string())
            .arg("--kubeconfig-dir")
            .arg(&dir)
            .arg("-f")
            .arg(&jobs)
            .env("RUST_LOG", "info"),
        Stdio::null(),
        &out,
        &dir.join("controller.log"),
    );
    let announced = format!("Metrics on http://{metrics}/metrics");
    eventually("the demo to serve metrics", STARTUP, async || {
        process.check_alive();
        process.stdout().contains(&announced).then_some(())
    })
    .await;
    Demo {
        process,
        dir,
        metrics,
    }
}

impl Demo {
    /// `GET path` on the demo's metrics server.
    pub async fn get(&self, path: &str) -> (u16, String) {
        get(self.metrics, path).await
    }

    /// The current `/metrics` text; fails unless it answers 200.
    pub async fn scrape(&self) -> String {
        scrape(self.metrics).await
    }

    /// The admin kubeconfig of `cluster`.
    pub fn kubeconfig(&self, cluster: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{cluster}.kubeconfig")))
            .unwrap_or_else(|e| panic!("{cluster}.kubeconfig: {e}"))
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the demo's files kept in {}", self.dir.display());
        } else {
            self.process.kill();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `GET path` on a metrics server.
pub async fn get(metrics: SocketAddr, path: &str) -> (u16, String) {
    http(&metrics.to_string(), "GET", path, None).await
}

/// The current `/metrics` text of a metrics server; fails unless it answers 200.
pub async fn scrape(metrics: SocketAddr) -> String {
    let (status, body) = get(metrics, "/metrics").await;
    assert_eq!(status, 200, "/metrics answered {status}: {body}");
    body
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
        if !std::thread::panicking() {
            self.process.kill();
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
            let mut process = Process::spawn(
                "Prometheus",
                Command::new(binary("prometheus"))
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.join("data").display()
                    ))
                    .arg(format!("--web.listen-address={addr}")),
                &dir.join("prometheus.log"),
            );
            let ready = eventually("Prometheus to get ready", STARTUP, async || {
                if process.exited().is_some() {
                    return Ok(false);
                }
                let connected = tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio::net::TcpStream::connect(&addr),
                )
                .await;
                if matches!(connected, Ok(Ok(_)))
                    && http(&addr, "GET", "/-/ready", None).await.0 == 200
                {
                    return Ok(true);
                }
                Err(process.output())
            })
            .await;
            if ready {
                return Prometheus { process, addr, dir };
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
