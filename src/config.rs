//! Controller settings, read from `--config FILE` (YAML); every setting is
//! optional and `config/default.yaml` documents each with its default.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error("{path}: {source}")]
    Fence {
        path: String,
        source: crate::fence::SettingsError,
    },
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ControllerConfig {
    /// The name the home cluster has in `replicaStatus[].cluster` and placement.
    pub home_cluster_name: String,
    /// A job's status writes are at least this far apart (except the one
    /// that ends the job); a new phase or condition is written at once after
    /// a quiet spell.
    pub status_write_interval_ms: u64,
    /// Changes of replica states and counts alone (no new phase, condition
    /// or restart) wait this long after the previous write, doubling with
    /// each such write (up to 4×) until the next summary change.
    pub status_detail_interval_ms: u64,
    /// The first wait before retrying a failed API call (doubling up to
    /// 30×, with jitter: `actors::call`).
    pub retry_interval_ms: u64,
    /// The Reporter of Events (`reportingController`).
    pub event_reporter: String,
    /// Whether replicas may be placed on the home cluster too (when member
    /// clusters are registered; without members every replica runs at home).
    pub home_is_target: bool,
    /// Whether the replicas placed on home get a multicluster.x-k8s.io
    /// ServiceExport each, as a member's `exportServices` gives them: only
    /// then may a job be split over home and members (peers elsewhere reach
    /// home's replicas by their clusterset.local names).
    pub home_export_services: bool,
    /// How often each member cluster is probed (Ready, heartbeat, capacity).
    pub member_probe_interval_ms: u64,
    /// A member without a good probe for this long is lost: the jobs with
    /// replicas there are re-placed on healthy clusters. A member that is
    /// slow or erroring for less changes nothing.
    pub cluster_lost_timeout_ms: u64,
    /// With `run --leader-elect`: how long the leader's Lease holds without
    /// a renewal before a standby replica takes over. The leader renews every
    /// third of it and stops leading when two thirds pass without a renewal.
    pub lease_duration_ms: u64,
    /// Each connected member is swept this often too (besides when it is
    /// connected or returns), so nothing the controller made outlives its
    /// job for long, whoever ran the job.
    pub sweep_interval_ms: u64,
    /// A member's fence (`tfjob-federator fence`) stops the federation's
    /// pods there once the controller has not renewed its Lease on that
    /// member for this long. The controller renews it at every good probe
    /// and writes this value into it, so the fences obey this setting.
    pub fence_after_ms: u64,
    /// The most termination grace a fence gives a pod it stops (whole
    /// seconds, at least one): a pod's own grace, capped at this.
    pub fence_pod_grace_ms: u64,
    /// How far apart the clocks of home's controller and a member's fence
    /// may be. `clusterLostTimeoutMs` must exceed `fenceAfterMs` +
    /// `fencePodGraceMs` + this (`fence::check`).
    pub clock_skew_margin_ms: u64,
    /// Replicas of the jobs starting at once (placement, their clusters'
    /// preparation, their pods' and services' creates): later jobs wait,
    /// first come first served, until earlier ones have their pods
    /// (`start_gate`). A job larger than this starts alone.
    pub start_budget_replicas: usize,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            home_cluster_name: "home".into(),
            status_write_interval_ms: 300,
            status_detail_interval_ms: 1000,
            retry_interval_ms: 1000,
            event_reporter: "tfjob-federator".into(),
            home_is_target: true,
            home_export_services: false,
            member_probe_interval_ms: 5000,
            cluster_lost_timeout_ms: 60_000,
            lease_duration_ms: 15_000,
            sweep_interval_ms: 600_000,
            fence_after_ms: 30_000,
            fence_pod_grace_ms: 10_000,
            clock_skew_margin_ms: 5_000,
            start_budget_replicas: crate::start_gate::START_BUDGET,
        }
    }
}

impl ControllerConfig {
    pub fn load(path: Option<&Path>) -> Result<ControllerConfig, ConfigError> {
        let Some(path) = path else {
            return Ok(ControllerConfig::default());
        };
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let config: ControllerConfig =
            serde_yaml::from_str(&text).map_err(|source| ConfigError::Parse {
                path: path.display().to_string(),
                source,
            })?;
        config.check().map_err(|source| ConfigError::Fence {
            path: path.display().to_string(),
            source,
        })?;
        Ok(config)
    }

    /// Whether the settings keep the fence's guarantee: the controller
    /// refuses to start otherwise.
    pub fn check(&self) -> Result<(), crate::fence::SettingsError> {
        crate::fence::check(&self.fence_settings())
    }

    /// Why peers on members cannot reach a replica on home (None: they can).
    pub fn home_unreachable(&self) -> Option<String> {
        crate::placement::unreachable_across_clusters(
            crate::builders::DEFAULT_ADDRESS_TEMPLATE,
            self.home_export_services,
            "homeExportServices in the controller's config",
        )
    }

    pub fn fence_settings(&self) -> crate::fence::Settings {
        crate::fence::Settings {
            cluster_lost_timeout_ms: self.cluster_lost_timeout_ms,
            fence_after_ms: self.fence_after_ms,
            fence_pod_grace_ms: self.fence_pod_grace_ms,
            clock_skew_margin_ms: self.clock_skew_margin_ms,
            member_probe_interval_ms: self.member_probe_interval_ms,
        }
    }

    pub fn clock_skew_margin(&self) -> Duration {
        Duration::from_millis(self.clock_skew_margin_ms)
    }

    pub fn status_write_interval(&self) -> Duration {
        Duration::from_millis(self.status_write_interval_ms)
    }

    pub fn status_detail_interval(&self) -> Duration {
        Duration::from_millis(self.status_detail_interval_ms)
    }

    pub fn retry_interval(&self) -> Duration {
        Duration::from_millis(self.retry_interval_ms)
    }

    pub fn member_probe_interval(&self) -> Duration {
        // A zero interval would make actix spin.
        Duration::from_millis(self.member_probe_interval_ms.max(1))
    }

    pub fn lease_duration(&self) -> Duration {
        // Under a second the renewals would spin.
        Duration::from_millis(self.lease_duration_ms.max(1000))
    }

    pub fn sweep_interval(&self) -> Duration {
        // A sweep lists every managed object: never more than once a second.
        Duration::from_millis(self.sweep_interval_ms.max(1000))
    }

    pub fn cluster_lost_timeout(&self) -> Duration {
        Duration::from_millis(self.cluster_lost_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_default_file_matches_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.yaml");
        assert_eq!(
            ControllerConfig::load(Some(&path)).expect("config/default.yaml loads"),
            ControllerConfig::default()
        );
    }

    #[test]
    fn the_defaults_keep_the_fences_guarantee() {
        assert_eq!(ControllerConfig::default().check(), Ok(()));
    }

    #[test]
    fn a_lost_timeout_that_does_not_wait_for_the_fence_is_refused_naming_both() {
        let dir = std::env::temp_dir().join(format!("tfjob-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let path = dir.join("fence.yaml");
        std::fs::write(&path, "clusterLostTimeoutMs: 30000\nfenceAfterMs: 30000\n")
            .expect("written");
        let err = ControllerConfig::load(Some(&path)).expect_err("refused");
        let text = err.to_string();
        assert!(
            text.contains("clusterLostTimeoutMs (30000)") && text.contains("fenceAfterMs (30000)"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unknown_settings_are_rejected() {
        let err = serde_yaml::from_str::<ControllerConfig>("statusWriteIntervalMs: 5\nbogus: 1\n")
            .expect_err("unknown key");
        assert!(err.to_string().contains("bogus"), "{err}");
    }
}
