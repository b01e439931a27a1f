use serde_json::json;

use super::*;

/// Request bodies kubectl v1.32 sent (`-v=9`), as hex.
const KUBECTL_CREATE_DEPLOYMENT: &str = "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412ab010a1f0a0377656212001a0022002a003200380042005a0a0a036170701203776562127a0801120c0a0a0a0361707012037765621a600a1c0a0012001a0022002a003200380042005a0a0a036170701203776562124012220a056e67696e7812056e67696e782a0042006a007200800100880100900100a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c0800100018002000280038001a002200";
const KUBECTL_CREATE_SECRET: &str = "6b3873000a0c0a0276311206536563726574121f0a130a0373656312001a0022002a0032003800420012060a01611201621a001a002200";
const KUBECTL_CREATE_NAMESPACE: &str = "6b3873000a0f0a02763112094e616d657370616365121b0a130a036e733212001a0022002a0032003800420012001a020a001a002200";

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex fixture"))
        .collect()
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

fn int(tag: u64, v: i64) -> Vec<u8> {
    let mut out = varint(tag << 3);
    out.extend(varint(v as u64));
    out
}

fn len(tag: u64, bytes: &[u8]) -> Vec<u8> {
    let mut out = varint(tag << 3 | 2);
    out.extend(varint(bytes.len() as u64));
    out.extend_from_slice(bytes);
    out
}

fn text(tag: u64, s: &str) -> Vec<u8> {
    len(tag, s.as_bytes())
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(len(1, &[text(1, api_version), text(2, kind)].concat()));
    out.extend(len(2, raw));
    out
}

#[test]
fn schema_parses_and_every_message_it_names_is_defined_or_special() {
    let schema = schema().expect("schema.txt parses");
    assert!(schema.kinds.len() >= 17, "{:?}", schema.kinds.keys());
    for message in schema.kinds.values() {
        assert!(schema.messages.contains_key(message), "{message}");
    }
    let special = [
        "Time",
        "MicroTime",
        "Duration",
        "Quantity",
        "IntOrString",
        "FieldsV1",
        "RawExtension",
        "Json",
        "JsonSchemaPropsOrArray",
        "JsonSchemaPropsOrBool",
        "JsonSchemaPropsOrStringArray",
    ];
    for (name, fields) in &schema.messages {
        for field in fields.values() {
            if let Type::Message(m) = &field.ty {
                let short = m.rsplit('.').next().unwrap_or_default();
                assert!(
                    schema.messages.contains_key(m) || special.contains(&short),
                    "{name}.{} refers to {m}",
                    field.json
                );
            }
        }
    }
}

#[test]
fn kubectl_create_deployment_decodes_to_what_go_prints_as_json() {
    let decoded = decode(&hex(KUBECTL_CREATE_DEPLOYMENT)).expect("decodes");
    assert_eq!(
        decoded,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx", "resources": {}}]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
}

#[test]
fn kubectl_create_secret_and_namespace_decode() {
    let secret = decode(&hex(KUBECTL_CREATE_SECRET)).expect("decodes");
    assert_eq!(
        secret,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "data": {"a": "Yg=="}})
    );
    let namespace = decode(&hex(KUBECTL_CREATE_NAMESPACE)).expect("decodes");
    assert_eq!(
        namespace,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns2"}, "spec": {}, "status": {}})
    );
}

#[test]
fn zero_values_are_kept_only_where_they_mean_something() {
    // Deployment: replicas 0 (a pointer) is kept, minReadySeconds 0 and an
    // empty generateName are dropped.
    let meta = [text(1, "web"), text(2, "")].concat();
    let spec = [int(1, 0), int(5, 0)].concat();
    let body = envelope(
        "apps/v1",
        "Deployment",
        &[len(1, &meta), len(2, &spec)].concat(),
    );
    let decoded = decode(&body).expect("decodes");
    assert_eq!(decoded["metadata"], json!({"name": "web"}));
    assert_eq!(decoded["spec"], json!({"replicas": 0}));
    // A required field (ContainerPort.containerPort) and runAsUser 0 (root).
    let port = [int(3, 0)].concat();
    let security = int(4, 0);
    let container = [text(1, "c"), len(6, &port), len(15, &security)].concat();
    let pod = envelope("v1", "Pod", &len(2, &len(2, &container)));
    let decoded = decode(&pod).expect("decodes");
    assert_eq!(
        decoded["spec"]["containers"],
        json!([{"name": "c", "ports": [{"containerPort": 0}], "securityContext": {"runAsUser": 0}}])
    );
}

#[test]
fn special_messages_take_their_json_form() {
    // Pod: a toleration's -1 seconds, resources (Quantity map), a probe's
    // port (IntOrString), a deletion time (Time) and packed int64s.
    let quantity = |s: &str| text(1, s);
    let entry = |k: &str, v: Vec<u8>| len(1, &[text(1, k), len(2, &v)].concat());
    let resources = [
        entry("cpu", quantity("500m")),
        entry("memory", quantity("1Gi")),
    ]
    .concat();
    let int_or_string = [int(1, 1), text(3, "http")].concat();
    let probe = len(1, &len(2, &len(2, &int_or_string))); // handler.httpGet.port
    let container = [text(1, "c"), len(8, &resources), len(10, &probe)].concat();
    let toleration = [text(1, "k"), int(5, -1)].concat();
    let mut packed = Vec::new();
    for v in [1000u64, 2000] {
        packed.extend(varint(v));
    }
    let security = len(4, &packed); // PodSecurityContext.supplementalGroups
    let spec = [len(2, &container), len(22, &toleration), len(14, &security)].concat();
    let meta = [text(1, "p"), len(9, &int(1, 1_700_000_000))].concat();
    let body = envelope("v1", "Pod", &[len(1, &meta), len(2, &spec)].concat());
    let decoded = decode(&body).expect("decodes");
    assert_eq!(
        decoded["metadata"]["deletionTimestamp"],
        json!("2023-11-14T22:13:20Z")
    );
    let container = &decoded["spec"]["containers"][0];
    assert_eq!(
        container["resources"]["limits"],
        json!({"cpu": "500m", "memory": "1Gi"})
    );
    // Probe embeds its handler (`json:",inline"`).
    assert_eq!(
        container["livenessProbe"],
        json!({"httpGet": {"port": "http"}})
    );
    assert_eq!(
        decoded["spec"]["tolerations"],
        json!([{"key": "k", "tolerationSeconds": -1}])
    );
    assert_eq!(
        decoded["spec"]["securityContext"]["supplementalGroups"],
        json!([1000, 2000])
    );
}

fn double(tag: u64, v: f64) -> Vec<u8> {
    let mut out = varint(tag << 3 | 1);
    out.extend(v.to_bits().to_le_bytes());
    out
}

#[test]
fn a_crd_decodes_with_its_schema_unions() {
    let prop = |k: &str, v: Vec<u8>| len(29, &[text(1, k), len(2, &v)].concat());
    let size = [text(5, "integer"), double(11, 0.0), len(8, &text(1, "3"))].concat();
    let tags = [text(5, "array"), len(24, &len(1, &text(5, "string")))].concat();
    let labels = [text(5, "object"), len(30, &len(2, &text(5, "string")))].concat();
    let color = [
        text(5, "string"),
        len(20, &text(1, "\"red\"")),
        len(20, &text(1, "\"blue\"")),
    ]
    .concat();
    let closed = [text(5, "object"), len(30, &int(1, 0))].concat();
    let schema = [
        text(5, "object"),
        prop("size", size),
        prop("tags", tags),
        prop("labels", labels),
        prop("color", color),
        prop("closed", closed),
    ]
    .concat();
    let version = |name: &str, served: bool| {
        [
            text(1, name),
            int(2, served as i64),
            int(3, served as i64),
            len(4, &len(1, &schema)),
        ]
        .concat()
    };
    let names = [text(1, "widgets"), text(4, "Widget")].concat();
    let spec = [
        text(1, "example.com"),
        len(3, &names),
        text(4, "Namespaced"),
        len(7, &version("v1", true)),
        len(7, &version("v0", false)),
    ]
    .concat();
    let meta = text(1, "widgets.example.com");
    let body = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &[len(1, &meta), len(2, &spec)].concat(),
    );
    let decoded = decode(&body).expect("decodes");
    let schema = json!({
        "type": "object",
        "properties": {
            "size": {"type": "integer", "minimum": 0, "default": 3},
            "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "color": {"type": "string", "enum": ["red", "blue"]},
            "closed": {"type": "object", "additionalProperties": false},
        },
    });
    assert_eq!(
        decoded["spec"],
        json!({
            "group": "example.com",
            "names": {"plural": "widgets", "kind": "Widget"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema}},
                {"name": "v0", "served": false, "storage": false, "schema": {"openAPIV3Schema": schema}},
            ],
        })
    );
}

#[test]
fn embedded_structs_are_inlined() {
    // A volume embeds its source; a ConfigMap source embeds its reference.
    let config_map = [len(1, &text(1, "settings")), int(3, 0o644)].concat();
    let volume = [text(1, "cfg"), len(2, &len(19, &config_map))].concat();
    let body = envelope("v1", "Pod", &len(2, &len(1, &volume)));
    let decoded = decode(&body).expect("decodes");
    assert_eq!(
        decoded["spec"]["volumes"],
        json!([{"name": "cfg", "configMap": {"name": "settings", "defaultMode": 420}}])
    );
}

#[test]
fn a_kind_without_a_schema_is_415_and_a_broken_body_400() {
    let widget = envelope("example.com/v1", "Widget", &text(1, "x"));
    let err = decode(&widget).expect_err("unknown kind");
    assert_eq!(err.code, 415, "{err}");
    assert!(err.message.contains("Widget"), "{err}");

    let mut encoded = MAGIC.to_vec();
    encoded.extend(len(1, &[text(1, "v1"), text(2, "ConfigMap")].concat()));
    encoded.extend(text(3, "gzip"));
    assert_eq!(decode(&encoded).expect_err("encoding").code, 415);

    assert_eq!(
        decode(b"{\"kind\":\"ConfigMap\"}")
            .expect_err("no magic")
            .code,
        400
    );
    let mut truncated = hex(KUBECTL_CREATE_SECRET);
    truncated.truncate(truncated.len() - 12);
    assert_eq!(decode(&truncated).expect_err("truncated").code, 400);
    // A string field of a known kind in the wrong wire type.
    let wrong = envelope("v1", "ConfigMap", &len(1, &int(1, 5)));
    assert_eq!(decode(&wrong).expect_err("wire type").code, 400);
    // Invalid UTF-8 in a string.
    let bad = envelope("v1", "ConfigMap", &len(1, &len(1, &[0xff, 0xfe])));
    assert_eq!(decode(&bad).expect_err("utf-8").code, 400);
}

#[test]
fn nesting_beyond_the_limit_is_rejected() {
    // JSONSchemaProps.not, 150 deep, in a CRD.
    let mut props = text(5, "object");
    for _ in 0..150 {
        props = len(28, &props);
    }
    let validation = len(1, &props);
    let version = [text(1, "v1"), len(4, &validation)].concat();
    let spec = len(7, &version);
    let crd = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        &len(2, &spec),
    );
    let err = decode(&crd).expect_err("deep");
    assert_eq!(err.code, 400, "{err}");
    assert!(err.message.contains("nested too deeply"), "{err}");
}

#[test]
fn delete_options_of_any_group_version_decode() {
    let options = [int(1, 0), text(4, "Foreground")].concat();
    for api_version in ["v1", "apps/v1", "meta.k8s.io/v1"] {
        let decoded = decode(&envelope(api_version, "DeleteOptions", &options)).expect("decodes");
        assert_eq!(decoded["gracePeriodSeconds"], 0, "{api_version}");
        assert_eq!(decoded["propagationPolicy"], "Foreground", "{api_version}");
    }
}

#[test]
fn go_durations() {
    assert_eq!(go_duration(0), "0s");
    assert_eq!(go_duration(1_500_000_000), "1.5s");
    assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
    assert_eq!(go_duration(90_000_000_000), "1m30s");
    assert_eq!(go_duration(2_000_000), "2ms");
    assert_eq!(go_duration(-5), "-5ns");
}

#[test]
fn content_type_with_parameters_is_protobuf() {
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf(
        "application/vnd.kubernetes.protobuf; charset=utf-8"
    ));
    assert!(!is_protobuf("application/json"));
}
