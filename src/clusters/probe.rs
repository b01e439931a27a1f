//! The health probe of a member cluster, and the MemberCluster status it
//! leads to.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;

use crate::api::{ClusterCondition, MemberClusterStatus, READY_CONDITION, reason};
use crate::capacity::{self, Capacity};

/// A probe slower than this counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// What a probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    pub ready: bool,
    pub message: String,
}

/// Asks the cluster's API server for its version, within `PROBE_TIMEOUT`.
pub async fn probe(client: &Client) -> Probe {
    let (ready, message) =
        match tokio::time::timeout(PROBE_TIMEOUT, client.apiserver_version()).await {
            Ok(Ok(_)) => (true, "the API server answers".to_string()),
            Ok(Err(e)) => (false, format!("probe failed: {e}")),
            Err(_) => (
                false,
                format!("no answer within {}s", PROBE_TIMEOUT.as_secs()),
            ),
        };
    Probe { ready, message }
}

/// The MemberCluster status after a probe: the Ready condition keeps its
/// transition time while its status holds.
pub fn member_status(
    previous: &MemberClusterStatus,
    ready: bool,
    message: &str,
    capacity: Option<&Capacity>,
    now: Time,
) -> MemberClusterStatus {
    let status = if ready { "True" } else { "False" };
    let transition = previous
        .conditions
        .iter()
        .find(|c| c.condition_type == READY_CONDITION && c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    MemberClusterStatus {
        conditions: vec![ClusterCondition {
            condition_type: READY_CONDITION.into(),
            status: status.into(),
            last_transition_time: Some(transition),
            reason: Some(
                if ready {
                    reason::PROBE_SUCCEEDED
                } else {
                    reason::PROBE_FAILED
                }
                .into(),
            ),
            message: Some(message.into()),
        }],
        last_heartbeat_time: if ready {
            Some(now)
        } else {
            previous.last_heartbeat_time.clone()
        },
        allocatable: capacity
            .map(|c| capacity::report(&c.allocatable))
            .unwrap_or_else(|| previous.allocatable.clone()),
        free: capacity
            .map(|c| capacity::report(&c.free))
            .unwrap_or_else(|| previous.free.clone()),
        observed_generation: previous.observed_generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Time {
        Time(jiff::Timestamp::from_second(second).expect("valid"))
    }

    #[test]
    fn ready_keeps_its_transition_time_and_heartbeat_moves() {
        let first = member_status(&MemberClusterStatus::default(), true, "ok", None, at(10));
        let second = member_status(&first, true, "ok", None, at(20));
        assert_eq!(second.conditions[0].last_transition_time, Some(at(10)));
        assert_eq!(second.last_heartbeat_time, Some(at(20)));
        let lost = member_status(&second, false, "no answer", None, at(30));
        assert_eq!(lost.conditions[0].status, "False");
        assert_eq!(lost.conditions[0].last_transition_time, Some(at(30)));
        assert_eq!(
            lost.last_heartbeat_time,
            Some(at(20)),
            "the last good heartbeat stays"
        );
    }
}
