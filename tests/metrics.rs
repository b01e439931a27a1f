//! Observability, end to end: a `demo` run of a few jobs (split across
//! clusters, failing, restarting, waiting for capacity) scraped by a real
//! Prometheus from the start, then the `/metrics` scrape linted by `promtool`,
//! every metric the Grafana dashboard reads present with data, every panel
//! query evaluated by a real Prometheus that scraped the run, and
//! `/healthz` and `/readyz` before and after the home informers sync.

mod common;

use common::observe;
use common::real::Ground;
use common::real::client_for;
use common::setup::Setup;
use common::sim_kube::set_faults;
use common::wait::eventually;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::Api;
use serde_json::{Value, json};
use tfjob_federator::api::TensorFlowTrainingJob;

use observe::{Prometheus, sample};

const DASHBOARD: &str = include_str!("../dashboards/tfjob-federator.json");
/// Dashboard rows whose every query must return data after the run.
const ROWS_WITH_DATA: [&str; 2] = ["Overview", "Placement and clusters"];
const WAIT: Duration = Duration::from_secs(60);

/// A job whose replicas `(type, count, gpus, exit codes, restart policy)`
/// run four seconds each (so that Prometheus scrapes the counters at zero
/// before any job ends), and the phase the demo should see it reach.
fn job(
    name: &str,
    replicas: &[(&str, i64, i64, &str, &str)],
    extra_spec: Value,
    expected_phase: &str,
) -> Value {
    let specs: Vec<Value> = replicas
        .iter()
        .map(|(t, n, gpus, exits, policy)| {
            json!({"type": t, "replicas": n, "restartPolicy": policy, "template": {
                "metadata": {"annotations": {
                    "sim.federation.tfjob.io/run-seconds": "4",
                    "sim.federation.tfjob.io/pending-seconds": "0.1",
                    "sim.federation.tfjob.io/exit-codes": exits}},
                "spec": {"containers": [{"name": "tensorflow", "image": "tf",
                    "resources": {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": gpus}}}]}}})
        })
        .collect();
    let mut spec = json!({"replicaSpecs": specs, "runPolicy": {"cleanUpPolicy": "none"}});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "TensorFlowTrainingJob",
           "metadata": {"name": name, "namespace": "default", "annotations": {
               "demo.federation.tfjob.io/expected-phase": expected_phase}},
           "spec": spec})
}

async fn wait_phase(jobs: &Api<TensorFlowTrainingJob>, name: &str, phase: &str) {
    eventually(&format!("job {name} {phase}"), WAIT, async || {
        let job = jobs.get(name).await.ok()?;
        let current = serde_json::to_value(job.status.as_ref()?.phase?).ok()?;
        (current == phase).then_some(())
    })
    .await;
}

/// Each dashboard query with the variables Grafana would fill in.
fn as_grafana_sends(expr: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$cluster", ".*")
}

/// The dashboard is templated the way docs/src/observability.md promises.
fn check_dashboard_shape(dashboard: &Value) {
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating variables");
    let variable = |name: &str| {
        variables
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no variable {name}"))
    };
    assert_eq!(variable("datasource")["type"], "datasource");
    assert_eq!(variable("datasource")["query"], "prometheus");
    let cluster = variable("cluster");
    assert!(
        cluster["definition"]
            .as_str()
            .is_some_and(|d| d.starts_with("label_values(")),
        "{cluster}"
    );
    assert_eq!(cluster["datasource"]["uid"], "${datasource}");
    let mut panels: Vec<&Value> = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        panels.push(panel);
        panels.extend(panel["panels"].as_array().into_iter().flatten());
    }
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "panel {} uses the templated data source",
            panel["title"]
        );
    }
    let rows: BTreeSet<&str> = panels
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["title"].as_str())
        .collect();
    for row in [
        "Overview",
        "Latency",
        "Placement and clusters",
        "Restarts and failures",
        "API and actors",
    ] {
        assert!(rows.contains(row), "row {row} in {rows:?}");
    }
    for query in observe::dashboard_queries(dashboard) {
        // Every range is Grafana's rate interval, never a fixed window.
        for range in query.expr.split('[').skip(1) {
            let window = range.split(']').next().unwrap_or_default();
            assert_eq!(
                window, "$__rate_interval",
                "{}: {}",
                query.panel, query.expr
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_lint_clean_feed_every_dashboard_panel_and_prometheus() {
    let dashboard: Value = serde_json::from_str(DASHBOARD).expect("the dashboard is JSON");
    check_dashboard_shape(&dashboard);
    let queries = observe::dashboard_queries(&dashboard);
    assert!(queries.len() >= 20, "{} queries", queries.len());

    let spread = json!({"scheduler": {"federation": {"strategy": "Spread"}}});
    let submitted = [
        job(
            "split",
            &[
                ("chief", 1, 1, "0", "Never"),
                ("worker", 2, 1, "0", "Never"),
            ],
            spread,
            "Succeeded",
        ),
        job(
            "fails",
            &[("worker", 1, 1, "1", "Never")],
            json!({}),
            "Failed",
        ),
        job(
            "restarts",
            &[("worker", 1, 1, "137,0", "ExitCode")],
            json!({}),
            "Succeeded",
        ),
        // 64 GPUs fit nowhere (3 clusters of 4 nodes × 4): it waits.
        job(
            "too-big",
            &[("worker", 1, 64, "0", "Never")],
            json!({}),
            "Pending",
        ),
    ];
    let yaml: String = submitted
        .iter()
        .map(|job| format!("---\n{}", serde_yaml::to_string(job).expect("yaml")))
        .collect();
    // Prometheus first, so it scrapes the demo from its first second on:
    // counters are seen at zero before any job ends, and increase() sees them move.
    let metrics_addr: std::net::SocketAddr = format!("127.0.0.1:{}", observe::free_port())
        .parse()
        .expect("an address");
    let prometheus = Prometheus::start(metrics_addr).await;
    // Prometheus applies its targets a few seconds after it starts.
    eventually("Prometheus to know its target", WAIT, async || {
        let (status, body) = observe::http(&prometheus.addr, "GET", "/api/v1/targets", None).await;
        let targets: Value = serde_json::from_str(&body).ok()?;
        let active = targets["data"]["activeTargets"].as_array()?;
        (status == 200 && !active.is_empty()).then_some(())
    })
    .await;
    let system = observe::start_demo(&yaml, metrics_addr).await;
    eventually("/readyz 200", WAIT, async || {
        (system.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    let home = client_for(&system.kubeconfig("home")).await;
    let jobs: Api<TensorFlowTrainingJob> = Api::namespaced(home, "default");
    wait_phase(&jobs, "split", "Succeeded").await;
    wait_phase(&jobs, "fails", "Failed").await;
    wait_phase(&jobs, "restarts", "Succeeded").await;
    wait_phase(&jobs, "too-big", "Pending").await;
    eventually("the demo's summary", WAIT, async || {
        let out = std::fs::read_to_string(system.dir.join("demo.out")).ok()?;
        out.contains("All 4 jobs reached the expected phase")
            .then_some(())
    })
    .await;

    // What the run must show, once the last status writes are counted.
    let scrape = eventually("completions counted", WAIT, async || {
        let scrape = system.scrape().await;
        let count = |outcome: &str| {
            sample(
                &scrape,
                &format!("tfjob_federator_job_completions_total{{outcome=\"{outcome}\"}}"),
            )
        };
        (count("succeeded") == Some(2.0)
            && count("failed") == Some(1.0)
            && sample(&scrape, "tfjob_federator_jobs_waiting_for_capacity") == Some(1.0))
        .then_some(scrape)
    })
    .await;

    // (a) promtool has nothing to say.
    let (ok, printed) = observe::promtool_check(&scrape);
    assert!(
        ok && printed.trim().is_empty(),
        "promtool check metrics: {printed}\n--- scrape ---\n{scrape}"
    );
    let expect = |series: &str, value: f64| {
        assert_eq!(
            sample(&scrape, series),
            Some(value),
            "{series} in\n{scrape}"
        );
    };
    expect("tfjob_federator_jobs{phase=\"Succeeded\"}", 2.0);
    expect("tfjob_federator_jobs{phase=\"Failed\"}", 1.0);
    expect("tfjob_federator_jobs{phase=\"Pending\"}", 1.0);
    expect(
        "tfjob_federator_replica_restarts_total{reason=\"Killed\"}",
        1.0,
    );
    expect("tfjob_federator_actors{kind=\"job\"}", 4.0);
    expect("tfjob_federator_actors{kind=\"replica\"}", 5.0);
    expect("tfjob_federator_actors{kind=\"cluster\"}", 3.0);
    expect(
        &format!(
            "tfjob_federator_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        ),
        1.0,
    );
    for member in ["member-1", "member-2"] {
        expect(
            &format!("tfjob_federator_cluster_ready{{cluster=\"{member}\"}}"),
            1.0,
        );
        expect(
            &format!(
                "tfjob_federator_cluster_allocatable{{cluster=\"{member}\",resource=\"nvidia.com/gpu\",unit=\"device\"}}"
            ),
            16.0,
        );
        // The split job's replica there went through the member's client.
        assert!(
            sample(
                &scrape,
                &format!(
                    "tfjob_federator_api_requests_total{{cluster=\"{member}\",code=\"201\",resource=\"pods\",verb=\"create\"}}"
                )
            )
            .is_some_and(|n| n >= 1.0),
            "pods created on {member}:\n{scrape}"
        );
    }
    let counter = |series: &str| sample(&scrape, series).unwrap_or(0.0);
    assert!(counter("tfjob_federator_placement_attempts_total{outcome=\"placed\"}") >= 3.0);
    assert!(counter("tfjob_federator_placement_attempts_total{outcome=\"waiting\"}") >= 1.0);
    assert!(counter("tfjob_federator_status_writes_total") >= 4.0);
    assert!(counter("tfjob_federator_job_submit_to_pods_created_seconds_count") >= 3.0);
    assert!(counter("tfjob_federator_job_submit_to_running_seconds_count") >= 2.0);
    let replicas_on = |cluster: &str| -> f64 {
        scrape
            .lines()
            .filter(|l| l.starts_with(&format!("tfjob_federator_replicas{{cluster=\"{cluster}\"")))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    for cluster in ["home", "member-1", "member-2"] {
        assert!(
            replicas_on(cluster) >= 1.0,
            "Spread put a replica on {cluster}:\n{scrape}"
        );
    }

    // (b) every metric a panel reads is exported, with samples.
    let samples = observe::samples_per_metric(&scrape);
    let mut read: BTreeMap<String, String> = BTreeMap::new();
    for query in &queries {
        let names = observe::metric_names(&query.expr);
        assert!(!names.is_empty(), "no metric in {}", query.expr);
        for name in names {
            read.insert(observe::family(&name).to_string(), query.panel.clone());
        }
    }
    for (family, panel) in &read {
        assert!(
            samples.get(family).is_some_and(|n| *n >= 1),
            "panel {panel:?} reads {family}, which the scrape lacks"
        );
    }

    // (c) Prometheus evaluates every panel query, and the overview and
    // cluster panels have data.
    eventually("Prometheus holding the final state", WAIT, async || {
        let completions = prometheus
            .value("sum(tfjob_federator_job_completions_total)")
            .await?;
        let home_capacity = prometheus
            .value(r#"count(tfjob_federator_cluster_free{resource="nvidia.com/gpu"})"#)
            .await?;
        (completions == 3.0 && home_capacity == 3.0).then_some(())
    })
    .await;
    // The cluster variable's label_values() as Grafana asks for it.
    let path = observe::with_query(
        "/api/v1/label/cluster/values",
        &[("match[]", "tfjob_federator_cluster_ready")],
    );
    let (status, body) = observe::http(&prometheus.addr, "GET", &path, None).await;
    let values: Value = serde_json::from_str(&body).expect("label values are JSON");
    assert_eq!(
        (status, &values["data"]),
        (200, &json!(["home", "member-1", "member-2"])),
        "{body}"
    );
    let mut empty = Vec::new();
    for query in &queries {
        let expr = as_grafana_sends(&query.expr);
        let result = prometheus
            .query(&expr)
            .await
            .unwrap_or_else(|e| panic!("panel {:?}: {expr}: {e}", query.panel));
        if result.is_empty() && ROWS_WITH_DATA.contains(&query.row.as_str()) {
            empty.push(format!("{} / {}: {expr}", query.row, query.panel));
        }
    }
    assert!(
        empty.is_empty(),
        "queries without data:\n{}",
        empty.join("\n")
    );
    let free_gpus = prometheus
        .query(&as_grafana_sends(
            r#"sum by (cluster) (tfjob_federator_cluster_free{resource="nvidia.com/gpu", cluster=~"$cluster"})"#,
        ))
        .await
        .expect("free GPUs");
    assert_eq!(
        free_gpus.len(),
        3,
        "home, member-1, member-2: {free_gpus:?}"
    );
    let ratio = prometheus
        .value(&as_grafana_sends(
            r#"sum(increase(tfjob_federator_job_completions_total{outcome="succeeded"}[$__rate_interval])) / sum(increase(tfjob_federator_job_completions_total[$__rate_interval]))"#,
        ))
        .await
        .expect("a success ratio");
    assert!(
        (ratio - 2.0 / 3.0).abs() < 0.01,
        "2 of 3 ended jobs succeeded: {ratio}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_home_informers_and_healthz_does_not() {
    // (Two clusters: `sim --register` installs the CRDs with the first member.)
    let system = Setup::on(Ground::Sim)
        .members(&["member-1"])
        .partition_home()
        .start()
        .await;
    let (status, body) = system.get("/healthz").await;
    assert_eq!((status, body.trim()), (200, "ok"));
    for _ in 0..10 {
        let (status, body) = system.get("/readyz").await;
        assert_eq!(status, 503, "not ready while home is partitioned: {body}");
        assert!(
            body.contains("waiting for") && body.contains("home cluster"),
            "{body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    set_faults(&system.client, json!({"partitioned": false})).await;
    let body = eventually("/readyz 200 once healed", WAIT, async || {
        let (status, body) = system.get("/readyz").await;
        (status == 200).then_some(body)
    })
    .await;
    assert_eq!(body.trim(), "ok");
    let (status, _) = system.get("/healthz").await;
    assert_eq!(status, 200);
    let (status, _) = system.get("/nothing-here").await;
    assert_eq!(status, 404);
}

#[test]
fn metric_names_skip_functions_labels_ranges_and_keywords() {
    let names = |e: &str| observe::metric_names(e).into_iter().collect::<Vec<_>>();
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
    let counts = observe::samples_per_metric(scrape);
    assert_eq!(counts["h"], 3);
    assert_eq!(counts["g"], 1);
    assert_eq!(sample(scrape, "g{a=\"b\"}"), Some(2.0));
}
