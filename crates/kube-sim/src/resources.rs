//! The resource types a simulated cluster serves: the built-in ones and those
//! that CustomResourceDefinitions add. Discovery, OpenAPI, routing and tables
//! are all derived from this one registry.

use std::borrow::Cow;

use serde_json::Value;

use super::event_apis::{self, EventApi};

/// One served version of a resource type.
#[derive(Debug, Clone)]
pub struct Version {
    pub name: String,
    /// Whether `/status` is served; writes to the main resource then keep the old status.
    pub status_subresource: bool,
    /// The `openAPIV3Schema` of a custom resource version (structural schema).
    pub schema: Option<Value>,
    /// Printer columns beyond NAME (CRD `additionalPrinterColumns`, or the built-in ones).
    pub columns: Vec<Column>,
}

/// A printer column for `kubectl get` tables.
#[derive(Debug, Clone)]
pub struct Column {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub description: String,
    pub priority: i64,
}

/// A resource type as the API server knows it.
#[derive(Debug, Clone)]
pub struct ResourceType {
    pub group: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub list_kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    /// Served versions; the first is the preferred and storage version.
    pub versions: Vec<Version>,
    /// Built-in kinds support strategic merge patch and keep their list-merge keys under SSA.
    pub builtin: bool,
    /// Field labels accepted by field selectors besides `metadata.name` / `metadata.namespace`.
    pub field_labels: Vec<String>,
    /// How the store keeps its objects.
    pub storage: Storage,
}

/// How the store keeps a type's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Storage {
    /// As written, in a table of the type's own.
    AsWritten,
    /// As core `v1` Events, whichever of the two Event APIs wrote them: the
    /// APIs share one table, as on kube-apiserver.
    CoreEvents(EventApi),
}

impl Storage {
    /// The field label of the stored objects that a selector's label names.
    pub fn field_label(self, label: &str) -> Cow<'_, str> {
        match self {
            Storage::CoreEvents(EventApi::Events) => event_apis::core_field_label(label).into(),
            _ => label.into(),
        }
    }
}

impl ResourceType {
    /// The storage key of the type: `<group>/<plural>`.
    pub fn id(&self) -> String {
        type_id(&self.group, &self.plural)
    }

    /// The storage key of the table that keeps the type's objects.
    pub fn storage_id(&self) -> String {
        match self.storage {
            Storage::AsWritten => self.id(),
            Storage::CoreEvents(_) => type_id("", "events"),
        }
    }

    /// An object written through this type, as the store keeps it.
    pub fn stored_form(&self, obj: Value) -> Value {
        match self.storage {
            Storage::AsWritten => obj,
            Storage::CoreEvents(api) => event_apis::convert(&obj, api, EventApi::Core),
        }
    }

    /// Whether the stored objects are converted to be served by this type.
    pub fn serves_converted(&self) -> bool {
        self.storage == Storage::CoreEvents(EventApi::Events)
    }

    /// A stored object as this type serves it.
    pub fn served_form(&self, obj: Value) -> Value {
        if self.serves_converted() {
            event_apis::convert(&obj, EventApi::Core, EventApi::Events)
        } else {
            obj
        }
    }

    pub fn version(&self, name: &str) -> Option<&Version> {
        self.versions.iter().find(|v| v.name == name)
    }

    pub fn preferred_version(&self) -> &str {
        self.versions
            .first()
            .map(|v| v.name.as_str())
            .unwrap_or("v1")
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// Whether `/scale` is served (an `autoscaling/v1` Scale of `spec.replicas`).
    pub fn serves_scale(&self) -> bool {
        self.builtin && self.group == "apps" && self.plural == "deployments"
    }

    /// Every field label a selector may use for this type.
    pub fn all_field_labels(&self) -> Vec<&str> {
        let mut labels = vec!["metadata.name", "metadata.namespace"];
        labels.extend(self.field_labels.iter().map(String::as_str));
        labels
    }

    /// Parses a CRD object into the type it defines.
    pub fn from_crd(crd: &Value) -> Result<ResourceType, String> {
        let spec = crd.get("spec").ok_or("spec: Required value")?;
        let names = spec.get("names").ok_or("spec.names: Required value")?;
        let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let strings = |v: &Value, k: &str| -> Vec<String> {
            v.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        let group = text(spec, "group").ok_or("spec.group: Required value")?;
        let plural = text(names, "plural").ok_or("spec.names.plural: Required value")?;
        let kind = text(names, "kind").ok_or("spec.names.kind: Required value")?;
        let expected_name = format!("{plural}.{group}");
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if name != expected_name {
            return Err(format!(
                "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
            ));
        }
        let namespaced = match text(spec, "scope").as_deref() {
            Some("Namespaced") => true,
            Some("Cluster") => false,
            _ => {
                return Err(
                    "spec.scope: Unsupported value: must be \"Cluster\" or \"Namespaced\"".into(),
                );
            }
        };
        let mut versions = Vec::new();
        let mut storage_first = Vec::new();
        for v in spec
            .get("versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if v.get("served").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let Some(vname) = text(v, "name") else {
                return Err("spec.versions[].name: Required value".into());
            };
            let columns = v
                .get("additionalPrinterColumns")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    Some(Column {
                        name: text(c, "name")?,
                        type_: text(c, "type").unwrap_or_else(|| "string".into()),
                        json_path: text(c, "jsonPath")?,
                        description: text(c, "description").unwrap_or_default(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                })
                .collect();
            if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
                let mut refused = Vec::new();
                super::validate::unparsable_rules(
                    schema,
                    "spec.validation.openAPIV3Schema.",
                    &mut refused,
                );
                if let Some(first) = refused.into_iter().next() {
                    return Err(first);
                }
            }
            let version = Version {
                name: vname,
                status_subresource: v.pointer("/subresources/status").is_some(),
                schema: v.pointer("/schema/openAPIV3Schema").cloned(),
                columns,
            };
            if v.get("storage").and_then(Value::as_bool) == Some(true) {
                storage_first.push(version);
            } else {
                versions.push(version);
            }
        }
        storage_first.extend(versions);
        if storage_first.is_empty() {
            return Err(
                "spec.versions: Invalid value: must have at least one served version".into(),
            );
        }
        Ok(ResourceType {
            singular: text(names, "singular").unwrap_or_else(|| kind.to_lowercase()),
            list_kind: text(names, "listKind").unwrap_or_else(|| format!("{kind}List")),
            short_names: strings(names, "shortNames"),
            categories: strings(names, "categories"),
            group,
            plural,
            kind,
            namespaced,
            versions: storage_first,
            builtin: false,
            field_labels: Vec::new(),
            storage: Storage::AsWritten,
        })
    }
}

pub fn type_id(group: &str, plural: &str) -> String {
    format!("{group}/{plural}")
}

fn column(name: &str, type_: &str, json_path: &str, priority: i64) -> Column {
    Column {
        name: name.into(),
        type_: type_.into(),
        json_path: json_path.into(),
        description: String::new(),
        priority,
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
    status: bool,
    field_labels: &'static [&'static str],
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
        short_names: &["ns"],
        status: true,
        field_labels: &["status.phase"],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "pods",
        kind: "Pod",
        namespaced: true,
        short_names: &["po"],
        status: true,
        field_labels: &[
            "spec.nodeName",
            "spec.schedulerName",
            "status.phase",
            "status.podIP",
            "spec.restartPolicy",
        ],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "services",
        kind: "Service",
        namespaced: true,
        short_names: &["svc"],
        status: true,
        field_labels: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "nodes",
        kind: "Node",
        namespaced: false,
        short_names: &["no"],
        status: true,
        field_labels: &["spec.unschedulable"],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "secrets",
        kind: "Secret",
        namespaced: true,
        short_names: &[],
        status: false,
        field_labels: &["type"],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "configmaps",
        kind: "ConfigMap",
        namespaced: true,
        short_names: &["cm"],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status: false,
        field_labels: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        kind: "Event",
        namespaced: true,
        short_names: &["ev"],
        status: false,
        field_labels: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "type",
            "reportingController",
        ],
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        kind: "Lease",
        namespaced: true,
        short_names: &[],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        plural: "serviceaccounts",
        kind: "ServiceAccount",
        namespaced: true,
        short_names: &["sa"],
        status: false,
        field_labels: &[],
    },
    // Stored only (no controller acts on them): enough to apply a
    // deployment manifest, as `deploy/` has, and read it back.
    Builtin {
        group: "apps",
        version: "v1",
        plural: "deployments",
        kind: "Deployment",
        namespaced: true,
        short_names: &["deploy"],
        status: true,
        field_labels: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterroles",
        kind: "ClusterRole",
        namespaced: false,
        short_names: &[],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "roles",
        kind: "Role",
        namespaced: true,
        short_names: &[],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "rolebindings",
        kind: "RoleBinding",
        namespaced: true,
        short_names: &[],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "rbac.authorization.k8s.io",
        version: "v1",
        plural: "clusterrolebindings",
        kind: "ClusterRoleBinding",
        namespaced: false,
        short_names: &[],
        status: false,
        field_labels: &[],
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        plural: "customresourcedefinitions",
        kind: "CustomResourceDefinition",
        namespaced: false,
        short_names: &["crd", "crds"],
        status: true,
        field_labels: &[],
    },
];

/// Printer columns for built-in kinds whose cells are plain JSON paths; the
/// computed ones (pod READY/STATUS, node STATUS) are filled in by `table`.
fn builtin_columns(plural: &str) -> Vec<Column> {
    match plural {
        "namespaces" => vec![column("Status", "string", ".status.phase", 0)],
        "services" => vec![
            column("Type", "string", ".spec.type", 0),
            column("Cluster-IP", "string", ".spec.clusterIP", 0),
        ],
        "secrets" => vec![column("Type", "string", ".type", 0)],
        "leases" => vec![column("Holder", "string", ".spec.holderIdentity", 0)],
        _ => Vec::new(),
    }
}

/// The types every simulated cluster serves from the start.
pub fn builtins() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(|b| ResourceType {
            group: b.group.into(),
            plural: b.plural.into(),
            singular: b.kind.to_lowercase(),
            kind: b.kind.into(),
            list_kind: format!("{}List", b.kind),
            namespaced: b.namespaced,
            short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
            categories: if matches!(b.plural, "pods" | "services") {
                vec!["all".into()]
            } else {
                Vec::new()
            },
            versions: vec![Version {
                name: b.version.into(),
                status_subresource: b.status,
                schema: None,
                columns: builtin_columns(b.plural),
            }],
            builtin: true,
            field_labels: b.field_labels.iter().map(|s| s.to_string()).collect(),
            storage: match (b.group, b.plural) {
                ("", "events") => Storage::CoreEvents(EventApi::Core),
                ("events.k8s.io", "events") => Storage::CoreEvents(EventApi::Events),
                _ => Storage::AsWritten,
            },
        })
        .collect()
}
