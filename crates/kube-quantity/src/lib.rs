//! Kubernetes resource quantities (`500m`, `2`, `4Gi`, `1e3`) as integer
//! milli-units, which is all a scheduler or a placement needs to compare them.
//! A neutral utility: both the controller's placement and the simulated
//! scheduler use it, as both would use a quantity crate.

use std::collections::BTreeMap;

use serde_json::Value;

/// A quantity in thousandths of its unit (millicores for cpu, milli-bytes for memory).
pub fn parse_milli(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        s if s.starts_with(['e', 'E']) => 10f64.powi(s[1..].parse().ok()?),
        _ => return None,
    };
    Some((number * factor * 1000.0).round() as i64)
}

/// A resource list (`{"cpu": "2", "memory": "4Gi"}`) in milli-units; values
/// that do not parse are left out.
pub fn resource_list(list: Option<&Value>) -> BTreeMap<String, i64> {
    list.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    let milli = match v {
                        Value::String(s) => parse_milli(s),
                        Value::Number(n) => n.as_f64().map(|f| (f * 1000.0).round() as i64),
                        _ => None,
                    }?;
                    Some((k.clone(), milli))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What one container asks for: its requests, its limits standing in for
/// requests it does not state.
pub fn container_requests(
    limits: BTreeMap<String, i64>,
    requests: BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    let mut asked = limits;
    asked.extend(requests);
    asked
}

/// The requests a pod needs on a node, as upstream computes them from what
/// each container asks (`container_requests`): the sum over containers, at
/// least the largest init container, plus one pod slot.
pub fn pod_total(
    containers: impl IntoIterator<Item = BTreeMap<String, i64>>,
    init_containers: impl IntoIterator<Item = BTreeMap<String, i64>>,
) -> BTreeMap<String, i64> {
    let mut total: BTreeMap<String, i64> = BTreeMap::new();
    for asked in containers {
        for (k, v) in asked {
            *total.entry(k).or_default() += v;
        }
    }
    for asked in init_containers {
        for (k, v) in asked {
            let entry = total.entry(k).or_default();
            *entry = (*entry).max(v);
        }
    }
    total.insert("pods".into(), 1000);
    total
}

/// `pod_total` of a pod given as JSON.
pub fn pod_requests(pod: &Value) -> BTreeMap<String, i64> {
    let containers = |field: &str| {
        pod.pointer(&format!("/spec/{field}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                container_requests(
                    resource_list(c.pointer("/resources/limits")),
                    resource_list(c.pointer("/resources/requests")),
                )
            })
    };
    pod_total(containers("containers"), containers("initContainers"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_suffixes() {
        assert_eq!(parse_milli("500m"), Some(500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("4Gi"), Some(4 * 1024 * 1024 * 1024 * 1000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("x"), None);
        assert_eq!(parse_milli("1Qi"), None);
    }

    #[test]
    fn pod_requests_sum_containers_and_respect_init_containers() {
        let pod = json!({"spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": 1}}},
                {"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            ],
            "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
        }});
        let r = pod_requests(&pod);
        assert_eq!(
            r["cpu"], 4000,
            "the init container's 4 cpu exceeds 1.5 from the containers"
        );
        assert_eq!(r["memory"], 1024 * 1024 * 1024 * 1000);
        assert_eq!(r["nvidia.com/gpu"], 1000);
        assert_eq!(r["pods"], 1000);
    }
}
