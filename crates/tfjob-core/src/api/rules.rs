//! What the API server refuses at the door (`kubectl apply` fails): schema
//! bounds and enums, and CEL rules (`x-kubernetes-validations`) for what a
//! schema cannot say. The controller's own validation (`crate::validation`)
//! checks the same and more (the pod template, which the CRD preserves
//! unchecked), for objects stored before these rules existed.
//!
//! The rules stay within the CEL the simulated API server evaluates
//! (`kube_sim`'s `cel`): `self`, `oldSelf`, field selection, `has`, `size`,
//! `string`, `all`/`exists`/`exists_one`, comparisons, `in`, `&&`, `||`, `!`
//! and integer `+`/`-`.

use serde_json::{Value, json};

use super::{FailoverScope, FederationStrategy, MAX_REPLICAS, ReplicaType, RestartPolicy};

/// The longest name a pod or service may have: a DNS-1035 label.
const MAX_NAME: usize = 63;

/// The most replicas one job may have, over all its replica types: with
/// [`MAX_TEMPLATE_BYTES_TIMES_REPLICAS`], what keeps one job's share of
/// the controller's memory (chart limit 1 GiB) to about half of it
/// (docs/src/api/door.md, "The job-size bound").
pub const MAX_TOTAL_REPLICAS: i64 = 1024;

/// The most bytes of pod templates one job may ask the controller to build
/// pods from: each replica spec's template (as JSON) times its replicas,
/// summed over the replica specs. 16 MiB: e.g. 1,024 replicas of 16 KiB
/// templates, or 320 of a template carrying a 50 KB annotation.
pub const MAX_TEMPLATE_BYTES_TIMES_REPLICAS: usize = 16 * 1024 * 1024;

/// The largest `spec.scheduler.federation.weights` value.
pub const MAX_WEIGHT: i32 = 100;

/// Adds the door's rules to the job's `openAPIV3Schema`.
pub fn add_door_rules(root: &mut Value) {
    rule(
        root,
        json!({
            "rule": "!has(oldSelf.status) || !has(oldSelf.status.placement) || \
                     self.spec.replicaSpecs == oldSelf.spec.replicaSpecs",
            "message": "spec.replicaSpecs may not change after the job started; \
                        create a new job instead",
            "fieldPath": ".spec.replicaSpecs",
            "reason": "FieldValueForbidden",
        }),
    );
    // `<job>-<type>-<index>` names every pod and service; 2 for the dashes.
    rule(
        root,
        json!({
            "rule": format!(
                "self.spec.replicaSpecs.all(r, size(self.metadata.name) + size(r.type) + \
                 size(string(r.replicas - 1)) + 2 <= {MAX_NAME})"
            ),
            "message": format!(
                "metadata.name is too long: every pod and service is named \
                 <job>-<type>-<index>, which must fit {MAX_NAME} characters"
            ),
        }),
    );
    let Some(spec) = root.pointer_mut("/properties/spec") else {
        return;
    };
    if let Some(specs) = spec.pointer_mut("/properties/replicaSpecs") {
        specs["minItems"] = json!(1);
        specs["maxItems"] = json!(ReplicaType::ALL.len());
        rule(
            specs,
            json!({
                "rule": "self.all(a, self.exists_one(b, b.type == a.type))",
                "message": "each replica type may be listed once",
            }),
        );
        // The replicas of the (at most four) replica specs, summed: the
        // CEL subset has no sum, and indexing past the end is an error.
        let total = (0..ReplicaType::ALL.len())
            .map(|i| format!("(size(self) > {i} ? self[{i}].replicas : 0)"))
            .collect::<Vec<_>>()
            .join(" + ");
        rule(
            specs,
            json!({
                "rule": format!("{total} <= {MAX_TOTAL_REPLICAS}"),
                "message": format!(
                    "a job may have at most {MAX_TOTAL_REPLICAS} replicas over all its replica types"
                ),
            }),
        );
        rule(
            specs,
            json!({
                "rule": "self.exists(r, r.type == 'chief' || r.type == 'worker')",
                "message": "a chief or at least one worker is needed: the master replica \
                            (chief, else worker-0) decides when the job succeeds",
            }),
        );
        if let Some(replica) = specs.get_mut("items") {
            let types: Vec<&str> = ReplicaType::ALL.iter().map(|t| t.as_str()).collect();
            let policies: Vec<&str> = RestartPolicy::ALL.iter().map(|p| p.as_str()).collect();
            if let Some(properties) = replica.get_mut("properties") {
                properties["type"]["enum"] = json!(types);
                properties["replicas"]["minimum"] = json!(1);
                properties["replicas"]["maximum"] = json!(MAX_REPLICAS);
                properties["restartPolicy"]["enum"] = json!(policies);
            }
            rule(
                replica,
                json!({
                    "rule": "!(self.type in ['chief', 'evaluator']) || self.replicas <= 1",
                    "message": "a job may have at most one chief and one evaluator",
                    "fieldPath": ".replicas",
                }),
            );
        }
    }
    if let Some(policy) = spec.pointer_mut("/properties/runPolicy/properties") {
        policy["activeDeadlineSeconds"]["minimum"] = json!(1);
        policy["backoffLimit"]["minimum"] = json!(0);
    }
    if let Some(t9k) = spec.pointer_mut("/properties/scheduler/properties/t9kScheduler/properties")
    {
        t9k["priority"]["minimum"] = json!(0);
        t9k["priority"]["maximum"] = json!(100);
    }
    if let Some(federation) = spec.pointer_mut("/properties/scheduler/properties/federation") {
        let strategies: Vec<&str> = FederationStrategy::ALL.iter().map(|s| s.as_str()).collect();
        federation["properties"]["strategy"]["enum"] = json!(strategies);
        let scopes: Vec<&str> = FailoverScope::ALL.iter().map(|s| s.as_str()).collect();
        federation["properties"]["failover"]["enum"] = json!(scopes);
        federation["properties"]["weights"]["additionalProperties"]["minimum"] = json!(0);
        federation["properties"]["weights"]["additionalProperties"]["maximum"] = json!(MAX_WEIGHT);
    }
}

fn rule(schema: &mut Value, rule: Value) {
    let rules = &mut schema["x-kubernetes-validations"];
    if !rules.is_array() {
        *rules = json!([]);
    }
    if let Some(rules) = rules.as_array_mut() {
        rules.push(rule);
    }
}
