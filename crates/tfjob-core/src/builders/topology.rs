//! Where each replica runs and how replicas on other clusters reach it: the
//! input of `TF_CONFIG` and of per-cluster PodGroups.
//!
//! An address template turns a replica's service into a host name reachable
//! from other clusters. Placeholders: `{service}` (the replica's service
//! name, `<job>-<type>-<index>`), `{namespace}` (the job's namespace) and
//! `{cluster}` (the name of the cluster the replica runs on). The default,
//! [`DEFAULT_ADDRESS_TEMPLATE`], is the Kubernetes multi-cluster services
//! (MCS) name. Replicas of a job on one cluster use `<svc>.<ns>.svc`; a job
//! over several clusters names every replica by its cluster's template, and
//! so does a job whose replicas may move one by one (`failover:
//! LostReplicas`, see [`Topology::use_stable_addresses`]), so that a moved
//! replica keeps its address in every peer's `TF_CONFIG`.

use std::collections::BTreeMap;

use crate::api::ReplicaKey;

/// The cross-cluster address of a service unless a cluster names another.
pub const DEFAULT_ADDRESS_TEMPLATE: &str = "{service}.{namespace}.svc.clusterset.local";

const PLACEHOLDERS: [&str; 3] = ["service", "namespace", "cluster"];

/// The cluster of every replica (a default cluster plus exceptions) and the
/// address template of every cluster that has one.
///
/// The single-cluster controller uses `Topology::new("home")`; multi-cluster
/// placement assigns replicas to members with [`Topology::assign`] and sets
/// each member's `addressTemplate` with [`Topology::set_address_template`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    default_cluster: String,
    clusters: BTreeMap<ReplicaKey, String>,
    address_templates: BTreeMap<String, String>,
    stable_addresses: bool,
}

impl Topology {
    /// Every replica on `default_cluster` until assigned elsewhere.
    pub fn new(default_cluster: impl Into<String>) -> Topology {
        Topology {
            default_cluster: default_cluster.into(),
            clusters: BTreeMap::new(),
            address_templates: BTreeMap::new(),
            stable_addresses: false,
        }
    }

    /// Names every replica by its cluster's address template even when the
    /// replicas share one cluster: their addresses then stay the same
    /// wherever a replica moves (the templates are cluster-independent).
    pub fn use_stable_addresses(&mut self) -> &mut Topology {
        self.stable_addresses = true;
        self
    }

    /// Whether every replica is named by its cluster's address template.
    pub fn stable_addresses(&self) -> bool {
        self.stable_addresses
    }

    /// Places one replica on `cluster`.
    pub fn assign(&mut self, key: ReplicaKey, cluster: impl Into<String>) -> &mut Topology {
        self.clusters.insert(key, cluster.into());
        self
    }

    /// Sets how other clusters reach services on `cluster`.
    pub fn set_address_template(
        &mut self,
        cluster: impl Into<String>,
        template: impl Into<String>,
    ) -> &mut Topology {
        self.address_templates
            .insert(cluster.into(), template.into());
        self
    }

    /// The cluster a replica runs on.
    pub fn cluster_of(&self, key: ReplicaKey) -> &str {
        self.clusters
            .get(&key)
            .map_or(self.default_cluster.as_str(), String::as_str)
    }

    /// The address template of a cluster.
    pub fn address_template(&self, cluster: &str) -> &str {
        self.address_templates
            .get(cluster)
            .map_or(DEFAULT_ADDRESS_TEMPLATE, String::as_str)
    }

    /// How many of `keys` run on `cluster` (a PodGroup's minMember there).
    pub fn replicas_on(&self, keys: &[ReplicaKey], cluster: &str) -> i32 {
        let count = keys
            .iter()
            .filter(|k| self.cluster_of(**k) == cluster)
            .count();
        i32::try_from(count).unwrap_or(i32::MAX)
    }

    /// The host name `from` uses to reach `peer`'s service `service` in
    /// `namespace`: cluster-local when both share a cluster, else the peer
    /// cluster's address template.
    pub fn peer_host(
        &self,
        from: ReplicaKey,
        peer: ReplicaKey,
        service: &str,
        namespace: &str,
    ) -> String {
        let peer_cluster = self.cluster_of(peer);
        if peer_cluster == self.cluster_of(from) {
            format!("{service}.{namespace}.svc")
        } else {
            render_address(
                self.address_template(peer_cluster),
                service,
                namespace,
                peer_cluster,
            )
        }
    }
}

impl Topology {
    /// The host name of `peer`'s service `service` in `namespace` from any
    /// cluster: its cluster's address template (a job over several
    /// clusters names every replica so, see `tf_config`).
    pub fn cluster_independent_host(
        &self,
        peer: ReplicaKey,
        service: &str,
        namespace: &str,
    ) -> String {
        let cluster = self.cluster_of(peer);
        render_address(self.address_template(cluster), service, namespace, cluster)
    }
}

/// Fills an address template's placeholders; anything else, including an
/// unknown `{placeholder}`, is kept as written ([`check_address_template`]
/// rejects those).
pub fn render_address(template: &str, service: &str, namespace: &str, cluster: &str) -> String {
    template
        .replace("{service}", service)
        .replace("{namespace}", namespace)
        .replace("{cluster}", cluster)
}

/// Checks an address template: every `{…}` is a known placeholder, and
/// `{service}` is present (without it every replica would share one host).
pub fn check_address_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(format!("unclosed '{{' in address template {template:?}"));
        };
        let name = &after[..close];
        if !PLACEHOLDERS.contains(&name) {
            return Err(format!(
                "unknown placeholder {{{name}}} in address template {template:?}; known: \
                 {{service}}, {{namespace}}, {{cluster}}"
            ));
        }
        rest = &after[close + 1..];
    }
    if !template.contains("{service}") {
        return Err(format!(
            "address template {template:?} lacks {{service}}: every replica would get the same host"
        ));
    }
    // The host it makes must be a DNS name: a port, a scheme, a path,
    // spaces or a label over 63 characters would make TF_CONFIG addresses
    // no peer can resolve. Each placeholder stands in for a one-letter
    // name here; the real names are DNS labels themselves.
    let example = render_address(template, "s", "n", "c");
    let problems = crate::kube_names::dns1123_subdomain(&example);
    let long_label = example
        .split('.')
        .find(|label| label.len() > crate::kube_names::DNS1123_LABEL_MAX);
    if let Some(label) = long_label {
        return Err(format!(
            "address template {template:?} makes hosts with a label of {} characters ({label:?}); \
             a DNS label has at most {}",
            label.len(),
            crate::kube_names::DNS1123_LABEL_MAX
        ));
    }
    if !problems.is_empty() {
        return Err(format!(
            "address template {template:?} must make a DNS host name (e.g. {example:?}): {}",
            problems.join("; ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ReplicaType;

    #[test]
    fn default_cluster_and_assignments() {
        let chief = ReplicaKey::new(ReplicaType::Chief, 0);
        let worker = ReplicaKey::new(ReplicaType::Worker, 0);
        let mut topology = Topology::new("home");
        topology.assign(worker, "member-1");
        assert_eq!(topology.cluster_of(chief), "home");
        assert_eq!(topology.cluster_of(worker), "member-1");
        assert_eq!(topology.replicas_on(&[chief, worker], "home"), 1);
        assert_eq!(
            topology.peer_host(chief, worker, "mnist-worker-0", "ns"),
            "mnist-worker-0.ns.svc.clusterset.local"
        );
        assert_eq!(
            topology.peer_host(worker, worker, "mnist-worker-0", "ns"),
            "mnist-worker-0.ns.svc"
        );
        topology.set_address_template("member-1", "{service}-{namespace}.{cluster}.example.org");
        assert_eq!(
            topology.peer_host(chief, worker, "mnist-worker-0", "ns"),
            "mnist-worker-0-ns.member-1.example.org"
        );
    }

    #[test]
    fn address_templates_are_checked() {
        assert_eq!(check_address_template(DEFAULT_ADDRESS_TEMPLATE), Ok(()));
        assert_eq!(
            check_address_template("{service}.{cluster}.example.org"),
            Ok(())
        );
        assert!(
            check_address_template("{svc}.example.org")
                .expect_err("unknown")
                .contains("unknown placeholder {svc}")
        );
        assert!(
            check_address_template("{namespace}.example.org")
                .expect_err("no service")
                .contains("lacks {service}")
        );
        assert!(check_address_template("{service.example.org").is_err());
    }

    /// Issue 22: the host a template makes must be a DNS name.
    #[test]
    fn address_templates_must_make_dns_host_names() {
        let long_label = format!("{{service}}.{}.example.org", "x".repeat(64));
        let long_host = format!("{{service}}{}", ".abcdefghij".repeat(25));
        for (template, why) in [
            (
                "{service}:9999",
                "must make a DNS host name (e.g. \"s:9999\")",
            ),
            ("http://{service}/", "must make a DNS host name"),
            ("{service}.my cluster.org", "must make a DNS host name"),
            ("{service}.Example.ORG", "must make a DNS host name"),
            ("{service}..example.org", "must make a DNS host name"),
            (long_label.as_str(), "a label of 64 characters"),
            (long_host.as_str(), "must be no more than 253 characters"),
        ] {
            let error = check_address_template(template).expect_err(template);
            assert!(error.contains(why), "{template}: {error}");
        }
        for fine in [
            "{service}-{namespace}.{cluster}.example.org",
            "{service}.{namespace}.svc.cluster.local",
        ] {
            assert_eq!(check_address_template(fine), Ok(()), "{fine}");
        }
    }
}
