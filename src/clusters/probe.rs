//! The health probe of a member cluster, which also reads who the cluster
//! is, and the MemberCluster status it leads to.

use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::Api;

use crate::api::{ClusterCondition, ClusterIdentity, MemberClusterStatus, READY_CONDITION};
use crate::capacity::{self, Capacity};
use crate::member_health::Condition;

/// A probe slower than this counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The namespace whose uid is a cluster's identity (`member_identity`).
pub const IDENTITY_NAMESPACE: &str = "kube-system";

/// What a probe found: the identity of the cluster the client reaches, or
/// why it did not answer (an error as `shown` shows it).
#[derive(Debug, Clone)]
pub struct Probe {
    pub reached: Result<String, String>,
}

/// Reads the uid of the cluster's `kube-system` namespace, within
/// `PROBE_TIMEOUT`: one request both says that the API server answers and
/// which cluster it is.
pub async fn probe(client: &Client) -> Probe {
    let reached = match tokio::time::timeout(PROBE_TIMEOUT, identity(client)).await {
        Ok(answer) => answer,
        Err(_) => Err(format!("no answer within {}s", PROBE_TIMEOUT.as_secs())),
    };
    Probe { reached }
}

/// The identity of the cluster `client` reaches: its `kube-system`
/// namespace's uid.
pub async fn identity(client: &Client) -> Result<String, String> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces.get(IDENTITY_NAMESPACE).await {
        Ok(namespace) => namespace.metadata.uid.ok_or_else(|| {
            format!("namespace {IDENTITY_NAMESPACE} has no uid: not a Kubernetes API server")
        }),
        Err(e) => Err(format!(
            "reading namespace {IDENTITY_NAMESPACE} (the cluster's identity): {}",
            crate::telemetry::shown(&e)
        )),
    }
}

/// The MemberCluster status after a probe: the Ready condition keeps its
/// transition time while its status holds; the recorded identity is kept.
pub fn member_status(
    previous: &MemberClusterStatus,
    readiness: &Condition,
    identity: Option<ClusterIdentity>,
    capacity: Option<&Capacity>,
    now: Time,
) -> MemberClusterStatus {
    let ready = readiness.ready;
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
            reason: Some(readiness.reason.into()),
            message: Some(readiness.message.clone()),
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
        identity: identity.or_else(|| previous.identity.clone()),
    }
}

/// Adds the `Fenced` condition to `status`: `fenced` when the fence's
/// Lease was read since, else the one `previous` shows (an unreachable
/// member's fence cannot be read; what was last known stays). Its
/// transition time stays while its status holds.
pub fn add_fenced(
    status: &mut MemberClusterStatus,
    previous: &MemberClusterStatus,
    fenced: Option<&crate::fence::Condition>,
    now: Time,
) {
    let before = previous
        .conditions
        .iter()
        .find(|c| c.condition_type == crate::fence::FENCED_CONDITION);
    let Some(fenced) = fenced else {
        status.conditions.extend(before.cloned());
        return;
    };
    let value = if fenced.fenced { "True" } else { "False" };
    let transition = before
        .filter(|c| c.status == value)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    status.conditions.push(ClusterCondition {
        condition_type: crate::fence::FENCED_CONDITION.into(),
        status: value.into(),
        last_transition_time: Some(transition),
        reason: Some(fenced.reason.into()),
        message: Some(fenced.message.clone()),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::reason;

    /// Ready (ProbeSucceeded) or not (ProbeFailed), with `message`.
    fn probed(ready: bool, message: &str) -> Condition {
        Condition {
            ready,
            reason: if ready {
                reason::PROBE_SUCCEEDED
            } else {
                reason::PROBE_FAILED
            },
            message: message.to_string(),
        }
    }

    fn at(second: i64) -> Time {
        Time(jiff::Timestamp::from_second(second).expect("valid"))
    }

    #[test]
    fn ready_keeps_its_transition_time_and_heartbeat_moves() {
        let ok = probed(true, "ok");
        let first = member_status(&MemberClusterStatus::default(), &ok, None, None, at(10));
        let second = member_status(&first, &ok, None, None, at(20));
        assert_eq!(second.conditions[0].last_transition_time, Some(at(10)));
        assert_eq!(second.last_heartbeat_time, Some(at(20)));
        let lost = member_status(&second, &probed(false, "no answer"), None, None, at(30));
        assert_eq!(lost.conditions[0].status, "False");
        assert_eq!(lost.conditions[0].last_transition_time, Some(at(30)));
        assert_eq!(
            lost.last_heartbeat_time,
            Some(at(20)),
            "the last good heartbeat stays"
        );
    }

    #[test]
    fn fenced_follows_ready_keeps_its_transition_time_and_stays_while_unread() {
        let ok = probed(true, "ok");
        let fenced = |yes: bool| crate::fence::Condition {
            fenced: yes,
            reason: if yes { "FenceRenewing" } else { "NoFence" },
            message: "m".into(),
        };
        let mut first = member_status(&MemberClusterStatus::default(), &ok, None, None, at(10));
        add_fenced(
            &mut first,
            &MemberClusterStatus::default(),
            Some(&fenced(true)),
            at(10),
        );
        let mut second = member_status(&first, &ok, None, None, at(20));
        add_fenced(&mut second, &first, Some(&fenced(true)), at(20));
        assert_eq!(second.conditions.len(), 2);
        assert_eq!(second.conditions[0].condition_type, READY_CONDITION);
        assert_eq!(second.conditions[1].condition_type, "Fenced");
        assert_eq!(second.conditions[1].last_transition_time, Some(at(10)));
        // Not read (the member is cut off): the last known one stays.
        let mut third = member_status(&second, &probed(false, "no answer"), None, None, at(30));
        add_fenced(&mut third, &second, None, at(30));
        assert_eq!(third.conditions[1], second.conditions[1]);
        let mut fourth = member_status(&third, &ok, None, None, at(40));
        add_fenced(&mut fourth, &third, Some(&fenced(false)), at(40));
        assert_eq!(fourth.conditions[1].status, "False");
        assert_eq!(fourth.conditions[1].last_transition_time, Some(at(40)));
        // Never read: no Fenced condition at all.
        let mut none = member_status(&MemberClusterStatus::default(), &ok, None, None, at(10));
        add_fenced(&mut none, &MemberClusterStatus::default(), None, at(10));
        assert_eq!(none.conditions.len(), 1);
    }

    #[test]
    fn the_recorded_identity_stays_once_written() {
        let recorded = ClusterIdentity {
            kube_system_uid: "uid-a".into(),
        };
        let ok = probed(true, "ok");
        let first = member_status(
            &MemberClusterStatus::default(),
            &ok,
            Some(recorded.clone()),
            None,
            at(10),
        );
        let refused = Condition {
            ready: false,
            reason: "ClusterIdentityChanged",
            message: "refused".to_string(),
        };
        let later = member_status(&first, &refused, None, None, at(20));
        assert_eq!(later.identity, Some(recorded));
        assert_eq!(
            later.conditions[0].reason.as_deref(),
            Some("ClusterIdentityChanged")
        );
    }
}
