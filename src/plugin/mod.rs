//! `kubectl tfjob`: the kubectl plugin (binary `kubectl-tfjob`) that shows
//! jobs, their replicas on every cluster, their logs, the dry run and the
//! members, from the home cluster a kubeconfig names. The decisions (rows,
//! which replica, what a job waits for) are in [`view`]; this module
//! reads the clusters and prints.

pub mod view;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use futures::{AsyncBufReadExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, LogParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::api::{MemberCluster, TENSORFLOW_CONTAINER, TensorFlowTrainingJob};
use crate::clusters::ConnectError;
use crate::config::{ConfigError, ControllerConfig};
use crate::plan::{self, PlanError};

/// How long a member may take to start answering a log request.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-tfjob",
    bin_name = "kubectl tfjob",
    version,
    about = "TensorFlowTrainingJobs across clusters: jobs, replicas, logs, dry runs and members"
)]
pub struct Cli {
    /// Kubeconfig of the home cluster (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// Context in that kubeconfig (default: its current context).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace (default: the context's, else `default`).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Every namespace (`get`).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Output format of `get` and `clusters`: json, yaml or wide.
    #[arg(short = 'o', long, global = true, value_enum)]
    pub output: Option<Output>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Wide,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Jobs with phase, replicas per cluster, restarts and age.
    Get {
        /// One job (default: every job in the namespace).
        job: Option<String>,
    },
    /// One job: each replica's cluster, pod, phase, exit code and restarts,
    /// what it waits for, its conditions and recent Events.
    Describe { job: String },
    /// A replica's log, from the cluster its pod runs on (through the
    /// member's kubeconfig Secret on home).
    Logs {
        job: String,
        /// `worker-1` or the pod's name `JOB-worker-1` (default: the
        /// master, chief-0 else worker-0).
        replica: Option<String>,
        /// Stream new lines until the container ends.
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the last N lines (-1, kubectl's default: all).
        #[arg(long, allow_negative_numbers = true)]
        tail: Option<i64>,
        /// The container (default: `tensorflow`, the main one).
        #[arg(short = 'c', long)]
        container: Option<String>,
    },
    /// Dry run: where each replica of the job in FILE would go, and why
    /// other clusters are passed over; or, with --lose, what losing those
    /// clusters now would do to the running jobs (-n, -A, -o json apply)
    /// (as `tfjob-federator plan`).
    Plan {
        /// The job manifest (YAML).
        #[arg(
            short = 'f',
            long = "filename",
            required_unless_present = "lose",
            conflicts_with = "lose"
        )]
        file: Option<PathBuf>,
        /// Clusters to suppose lost now (comma-separated).
        #[arg(long, value_delimiter = ',', num_args = 1..)]
        lose: Option<Vec<String>>,
        /// With --lose: only this job.
        job: Option<String>,
        /// The controller's settings (YAML), for the home cluster's name
        /// and whether home takes replicas (default: the defaults).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Member clusters: Ready and free GPUs, as the controller records them.
    Clusters,
}

/// Why a command failed (messages name the object, never Secret content).
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("connecting to home: {0}")]
    Connect(String),
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("TensorFlowTrainingJob {namespace}/{name} not found")]
    JobNotFound { namespace: String, name: String },
    #[error("TensorFlowTrainingJob {name} cannot be read: {error}")]
    Unreadable { name: String, error: String },
    #[error(transparent)]
    Replica(#[from] view::ReplicaChoiceError),
    #[error("connecting to member {cluster}: {source}")]
    Member {
        cluster: String,
        source: ConnectError,
    },
    #[error("cluster {cluster} did not answer within {}s", MEMBER_TIMEOUT.as_secs())]
    Unreachable { cluster: String },
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{path}: {error}")]
    File { path: String, error: String },
    #[error("{what}: {error}")]
    Stream { what: String, error: String },
    #[error("writing the output: {0}")]
    Output(String),
}

fn api_error(what: impl Into<String>) -> impl FnOnce(kube::Error) -> PluginError {
    let what = what.into();
    move |source| PluginError::Api { what, source }
}

fn output_error(e: impl std::fmt::Display) -> PluginError {
    PluginError::Output(e.to_string())
}

/// The home cluster and the namespace the command works in.
struct Home {
    client: Client,
    namespace: String,
    all_namespaces: bool,
}

impl Home {
    async fn connect(cli: &Cli) -> Result<Home, PluginError> {
        let kubeconfig = match &cli.kubeconfig {
            Some(path) => Kubeconfig::read_from(path)?,
            None => Kubeconfig::read()?,
        };
        let options = KubeConfigOptions {
            context: cli.context.clone(),
            ..Default::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
        let namespace = cli
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| PluginError::Connect(e.to_string()))?;
        Ok(Home {
            client,
            namespace,
            all_namespaces: cli.all_namespaces,
        })
    }

    fn namespaced<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The job; read untyped first, so that a job this version cannot
    /// decode is reported as unreadable rather than as a failed request.
    async fn job(&self, name: &str) -> Result<TensorFlowTrainingJob, PluginError> {
        decode(self.raw_job(name).await?).map_err(|error| PluginError::Unreadable {
            name: name.to_string(),
            error,
        })
    }

    /// The job in the command's namespace, as the API returns it.
    async fn raw_job(&self, name: &str) -> Result<DynamicObject, PluginError> {
        let raw: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &ApiResource::erase::<TensorFlowTrainingJob>(&()),
        );
        raw.get_opt(name)
            .await
            .map_err(api_error(format!("reading job {name}")))?
            .ok_or_else(|| PluginError::JobNotFound {
                namespace: self.namespace.clone(),
                name: name.to_string(),
            })
    }

    /// The client of the cluster a replica reports: a member through its
    /// kubeconfig Secret on home, else home itself (single-cluster
    /// installs, and home's own name).
    async fn cluster(&self, cluster: Option<&str>) -> Result<Client, PluginError> {
        let Some(name) = cluster else {
            return Ok(self.client.clone());
        };
        let members: Api<MemberCluster> = Api::all(self.client.clone());
        let member = members
            .get_opt(name)
            .await
            .map_err(api_error(format!("reading MemberCluster {name}")))?;
        let Some(member) = member else {
            return Ok(self.client.clone());
        };
        let backoff = crate::actors::call::Backoff::from(Duration::from_millis(200));
        let wrap = |config: kube::Config| Client::try_from(config).map_err(|e| e.to_string());
        crate::clusters::member_client(&self.client, &member, backoff, wrap)
            .await
            .map(|(client, _)| client)
            .map_err(|source| PluginError::Member {
                cluster: name.to_string(),
                source,
            })
    }
}

fn decode(object: DynamicObject) -> Result<TensorFlowTrainingJob, String> {
    let value = serde_json::to_value(object).map_err(|e| e.to_string())?;
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// Runs one command, printing to `out` (and notes to stderr).
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<(), PluginError> {
    let home = Home::connect(&cli).await?;
    let output = cli.output;
    match cli.command {
        Command::Get { job } => get(&home, job.as_deref(), output, out).await,
        Command::Describe { job } => describe(&home, &job, out).await,
        Command::Logs {
            job,
            replica,
            follow,
            tail,
            container,
        } => {
            let params = LogParams {
                container: Some(container.unwrap_or_else(|| TENSORFLOW_CONTAINER.to_string())),
                follow,
                // A negative tail means every line, as kubectl reads it.
                tail_lines: tail.filter(|n| *n >= 0),
                ..LogParams::default()
            };
            logs(&home, &job, replica.as_deref(), &params, out).await
        }
        Command::Plan {
            file: None,
            lose: Some(lose),
            job,
            config,
        } => {
            let config = ControllerConfig::load(config.as_deref())?;
            let lost = lose.into_iter().collect();
            let namespace =
                (!home.all_namespaces || job.is_some()).then_some(home.namespace.as_str());
            let predictions =
                plan::predict_loss(&home.client, &config, &lost, namespace, job.as_deref()).await?;
            let value = serde_json::to_value(&predictions).map_err(output_error)?;
            if print_machine(&value, output, out)? {
                return Ok(());
            }
            write!(out, "{}", plan::loss_report(&lost, &predictions)).map_err(output_error)
        }
        Command::Plan { file, config, .. } => {
            let file = file.ok_or_else(|| PluginError::File {
                path: "-f".into(),
                error: "plan needs -f FILE or --lose CLUSTERS".into(),
            })?;
            let path = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| PluginError::File {
                path: path.clone(),
                error: e.to_string(),
            })?;
            let mut job: TensorFlowTrainingJob =
                serde_yaml::from_str(&text).map_err(|e| PluginError::File {
                    path,
                    error: format!("not a TensorFlowTrainingJob: {e}"),
                })?;
            job.metadata
                .namespace
                .get_or_insert_with(|| home.namespace.clone());
            let config = ControllerConfig::load(config.as_deref())?;
            let clusters = plan::cluster_states(&home.client, &config).await?;
            write!(out, "{}", plan::report(&job, &clusters)).map_err(output_error)
        }
        Command::Clusters => clusters(&home, output, out).await,
    }
}

/// A kubectl-like `List` of objects.
fn list_of(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

/// Prints `value` as JSON or YAML; false for the table formats.
fn print_machine(
    value: &Value,
    output: Option<Output>,
    out: &mut impl Write,
) -> Result<bool, PluginError> {
    let text = match output {
        Some(Output::Json) => serde_json::to_string_pretty(value).map_err(output_error)? + "\n",
        Some(Output::Yaml) => serde_yaml::to_string(value).map_err(output_error)?,
        _ => return Ok(false),
    };
    out.write_all(text.as_bytes()).map_err(output_error)?;
    Ok(true)
}

async fn get(
    home: &Home,
    name: Option<&str>,
    output: Option<Output>,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let resource = ApiResource::erase::<TensorFlowTrainingJob>(&());
    let all = home.all_namespaces && name.is_none();
    let objects = match name {
        Some(name) => vec![home.raw_job(name).await?],
        None => {
            let api: Api<DynamicObject> = if all {
                Api::all_with(home.client.clone(), &resource)
            } else {
                Api::namespaced_with(home.client.clone(), &home.namespace, &resource)
            };
            api.list(&ListParams::default())
                .await
                .map_err(api_error("listing TensorFlowTrainingJobs"))?
                .items
        }
    };
    let values: Vec<Value> = objects
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(output_error)?;
    // One job prints as the object, several as a List, as kubectl does.
    let machine = match (name, values.as_slice()) {
        (Some(_), [one]) => one.clone(),
        _ => list_of(values),
    };
    if print_machine(&machine, output, out)? {
        return Ok(());
    }
    let wide = output == Some(Output::Wide);
    let now = Timestamp::now();
    let mut rows = Vec::new();
    for object in objects {
        let job_name = object.name_any();
        match decode(object) {
            Ok(job) => rows.push(view::job_row(&job, all, wide, now)),
            Err(error) => eprintln!("warning: job {job_name} cannot be read: {error}"),
        }
    }
    if rows.is_empty() {
        if all {
            eprintln!("No resources found");
        } else {
            eprintln!("No resources found in {} namespace.", home.namespace);
        }
        return Ok(());
    }
    let text = view::table(&view::job_headers(all, wide), &rows);
    out.write_all(text.as_bytes()).map_err(output_error)
}

async fn describe(home: &Home, name: &str, out: &mut impl Write) -> Result<(), PluginError> {
    let job = home.job(name).await?;
    let uid = job.metadata.uid.clone();
    let params = ListParams::default().fields(&format!("regarding.name={name}"));
    let events: Vec<Event> = home
        .namespaced::<Event>()
        .list(&params)
        .await
        .map_err(api_error(format!("listing the Events of job {name}")))?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.uid.clone()) == uid)
        .collect();
    let mut lines: Vec<view::EventLine> = events
        .iter()
        .map(|e| view::EventLine {
            kind: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            first: first_time(e),
            last: e
                .series
                .as_ref()
                .map(|s| s.last_observed_time.0)
                .or_else(|| e.deprecated_last_timestamp.as_ref().map(|t| t.0)),
            count: e
                .series
                .as_ref()
                .map(|s| s.count)
                .or(e.deprecated_count)
                .unwrap_or(1),
            from: e.reporting_controller.clone().unwrap_or_default(),
            message: e.note.clone().unwrap_or_default(),
        })
        .collect();
    lines.sort_by_key(|l| l.last.or(l.first));
    let text = view::describe(&job, &lines, Timestamp::now());
    out.write_all(text.as_bytes()).map_err(output_error)
}

/// When an Event first happened.
fn first_time(event: &Event) -> Option<Timestamp> {
    event
        .event_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| event.deprecated_first_timestamp.as_ref().map(|t| t.0))
        .or_else(|| event.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

async fn logs(
    home: &Home,
    name: &str,
    replica: Option<&str>,
    params: &LogParams,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let job = home.job(name).await?;
    let chosen = view::choose_replica(&job, replica)?;
    let cluster = chosen.cluster.as_deref();
    let where_ = cluster.unwrap_or("home").to_string();
    let client = home.cluster(cluster).await?;
    let pods: Api<Pod> = Api::namespaced(client, &home.namespace);
    let what = format!("reading the log of pod {} on {where_}", chosen.name);
    let stream = tokio::time::timeout(MEMBER_TIMEOUT, pods.log_stream(&chosen.name, params))
        .await
        .map_err(|_| PluginError::Unreachable {
            cluster: where_.clone(),
        })?
        .map_err(api_error(what.clone()))?;
    let mut lines = stream.lines();
    while let Some(line) = lines.try_next().await.map_err(|e| PluginError::Stream {
        what: what.clone(),
        error: e.to_string(),
    })? {
        writeln!(out, "{line}").map_err(output_error)?;
        // Followed lines show as they come.
        out.flush().map_err(output_error)?;
    }
    Ok(())
}

async fn clusters(
    home: &Home,
    output: Option<Output>,
    out: &mut impl Write,
) -> Result<(), PluginError> {
    let members = Api::<MemberCluster>::all(home.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api_error("listing MemberClusters"))?
        .items;
    let values: Vec<Value> = members
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()
        .map_err(output_error)?;
    if print_machine(&list_of(values), output, out)? {
        return Ok(());
    }
    if members.is_empty() {
        eprintln!("No member clusters registered.");
        return Ok(());
    }
    let wide = output == Some(Output::Wide);
    let now = Timestamp::now();
    let rows: Vec<Vec<String>> = members
        .iter()
        .map(|m| view::cluster_row(m, wide, now))
        .collect();
    let text = view::table(&view::cluster_headers(wide), &rows);
    out.write_all(text.as_bytes()).map_err(output_error)
}
