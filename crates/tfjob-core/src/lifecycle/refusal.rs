//! What a cluster's refusal to create a replica's pod or service means for
//! the job: wait and try again (the cluster may change soon), place the job
//! without that cluster, or fail it (no cluster would take the object).

/// How a refused create reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// The namespace is missing or being deleted there: wait for it.
    NamespaceMissing,
    /// Soon different (the namespace's default ServiceAccount is not made
    /// yet, a conflict): try again.
    Transient,
    /// This cluster's rule (Pod Security, a quota, an admission webhook,
    /// RBAC): the job is placed without it.
    ThisCluster,
    /// The object itself is invalid (400, 422): no cluster would take it.
    Everywhere,
}

/// Reads a refusal by its HTTP code and the API server's message.
pub fn classify(code: u16, message: &str) -> RefusalKind {
    match code {
        404 => RefusalKind::NamespaceMissing,
        _ if message.contains("being terminated") => RefusalKind::NamespaceMissing,
        // kube-apiserver's ServiceAccount admission, before the namespace's
        // ServiceAccount controller made `default`.
        403 if message.contains("error looking up service account") => RefusalKind::Transient,
        409 | 429 => RefusalKind::Transient,
        400 | 422 => RefusalKind::Everywhere,
        400..=499 => RefusalKind::ThisCluster,
        _ => RefusalKind::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_by_code_and_message() {
        use RefusalKind::*;
        let rows = [
            (404, "namespaces \"ns\" not found", NamespaceMissing),
            (
                403,
                "unable to create new content in namespace ns because it is being terminated",
                NamespaceMissing,
            ),
            (
                403,
                "pods \"j-worker-0\" is forbidden: error looking up service account ns/default: serviceaccount \"default\" not found",
                Transient,
            ),
            (
                403,
                "pods \"j-worker-0\" is forbidden: violates PodSecurity \"baseline:latest\": privileged",
                ThisCluster,
            ),
            (
                403,
                "pods \"j-worker-0\" is forbidden: exceeded quota: compute",
                ThisCluster,
            ),
            (
                422,
                "Pod \"j-worker-0\" is invalid: spec.containers[1].name: Duplicate value: \"tensorflow\"",
                Everywhere,
            ),
            (
                400,
                "the body of the request was in an unknown format",
                Everywhere,
            ),
            (409, "already exists", Transient),
            (429, "too many requests", Transient),
            (500, "etcdserver: request timed out", Transient),
        ];
        for (code, message, expected) in rows {
            assert_eq!(classify(code, message), expected, "{code} {message}");
        }
    }
}
