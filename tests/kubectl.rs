//! The real kubectl (v1.32, default settings: server-side field validation
//! from the OpenAPI documents, discovery cache in a private dir) against
//! both grounds from one source: `NAME::sim` on a simulated cluster of its
//! own (in-process), `NAME::real` on the real cluster the test binary
//! shares (`hack/real-clusters`); either way kubectl works in a namespace of
//! the test's own. Tests that use the cluster-wide `widgets.example.com`
//! CRD take turns on the real cluster (`Kubectl::take_turn`).

#[macro_use]
mod common;

use std::time::Duration;

use common::kubectl::Kubectl;
use common::real::Ground;
use serde_json::{Value, json};

on_both_grounds!(sync Kubectl::on;
    create_reports_already_exists_on_second_create,
    client_side_apply_of_builtin_kinds_uses_three_way_strategic_merge,
    client_side_apply_of_custom_resources_uses_json_merge_patch,
    server_side_apply_creates_updates_and_reports_conflicts,
    get_lists_with_selectors_and_prints_tables,
    get_watch_sees_concurrent_changes,
    patch_merge_json_and_failed_json_test_op,
    patch_status_subresource_leaves_spec_and_generation,
    wait_returns_when_a_condition_appears_or_the_object_is_deleted,
    delete_removes_objects,
    crd_shows_in_discovery_with_printer_columns_and_strict_validation,
    get_nodes_shows_ready_nodes_with_capacity,
    get_pods_watch_shows_the_phases_and_yaml_the_status,
    create_generators_send_protobuf_bodies_that_the_simulator_decodes,
    typed_client_writes_of_pods_services_serviceaccounts_and_rbac_decode,
    scale_writes_replicas_through_the_scale_subresource,
    protobuf_bodies_the_simulator_cannot_decode_get_a_status,
    nodes_renew_their_leases_in_kube_node_lease,
    recorded_events_show_in_get_events_and_describe,
);

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: nginx
    image: nginx:1.25
"#;

/// `POD` with `sim.federation.tfjob.io/` annotations (without the prefix)
/// that script what the simulated kubelet does with it.
fn scripted_pod(script: &[(&str, &str)]) -> String {
    let annotations: String = script
        .iter()
        .map(|(k, v)| format!("    sim.federation.tfjob.io/{k}: \"{v}\"\n"))
        .collect();
    POD.replace(
        "  labels:\n",
        &format!("  annotations:\n{annotations}  labels:\n"),
    )
}

const CONFIGMAP: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  color: blue
"#;

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    listKind: WidgetList
    shortNames: [wg, wdg]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Phase
      type: string
      jsonPath: .status.phase
    - name: Owner
      type: string
      jsonPath: .spec.owner
      priority: 1
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string}
              owner: {type: string}
          status:
            type: object
            properties:
              phase: {type: string}
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
                    reason: {type: string}
"#;

fn widget(name: &str, size: i64, color: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  size: {size}\n  color: {color}\n"
    )
}

/// Applies the Widget CRD (in this test's turn at it, until the test ends
/// and deletes it) and checks that kubectl reports it created.
fn install_widgets(k: &Kubectl) {
    k.take_turn();
    k.delete_at_end("customresourcedefinition", "widgets.example.com");
    let crd = k.write("widget-crd.yaml", WIDGET_CRD);
    k.ok(&["apply", "-f", &crd])
        .stdout_has("customresourcedefinition.apiextensions.k8s.io/widgets.example.com created");
    // A real API server serves a new type once the CRD is Established.
    k.ok(&[
        "wait",
        "--for=condition=Established",
        "customresourcedefinition/widgets.example.com",
        "--timeout=20s",
    ]);
}

fn names(list: &Value) -> Vec<String> {
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// `labels` with the region and zone of the node that `pod` is bound to
/// (waiting for the binding): kube-apiserver copies them onto a pod as it
/// binds it (PodTopologyLabels admission).
fn with_node_topology(k: &Kubectl, pod: &str, mut labels: Value) -> Value {
    k.ok(&[
        "wait",
        "--for=condition=PodScheduled",
        &format!("pod/{pod}"),
        "--timeout=20s",
    ]);
    let bound = k.json(&["get", "pod", pod]);
    let node = bound["spec"]["nodeName"]
        .as_str()
        .unwrap_or_else(|| panic!("{pod} is bound: {bound}"));
    let node = k.json(&["get", "node", node]);
    for key in [
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
    ] {
        let value = &node["metadata"]["labels"][key];
        assert!(value.is_string(), "{key} on the node: {node}");
        labels[key] = value.clone();
    }
    labels
}

fn create_reports_already_exists_on_second_create(k: &Kubectl) {
    let pod = k.write("pod.yaml", POD);
    let cm = k.write("cm.yaml", CONFIGMAP);

    k.ok(&["create", "-f", &pod]).stdout_has("pod/web created");
    k.ok(&["create", "-f", &cm])
        .stdout_has("configmap/settings created");

    let labels = with_node_topology(k, "web", json!({"app": "web"}));
    let got = k.json(&["get", "pod", "web"]);
    assert_eq!(got["kind"], "Pod");
    assert_eq!(got["metadata"]["namespace"], k.namespace);
    assert_eq!(got["metadata"]["labels"], labels);
    assert_eq!(got["spec"]["containers"][0]["image"], "nginx:1.25");
    assert!(
        got["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty())
    );
    assert!(
        got["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty())
    );
    let got = k.json(&["get", "configmap", "settings"]);
    assert_eq!(got["data"], json!({"color": "blue"}));

    k.fails(&["create", "-f", &cm])
        .stderr_has("Error from server (AlreadyExists)")
        .stderr_has(r#"configmaps "settings" already exists"#);
    k.fails(&["create", "-f", &pod])
        .stderr_has("Error from server (AlreadyExists)")
        .stderr_has(r#"pods "web" already exists"#);
    // The failed creates changed nothing.
    let got = k.json(&["get", "configmap", "settings"]);
    assert_eq!(got["data"], json!({"color": "blue"}));
}

fn client_side_apply_of_builtin_kinds_uses_three_way_strategic_merge(k: &Kubectl) {
    let v1 = r#"
apiVersion: v1
kind: Pod
metadata:
  name: app
  labels:
    app: web
    tier: front
spec:
  containers:
  - name: main
    image: nginx:1.25
  - name: sidecar
    image: busybox:1.36
"#;
    let path = k.write("pod.yaml", v1);
    k.ok(&["apply", "-f", &path]).stdout_has("pod/app created");
    let pod = k.json(&["get", "pod", "app"]);
    let last_applied =
        pod["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap_or_else(|| panic!("no last-applied annotation: {pod}"));
    let last_applied: Value = serde_json::from_str(last_applied).expect("annotation is JSON");
    assert_eq!(
        last_applied["metadata"]["labels"],
        json!({"app": "web", "tier": "front"})
    );

    k.ok(&["apply", "-f", &path])
        .stdout_has("pod/app unchanged");

    // A label set outside the manifest is not the manifest's to remove.
    k.ok(&["label", "pod", "app", "owner=ops"])
        .stdout_has("pod/app labeled");

    // New image for one container, `tier` dropped from the manifest, `track` added.
    let v2 = v1
        .replace("nginx:1.25", "nginx:1.26")
        .replace("    tier: front\n", "    track: stable\n");
    let path = k.write("pod.yaml", &v2);
    k.ok(&["apply", "-f", &path])
        .stdout_has("pod/app configured");
    let labels = with_node_topology(
        k,
        "app",
        json!({"app": "web", "track": "stable", "owner": "ops"}),
    );
    let pod = k.json(&["get", "pod", "app"]);
    assert_eq!(pod["metadata"]["labels"], labels);
    let containers: Vec<(String, String)> = pod["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or_default().into(),
                c["image"].as_str().unwrap_or_default().into(),
            )
        })
        .collect();
    assert_eq!(
        containers,
        vec![
            ("main".to_string(), "nginx:1.26".to_string()),
            ("sidecar".to_string(), "busybox:1.36".to_string())
        ],
        "the strategic merge patch merges containers by name: {pod}"
    );
    // Server-side defaults of the untouched container survive the patch.
    assert_eq!(
        pod["spec"]["containers"][1]["imagePullPolicy"],
        "IfNotPresent"
    );
    let spec_keys: Vec<&String> = pod["spec"].as_object().expect("spec").keys().collect();
    assert!(
        spec_keys.iter().all(|k| !k.starts_with('$')),
        "patch directives leaked into the object: {spec_keys:?}"
    );
    k.ok(&["apply", "-f", &path])
        .stdout_has("pod/app unchanged");

    // ConfigMap: a key removed from the manifest is removed from the object.
    let cm_v1 = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\n  labels:\n    a: \"1\"\n    b: \"2\"\ndata:\n  keep: \"yes\"\n  drop: \"me\"\n";
    let cm = k.write("cm.yaml", cm_v1);
    k.ok(&["apply", "-f", &cm])
        .stdout_has("configmap/conf created");
    k.ok(&["apply", "-f", &cm])
        .stdout_has("configmap/conf unchanged");
    let cm_v2 = cm_v1
        .replace("  drop: \"me\"\n", "  added: \"new\"\n")
        .replace("    b: \"2\"\n", "");
    let cm = k.write("cm.yaml", &cm_v2);
    k.ok(&["apply", "-f", &cm])
        .stdout_has("configmap/conf configured");
    let got = k.json(&["get", "configmap", "conf"]);
    assert_eq!(got["data"], json!({"keep": "yes", "added": "new"}));
    assert_eq!(got["metadata"]["labels"], json!({"a": "1"}));
}

fn client_side_apply_of_custom_resources_uses_json_merge_patch(k: &Kubectl) {
    install_widgets(k);
    let v1 = "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  labels:\n    app: widgets\n    stage: beta\nspec:\n  size: 3\n  color: red\n  owner: team-a\n";
    let path = k.write("w1.yaml", v1);
    k.ok(&["apply", "-f", &path])
        .stdout_has("widget.example.com/w1 created");
    k.ok(&["apply", "-f", &path])
        .stdout_has("widget.example.com/w1 unchanged");
    let before = k.json(&["get", "widget", "w1"]);
    assert_eq!(before["metadata"]["generation"], 1);

    let v2 = v1
        .replace("size: 3", "size: 5")
        .replace("    stage: beta\n", "")
        .replace("  owner: team-a\n", "");
    let path = k.write("w1.yaml", &v2);
    let run = k.run(&["apply", "-f", &path, "-v=6"]).success();
    assert!(
        run.stdout.contains("widget.example.com/w1 configured"),
        "{run}"
    );
    assert!(
        run.stderr.contains("PATCH")
            && run.stderr.contains(&format!(
                "/apis/example.com/v1/namespaces/{}/widgets/w1",
                k.namespace
            )),
        "kubectl patches the custom object: {run}"
    );
    let got = k.json(&["get", "widget", "w1"]);
    assert_eq!(got["metadata"]["labels"], json!({"app": "widgets"}));
    assert_eq!(got["spec"], json!({"size": 5, "color": "red"}));
    assert_eq!(
        got["metadata"]["generation"], 2,
        "a spec change bumps generation"
    );
    k.ok(&["apply", "-f", &path])
        .stdout_has("widget.example.com/w1 unchanged");

    // The default strategic patch type is refused for custom resources.
    k.fails(&["patch", "widget", "w1", "-p", r#"{"spec":{"size":9}}"#])
        .stderr_has(
            "error: application/strategic-merge-patch+json is not supported by example.com/v1, Kind=Widget: the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        );
    assert_eq!(k.json(&["get", "widget", "w1"])["spec"]["size"], 5);
}

fn server_side_apply_creates_updates_and_reports_conflicts(k: &Kubectl) {
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n  a: \"1\"\n  b: \"2\"\n  c: \"3\"\n";
    let path = k.write("shared.yaml", manifest);
    k.ok(&["apply", "--server-side", "-f", &path])
        .stdout_has("configmap/shared serverside-applied");
    let got = k.json(&["get", "configmap", "shared", "--show-managed-fields"]);
    assert_eq!(got["data"], json!({"a": "1", "b": "2", "c": "3"}));
    let managers = got["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    assert_eq!(managers.len(), 1, "{managers:?}");
    assert_eq!(managers[0]["manager"], "kubectl");
    assert_eq!(managers[0]["operation"], "Apply");
    assert!(
        got["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_null(),
        "server-side apply leaves no last-applied annotation: {got}"
    );

    // Change a, drop c: the applier owned c alone, so it goes away.
    let path = k.write(
        "shared.yaml",
        &manifest
            .replace("a: \"1\"", "a: \"10\"")
            .replace("  c: \"3\"\n", ""),
    );
    k.ok(&["apply", "--server-side", "-f", &path])
        .stdout_has("configmap/shared serverside-applied");
    let got = k.json(&["get", "configmap", "shared"]);
    assert_eq!(got["data"], json!({"a": "10", "b": "2"}));

    // Another manager wants a different value for a.
    let other = k.write(
        "other.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n  a: \"99\"\n",
    );
    k.fails(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "-f",
        &other,
    ])
    .stderr_has("Apply failed with 1 conflict")
    .stderr_has(r#"conflict with "kubectl""#)
    .stderr_has(".data.a")
    .stderr_has("--force-conflicts");
    assert_eq!(k.json(&["get", "configmap", "shared"])["data"]["a"], "10");

    k.ok(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "--force-conflicts",
        "-f",
        &other,
    ])
    .stdout_has("configmap/shared serverside-applied");
    let got = k.json(&["get", "configmap", "shared", "--show-managed-fields"]);
    assert_eq!(got["data"], json!({"a": "99", "b": "2"}));
    let owned = |manager: &str| -> Value {
        got["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .find(|m| m["manager"] == manager)
            .map(|m| m["fieldsV1"].clone())
            .unwrap_or_else(|| panic!("no entry for {manager}: {got}"))
    };
    assert_eq!(owned("other"), json!({"f:data": {"f:a": {}}}));
    assert_eq!(owned("kubectl"), json!({"f:data": {"f:b": {}}}));

    // Server-side apply of a custom resource: create, then update.
    install_widgets(k);
    let w = k.write("w.yaml", &widget("ssa-w", 1, "green"));
    k.ok(&["apply", "--server-side", "-f", &w])
        .stdout_has("widget.example.com/ssa-w serverside-applied");
    let w = k.write("w.yaml", &widget("ssa-w", 2, "green"));
    k.ok(&["apply", "--server-side", "-f", &w])
        .stdout_has("widget.example.com/ssa-w serverside-applied");
    let got = k.json(&["get", "widget", "ssa-w"]);
    assert_eq!(got["spec"], json!({"size": 2, "color": "green"}));
    let w_other = k.write("w-other.yaml", &widget("ssa-w", 7, "green"));
    k.fails(&[
        "apply",
        "--server-side",
        "--field-manager",
        "other",
        "-f",
        &w_other,
    ])
    .stderr_has(r#"conflict with "kubectl""#)
    .stderr_has(".spec.size");
}

fn get_lists_with_selectors_and_prints_tables(k: &Kubectl) {
    let manifests = [
        ("alpha", "app: a\n    tier: web"),
        ("beta", "app: a\n    tier: db"),
        ("gamma", "app: b\n    tier: web"),
        ("delta", "other: x"),
    ]
    .iter()
    .map(|(name, labels)| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    {labels}\ndata:\n  name: {name}\n")
    })
    .collect::<Vec<_>>()
    .join("---\n");
    let path = k.write("cms.yaml", &manifests);
    let created = k.ok(&["create", "-f", &path]);
    for name in ["alpha", "beta", "gamma", "delta"] {
        assert!(
            created
                .stdout
                .contains(&format!("configmap/{name} created")),
            "{created}"
        );
    }

    let list = k.json(&["get", "configmaps", "-l", "app=a"]);
    assert_eq!(list["kind"], "List");
    assert_eq!(names(&list), ["alpha", "beta"]);
    assert_eq!(list["items"][0]["kind"], "ConfigMap");
    assert_eq!(list["items"][0]["apiVersion"], "v1");
    assert_eq!(
        names(&k.json(&["get", "cm", "-l", "app in (a,b),tier!=db"])),
        ["alpha", "gamma"]
    );
    assert_eq!(
        names(&k.json(&["get", "cm", "-l", "!app"])),
        ["delta", "kube-root-ca.crt"]
    );
    assert_eq!(
        names(&k.json(&["get", "cm", "-l", "tier"])),
        ["alpha", "beta", "gamma"]
    );
    assert_eq!(
        names(&k.json(&[
            "get",
            "cm",
            "-l",
            "app=a",
            "--field-selector",
            "metadata.name!=alpha"
        ])),
        ["beta"]
    );
    assert!(names(&k.json(&["get", "cm", "-l", "app=nope"])).is_empty());
    let list = k.json(&["get", "cm", "-A", "-l", "app=b"]);
    assert_eq!(names(&list), ["gamma"]);
    assert_eq!(list["items"][0]["metadata"]["namespace"], k.namespace);
    k.ok(&["get", "cm", "-l", "app=a", "-o", "name"])
        .stdout_has("configmap/alpha\nconfigmap/beta\n");
    // A malformed selector is refused (client- or server-side).
    k.fails(&["get", "cm", "-l", "app in (a"]);

    // The kubelet keeps this one Pending long enough to be listed so.
    let pod = k.write("pod.yaml", &scripted_pod(&[("pending-seconds", "30")]));
    k.ok(&["create", "-f", &pod]);
    let table = k.ok(&["get", "pods"]).table();
    assert_eq!(
        table[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{table:?}"
    );
    assert_eq!(table.len(), 2, "{table:?}");
    assert_eq!(table[1][..4], ["web", "0/1", "Pending", "0"], "{table:?}");
    assert!(
        table[1][4].ends_with('s'),
        "a fresh pod's age is in seconds: {table:?}"
    );
    let wide = k.ok(&["get", "pods", "-o", "wide"]).table();
    assert_eq!(
        wide[0][..7],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    );
    let table = k.ok(&["get", "pods", "-l", "app=other"]);
    assert!(
        table.stdout.is_empty()
            && table
                .stderr
                .contains(&format!("No resources found in {} namespace.", k.namespace)),
        "{table}"
    );
    let table = k.ok(&["get", "namespaces"]).table();
    assert_eq!(table[0], ["NAME", "STATUS", "AGE"]);
    let namespaces: Vec<&str> = table[1..].iter().map(|r| r[0].as_str()).collect();
    assert!(
        namespaces.contains(&"default") && namespaces.contains(&"kube-system"),
        "{table:?}"
    );
    k.fails(&["get", "pod", "missing"])
        .stderr_has(r#"Error from server (NotFound): pods "missing" not found"#);
}

fn get_watch_sees_concurrent_changes(k: &Kubectl) {
    let sentinel = k.write(
        "sentinel.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: sentinel\n  labels:\n    app: watched\n",
    );
    k.ok(&["create", "-f", &sentinel]);
    let mut watch = k.spawn(&[
        "get",
        "configmaps",
        "-l",
        "app=watched",
        "--watch",
        "--output-watch-events",
        "-o",
        "json",
    ]);
    // The initial list arrives as ADDED events; changes after it are watched.
    watch.wait_for_documents("the initial ADDED event", |docs| {
        docs.iter()
            .any(|d| d["type"] == "ADDED" && d["object"]["metadata"]["name"] == "sentinel")
    });

    let noise = k.write(
        "noise.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: noise\n",
    );
    k.ok(&["create", "-f", &noise]);
    let item = k.write(
        "item.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: item\n  labels:\n    app: watched\ndata:\n  step: \"1\"\n",
    );
    k.ok(&["create", "-f", &item]);
    k.ok(&[
        "patch",
        "configmap",
        "item",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"step":"2"}}"#,
    ]);
    k.ok(&["delete", "configmap", "item"]);

    let docs = watch.wait_for_documents("ADDED, MODIFIED and DELETED for item", |docs| {
        docs.iter().any(|d| d["type"] == "DELETED")
    });
    watch.assert_running();
    drop(watch);

    let events: Vec<(String, String, Value)> = docs
        .iter()
        .map(|d| {
            (
                d["type"].as_str().unwrap_or_default().to_string(),
                d["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                d["object"]["data"]["step"].clone(),
            )
        })
        .collect();
    assert_eq!(
        events,
        vec![
            ("ADDED".into(), "sentinel".into(), Value::Null),
            ("ADDED".into(), "item".into(), json!("1")),
            ("MODIFIED".into(), "item".into(), json!("2")),
            ("DELETED".into(), "item".into(), json!("2")),
        ],
        "the unlabeled configmap is filtered out and the events come in order"
    );
    for doc in &docs {
        assert_eq!(doc["object"]["kind"], "ConfigMap", "{doc}");
        assert!(
            doc["object"]["metadata"]["resourceVersion"]
                .as_str()
                .is_some(),
            "{doc}"
        );
    }
}

fn patch_merge_json_and_failed_json_test_op(k: &Kubectl) {
    let cm = k.write(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: p\ndata:\n  a: \"1\"\n  b: \"2\"\n",
    );
    k.ok(&["create", "-f", &cm]);

    k.ok(&[
        "patch",
        "configmap",
        "p",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"a":null,"c":"3"},"metadata":{"labels":{"x":"y"}}}"#,
    ])
    .stdout_has("configmap/p patched");
    let got = k.json(&["get", "configmap", "p"]);
    assert_eq!(got["data"], json!({"b": "2", "c": "3"}));
    assert_eq!(got["metadata"]["labels"], json!({"x": "y"}));

    k.ok(&[
        "patch",
        "configmap",
        "p",
        "--type",
        "json",
        "-p",
        r#"[{"op":"test","path":"/data/b","value":"2"},{"op":"replace","path":"/data/b","value":"20"},{"op":"add","path":"/data/d","value":"4"},{"op":"remove","path":"/data/c"}]"#,
    ])
    .stdout_has("configmap/p patched");
    let got = k.json(&["get", "configmap", "p"]);
    assert_eq!(got["data"], json!({"b": "20", "d": "4"}));
    let rv = got["metadata"]["resourceVersion"].clone();

    // A failing `test` op rejects the whole patch.
    k.fails(&[
        "patch",
        "configmap",
        "p",
        "--type",
        "json",
        "-p",
        r#"[{"op":"add","path":"/data/e","value":"5"},{"op":"test","path":"/data/b","value":"wrong"}]"#,
    ])
    .stderr_has(
        "The request is invalid: the server rejected our request due to an error in our request",
    );
    let got = k.json(&["get", "configmap", "p"]);
    assert_eq!(got["data"], json!({"b": "20", "d": "4"}));
    assert_eq!(
        got["metadata"]["resourceVersion"], rv,
        "a rejected patch writes nothing"
    );
    // Removing a missing path fails as well.
    k.fails(&[
        "patch",
        "configmap",
        "p",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/data/nope"}]"#,
    ])
    .stderr_has("The request is invalid");
    // A patch that changes nothing succeeds without a new resourceVersion.
    k.ok(&[
        "patch",
        "configmap",
        "p",
        "--type",
        "merge",
        "-p",
        r#"{"data":{"b":"20"}}"#,
    ])
    .stdout_has("configmap/p patched (no change)");
    assert_eq!(
        k.json(&["get", "configmap", "p"])["metadata"]["resourceVersion"],
        rv
    );
    k.fails(&[
        "patch",
        "configmap",
        "absent",
        "--type",
        "merge",
        "-p",
        "{}",
    ])
    .stderr_has(r#"configmaps "absent" not found"#);
}

fn patch_status_subresource_leaves_spec_and_generation(k: &Kubectl) {
    install_widgets(k);
    let w = k.write("w.yaml", &widget("w1", 3, "red"));
    k.ok(&["apply", "-f", &w]);
    let before = k.json(&["get", "widget", "w1"]);
    assert_eq!(before["metadata"]["generation"], 1);

    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Running"},"spec":{"size":100}}"#,
    ])
    .stdout_has("widget.example.com/w1 patched");
    let got = k.json(&["get", "widget", "w1"]);
    assert_eq!(got["status"], json!({"phase": "Running"}));
    assert_eq!(
        got["spec"],
        json!({"size": 3, "color": "red"}),
        "status writes ignore spec"
    );
    assert_eq!(
        got["metadata"]["generation"], 1,
        "status writes keep generation"
    );
    assert_ne!(
        got["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    let status = k.json(&["get", "widget", "w1", "--subresource=status"]);
    assert_eq!(status["status"]["phase"], "Running");

    // Writes to the main resource ignore status and bump generation on spec changes.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Hacked"},"spec":{"size":4}}"#,
    ]);
    let got = k.json(&["get", "widget", "w1"]);
    assert_eq!(got["status"]["phase"], "Running");
    assert_eq!(got["spec"]["size"], 4);
    assert_eq!(got["metadata"]["generation"], 2);

    let table = k.ok(&["get", "wg"]).table();
    assert_eq!(table[0], ["NAME", "SIZE", "COLOR", "PHASE", "AGE"]);
    assert_eq!(table[1][..4], ["w1", "4", "red", "Running"]);

    // A resource without the status subresource has no /status.
    let cm = k.write("cm.yaml", CONFIGMAP);
    k.ok(&["create", "-f", &cm]);
    k.fails(&[
        "patch",
        "configmap",
        "settings",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        "{}",
    ]);
}

fn wait_returns_when_a_condition_appears_or_the_object_is_deleted(k: &Kubectl) {
    install_widgets(k);
    let w = k.write("w.yaml", &widget("w1", 1, "blue"));
    k.ok(&["apply", "-f", &w]);

    let mut waiting = k.spawn(&[
        "wait",
        "--for=condition=Ready=true",
        "widget/w1",
        "--timeout=30s",
    ]);
    std::thread::sleep(Duration::from_millis(1500));
    waiting.assert_running();
    // Another condition does not satisfy the wait.
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Starting"}]}}"#,
    ]);
    std::thread::sleep(Duration::from_millis(700));
    waiting.assert_running();
    k.ok(&[
        "patch",
        "widget",
        "w1",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Done"}]}}"#,
    ]);
    waiting
        .finish()
        .success()
        .stdout_has("widget.example.com/w1 condition met");

    // Already satisfied: returns at once. Never satisfied: times out.
    k.ok(&[
        "wait",
        "--for=condition=Ready",
        "widget/w1",
        "--timeout=10s",
    ])
    .stdout_has("widget.example.com/w1 condition met");
    k.fails(&[
        "wait",
        "--for=condition=Missing",
        "widget/w1",
        "--timeout=1s",
    ])
    .stderr_has("timed out waiting for the condition");

    // A pod's Ready condition, set by the simulated kubelet once it runs.
    let script = [("pending-seconds", "2.5"), ("run-seconds", "60")];
    let pod = k.write("pod.yaml", &scripted_pod(&script));
    k.ok(&["create", "-f", &pod]);
    let mut waiting = k.spawn(&["wait", "--for=condition=Ready", "pod/web", "--timeout=30s"]);
    std::thread::sleep(Duration::from_millis(1000));
    waiting.assert_running();
    waiting
        .finish()
        .success()
        .stdout_has("pod/web condition met");

    // --for=delete
    let mut waiting = k.spawn(&["wait", "--for=delete", "widget/w1", "--timeout=30s"]);
    std::thread::sleep(Duration::from_millis(1000));
    waiting.assert_running();
    k.ok(&["delete", "widget", "w1"])
        .stdout_has(r#"widget.example.com "w1" deleted"#);
    waiting
        .finish()
        .success()
        .stdout_has("widget.example.com/w1 condition met");
}

fn delete_removes_objects(k: &Kubectl) {
    let pod = k.write("pod.yaml", POD);
    let cm = k.write("cm.yaml", CONFIGMAP);
    k.ok(&["create", "-f", &pod]);
    k.ok(&["create", "-f", &cm]);

    k.ok(&["delete", "pod", "web"])
        .stdout_has(r#"pod "web" deleted"#);
    k.fails(&["get", "pod", "web"])
        .stderr_has(r#"Error from server (NotFound): pods "web" not found"#);
    k.fails(&["delete", "pod", "web"])
        .stderr_has(r#"Error from server (NotFound): pods "web" not found"#);
    k.ok(&["delete", "pod", "web", "--ignore-not-found"]);

    k.ok(&["delete", "-f", &cm])
        .stdout_has(r#"configmap "settings" deleted"#);
    k.fails(&["get", "configmap", "settings"])
        .stderr_has("not found");
    // What is left is what every namespace has.
    assert_eq!(names(&k.json(&["get", "configmaps"])), ["kube-root-ca.crt"]);

    // Delete by label selector removes exactly the selected objects.
    let many = (1..=3)
        .map(|i| {
            let group = if i == 3 { "keep" } else { "drop" };
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm{i}\n  labels:\n    group: {group}\n")
        })
        .collect::<Vec<_>>()
        .join("---\n");
    let many = k.write("many.yaml", &many);
    k.ok(&["create", "-f", &many]);
    let run = k.ok(&["delete", "configmaps", "-l", "group=drop"]);
    assert!(
        run.stdout.contains(r#"configmap "cm1" deleted"#)
            && run.stdout.contains(r#"configmap "cm2" deleted"#)
            && !run.stdout.contains("cm3"),
        "{run}"
    );
    assert_eq!(
        names(&k.json(&["get", "configmaps"])),
        ["cm3", "kube-root-ca.crt"]
    );

    // A custom object, too.
    install_widgets(k);
    let w = k.write("w.yaml", &widget("gone", 1, "red"));
    k.ok(&["apply", "-f", &w]);
    k.ok(&["delete", "wg", "gone"])
        .stdout_has(r#"widget.example.com "gone" deleted"#);
    k.fails(&["get", "wg", "gone"])
        .stderr_has(r#"Error from server (NotFound): widgets.example.com "gone" not found"#);
}

fn crd_shows_in_discovery_with_printer_columns_and_strict_validation(k: &Kubectl) {
    // No other test's widgets.example.com meanwhile.
    k.take_turn();
    k.fails(&["get", "wg"])
        .stderr_has(r#"the server doesn't have a resource type "wg""#);
    let before = k.ok(&["api-resources"]);
    assert!(!before.stdout.contains("example.com"), "{before}");

    install_widgets(k);
    let resources = k.ok(&["api-resources"]).table();
    assert_eq!(
        resources[0],
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    let row = resources
        .iter()
        .find(|r| r[0] == "widgets")
        .unwrap_or_else(|| panic!("widgets missing from api-resources: {resources:?}"));
    assert_eq!(row[1..], ["wg,wdg", "example.com/v1", "true", "Widget"]);
    assert!(
        resources.iter().any(|r| r[0] == "customresourcedefinitions"
            && r[1] == "crd,crds"
            && r[2] == "apiextensions.k8s.io/v1"),
        "{resources:?}"
    );
    k.ok(&["api-resources", "--api-group=example.com", "-o", "name"])
        .stdout_has("widgets.example.com\n");
    let wide = k
        .ok(&["api-resources", "--api-group=example.com", "-o", "wide"])
        .table();
    assert_eq!(wide[0][5], "VERBS");
    assert!(
        wide[1][5].contains("watch") && wide[1][5].contains("patch"),
        "{wide:?}"
    );

    let w1 = k.write("w1.yaml", &widget("w1", 3, "red"));
    k.ok(&["apply", "-f", &w1])
        .stdout_has("widget.example.com/w1 created");
    let w2 = k.write(
        "w2.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  size: 12\n  owner: team-b\n",
    );
    k.ok(&["create", "-f", &w2])
        .stdout_has("widget.example.com/w2 created");

    // A path that finds nothing leaves its cell empty.
    for resource in ["wg", "wdg", "widgets", "widget", "widgets.example.com"] {
        let table = k.ok(&["get", resource]).columns();
        assert_eq!(
            table[0],
            ["NAME", "SIZE", "COLOR", "PHASE", "AGE"],
            "{resource}: {table:?}"
        );
        assert_eq!(
            table[1][..4],
            ["w1", "3", "red", ""],
            "{resource}: {table:?}"
        );
        assert_eq!(table[2][..4], ["w2", "12", "", ""], "{resource}: {table:?}");
        assert!(table[2][4].ends_with('s'), "{resource}: {table:?}");
    }
    let wide = k.ok(&["get", "wg", "-o", "wide"]).columns();
    assert_eq!(wide[0], ["NAME", "SIZE", "COLOR", "PHASE", "OWNER", "AGE"]);
    assert_eq!(wide[2][..5], ["w2", "12", "", "", "team-b"]);
    let list = k.json(&["get", "wg"]);
    assert_eq!(names(&list), ["w1", "w2"]);
    assert_eq!(list["items"][0]["apiVersion"], "example.com/v1");
    assert_eq!(list["items"][0]["kind"], "Widget");

    // Unknown fields: kubectl asks for strict server-side validation.
    let bad = k.write(
        "bad.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: bad\nspec:\n  size: 1\n  bogus: true\n",
    );
    let run = k.run(&["apply", "-f", &bad, "-v=6"]).failure();
    assert!(run.stderr.contains("fieldValidation=Strict"), "{run}");
    let run = k.fails(&["apply", "-f", &bad]);
    assert_eq!(
        run.stderr.trim(),
        format!(
            r#"Error from server (BadRequest): error when creating "{bad}": Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.bogus""#
        ),
        "{run}"
    );
    k.fails(&["create", "-f", &bad])
        .stderr_has(r#"strict decoding error: unknown field "spec.bogus""#);
    k.fails(&["get", "wg", "bad"]).stderr_has("not found");

    // An update with an unknown field is rejected too and changes nothing.
    let w1_bad = k.write(
        "w1-bad.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 4\n  color: red\n  extra: 1\n",
    );
    k.fails(&["apply", "-f", &w1_bad])
        .stderr_has(r#"strict decoding error: unknown field "spec.extra""#);
    assert_eq!(
        k.json(&["get", "wg", "w1"])["spec"],
        json!({"size": 3, "color": "red"})
    );
}

fn get_nodes_shows_ready_nodes_with_capacity(k: &Kubectl) {
    let table = k.ok(&["get", "nodes"]).table();
    assert_eq!(
        table[0],
        ["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        "{table:?}"
    );
    assert_eq!(table.len(), 5, "four nodes by default: {table:?}");
    let nodes = k.json(&["get", "nodes"]);
    for (i, row) in table[1..].iter().enumerate() {
        assert_eq!(row[0], format!("home-node-{i}"), "{table:?}");
        assert_eq!(row[1..3], ["Ready", "<none>"], "{table:?}");
        assert!(
            row[3].ends_with('s') || row[3].ends_with('m'),
            "a fresh node's age: {table:?}"
        );
        // The kubelet's version (the simulator's, or kwok's on the real ground).
        assert_eq!(
            row[4], nodes["items"][i]["status"]["nodeInfo"]["kubeletVersion"],
            "{table:?}"
        );
    }

    let capacity = k
        .ok(&[
            "get",
            "nodes",
            "-o",
            r"custom-columns=NAME:.metadata.name,CPU:.status.capacity.cpu,MEMORY:.status.capacity.memory,GPU:.status.capacity.nvidia\.com/gpu,PODS:.status.allocatable.pods,ZONE:.metadata.labels.topology\.kubernetes\.io/zone",
        ])
        .table();
    assert_eq!(
        capacity[0],
        ["NAME", "CPU", "MEMORY", "GPU", "PODS", "ZONE"],
        "{capacity:?}"
    );
    assert_eq!(
        capacity[1][..5],
        ["home-node-0", "32", "128Gi", "4", "110"],
        "{capacity:?}"
    );
    assert!(capacity[1][5].starts_with("home-zone-"), "{capacity:?}");

    // `describe` puts capacity and conditions together.
    let described = k.ok(&["describe", "node", "home-node-0"]);
    let lines = describe_lines(&described.stdout);
    for expected in [&["Capacity:"][..], &["nvidia.com/gpu:", "4"]] {
        assert!(
            lines.iter().any(|l| l.as_slice() == expected),
            "{expected:?}: {described}"
        );
    }
    assert!(
        lines.iter().any(|l| l[..].starts_with(&["Ready", "True"])),
        "{described}"
    );
}

fn describe_lines(text: &str) -> Vec<Vec<&str>> {
    text.lines()
        .map(|l| l.split_whitespace().collect())
        .collect()
}

/// Each node's heartbeat Lease: kubectl describe shows it (its holder is the
/// node's kubelet here, kwok's identity on the real ground).
fn nodes_renew_their_leases_in_kube_node_lease(k: &Kubectl) {
    let described = k.ok(&["describe", "node", "home-node-0"]);
    let lines = describe_lines(&described.stdout);
    assert!(
        lines
            .iter()
            .any(|l| l.len() == 2 && l[0] == "HolderIdentity:" && !l[1].is_empty()),
        "{described}"
    );
    let leases = k.ok(&["get", "leases", "-n", "kube-node-lease", "-o", "name"]);
    for i in 0..4 {
        assert!(
            leases
                .stdout
                .contains(&format!("lease.coordination.k8s.io/home-node-{i}\n")),
            "{leases}"
        );
    }
}

fn get_pods_watch_shows_the_phases_and_yaml_the_status(k: &Kubectl) {
    // A pod no scheduler here serves stays Pending; once the watch lists
    // it, later changes reach the watch.
    let parked = scripted_pod(&[])
        .replace("name: web", "name: parked")
        .replace(
            "  containers:\n",
            "  schedulerName: manual\n  containers:\n",
        );
    k.ok(&["create", "-f", &k.write("parked.yaml", &parked)]);
    let mut watch = k.spawn(&["get", "pods", "--watch"]);
    watch.wait_for_output("the initial list", |out, _| out.contains("parked"));
    let script = [("pending-seconds", "0.5"), ("run-seconds", "0.5")];
    let pod =
        scripted_pod(&script).replace("  containers:\n", "  restartPolicy: Never\n  containers:\n");
    k.ok(&["create", "-f", &k.write("pod.yaml", &pod)]);
    let out = watch.wait_for_output("the pod completing", |out, _| out.contains("Completed"));
    drop(watch);

    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|cells: &Vec<&str>| !cells.is_empty())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(rows[1][..3], ["parked", "0/1", "Pending"], "{out}");
    let mut seen: Vec<(&str, &str)> = rows[2..]
        .iter()
        .map(|r| {
            assert_eq!(r[0], "web", "{out}");
            (r[1], r[2])
        })
        .collect();
    seen.dedup();
    assert_eq!(
        seen,
        [("0/1", "Pending"), ("1/1", "Running"), ("0/1", "Completed")],
        "{out}"
    );

    let yaml = k.ok(&["get", "pod", "web", "-o", "yaml"]);
    for needle in ["conditions:", "containerStatuses:", "exitCode: 0"] {
        assert!(yaml.stdout.contains(needle), "lacks {needle:?}: {yaml}");
    }
    let pod: Value = serde_yaml::from_str(&yaml.stdout).expect("YAML");
    let status = &pod["status"];
    assert_eq!(status["phase"], "Succeeded", "{status}");
    for key in ["startTime", "podIP", "hostIP"] {
        assert!(status[key].is_string(), "{key}: {status}");
    }
    let conditions: Vec<(String, String)> = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_string(),
                c["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    for expected in [
        ("PodScheduled", "True"),
        ("Initialized", "True"),
        ("ContainersReady", "False"),
        ("Ready", "False"),
    ] {
        assert!(
            conditions.contains(&(expected.0.to_string(), expected.1.to_string())),
            "{expected:?} in {conditions:?}"
        );
    }
    let container = &status["containerStatuses"][0];
    assert_eq!(container["name"], "nginx", "{container}");
    assert_eq!(container["restartCount"], 0, "{container}");
    assert_eq!(
        container["state"]["terminated"]["reason"], "Completed",
        "{container}"
    );
    assert_eq!(
        container["state"]["terminated"]["exitCode"], 0,
        "{container}"
    );
    assert!(
        pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| n.starts_with("home-node-")),
        "{pod}"
    );
}

/// The Content-Type of kubectl's typed clients (`create namespace|configmap|…`).
const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `kubectl <args> -v=8`, which logs the request headers: asserts that it
/// succeeded and sent a protobuf body, so that a test of the decoder cannot
/// pass by kubectl falling back to JSON.
#[track_caller]
fn ok_with_protobuf_body(k: &Kubectl, args: &[&str]) -> common::kubectl::Run {
    let mut all = vec!["-v=8"];
    all.extend_from_slice(args);
    let run = k.ok(&all);
    assert!(
        run.stderr.contains(&format!("Content-Type: {PROTOBUF}")),
        "kubectl sent no protobuf body: {run}"
    );
    run
}

fn create_generators_send_protobuf_bodies_that_the_simulator_decodes(k: &Kubectl) {
    // A namespace is cluster-wide: its name is the test's.
    let team = format!("team-{}", k.namespace);
    k.delete_at_end("namespace", &team);
    ok_with_protobuf_body(k, &["create", "namespace", &team])
        .stdout_has(&format!("namespace/{team} created"));
    let ns = k.json(&["get", "namespace", &team]);
    assert_eq!(ns["status"]["phase"], "Active");
    assert_eq!(
        ns["metadata"]["labels"]["kubernetes.io/metadata.name"],
        team.as_str()
    );

    ok_with_protobuf_body(
        k,
        &[
            "create",
            "configmap",
            "settings",
            "--from-literal=color=blue",
            "--from-literal=empty=",
            "-n",
            &team,
        ],
    )
    .stdout_has("configmap/settings created");
    let cm = k.json(&["get", "configmap", "settings", "-n", &team]);
    assert_eq!(cm["data"], json!({"color": "blue", "empty": ""}));
    assert_eq!(cm["metadata"]["namespace"], team.as_str());
    assert!(cm.get("binaryData").is_none(), "{cm}");

    ok_with_protobuf_body(
        k,
        &[
            "create",
            "secret",
            "generic",
            "token",
            "--from-literal=user=admin",
            "--from-literal=password=s3cr=t",
            "-n",
            &team,
        ],
    )
    .stdout_has("secret/token created");
    let secret = k.json(&["get", "secret", "token", "-n", &team]);
    // "admin", "s3cr=t" in base64; the type defaults to Opaque.
    assert_eq!(
        secret["data"],
        json!({"user": "YWRtaW4=", "password": "czNjcj10"})
    );
    assert_eq!(secret["type"], "Opaque");
    let decoded = k
        .ok(&[
            "get",
            "secret",
            "token",
            "-n",
            &team,
            "-o",
            "jsonpath={.data.password}",
        ])
        .stdout;
    assert_eq!(decoded, "czNjcj10");

    ok_with_protobuf_body(
        k,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.25",
            "--replicas=2",
            "--port=80",
            "-n",
            &team,
        ],
    )
    .stdout_has("deployment.apps/web created");
    let deploy = k.json(&["get", "deployment", "web", "-n", &team]);
    assert_eq!(deploy["spec"]["replicas"], 2);
    assert_eq!(
        deploy["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
    assert_eq!(deploy["metadata"]["labels"], json!({"app": "web"}));
    let container = &deploy["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "nginx");
    assert_eq!(container["image"], "nginx:1.25");
    assert_eq!(
        container["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    // Fields kubectl never set are absent, not empty strings or zeros.
    let meta = deploy["metadata"].as_object().expect("metadata");
    assert!(
        !meta.contains_key("generateName") && !meta.contains_key("deletionGracePeriodSeconds"),
        "{deploy}"
    );
    assert_eq!(deploy["metadata"]["generation"], 1);
    assert!(deploy["metadata"]["creationTimestamp"].is_string());

    // Writes of the same generators get the usual errors.
    k.fails(&["create", "namespace", &team])
        .stderr_has(&format!(r#"namespaces "{team}" already exists"#));
    k.fails(&["create", "configmap", "settings", "-n", &team])
        .stderr_has(r#"configmaps "settings" already exists"#);
}

fn typed_client_writes_of_pods_services_serviceaccounts_and_rbac_decode(k: &Kubectl) {
    // `kubectl run` sends JSON; `kubectl debug --copy-to` sends the copy
    // (the whole stored spec, defaults included) in protobuf.
    let pod = k.write(
        "box.yaml",
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: box
  labels: {app: box}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 0
  automountServiceAccountToken: false
  securityContext: {runAsUser: 0, runAsNonRoot: false}
  tolerations:
  - {key: gpu, operator: Exists, effect: NoSchedule}
  volumes:
  - name: cfg
    configMap: {name: settings, defaultMode: 0400, optional: false}
  containers:
  - name: main
    image: busybox
    args: [sleep, "60"]
    env: [{name: MODE, value: test}]
    ports: [{containerPort: 8080, name: http}]
    resources:
      requests: {cpu: 250m, memory: 64Mi}
      limits: {nvidia.com/gpu: "1"}
    readinessProbe:
      httpGet: {path: /ready, port: http}
      periodSeconds: 5
    volumeMounts: [{name: cfg, mountPath: /etc/cfg, readOnly: true}]
"#,
    );
    k.ok(&["create", "-f", &pod]);
    let original = k.json(&["get", "pod", "box"]);
    ok_with_protobuf_body(
        k,
        &[
            "debug",
            "box",
            "--copy-to=box-copy",
            "--image=busybox:1.36",
            "--container=debugger",
        ],
    );
    let copy = k.json(&["get", "pod", "box-copy"]);
    let (spec, copied) = (&original["spec"], &copy["spec"]);
    assert_eq!(copied["containers"][0], spec["containers"][0]);
    assert_eq!(copied["containers"][1]["name"], "debugger");
    assert_eq!(copied["containers"][1]["image"], "busybox:1.36");
    for field in [
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "automountServiceAccountToken",
        "securityContext",
        "tolerations",
        "volumes",
        "dnsPolicy",
        "enableServiceLinks",
    ] {
        assert_eq!(copied[field], spec[field], "spec.{field}: {copy}");
    }
    // Zeros that mean something survive protobuf (Go pointers).
    assert_eq!(copied["terminationGracePeriodSeconds"], 0);
    assert_eq!(copied["automountServiceAccountToken"], false);
    assert_eq!(
        copied["securityContext"],
        json!({"runAsUser": 0, "runAsNonRoot": false})
    );
    assert_eq!(
        copied["volumes"][0]["configMap"],
        json!({"name": "settings", "defaultMode": 256, "optional": false})
    );

    ok_with_protobuf_body(
        k,
        &["create", "service", "clusterip", "api", "--tcp=80:8080"],
    )
    .stdout_has("service/api created");
    let svc = k.json(&["get", "service", "api"]);
    assert_eq!(
        svc["spec"]["ports"],
        json!([{"name": "80-8080", "port": 80, "protocol": "TCP", "targetPort": 8080}])
    );
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["selector"], json!({"app": "api"}));

    ok_with_protobuf_body(k, &["create", "serviceaccount", "robot"])
        .stdout_has("serviceaccount/robot created");
    let sa = k.json(&["get", "serviceaccount", "robot"]);
    assert_eq!(sa["metadata"]["name"], "robot");

    ok_with_protobuf_body(
        k,
        &[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods,deployments.apps",
        ],
    )
    .stdout_has("role.rbac.authorization.k8s.io/reader created");
    let role = k.json(&["get", "role", "reader"]);
    assert_eq!(
        role["rules"],
        json!([
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
        ])
    );
    ok_with_protobuf_body(
        k,
        &[
            "create",
            "rolebinding",
            "robot-reads",
            "--role=reader",
            &format!("--serviceaccount={}:robot", k.namespace),
        ],
    );
    let binding = k.json(&["get", "rolebinding", "robot-reads"]);
    assert_eq!(
        binding["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"})
    );
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "robot", "namespace": k.namespace}])
    );
    // Cluster-wide objects: their names are the test's.
    let reader = format!("node-reader-{}", k.namespace);
    let binding_name = format!("alice-nodes-{}", k.namespace);
    k.delete_at_end("clusterrole", &reader);
    k.delete_at_end("clusterrolebinding", &binding_name);
    ok_with_protobuf_body(
        k,
        &[
            "create",
            "clusterrole",
            &reader,
            "--verb=get",
            "--resource=nodes",
        ],
    );
    ok_with_protobuf_body(
        k,
        &[
            "create",
            "clusterrolebinding",
            &binding_name,
            &format!("--clusterrole={reader}"),
            "--user=alice",
        ],
    );
    let binding = k.json(&["get", "clusterrolebinding", &binding_name]);
    assert_eq!(
        binding["subjects"],
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}])
    );
}

fn scale_writes_replicas_through_the_scale_subresource(k: &Kubectl) {
    ok_with_protobuf_body(k, &["create", "deployment", "web", "--image=nginx"]);
    let before = k.json(&["get", "deployment", "web"]);
    assert_eq!(before["spec"]["replicas"], 1);

    // Without preconditions kubectl sends a merge patch of the Scale.
    k.ok(&["scale", "deployment", "web", "--replicas=3"])
        .stdout_has("deployment.apps/web scaled");
    let got = k.json(&["get", "deployment", "web"]);
    assert_eq!(got["spec"]["replicas"], 3);
    assert_eq!(got["metadata"]["generation"], 2, "a spec change");
    assert_eq!(got["spec"]["template"], before["spec"]["template"]);

    let scale = k.json(&["get", "deployment", "web", "--subresource=scale"]);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");
    // The Scale carries the Deployment's resourceVersion. A real cluster's
    // deployment controller writes the status meanwhile, so the two are
    // read back to back until no write came between them.
    let deployment = format!("/apis/apps/v1/namespaces/{}/deployments/web", k.namespace);
    let get = |path: &str| {
        let (code, object) = k.raw_request("GET", path, "application/json", b"");
        assert_eq!(code, 200, "GET {path}: {object}");
        object["metadata"]["resourceVersion"].clone()
    };
    let mut attempts = 0;
    loop {
        let (first, scale, last) = (
            get(&deployment),
            get(&format!("{deployment}/scale")),
            get(&deployment),
        );
        if first == last {
            assert_eq!(scale, first, "the Scale's resourceVersion");
            break;
        }
        attempts += 1;
        assert!(attempts < 50, "the Deployment never stood still");
    }

    // With --current-replicas it reads the Scale and PUTs it back.
    k.ok(&[
        "scale",
        "deployment",
        "web",
        "--current-replicas=3",
        "--replicas=5",
    ]);
    assert_eq!(k.json(&["get", "deployment", "web"])["spec"]["replicas"], 5);
    k.fails(&[
        "scale",
        "deployment",
        "web",
        "--current-replicas=3",
        "--replicas=7",
    ])
    .stderr_has("Expected replicas to be 3, was 5");
    // A stale resourceVersion: kubectl checks it on the Scale it read…
    let stale = before["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion");
    k.fails(&[
        "scale",
        "deployment",
        "web",
        &format!("--resource-version={stale}"),
        "--replicas=7",
    ])
    .stderr_has(&format!("Expected resource version to be {stale}"));
    // …and the server on a Scale written with it.
    let put = |rv: &str| {
        let body = json!({
            "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {"name": "web", "namespace": k.namespace, "resourceVersion": rv},
            "spec": {"replicas": 7},
        });
        k.raw_request(
            "PUT",
            &format!(
                "/apis/apps/v1/namespaces/{}/deployments/web/scale",
                k.namespace
            ),
            "application/json",
            body.to_string().as_bytes(),
        )
    };
    let (code, status) = put(stale);
    assert_eq!(code, 409, "{status}");
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("the object has been modified")),
        "{status}"
    );
    assert_eq!(k.json(&["get", "deployment", "web"])["spec"]["replicas"], 5);
    // With the current resourceVersion the write succeeds; a conflict can
    // only come from another writer (a deployment controller) in between.
    let mut attempts = 0;
    let scale = loop {
        let current = get(&deployment);
        let (code, scale) = put(current.as_str().expect("resourceVersion"));
        if code == 409 && get(&deployment) != current && attempts < 50 {
            attempts += 1;
            continue;
        }
        assert_eq!(code, 200, "{scale}");
        break scale;
    };
    assert_eq!(scale["spec"]["replicas"], 7);
    assert_eq!(k.json(&["get", "deployment", "web"])["spec"]["replicas"], 7);

    k.ok(&["scale", "deployment", "web", "--replicas=0"]);
    assert_eq!(k.json(&["get", "deployment", "web"])["spec"]["replicas"], 0);
    k.fails(&["scale", "deployment", "web", "--replicas=-1"]);

    // A kind without /scale.
    k.ok(&["create", "configmap", "plain"]);
    k.fails(&["scale", "configmap", "plain", "--replicas=2"]);
}

/// Simulator only: custom resources have no protobuf form, and the
/// simulator answers 415 as kube-apiserver did up to v1.3x; v1.37.2 panics
/// decoding such a body and drops the request, which is no answer to copy
/// (docs/src/testing/simulated-clusters.md).
#[test]
fn protobuf_bodies_of_custom_resources_get_415() {
    let k = Kubectl::sim("protobuf-custom");
    install_widgets(&k);
    // ObjectMeta{name: "w1"}: field 1 of field 1.
    let meta = [0x0a, 0x04, 0x0a, 0x02, b'w', b'1'];
    let body = protobuf_envelope("example.com/v1", "Widget", &meta);
    let (code, status) = k.raw_request(
        "POST",
        &format!("/apis/example.com/v1/namespaces/{}/widgets", k.namespace),
        PROTOBUF,
        &body,
    );
    assert_eq!(code, 415, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "UnsupportedMediaType");
    assert_eq!(status["code"], 415);
    assert!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("Widget")),
        "{status}"
    );
    k.fails(&["get", "widget", "w1"]).stderr_has("NotFound");
}

/// A protobuf envelope (`k8s\0` + runtime.Unknown) around `raw`.
fn protobuf_envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    fn field(tag: u8, bytes: &[u8]) -> Vec<u8> {
        assert!(bytes.len() < 128, "one-byte lengths only");
        let mut out = vec![tag << 3 | 2, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }
    let type_meta = [field(1, api_version.as_bytes()), field(2, kind.as_bytes())].concat();
    [b"k8s\0".to_vec(), field(1, &type_meta), field(2, raw)].concat()
}

fn protobuf_bodies_the_simulator_cannot_decode_get_a_status(k: &Kubectl) {
    // ObjectMeta{name: "w1"}: field 1 of field 1.
    let meta = [0x0a, 0x04, 0x0a, 0x02, b'w', b'1'];
    let configmaps = format!("/api/v1/namespaces/{}/configmaps", k.namespace);

    // A body that is no protobuf envelope, and a truncated one.
    let (code, status) = k.raw_request(
        "POST",
        &configmaps,
        PROTOBUF,
        br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
    );
    assert_eq!(
        (code, &status["reason"]),
        (400, &json!("BadRequest")),
        "{status}"
    );
    let mut body = protobuf_envelope("v1", "ConfigMap", &meta);
    body.truncate(body.len() - 2);
    let (code, status) = k.raw_request("POST", &configmaps, PROTOBUF, &body);
    assert_eq!(code, 400, "{status}");

    // A decodable body of one kind sent to another kind's path.
    let body = protobuf_envelope("v1", "ConfigMap", &meta);
    let (code, status) = k.raw_request(
        "POST",
        &format!("/api/v1/namespaces/{}/secrets", k.namespace),
        PROTOBUF,
        &body,
    );
    assert_eq!(code, 400, "{status}");
    // …and to its own path it is created.
    let (code, status) = k.raw_request("POST", &configmaps, PROTOBUF, &body);
    assert_eq!(code, 201, "{status}");
    assert_eq!(status["metadata"]["name"], "w1");
    k.ok(&["get", "configmap", "w1"]);
    // Nothing else was stored.
    let secrets = k.json(&["get", "secrets"]);
    assert_eq!(names(&secrets), Vec::<String>::new());

    // A typed client's DELETE body: DeleteOptions{gracePeriodSeconds: 0}.
    let options = protobuf_envelope("v1", "DeleteOptions", &[0x08, 0x00]);
    let (code, status) = k.raw_request(
        "DELETE",
        &format!("/api/v1/namespaces/{}/configmaps/w1", k.namespace),
        PROTOBUF,
        &options,
    );
    assert_eq!(code, 200, "{status}");
    k.fails(&["get", "configmap", "w1"]).stderr_has("NotFound");
}

/// An Event recorded through `events.k8s.io/v1`, as the controller records
/// its Events (kube-rs's Recorder), shows in `kubectl get events` (core
/// `v1`, upstream's columns) and in `kubectl describe` of the object it
/// regards.
fn recorded_events_show_in_get_events_and_describe(k: &Kubectl) {
    k.ok(&["create", "configmap", "regarded", "--from-literal=a=b"]);
    let uid = k.json(&["get", "configmap", "regarded", "-o", "json"])["metadata"]["uid"].clone();
    let event_time = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let event = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "regarded.recorded"},
        "eventTime": event_time,
        "reportingController": "tfjob-federator",
        "reportingInstance": "tfjob-federator-0",
        "action": "Create", "reason": "Created", "type": "Normal",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": k.namespace, "name": "regarded", "uid": uid},
        "note": "Created pod job-worker-0",
    });
    let manifest = k.write("event.json", &event.to_string());
    k.ok(&["create", "-f", &manifest]);

    let listed = k.ok(&["get", "events"]).table();
    assert_eq!(
        listed[0],
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        "{listed:?}"
    );
    let row = listed
        .iter()
        .find(|row| {
            row.get(3)
                .is_some_and(|object| object == "configmap/regarded")
        })
        .unwrap_or_else(|| panic!("no row for the Event: {listed:?}"));
    assert_eq!(
        row[1..],
        [
            "Normal",
            "Created",
            "configmap/regarded",
            "Created",
            "pod",
            "job-worker-0"
        ],
        "{listed:?}"
    );
    assert!(row[0].ends_with('s'), "seen seconds ago: {listed:?}");

    let wide = k.ok(&["get", "events", "-o", "wide"]).columns();
    let source = wide[0]
        .iter()
        .position(|c| c == "SOURCE")
        .unwrap_or_else(|| panic!("no SOURCE column: {wide:?}"));
    assert!(
        wide.iter()
            .any(|row| row[source] == "tfjob-federator, tfjob-federator-0"),
        "the reporting controller and instance are the source: {wide:?}"
    );

    let described = k.ok(&["describe", "configmap", "regarded"]);
    let lines = describe_lines(&described.stdout);
    assert!(
        lines.iter().any(|l| l.len() == 7
            && l[..2] == ["Normal", "Created"]
            && l[3..] == ["tfjob-federator", "Created", "pod", "job-worker-0"]),
        "describe lists the Event: {described}"
    );
}
