//! Events are one resource served by two APIs, as on kube-apiserver: core
//! `v1` and `events.k8s.io/v1`. The store keeps every Event as a core `v1`
//! Event; one written or read through `events.k8s.io/v1` is converted with
//! the field mapping of upstream's `pkg/apis/events/v1/conversion.go`
//! (`note` ↔ `message`, `regarding` ↔ `involvedObject`, `deprecated*` ↔ the
//! core fields of the same meaning, `reportingController` ↔
//! `reportingComponent`). Either way the object gets the shape upstream's
//! typed encoding gives it: unknown fields dropped, fields without
//! `omitempty` always present.

use serde_json::{Map, Value, json};

/// The two APIs of Events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventApi {
    Core,
    Events,
}

/// How a Go field of an Event encodes when it is absent or empty.
#[derive(Debug, Clone, Copy)]
enum Encoding {
    /// `omitempty` on a string, number or pointer: left out.
    OmitEmpty,
    /// A struct (`omitempty` does not apply): `{}`.
    Struct,
    /// `metav1.Time` and `MicroTime`: `null`.
    Time,
    /// A string without `omitempty`: `""`.
    Text,
}

/// One field of an Event: its name and encoding in core `v1`, then in
/// `events.k8s.io/v1`.
struct Field {
    core: (&'static str, Encoding),
    events: (&'static str, Encoding),
}

const fn field(core: (&'static str, Encoding), events: (&'static str, Encoding)) -> Field {
    Field { core, events }
}

use Encoding::{OmitEmpty, Struct, Text, Time};

const FIELDS: &[Field] = &[
    field(("eventTime", Time), ("eventTime", Time)),
    field(("series", OmitEmpty), ("series", OmitEmpty)),
    field(
        ("reportingComponent", Text),
        ("reportingController", OmitEmpty),
    ),
    field(
        ("reportingInstance", Text),
        ("reportingInstance", OmitEmpty),
    ),
    field(("action", OmitEmpty), ("action", OmitEmpty)),
    field(("reason", OmitEmpty), ("reason", OmitEmpty)),
    field(("involvedObject", Struct), ("regarding", Struct)),
    field(("related", OmitEmpty), ("related", OmitEmpty)),
    field(("message", OmitEmpty), ("note", OmitEmpty)),
    field(("type", OmitEmpty), ("type", OmitEmpty)),
    field(("source", Struct), ("deprecatedSource", Struct)),
    field(("firstTimestamp", Time), ("deprecatedFirstTimestamp", Time)),
    field(("lastTimestamp", Time), ("deprecatedLastTimestamp", Time)),
    field(("count", OmitEmpty), ("deprecatedCount", OmitEmpty)),
];

impl EventApi {
    fn api_version(self) -> &'static str {
        match self {
            EventApi::Core => "v1",
            EventApi::Events => "events.k8s.io/v1",
        }
    }

    fn of(self, field: &Field) -> (&'static str, Encoding) {
        match self {
            EventApi::Core => field.core,
            EventApi::Events => field.events,
        }
    }
}

/// An Event as written through `from`, as `to` serves it (`from == to`
/// gives the object the shape of its typed encoding).
pub fn convert(event: &Value, from: EventApi, to: EventApi) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(to.api_version()));
    out.insert("kind".into(), json!("Event"));
    if let Some(metadata) = event.get("metadata") {
        out.insert("metadata".into(), metadata.clone());
    }
    for field in FIELDS {
        let (source, _) = from.of(field);
        let (target, encoding) = to.of(field);
        if let Some(value) = encode(event.get(source), encoding) {
            out.insert(target.into(), value);
        }
    }
    Value::Object(out)
}

fn encode(value: Option<&Value>, encoding: Encoding) -> Option<Value> {
    let value = value.filter(|v| !v.is_null());
    match encoding {
        Encoding::OmitEmpty => value
            .filter(|v| v.as_str() != Some("") && v.as_i64() != Some(0))
            .cloned(),
        Encoding::Struct => Some(value.cloned().unwrap_or_else(|| json!({}))),
        Encoding::Time => Some(
            value
                .filter(|v| v.as_str() != Some(""))
                .cloned()
                .unwrap_or(Value::Null),
        ),
        Encoding::Text => Some(value.cloned().unwrap_or_else(|| json!(""))),
    }
}

/// The core `v1` field label an `events.k8s.io/v1` field selector names
/// (`regarding.name` is `involvedObject.name`).
pub fn core_field_label(label: &str) -> String {
    let (head, rest) = label
        .split_once('.')
        .map_or((label, None), |(head, rest)| (head, Some(rest)));
    let head = FIELDS
        .iter()
        .find(|f| f.events.0 == head)
        .map_or(head, |f| f.core.0);
    match rest {
        Some(rest) => format!("{head}.{rest}"),
        None => head.to_string(),
    }
}

/// What a core `v1` Event's `source` field label selects: the source
/// component, else the reporting component (upstream's
/// `EventToSelectableFields`).
pub fn source(core_event: &Value) -> Option<String> {
    [
        core_event.pointer("/source/component"),
        core_event.get("reportingComponent"),
    ]
    .into_iter()
    .flatten()
    .filter_map(Value::as_str)
    .find(|s| !s.is_empty())
    .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded_event() -> Value {
        json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "job.1", "namespace": "ns"},
            "eventTime": "2026-01-02T03:04:05.123456Z",
            "reportingController": "tfjob-federator",
            "reportingInstance": "tfjob-federator-0",
            "action": "Create", "reason": "Created", "type": "Normal",
            "regarding": {"kind": "TFJob", "name": "job", "namespace": "ns", "uid": "u1"},
            "related": {"kind": "Pod", "name": "job-worker-0"},
            "note": "created pod job-worker-0",
            "series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:05.000000Z"},
            "unknownField": true,
        })
    }

    #[test]
    fn events_v1_fields_map_to_their_core_names() {
        let core = convert(&recorded_event(), EventApi::Events, EventApi::Core);
        assert_eq!(
            core,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "job.1", "namespace": "ns"},
                "eventTime": "2026-01-02T03:04:05.123456Z",
                "reportingComponent": "tfjob-federator",
                "reportingInstance": "tfjob-federator-0",
                "action": "Create", "reason": "Created", "type": "Normal",
                "involvedObject": {"kind": "TFJob", "name": "job", "namespace": "ns", "uid": "u1"},
                "related": {"kind": "Pod", "name": "job-worker-0"},
                "message": "created pod job-worker-0",
                "series": {"count": 2, "lastObservedTime": "2026-01-02T03:05:05.000000Z"},
                "source": {},
                "firstTimestamp": null,
                "lastTimestamp": null,
            })
        );
        assert_eq!(
            convert(&core, EventApi::Core, EventApi::Events),
            convert(&recorded_event(), EventApi::Events, EventApi::Events),
            "a round trip through core v1 keeps every field events.k8s.io/v1 has"
        );
    }

    #[test]
    fn core_fields_map_to_the_deprecated_events_v1_fields() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "pod.1", "namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": "pod"},
            "reason": "Pulled", "message": "pulled", "type": "Normal",
            "source": {"component": "kubelet", "host": "node-0"},
            "firstTimestamp": "2026-01-02T03:04:05Z",
            "lastTimestamp": "2026-01-02T03:06:05Z",
            "count": 3,
            "reportingComponent": "",
        });
        assert_eq!(
            convert(&core, EventApi::Core, EventApi::Events),
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "pod.1", "namespace": "ns"},
                "eventTime": null,
                "regarding": {"kind": "Pod", "name": "pod"},
                "reason": "Pulled", "note": "pulled", "type": "Normal",
                "deprecatedSource": {"component": "kubelet", "host": "node-0"},
                "deprecatedFirstTimestamp": "2026-01-02T03:04:05Z",
                "deprecatedLastTimestamp": "2026-01-02T03:06:05Z",
                "deprecatedCount": 3,
            })
        );
    }

    #[test]
    fn events_v1_field_labels_name_core_fields() {
        assert_eq!(core_field_label("regarding.name"), "involvedObject.name");
        assert_eq!(
            core_field_label("reportingController"),
            "reportingComponent"
        );
        assert_eq!(core_field_label("reason"), "reason");
        assert_eq!(core_field_label("metadata.name"), "metadata.name");
    }
}
