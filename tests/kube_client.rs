//! Drives the API server through kube-rs itself — a client nobody here
//! wrote — and checks the wire semantics kube-rs relies on: watchers and
//! reflectors across dropped watches and compaction, the finalizer helper,
//! server-side apply, optimistic concurrency, garbage collection,
//! pagination, selectors, streaming lists, generation/status rules, no-op
//! writes, injected faults and the scheduler's Unschedulable messages.
//!
//! Every scenario runs on both grounds from one source: `NAME::sim` on a
//! simulated cluster of its own, `NAME::real` in a namespace of its own on
//! the real cluster the test binary shares (`hack/real-clusters`), or on a
//! real cluster of its own when it injects faults that would hurt the
//! others. The few scenarios that need `/_sim/compact` run on the simulator
//! only (docs/src/testing/simulated-clusters.md).

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{self, finalizer};
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use common::real::Ground;
use common::sim_kube::{
    EVENTUALLY, TestCluster, api_error, config_map, install_widget_crd, widget,
};
use common::wait::eventually;

/// For each `async fn NAME(cluster: TestCluster)` that needs what only the
/// simulator has (`/_sim/compact`): `NAME::sim`.
macro_rules! on_the_simulator_only {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sim() {
                super::$name(super::TestCluster::sim(stringify!($name)).await).await
            }
        }
    )*};
}

on_both_grounds!(async TestCluster::on;
    finalizer_helper_adds_and_removes_its_finalizer,
    server_side_apply_creates_updates_removes_and_conflicts,
    replace_enforces_resource_version,
    garbage_collection_follows_propagation_policy,
    pagination_is_complete_and_consistent,
    label_and_field_selectors_filter,
    watch_reports_selector_transitions,
    streaming_list_watcher_gets_initial_events_then_live_ones,
    generation_and_status_subresource_rules,
    no_op_writes_keep_resource_version,
    no_new_finalizers_once_deleting,
    unschedulable_pods_stay_pending_with_the_scheduler_message,
    pods_are_admitted_with_their_service_account_and_default_tolerations,
    request_bodies_over_three_mebibytes_are_refused,
    events_are_one_resource_through_both_apis,
);

// Their faults (partition, latency, errors, dropped watches) would hurt
// every client of a shared cluster: a real cluster of their own.
on_both_grounds!(async TestCluster::on_private;
    watcher_and_reflector_stay_in_sync_across_dropped_watches,
    fault_injection_reaches_kube_clients,
);

on_the_simulator_only!(
    watcher_and_reflector_stay_in_sync_through_compaction,
    continue_token_of_a_compacted_snapshot_expires,
    watch_from_compacted_resource_version_gets_in_stream_410,
);

const STEP: Duration = Duration::from_secs(5);

fn rv<K: Resource>(obj: &K) -> String {
    obj.meta()
        .resource_version
        .clone()
        .expect("object has a resourceVersion")
}

fn names<K: ResourceExt>(items: impl IntoIterator<Item = K>) -> Vec<String> {
    let mut names: Vec<String> = items.into_iter().map(|o| o.name_any()).collect();
    names.sort();
    names
}

fn data_of(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.data.clone().unwrap_or_default()
}

/// name → (resourceVersion, data) of every ConfigMap, as `Api::list` reports it.
type Snapshot = BTreeMap<String, (String, BTreeMap<String, String>)>;

fn snapshot<'a>(items: impl IntoIterator<Item = &'a ConfigMap>) -> Snapshot {
    items
        .into_iter()
        .map(|cm| (cm.name_any(), (rv(cm), data_of(cm))))
        .collect()
}

/// Waits until the reflector store holds exactly what `Api::list` returns now.
async fn assert_in_sync(api: &Api<ConfigMap>, store: &reflector::Store<ConfigMap>, step: &str) {
    let listed = snapshot(&api.list(&ListParams::default()).await.expect("list").items);
    let mut last = Snapshot::new();
    let synced = tokio::time::timeout(STEP, async {
        loop {
            let state = store.state();
            last = snapshot(state.iter().map(|cm| &**cm));
            if last == listed {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        synced.is_ok(),
        "{step}: reflector store {last:?} never matched list {listed:?}"
    );
}

// 1. -------------------------------------------------------------------------

/// A reflector over the ConfigMaps of `api`, counting its (re)lists and the
/// in-stream 410s, and recording other errors.
struct Reflected {
    store: reflector::Store<ConfigMap>,
    inits: Arc<AtomicUsize>,
    expired: Arc<AtomicUsize>,
    errors: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Reflected {
    async fn start(api: &Api<ConfigMap>) -> Reflected {
        let (store, writer) = reflector::store();
        let inits = Arc::new(AtomicUsize::new(0));
        let errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let expired = Arc::new(AtomicUsize::new(0));
        let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()));
        let task = tokio::spawn({
            let (inits, errors, expired) = (inits.clone(), errors.clone(), expired.clone());
            async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::Init) => {
                            inits.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(_) => {}
                        Err(watcher::Error::WatchError(status)) if status.code == 410 => {
                            expired.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(e) => errors.lock().unwrap().push(format!("{e:?}")),
                    }
                }
            }
        });
        tokio::time::timeout(STEP, store.wait_until_ready())
            .await
            .expect("reflector ready in time")
            .unwrap();
        Reflected {
            store,
            inits,
            expired,
            errors,
            task,
        }
    }

    fn names(&self) -> Vec<String> {
        names(self.store.state().iter().map(|cm| (**cm).clone()))
    }
}

/// cm-0, cm-1 and cm-2 with `n` = their number; a reflector over them and
/// the namespace's kube-root-ca.crt, in sync after a create, an update and
/// a delete.
async fn reflect_three_then_change(api: &Api<ConfigMap>) -> Reflected {
    let pp = PostParams::default();
    for i in 0..3 {
        api.create(
            &pp,
            &config_map(&format!("cm-{i}"), &[], &[("n", &i.to_string())]),
        )
        .await
        .unwrap();
    }
    let reflected = Reflected::start(api).await;
    assert_in_sync(api, &reflected.store, "initial list").await;
    assert_eq!(
        reflected.names(),
        ["cm-0", "cm-1", "cm-2", "kube-root-ca.crt"]
    );

    api.create(&pp, &config_map("cm-3", &[], &[("n", "3")]))
        .await
        .unwrap();
    assert_in_sync(api, &reflected.store, "after create").await;

    api.patch(
        "cm-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "zero"}})),
    )
    .await
    .unwrap();
    assert_in_sync(api, &reflected.store, "after update").await;

    api.delete("cm-1", &DeleteParams::default()).await.unwrap();
    assert_in_sync(api, &reflected.store, "after delete").await;
    assert_eq!(reflected.inits.load(Ordering::SeqCst), 1, "no relist yet");
    reflected
}

/// Creates cm-4, changes cm-2, deletes cm-0 and waits for the reflector.
async fn change_after_the_cut(api: &Api<ConfigMap>, reflected: &Reflected, step: &str) {
    api.create(
        &PostParams::default(),
        &config_map("cm-4", &[], &[("n", "4")]),
    )
    .await
    .unwrap();
    api.patch(
        "cm-2",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "two"}})),
    )
    .await
    .unwrap();
    api.delete("cm-0", &DeleteParams::default()).await.unwrap();
    assert_in_sync(api, &reflected.store, step).await;
    assert_eq!(
        reflected.names(),
        ["cm-2", "cm-3", "cm-4", "kube-root-ca.crt"]
    );
}

/// Cut streams are resumed from the last resourceVersion seen: no relist,
/// no error, and no event lost.
async fn watcher_and_reflector_stay_in_sync_across_dropped_watches(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let reflected = reflect_three_then_change(&api).await;
    cluster.drop_watches().await;
    // Written while the watcher may not be watching yet: the resumed watch
    // replays them from its resourceVersion.
    change_after_the_cut(&api, &reflected, "after the dropped watch").await;
    cluster.drop_watches().await;
    api.patch(
        "cm-3",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"n": "three"}})),
    )
    .await
    .unwrap();
    assert_in_sync(&api, &reflected.store, "after a second dropped watch").await;
    assert_eq!(
        reflected.inits.load(Ordering::SeqCst),
        1,
        "resumed, not relisted"
    );
    assert_eq!(reflected.expired.load(Ordering::SeqCst), 0);
    let errors = reflected.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{errors:?}");
    reflected.task.abort();
    cluster.stop().await;
}

/// Simulator only (`/_sim/compact`): a watcher whose resourceVersion was
/// compacted away gets an in-stream 410 and relists.
async fn watcher_and_reflector_stay_in_sync_through_compaction(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let reflected = reflect_three_then_change(&api).await;

    // Move the cluster's resourceVersion past what this watcher has seen
    // (a write it does not watch), compact, then cut the stream: the watcher
    // must resume from an RV that is gone, get an in-stream 410, and relist.
    Api::<ConfigMap>::namespaced(cluster.client.clone(), "kube-system")
        .create(&PostParams::default(), &config_map("elsewhere", &[], &[]))
        .await
        .unwrap();
    cluster.compact().await;
    cluster.drop_watches().await;
    eventually("the watcher to relist after 410", EVENTUALLY, async || {
        (reflected.inits.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    assert_eq!(
        reflected.expired.load(Ordering::SeqCst),
        1,
        "the relist was caused by exactly one in-stream 410"
    );
    assert_in_sync(&api, &reflected.store, "after compaction and relist").await;

    // Live events still flow after the relist.
    change_after_the_cut(&api, &reflected, "after changes following the relist").await;
    let errors = reflected.errors.lock().unwrap().clone();
    assert!(
        errors.iter().all(|e| !e.contains("WatchStartFailed")),
        "410 must arrive in-stream, not as a failed watch start: {errors:?}"
    );
    reflected.task.abort();
    cluster.stop().await;
}

// 2. -------------------------------------------------------------------------

const FINALIZER: &str = "sim.test/cleanup";

/// Runs `finalizer()` once, recording which event (if any) it handed over.
async fn run_finalizer(
    api: &Api<ConfigMap>,
    obj: ConfigMap,
    seen: &Mutex<Vec<&'static str>>,
) -> Result<Action, finalizer::Error<Infallible>> {
    finalizer(api, FINALIZER, Arc::new(obj), |event| {
        seen.lock().unwrap().push(match event {
            finalizer::Event::Apply(_) => "apply",
            finalizer::Event::Cleanup(_) => "cleanup",
        });
        futures::future::ready(Ok::<_, Infallible>(Action::await_change()))
    })
    .await
}

async fn finalizer_helper_adds_and_removes_its_finalizer(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let seen = Mutex::new(Vec::new());

    // No finalizers at all: the helper's JSON patch tests /metadata/finalizers
    // against null while the field is absent, then adds it.
    let created = api
        .create(&PostParams::default(), &config_map("guarded", &[], &[]))
        .await
        .unwrap();
    run_finalizer(&api, created, &seen)
        .await
        .expect("add finalizer");
    assert!(seen.lock().unwrap().is_empty(), "adding runs no reconcile");
    let obj = api.get("guarded").await.unwrap();
    assert_eq!(obj.finalizers(), [FINALIZER]);

    run_finalizer(&api, obj, &seen).await.expect("apply");
    assert_eq!(*seen.lock().unwrap(), ["apply"]);

    let deleting = api
        .delete("guarded", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("a finalized object is returned, not a Status");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let obj = api.get("guarded").await.expect("held by the finalizer");
    assert!(obj.metadata.deletion_timestamp.is_some());
    run_finalizer(&api, obj, &seen).await.expect("cleanup");
    assert_eq!(*seen.lock().unwrap(), ["apply", "cleanup"]);
    assert!(
        api.get_opt("guarded").await.unwrap().is_none(),
        "removing the last finalizer deletes the object"
    );

    // Next to someone else's finalizer: added at the end, removed by index
    // after a `test` op on that index.
    seen.lock().unwrap().clear();
    let mut shared = config_map("shared", &[], &[]);
    shared.metadata.finalizers = Some(vec!["other.test/keep".into()]);
    let created = api.create(&PostParams::default(), &shared).await.unwrap();
    run_finalizer(&api, created, &seen)
        .await
        .expect("add finalizer");
    let obj = api.get("shared").await.unwrap();
    assert_eq!(obj.finalizers(), ["other.test/keep", FINALIZER]);
    api.delete("shared", &DeleteParams::default())
        .await
        .unwrap();
    let stale = api.get("shared").await.unwrap();
    api.patch(
        "shared",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": [FINALIZER]}})),
    )
    .await
    .unwrap();
    // The stale copy has our finalizer at index 1; the `test` op fails → 422.
    match run_finalizer(&api, stale, &seen).await {
        Err(finalizer::Error::RemoveFinalizer(kube::Error::Api(status))) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(status.is_invalid(), "{status:?}");
        }
        other => panic!("a failed JSON patch test must fail the removal, got {other:?}"),
    }
    assert_eq!(api.get("shared").await.unwrap().finalizers(), [FINALIZER]);
    let fresh = api.get("shared").await.unwrap();
    run_finalizer(&api, fresh, &seen).await.expect("cleanup");
    assert_eq!(*seen.lock().unwrap(), ["cleanup", "cleanup"]);
    assert!(api.get_opt("shared").await.unwrap().is_none());
    cluster.stop().await;
}

// 3. -------------------------------------------------------------------------

fn managers(cm: &ConfigMap) -> BTreeMap<String, String> {
    cm.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| {
            (
                m.manager.clone().unwrap_or_default(),
                m.operation.clone().unwrap_or_default(),
            )
        })
        .collect()
}

async fn server_side_apply_creates_updates_removes_and_conflicts(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let alpha = PatchParams::apply("alpha");
    // Labels are left out entirely when `labels` is null.
    let apply = |labels: Value, data: Value| {
        let mut body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "ssa"},
            "data": data,
        });
        if !labels.is_null() {
            body["metadata"]["labels"] = labels;
        }
        Patch::Apply(body)
    };

    // Create: the object is absent.
    let created = api
        .patch(
            "ssa",
            &alpha,
            &apply(json!({"team": "a"}), json!({"a": "1", "b": "2"})),
        )
        .await
        .expect("apply creates");
    assert_eq!(
        data_of(&created),
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "2".into())])
    );
    assert_eq!(created.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(
        managers(&created),
        BTreeMap::from([("alpha".into(), "Apply".into())])
    );
    assert!(created.metadata.uid.is_some());

    // Update: change a value.
    let updated = api
        .patch(
            "ssa",
            &alpha,
            &apply(json!({"team": "a"}), json!({"a": "10", "b": "2"})),
        )
        .await
        .expect("apply updates");
    assert_eq!(updated.data.as_ref().unwrap()["a"], "10");
    assert_eq!(updated.metadata.uid, created.metadata.uid);
    assert_ne!(rv(&updated), rv(&created));

    // Another manager writes a field of its own with a merge patch.
    let beta = api
        .patch(
            "ssa",
            &PatchParams {
                field_manager: Some("beta".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"c": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        managers(&beta),
        BTreeMap::from([
            ("alpha".into(), "Apply".into()),
            ("beta".into(), "Update".into())
        ])
    );

    // Field removal: alpha stops applying label `team` and key `b` → both go;
    // `c` was never alpha's, so it stays. alpha adds key `k`.
    let removed = api
        .patch(
            "ssa",
            &alpha,
            &apply(Value::Null, json!({"a": "10", "k": "alpha"})),
        )
        .await
        .expect("apply with fewer fields");
    assert_eq!(
        data_of(&removed),
        BTreeMap::from([
            ("a".into(), "10".into()),
            ("c".into(), "3".into()),
            ("k".into(), "alpha".into())
        ])
    );
    assert!(
        !removed.labels().contains_key("team"),
        "{:?}",
        removed.labels()
    );

    // Conflict: gamma sets alpha's field to another value without force.
    let gamma = PatchParams::apply("gamma");
    let status = api_error(
        api.patch("ssa", &gamma, &apply(Value::Null, json!({"a": "20"})))
            .await,
    );
    assert_eq!(status.code, 409, "{status:?}");
    assert!(status.is_conflict(), "{status:?}");
    let unchanged = api.get("ssa").await.unwrap();
    assert_eq!(unchanged.data.as_ref().unwrap()["a"], "10");
    assert_eq!(rv(&unchanged), rv(&removed));

    // With force, gamma takes the field over.
    let forced = api
        .patch(
            "ssa",
            &gamma.clone().force(),
            &apply(Value::Null, json!({"a": "20"})),
        )
        .await
        .expect("forced apply");
    assert_eq!(forced.data.as_ref().unwrap()["a"], "20");
    let by_manager = managers(&forced);
    assert_eq!(
        by_manager.keys().map(String::as_str).collect::<Vec<_>>(),
        ["alpha", "beta", "gamma"],
        "{:?}",
        forced.metadata.managed_fields
    );
    let gamma_fields = forced
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some("gamma"))
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| f.0.to_string())
        .unwrap_or_default();
    assert!(
        gamma_fields.contains("f:a"),
        "gamma owns data.a: {gamma_fields}"
    );

    let alpha_fields = forced
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .find(|m| m.manager.as_deref() == Some("alpha"))
        .and_then(|m| m.fields_v1.as_ref())
        .map(|f| f.0.to_string())
        .unwrap_or_default();
    assert!(
        alpha_fields.contains("f:k") && !alpha_fields.contains("f:a"),
        "alpha lost data.a, kept data.k: {alpha_fields}"
    );

    // alpha no longer owns `a`: applying without it leaves gamma's value.
    let after = api
        .patch("ssa", &alpha, &apply(Value::Null, json!({"k": "alpha"})))
        .await
        .unwrap();
    assert_eq!(after.data.as_ref().unwrap()["a"], "20");
    assert_eq!(after.data.as_ref().unwrap()["k"], "alpha");
    cluster.stop().await;
}

// 4. -------------------------------------------------------------------------

async fn replace_enforces_resource_version(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    let v1 = api
        .create(&pp, &config_map("occ", &[], &[("k", "1")]))
        .await
        .unwrap();

    let mut next = v1.clone();
    next.data = Some(BTreeMap::from([("k".into(), "2".into())]));
    let v2 = api
        .replace("occ", &pp, &next)
        .await
        .expect("replace at current RV");
    assert_eq!(data_of(&v2)["k"], "2");
    assert_ne!(rv(&v2), rv(&v1));

    // v1's resourceVersion is stale now.
    let mut stale = v1.clone();
    stale.data = Some(BTreeMap::from([("k".into(), "stale".into())]));
    let status = api_error(api.replace("occ", &pp, &stale).await);
    assert_eq!(status.code, 409, "{status:?}");
    assert!(status.is_conflict(), "{status:?}");
    assert_eq!(data_of(&api.get("occ").await.unwrap())["k"], "2");

    // Built-in types allow an unconditional update (no resourceVersion).
    let mut unconditional = v2.clone();
    unconditional.metadata.resource_version = None;
    unconditional.data = Some(BTreeMap::from([("k".into(), "3".into())]));
    let v3 = api
        .replace("occ", &pp, &unconditional)
        .await
        .expect("unconditional update of a ConfigMap");
    assert_eq!(data_of(&v3)["k"], "3");

    // Custom resources require the resourceVersion.
    let widgets = install_widget_crd(&cluster.client, &cluster.namespace).await;
    let w1 = widgets
        .create(
            &pp,
            &widget(&cluster.namespace, "w", json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap();
    let mut no_rv = w1.clone();
    no_rv.metadata.resource_version = None;
    no_rv.data["spec"]["size"] = json!(2);
    let status = api_error(widgets.replace("w", &pp, &no_rv).await);
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.is_invalid(), "{status:?}");

    let mut next = w1.clone();
    next.data["spec"]["size"] = json!(3);
    let w2 = widgets
        .replace("w", &pp, &next)
        .await
        .expect("replace CR with RV");
    assert_eq!(w2.data["spec"]["size"], json!(3));
    let status = api_error(widgets.replace("w", &pp, &w1).await);
    assert_eq!(status.code, 409, "{status:?}");
    assert!(status.is_conflict());
    cluster.stop().await;
}

// 5. -------------------------------------------------------------------------

fn owned_by(name: &str, owner: &ConfigMap) -> ConfigMap {
    let mut cm = config_map(name, &[], &[]);
    cm.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "name": owner.name_any(),
            "uid": owner.metadata.uid.clone().expect("owner uid"),
            "blockOwnerDeletion": true,
        }))
        .unwrap(),
    ]);
    cm
}

async fn garbage_collection_follows_propagation_policy(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    let gone = |name: &'static str| {
        let api = api.clone();
        async move || api.get_opt(name).await.unwrap().is_none().then_some(())
    };

    // Background: the owner goes at once, its dependent soon after.
    let owner = api
        .create(&pp, &config_map("owner-bg", &[], &[]))
        .await
        .unwrap();
    api.create(&pp, &owned_by("dep-bg", &owner)).await.unwrap();
    // An object owned by nobody stays.
    api.create(&pp, &config_map("bystander", &[], &[]))
        .await
        .unwrap();
    api.delete("owner-bg", &DeleteParams::background())
        .await
        .unwrap();
    assert!(api.get_opt("owner-bg").await.unwrap().is_none());
    eventually("background GC of dep-bg", EVENTUALLY, gone("dep-bg")).await;
    assert!(api.get_opt("bystander").await.unwrap().is_some());

    // Foreground: the owner waits, marked, until its dependents are gone.
    let owner = api
        .create(&pp, &config_map("owner-fg", &[], &[]))
        .await
        .unwrap();
    let mut dep = owned_by("dep-fg", &owner);
    dep.metadata.finalizers = Some(vec!["sim.test/hold".into()]);
    api.create(&pp, &dep).await.unwrap();
    let deleting = api
        .delete("owner-fg", &DeleteParams::foreground())
        .await
        .unwrap()
        .left()
        .expect("foreground deletion returns the owner");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert!(
        deleting
            .finalizers()
            .iter()
            .any(|f| f == "foregroundDeletion"),
        "{:?}",
        deleting.finalizers()
    );
    eventually("GC to start deleting dep-fg", EVENTUALLY, async || {
        api.get("dep-fg")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let waiting = api
        .get("owner-fg")
        .await
        .expect("owner waits for its dependent");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(waiting.finalizers(), ["foregroundDeletion"]);
    api.patch(
        "dep-fg",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("dep-fg to go", EVENTUALLY, gone("dep-fg")).await;
    eventually(
        "owner-fg to go after its dependent",
        EVENTUALLY,
        gone("owner-fg"),
    )
    .await;

    // Orphan: the dependent survives and loses its ownerReference.
    let owner = api
        .create(&pp, &config_map("owner-or", &[], &[]))
        .await
        .unwrap();
    api.create(&pp, &owned_by("dep-or", &owner)).await.unwrap();
    api.delete("owner-or", &DeleteParams::orphan())
        .await
        .unwrap();
    eventually("owner-or to go", EVENTUALLY, gone("owner-or")).await;
    let orphan = eventually(
        "dep-or to lose its ownerReference",
        EVENTUALLY,
        async || {
            let dep = api
                .get("dep-or")
                .await
                .expect("orphaned dependent survives");
            dep.owner_references().is_empty().then_some(dep)
        },
    )
    .await;
    assert!(orphan.metadata.deletion_timestamp.is_none());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(api.get_opt("dep-or").await.unwrap().is_some());
    cluster.stop().await;
}

// 6. -------------------------------------------------------------------------

async fn pagination_is_complete_and_consistent(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    let mut expected = Vec::new();
    for i in 0..25 {
        let name = format!("page-{i:02}");
        api.create(
            &pp,
            &config_map(&name, &[("set", "paged")], &[("v", "orig")]),
        )
        .await
        .unwrap();
        expected.push(name);
    }
    let base = ListParams::default().labels("set=paged").limit(7);

    let first = api.list(&base).await.unwrap();
    assert_eq!(first.items.len(), 7);
    let list_rv = first.metadata.resource_version.clone().expect("list RV");
    let mut token = first.metadata.continue_.clone().expect("continue token");

    // Changes after the first page must not show on later pages.
    api.create(
        &pp,
        &config_map("page-99", &[("set", "paged")], &[("v", "new")]),
    )
    .await
    .unwrap();
    api.delete("page-20", &DeleteParams::default())
        .await
        .unwrap();
    api.patch(
        "page-15",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "changed"}})),
    )
    .await
    .unwrap();

    let mut seen: Vec<ConfigMap> = first.items;
    let mut sizes = vec![7];
    loop {
        let page = api
            .list(&base.clone().continue_token(&token))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(list_rv.as_str()),
            "every page carries the first page's resourceVersion"
        );
        sizes.push(page.items.len());
        seen.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(next) => token = next,
            None => break,
        }
    }
    assert_eq!(sizes, [7, 7, 7, 4]);
    let seen_names: Vec<String> = seen.iter().map(|cm| cm.name_any()).collect();
    assert_eq!(seen_names.len(), 25, "{seen_names:?}");
    assert_eq!(
        names(seen.iter().cloned()),
        expected,
        "every object exactly once"
    );
    for cm in &seen {
        assert_eq!(
            data_of(cm)["v"],
            "orig",
            "{} is shown as of the snapshot",
            cm.name_any()
        );
    }

    // A fresh list sees the changes.
    let now = api
        .list(&ListParams::default().labels("set=paged"))
        .await
        .unwrap();
    let now_names = names(now.items.iter().cloned());
    assert!(now_names.contains(&"page-99".to_string()));
    assert!(!now_names.contains(&"page-20".to_string()));
    let p15 = now
        .items
        .iter()
        .find(|cm| cm.name_any() == "page-15")
        .unwrap();
    assert_eq!(data_of(p15)["v"], "changed");

    cluster.stop().await;
}

/// Simulator only (`/_sim/compact`): a continue token whose snapshot was
/// compacted away gets 410 Expired.
async fn continue_token_of_a_compacted_snapshot_expires(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    for i in 0..3 {
        api.create(
            &pp,
            &config_map(&format!("page-{i}"), &[("set", "paged")], &[]),
        )
        .await
        .unwrap();
    }
    let base = ListParams::default().labels("set=paged").limit(2);
    let first = api.list(&base).await.unwrap();
    let token = first.metadata.continue_.clone().unwrap();
    api.delete("page-0", &DeleteParams::default())
        .await
        .unwrap();
    cluster.compact().await;
    let status = api_error(api.list(&base.clone().continue_token(&token)).await);
    assert_eq!(status.code, 410, "{status:?}");
    assert_eq!(status.reason, "Expired", "{status:?}");
    cluster.stop().await;
}

// 7. -------------------------------------------------------------------------

/// kube-apiserver refuses request bodies over 3 MiB (413); so does the
/// simulator, which once read any body whole.
async fn request_bodies_over_three_mebibytes_are_refused(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let big = "x".repeat(4 * 1024 * 1024);
    let status = api_error(
        api.create(
            &PostParams::default(),
            &config_map("huge", &[], &[("data", &big)]),
        )
        .await,
    );
    assert_eq!(status.code, 413, "{}", status.message);
    assert!(
        status.message.contains("limit is 3145728"),
        "{}",
        status.message
    );
    let fits = "x".repeat(512 * 1024);
    api.create(
        &PostParams::default(),
        &config_map("fits", &[], &[("data", &fits)]),
    )
    .await
    .expect("a body under the limit is taken");
}

async fn label_and_field_selectors_filter(cluster: TestCluster) {
    let sel = cluster.namespace.as_str();
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    for (name, labels) in [
        ("web-prod", &[("env", "prod"), ("tier", "web")][..]),
        ("web-dev", &[("env", "dev"), ("tier", "web")][..]),
        ("db-staging", &[("env", "staging"), ("tier", "db")][..]),
        ("plain", &[][..]),
    ] {
        api.create(&pp, &config_map(name, labels, &[]))
            .await
            .unwrap();
    }
    let mine = ["web-prod", "web-dev", "db-staging", "plain"];
    let query = |lp: ListParams| {
        let api = api.clone();
        async move {
            let items = api
                .list(&lp)
                .await
                .unwrap_or_else(|e| panic!("{lp:?}: {e}"))
                .items;
            let mut names: Vec<String> = items
                .iter()
                .map(|o| o.name_any())
                .filter(|n| mine.contains(&n.as_str()))
                .collect();
            names.sort();
            names
        }
    };
    let sorted = |v: &[&str]| {
        let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    };
    for (selector, want) in [
        ("env=prod", &["web-prod"][..]),
        ("env==prod", &["web-prod"][..]),
        ("env!=prod", &["web-dev", "db-staging", "plain"][..]),
        ("env in (prod,dev)", &["web-prod", "web-dev"][..]),
        ("env notin (prod,dev)", &["db-staging", "plain"][..]),
        ("tier", &["web-prod", "web-dev", "db-staging"][..]),
        ("!tier", &["plain"][..]),
        ("tier=web,env!=dev", &["web-prod"][..]),
        ("env in (staging),tier", &["db-staging"][..]),
        ("env=nope", &[][..]),
    ] {
        assert_eq!(
            query(ListParams::default().labels(selector)).await,
            sorted(want),
            "labelSelector {selector:?}"
        );
    }
    for (selector, want) in [
        ("metadata.name=web-dev".to_string(), &["web-dev"][..]),
        (
            "metadata.name!=web-dev".to_string(),
            &["web-prod", "db-staging", "plain"][..],
        ),
        (format!("metadata.namespace={sel}"), &mine[..]),
        ("metadata.namespace=default".to_string(), &[][..]),
    ] {
        assert_eq!(
            query(ListParams::default().fields(&selector)).await,
            sorted(want),
            "fieldSelector {selector:?}"
        );
    }
    assert_eq!(
        query(
            ListParams::default()
                .labels("tier")
                .fields("metadata.name!=web-prod")
        )
        .await,
        sorted(&["web-dev", "db-staging"]),
    );
    // Across namespaces, metadata.namespace picks one.
    let all: Api<ConfigMap> = Api::all(cluster.client.clone());
    let across = all
        .list(&ListParams::default().fields(&format!("metadata.namespace={sel}")))
        .await
        .unwrap();
    assert!(
        across
            .items
            .iter()
            .all(|cm| cm.namespace().as_deref() == Some(sel))
    );
    assert_eq!(
        names(across.items.into_iter())
            .into_iter()
            .filter(|n| mine.contains(&n.as_str()))
            .count(),
        4
    );
    let elsewhere = all
        .list(&ListParams::default().fields(&format!("metadata.namespace!={sel}")))
        .await
        .unwrap();
    assert!(
        elsewhere
            .items
            .iter()
            .all(|cm| cm.namespace().as_deref() != Some(sel))
    );

    // Unsupported field labels → 400.
    for (selector, what) in [
        ("spec.nodeName=x", "configmaps"),
        ("metadata.labels=x", "configmaps"),
    ] {
        let status = api_error(api.list(&ListParams::default().fields(selector)).await);
        assert_eq!(status.code, 400, "{what} {selector:?}: {status:?}");
        assert_eq!(status.reason, "BadRequest", "{status:?}");
    }

    // Pods: spec.nodeName and status.phase. No kubelet runs pods bound to
    // nodes the cluster lacks, and no scheduler serves `manual`, so the
    // phases set here stay.
    let pods: Api<Pod> = cluster.api();
    for (name, node, phase) in [
        ("p-a", Some("node-a"), "Running"),
        ("p-b", Some("node-b"), "Pending"),
        ("p-none", None, "Succeeded"),
    ] {
        let mut spec = json!({
            "schedulerName": "manual",
            "containers": [{"name": "c", "image": "busybox"}],
        });
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        pods.create(&pp, &pod).await.unwrap();
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
    let pod_query = |fields: &'static str| {
        let pods = pods.clone();
        async move {
            names(
                pods.list(&ListParams::default().fields(fields))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(pod_query("spec.nodeName=node-a").await, ["p-a"]);
    assert_eq!(pod_query("spec.nodeName!=node-a").await, ["p-b", "p-none"]);
    assert_eq!(pod_query("spec.nodeName=").await, ["p-none"]);
    assert_eq!(pod_query("status.phase=Running").await, ["p-a"]);
    assert_eq!(
        pod_query("status.phase!=Running,spec.nodeName=node-b").await,
        ["p-b"]
    );
    assert_eq!(pod_query("status.phase=Failed").await, Vec::<String>::new());
    let status = api_error(
        pods.list(&ListParams::default().fields("spec.containers=x"))
            .await,
    );
    assert_eq!(status.code, 400, "{status:?}");
    cluster.stop().await;
}

async fn watch_reports_selector_transitions(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let created = api
        .create(
            &PostParams::default(),
            &config_map("mover", &[("env", "dev")], &[]),
        )
        .await
        .unwrap();
    let stream = api
        .watch(
            &WatchParams::default().labels("env=prod").timeout(20),
            &rv(&created),
        )
        .await
        .unwrap();
    let mut stream = std::pin::pin!(
        stream.try_filter(|e| futures::future::ready(!matches!(e, WatchEvent::Bookmark(_))))
    );
    let relabel = async |env: &str| {
        api.patch(
            "mover",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"env": env}}})),
        )
        .await
        .unwrap()
    };
    let into = relabel("prod").await;
    match tokio::time::timeout(STEP, stream.next()).await {
        Ok(Some(Ok(WatchEvent::Added(cm)))) => assert_eq!(rv(&cm), rv(&into)),
        other => panic!("starting to match must be ADDED, got {other:?}"),
    }
    let out = relabel("dev").await;
    match tokio::time::timeout(STEP, stream.next()).await {
        Ok(Some(Ok(WatchEvent::Deleted(cm)))) => {
            assert_eq!(cm.name_any(), "mover");
            assert_eq!(rv(&cm), rv(&out), "DELETED carries the new resourceVersion");
        }
        other => panic!("stopping to match must be DELETED, got {other:?}"),
    }
    cluster.stop().await;
}

// 8. -------------------------------------------------------------------------

async fn streaming_list_watcher_gets_initial_events_then_live_ones(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let pp = PostParams::default();
    for name in ["s-1", "s-2", "s-3"] {
        api.create(&pp, &config_map(name, &[], &[])).await.unwrap();
    }
    let mut stream = watcher(api.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut next = async || {
        tokio::time::timeout(STEP, stream.next())
            .await
            .expect("watcher event in time")
            .expect("stream open")
            .expect("no watcher error")
    };
    assert!(matches!(next().await, watcher::Event::Init));
    let mut initial = Vec::new();
    loop {
        match next().await {
            watcher::Event::InitApply(cm) => initial.push(cm.name_any()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event during the initial stream: {other}"),
        }
    }
    initial.sort();
    assert_eq!(initial, ["kube-root-ca.crt", "s-1", "s-2", "s-3"]);

    api.create(&pp, &config_map("s-4", &[], &[])).await.unwrap();
    match next().await {
        watcher::Event::Apply(cm) => assert_eq!(cm.name_any(), "s-4"),
        other => panic!("expected Apply(s-4), got {other}"),
    }
    api.patch(
        "s-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "y"}})),
    )
    .await
    .unwrap();
    match next().await {
        watcher::Event::Apply(cm) => {
            assert_eq!(cm.name_any(), "s-1");
            assert_eq!(data_of(&cm)["x"], "y");
        }
        other => panic!("expected Apply(s-1), got {other}"),
    }
    api.delete("s-2", &DeleteParams::default()).await.unwrap();
    match next().await {
        watcher::Event::Delete(cm) => assert_eq!(cm.name_any(), "s-2"),
        other => panic!("expected Delete(s-2), got {other}"),
    }
    cluster.stop().await;
}

// 9. -------------------------------------------------------------------------

async fn watch_from_compacted_resource_version_gets_in_stream_410(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let created = api
        .create(&PostParams::default(), &config_map("old", &[], &[]))
        .await
        .unwrap();
    api.patch(
        "old",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "b"}})),
    )
    .await
    .unwrap();
    cluster.compact().await;

    let stream = api
        .watch(&WatchParams::default().timeout(10), &rv(&created))
        .await
        .expect("the watch starts with HTTP 200 even for an expired RV");
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(STEP, stream.next()).await {
        Ok(Some(Ok(WatchEvent::Error(status)))) => {
            assert_eq!(status.code, 410, "{status:?}");
            assert_eq!(status.reason, "Expired", "{status:?}");
        }
        other => panic!("expected an in-stream 410, got {other:?}"),
    }

    // Watching from the current resourceVersion still works after compaction.
    let current = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(10), &current)
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    api.create(&PostParams::default(), &config_map("new", &[], &[]))
        .await
        .unwrap();
    let added = tokio::time::timeout(STEP, async {
        while let Some(event) = stream.next().await {
            match event.expect("watch event") {
                WatchEvent::Added(cm) => return cm,
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!("watch ended early")
    })
    .await
    .expect("ADDED in time");
    assert_eq!(added.name_any(), "new");
    cluster.stop().await;
}

fn generation(obj: &DynamicObject) -> i64 {
    obj.metadata.generation.expect("metadata.generation")
}

async fn generation_and_status_subresource_rules(cluster: TestCluster) {
    let widgets = install_widget_crd(&cluster.client, &cluster.namespace).await;
    let pp = PostParams::default();
    let patch = PatchParams::default();

    // Status sent with a create is ignored when /status is a subresource.
    let created = widgets
        .create(
            &pp,
            &widget(
                &cluster.namespace,
                "g",
                json!({"spec": {"size": 1}, "status": {"phase": "Injected"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(generation(&created), 1);
    assert!(
        created
            .data
            .get("status")
            .is_none_or(|s| s.get("phase").is_none()),
        "status ignored on create: {:?}",
        created.data
    );

    let status = widgets
        .patch_status(
            "g",
            &patch,
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.data["status"]["phase"], "Running");
    assert_eq!(
        generation(&status),
        1,
        "a status write does not bump generation"
    );
    assert_ne!(rv(&status), rv(&created));

    let spec = widgets
        .patch("g", &patch, &Patch::Merge(json!({"spec": {"size": 2}})))
        .await
        .unwrap();
    assert_eq!(generation(&spec), 2, "a spec change bumps generation");
    assert_eq!(spec.data["status"]["phase"], "Running");

    // Status in a main-resource write is ignored (a no-op here).
    let ignored = widgets
        .patch(
            "g",
            &patch,
            &Patch::Merge(json!({"status": {"phase": "Hacked"}})),
        )
        .await
        .unwrap();
    assert_eq!(ignored.data["status"]["phase"], "Running");
    assert_eq!(generation(&ignored), 2);
    assert_eq!(
        rv(&ignored),
        rv(&spec),
        "ignoring everything is a no-op write"
    );
    let mut replaced = ignored.clone();
    replaced.data["status"]["phase"] = json!("Replaced");
    replaced.data["spec"]["color"] = json!("red");
    let replaced = widgets.replace("g", &pp, &replaced).await.unwrap();
    assert_eq!(replaced.data["status"]["phase"], "Running");
    assert_eq!(replaced.data["spec"]["color"], "red");
    assert_eq!(generation(&replaced), 3);

    // Metadata changes do not bump generation.
    let labelled = widgets
        .patch(
            "g",
            &patch,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(generation(&labelled), 3);

    // Spec in a /status write is ignored.
    let status = widgets
        .patch_status(
            "g",
            &patch,
            &Patch::Merge(json!({"spec": {"size": 9}, "status": {"phase": "Done"}})),
        )
        .await
        .unwrap();
    assert_eq!(status.data["spec"]["size"], json!(2));
    assert_eq!(status.data["status"]["phase"], "Done");
    assert_eq!(generation(&status), 3);

    // Deletion held by a finalizer bumps generation once more.
    widgets
        .patch(
            "g",
            &patch,
            &Patch::Merge(json!({"metadata": {"finalizers": ["sim.test/hold"]}})),
        )
        .await
        .unwrap();
    let deleting = widgets
        .delete("g", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("held object returned");
    assert!(deleting.metadata.deletion_timestamp.is_some());
    assert_eq!(generation(&deleting), 4);
    widgets
        .patch(
            "g",
            &patch,
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(widgets.get_opt("g").await.unwrap().is_none());
    cluster.stop().await;
}

async fn no_op_writes_keep_resource_version(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let created = api
        .create(
            &PostParams::default(),
            &config_map("still", &[("l", "v")], &[("k", "v")]),
        )
        .await
        .unwrap();
    let before = rv(&created);

    let merged = api
        .patch(
            "still",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "v"}})),
        )
        .await
        .unwrap();
    assert_eq!(rv(&merged), before, "no-op merge patch");

    let replaced = api
        .replace("still", &PostParams::default(), &merged)
        .await
        .unwrap();
    assert_eq!(rv(&replaced), before, "no-op replace");

    let json_patched = api
        .patch(
            "still",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "replace", "path": "/data/k", "value": "v"}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(rv(&json_patched), before, "no-op JSON patch");

    let ssa = PatchParams::apply("noop");
    let body = Patch::Apply(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "still"}, "data": {"k2": "v2"},
    }));
    let first = api.patch("still", &ssa, &body).await.unwrap();
    assert_ne!(rv(&first), before);
    let second = api.patch("still", &ssa, &body).await.unwrap();
    assert_eq!(
        rv(&second),
        rv(&first),
        "repeating the same apply is a no-op"
    );

    // No event was emitted for the no-op writes: a watch from `before` sees
    // exactly the one apply.
    let stream = api
        .watch(
            &WatchParams::default().timeout(5).disable_bookmarks(),
            &before,
        )
        .await
        .unwrap();
    let mut stream = std::pin::pin!(stream);
    match tokio::time::timeout(STEP, stream.next()).await {
        Ok(Some(Ok(WatchEvent::Modified(cm)))) => assert_eq!(rv(&cm), rv(&first)),
        other => panic!("expected the apply's MODIFIED, got {other:?}"),
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(300), stream.next())
            .await
            .is_err(),
        "no further events"
    );

    let changed = api
        .patch(
            "still",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    assert_ne!(rv(&changed), rv(&first));
    cluster.stop().await;
}

async fn no_new_finalizers_once_deleting(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    let mut cm = config_map("ending", &[], &[]);
    cm.metadata.finalizers = Some(vec!["a.test/x".into()]);
    api.create(&PostParams::default(), &cm).await.unwrap();
    let deleting = api
        .delete("ending", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("held object returned");
    let since = deleting
        .metadata
        .deletion_timestamp
        .clone()
        .expect("deletionTimestamp");

    let status = api_error(
        api.patch(
            "ending",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["a.test/x", "b.test/y"]}})),
        )
        .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(status.is_invalid(), "{status:?}");
    let still = api.get("ending").await.unwrap();
    assert_eq!(still.finalizers(), ["a.test/x"]);
    assert_eq!(still.metadata.deletion_timestamp, Some(since));

    // A second delete does not restart or finish anything.
    api.delete("ending", &DeleteParams::default())
        .await
        .unwrap();
    assert!(api.get_opt("ending").await.unwrap().is_some());

    api.patch(
        "ending",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("ending").await.unwrap().is_none());
    cluster.stop().await;
}

async fn fault_injection_reaches_kube_clients(cluster: TestCluster) {
    let api: Api<ConfigMap> = cluster.api();
    api.create(&PostParams::default(), &config_map("probe", &[], &[]))
        .await
        .unwrap();

    let faults = cluster.set_faults(json!({"latencyMs": 150})).await;
    assert_eq!(faults["latencyMs"], 150);
    let started = std::time::Instant::now();
    api.get("probe").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));

    cluster
        .set_faults(json!({"latencyMs": 0, "errorRate": 1.0}))
        .await;
    let status = api_error(api.get("probe").await);
    assert!(matches!(status.code, 429 | 500), "{status:?}");

    // A partitioned cluster does not answer until healed; the admin port does.
    cluster
        .set_faults(json!({"errorRate": 0.0, "partitioned": true}))
        .await;
    let pending = tokio::spawn({
        let api = api.clone();
        async move { api.get("probe").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!pending.is_finished(), "no answer while partitioned");
    let faults = cluster.set_faults(json!({"partitioned": false})).await;
    assert_eq!(faults["partitioned"], false, "{faults}");
    assert_eq!(faults["latencyMs"].as_u64(), Some(0), "{faults}");
    assert_eq!(faults["errorRate"].as_f64(), Some(0.0), "{faults}");
    let got = tokio::time::timeout(STEP, pending)
        .await
        .expect("answered once healed")
        .unwrap()
        .unwrap();
    assert_eq!(got.name_any(), "probe");
    cluster.stop().await;
}

// Scheduler -------------------------------------------------------------------

fn unschedulable(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")
        .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// Pods that fit no node of the default 4 (4 GPUs each) stay Pending with
/// kube-scheduler's message: the filter reasons counted per node, then why
/// preemption cannot help (no node has 8 GPUs to free; a selector that
/// matches nothing is not the business of preemption).
async fn unschedulable_pods_stay_pending_with_the_scheduler_message(cluster: TestCluster) {
    let pods: Api<Pod> = cluster.api();
    let pod = |name: &str, gpus: u32, selector: Value| -> Pod {
        let mut resources = json!({"requests": {"cpu": "100m", "memory": "64Mi"}});
        if gpus > 0 {
            resources["limits"] = json!({"nvidia.com/gpu": gpus.to_string()});
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": selector,
                "containers": [{"name": "main", "image": "busybox:1.36", "resources": resources}],
            },
        }))
        .expect("Pod")
    };
    let cases = [
        (
            pod("greedy", 8, json!({})),
            "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        ),
        (
            pod("picky", 0, json!({"accelerator": "a100"})),
            "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        ),
        (
            pod(
                "zoned",
                8,
                json!({"topology.kubernetes.io/zone": "home-zone-a"}),
            ),
            "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling.",
        ),
    ];
    for (pod, _) in &cases {
        pods.create(&PostParams::default(), pod).await.unwrap();
    }
    for (pod, message) in &cases {
        let name = pod.name_any();
        let pending = eventually(
            &format!("{name} to be Unschedulable"),
            Duration::from_secs(30),
            async || {
                pods.get(&name)
                    .await
                    .ok()
                    .filter(|p| unschedulable(p).is_some())
            },
        )
        .await;
        let condition = unschedulable(&pending).expect("PodScheduled=False");
        assert_eq!(condition.message.as_deref(), Some(*message), "{name}");
        assert!(condition.last_transition_time.is_some(), "{condition:?}");
        assert_eq!(condition.observed_generation, Some(1), "{condition:?}");
        let status = pending.status.as_ref().expect("status");
        assert_eq!(status.qos_class.as_deref(), Some("Burstable"), "{name}");
        assert_eq!(status.phase.as_deref(), Some("Pending"), "{name}");
        assert!(
            pending
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none(),
            "{name} is not bound"
        );
        assert!(
            status.container_statuses.is_none(),
            "no kubelet touched {name}: {status:?}"
        );
    }
    cluster.stop().await;
}

// Admission -------------------------------------------------------------------

/// What the default admission plugins add to a pod: its ServiceAccount
/// (which must exist) and the projected API credentials unless automounting
/// is off, `PreemptLowerPriority`, and tolerating not-ready and unreachable
/// nodes for 300 s.
async fn pods_are_admitted_with_their_service_account_and_default_tolerations(
    cluster: TestCluster,
) {
    let pods: Api<Pod> = cluster.api();
    let pp = PostParams::default();
    let pod = |name: &str, spec: Value| -> Pod {
        let mut full = json!({
            "schedulerName": "manual",
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        });
        for (k, v) in spec.as_object().into_iter().flatten() {
            full[k] = v.clone();
        }
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": full,
        }))
        .expect("Pod")
    };

    let admitted = pods.create(&pp, &pod("plain", json!({}))).await.unwrap();
    let spec = serde_json::to_value(admitted.spec.expect("spec")).unwrap();
    assert_eq!(spec["serviceAccountName"], "default", "{spec}");
    assert_eq!(spec["serviceAccount"], "default", "{spec}");
    assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority", "{spec}");
    assert_eq!(spec["priority"], 0, "{spec}");
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );
    let volume = spec["volumes"][0]["name"].as_str().unwrap_or_default();
    assert!(volume.starts_with("kube-api-access-"), "{spec}");
    assert_eq!(
        spec["volumes"][0]["projected"],
        json!({"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]})
    );
    assert_eq!(
        spec["containers"][0]["volumeMounts"],
        json!([{"name": volume, "readOnly": true, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );

    // Tolerations of its own are kept; automounting off adds no volume.
    let quiet = pods
        .create(
            &pp,
            &pod(
                "quiet",
                json!({"automountServiceAccountToken": false,
                    "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists"}]}),
            ),
        )
        .await
        .unwrap();
    let spec = serde_json::to_value(quiet.spec.expect("spec")).unwrap();
    assert!(spec.get("volumes").is_none(), "{spec}");
    assert!(
        spec["containers"][0].get("volumeMounts").is_none(),
        "{spec}"
    );
    assert_eq!(
        spec["tolerations"],
        json!([
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists"},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );

    // Requests default to the limits; only cpu and memory make the QoS class.
    let gpus = pods
        .create(
            &pp,
            &pod(
                "gpus",
                json!({"containers": [{"name": "main", "image": "busybox:1.36",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}),
            ),
        )
        .await
        .unwrap();
    let resources =
        serde_json::to_value(&gpus.spec.as_ref().expect("spec").containers[0].resources).unwrap();
    assert_eq!(
        resources,
        json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}})
    );
    assert_eq!(
        gpus.status.and_then(|s| s.qos_class).as_deref(),
        Some("BestEffort")
    );

    // A ServiceAccount that does not exist: refused.
    let status = api_error(
        pods.create(&pp, &pod("orphan", json!({"serviceAccountName": "nobody"})))
            .await,
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert_eq!(
        status.message,
        format!(
            "pods \"orphan\" is forbidden: error looking up service account {}/nobody: serviceaccount \"nobody\" not found",
            cluster.namespace
        )
    );
    assert!(pods.get_opt("orphan").await.unwrap().is_none());
    cluster.stop().await;
}

/// An API for Events of type `K` (`core/v1` or `events.k8s.io/v1`) in the
/// test's namespace, as JSON: the tests compare what the server sends.
fn events_api<K: Resource<DynamicType = ()>>(cluster: &TestCluster) -> Api<DynamicObject> {
    Api::namespaced_with(
        cluster.client.clone(),
        &cluster.namespace,
        &ApiResource::erase::<K>(&()),
    )
}

/// An Event without its metadata: the fields the two APIs map.
fn event_fields(event: &DynamicObject) -> Value {
    let mut fields = serde_json::to_value(event).expect("an Event serializes");
    if let Some(map) = fields.as_object_mut() {
        map.remove("metadata");
    }
    fields
}

/// The next `count` watch events as (type, name, fields).
async fn next_watch_events(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<DynamicObject>>> + Unpin),
    count: usize,
) -> Vec<(&'static str, String, Value)> {
    let mut seen = Vec::new();
    while seen.len() < count {
        let event = tokio::time::timeout(STEP, stream.next())
            .await
            .unwrap_or_else(|_| panic!("no watch event within {STEP:?} after {seen:?}"))
            .expect("the watch stays open")
            .expect("a watch event");
        match event {
            WatchEvent::Added(o) => seen.push(("ADDED", o.name_any(), event_fields(&o))),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o.name_any(), event_fields(&o))),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o.name_any(), event_fields(&o))),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("watch error {e:?} after {seen:?}"),
        }
    }
    seen
}

/// Events are one resource served by two APIs: an Event written through
/// `events.k8s.io/v1` (as kube-rs's Recorder writes the controller's) is
/// read, listed and watched as a core `v1` Event, and one written through
/// core `v1` (as kubelets write theirs) through `events.k8s.io/v1`, their
/// fields mapped as kube-apiserver maps them (`pkg/apis/events/v1`).
async fn events_are_one_resource_through_both_apis(cluster: TestCluster) {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use k8s_openapi::api::events::v1::Event as EventsEvent;
    let ns = cluster.namespace.clone();
    let core = events_api::<CoreEvent>(&cluster);
    let events = events_api::<EventsEvent>(&cluster);
    let pp = PostParams::default();
    let regarded = cluster
        .api::<ConfigMap>()
        .create(&pp, &config_map("regarded", &[], &[]))
        .await
        .unwrap();
    let uid = regarded.uid().expect("a created object has a uid");
    let reference = json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "regarded", "uid": uid});
    let involving = format!("involvedObject.uid={uid}");
    let start = core
        .list(&ListParams::default().fields(&involving))
        .await
        .unwrap();
    let from = start
        .metadata
        .resource_version
        .expect("a list has a version");
    let mut core_watch = core
        .watch(&WatchParams::default().fields(&involving), &from)
        .await
        .unwrap()
        .boxed();
    let mut events_watch = events
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();

    let recorded: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "regarded.recorded"},
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "reportingController": "tfjob-federator",
        "reportingInstance": "tfjob-federator-0",
        "action": "Create", "reason": "Created", "type": "Normal",
        "regarding": reference,
        "related": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "job-worker-0"},
        "note": "Created pod job-worker-0",
    }))
    .unwrap();
    events.create(&pp, &recorded).await.unwrap();
    let recorded_as_core = json!({
        "apiVersion": "v1", "kind": "Event",
        "eventTime": "2026-01-02T03:04:05.123456Z",
        "reportingComponent": "tfjob-federator",
        "reportingInstance": "tfjob-federator-0",
        "action": "Create", "reason": "Created", "type": "Normal",
        "involvedObject": reference,
        "related": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "job-worker-0"},
        "message": "Created pod job-worker-0",
        "source": {},
        "firstTimestamp": null,
        "lastTimestamp": null,
    });
    assert_eq!(
        event_fields(&core.get("regarded.recorded").await.unwrap()),
        recorded_as_core,
        "the recorded Event read as a core Event"
    );

    // A repetition, as the Recorder reports one: a merge patch of its series.
    let series = json!({"count": 2, "lastObservedTime": "2026-01-02T03:05:05.654321Z"});
    events
        .patch(
            "regarded.recorded",
            &PatchParams::default(),
            &Patch::Merge(json!({"series": series})),
        )
        .await
        .unwrap();
    let mut repeated_as_core = recorded_as_core.clone();
    repeated_as_core["series"] = series.clone();

    let pulled = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "regarded.pulled"},
        "involvedObject": reference,
        "reason": "Pulled", "message": "Pulled the image", "type": "Warning",
        "source": {"component": "kubelet", "host": "node-0"},
        "firstTimestamp": "2026-01-02T03:04:05Z",
        "lastTimestamp": "2026-01-02T03:06:05Z",
        "count": 3,
    });
    core.create(&pp, &serde_json::from_value(pulled).unwrap())
        .await
        .unwrap();
    let pulled_as_events = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "eventTime": null,
        "reason": "Pulled", "note": "Pulled the image", "type": "Warning",
        "regarding": reference,
        "deprecatedSource": {"component": "kubelet", "host": "node-0"},
        "deprecatedFirstTimestamp": "2026-01-02T03:04:05Z",
        "deprecatedLastTimestamp": "2026-01-02T03:06:05Z",
        "deprecatedCount": 3,
    });
    assert_eq!(
        event_fields(&events.get("regarded.pulled").await.unwrap()),
        pulled_as_events,
        "the core Event read through events.k8s.io/v1"
    );

    let names = |list: kube::core::ObjectList<DynamicObject>| -> Vec<String> {
        let mut names: Vec<String> = list.items.iter().map(|e| e.name_any()).collect();
        names.sort();
        names
    };
    assert_eq!(
        names(
            core.list(&ListParams::default().fields(&involving))
                .await
                .unwrap()
        ),
        ["regarded.pulled", "regarded.recorded"],
        "kubectl describe's query of core Events finds both"
    );
    assert_eq!(
        names(
            events
                .list(&ListParams::default().fields("regarding.name=regarded,reason=Created"))
                .await
                .unwrap()
        ),
        ["regarded.recorded"],
        "events.k8s.io/v1 field selectors name its own fields"
    );
    for (source, name) in [
        ("kubelet", "regarded.pulled"),
        ("tfjob-federator", "regarded.recorded"),
    ] {
        assert_eq!(
            names(
                core.list(&ListParams::default().fields(&format!("source={source}")))
                    .await
                    .unwrap()
            ),
            [name],
            "`source` selects the source component, else the reporting one"
        );
    }

    assert_eq!(
        next_watch_events(&mut core_watch, 3).await,
        [
            ("ADDED", "regarded.recorded".to_string(), recorded_as_core),
            (
                "MODIFIED",
                "regarded.recorded".to_string(),
                repeated_as_core
            ),
            (
                "ADDED",
                "regarded.pulled".to_string(),
                json!({
                    "apiVersion": "v1", "kind": "Event",
                    "eventTime": null,
                    "involvedObject": reference,
                    "reason": "Pulled", "message": "Pulled the image", "type": "Warning",
                    "source": {"component": "kubelet", "host": "node-0"},
                    "firstTimestamp": "2026-01-02T03:04:05Z",
                    "lastTimestamp": "2026-01-02T03:06:05Z",
                    "count": 3,
                    "reportingComponent": "",
                    "reportingInstance": "",
                })
            ),
        ],
        "a watch of core Events sees the writes of both APIs"
    );
    let watched = next_watch_events(&mut events_watch, 3).await;
    assert_eq!(
        watched[2],
        ("ADDED", "regarded.pulled".to_string(), pulled_as_events),
        "a watch of events.k8s.io/v1 Events sees the core write: {watched:?}"
    );

    core.delete("regarded.recorded", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        api_error(events.get("regarded.recorded").await).code,
        404,
        "deleted through one API, gone from the other"
    );
}
