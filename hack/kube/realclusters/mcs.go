package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// The MCS importer: the one part of Multi-Cluster Services that the test
// ground writes itself, standing in for Submariner Lighthouse, Cilium or
// GKE's (none runs offline: each needs its own data plane or a cloud).
// It follows the MCS API (KEP-1645): for a Service that cluster A exports
// with a ServiceExport, every cluster B of the run (A too: a clusterset
// name resolves in every cluster of the set) gets a ServiceImport of the same namespace and name (`Headless` for a headless
// Service, else `ClusterSetIP` with A's cluster IPs in `spec.ips`, which
// the host routes to A's node) and copies of A's EndpointSlices labelled
// `multicluster.kubernetes.io/service-name` and `…/source-cluster` (not
// `kubernetes.io/service-name`: B's EndpointSlice controller would take
// them). CoreDNS answers `<svc>.<ns>.svc.clusterset.local` from them. A
// name resolves only once its import exists; an export withdrawn takes
// its copies with it. The namespace must exist in B (namespace sameness):
// until it does, the import is retried.
const (
	mcsManager         = "real-clusters-mcs.tfjob-federator.dev"
	labelMCSService    = "multicluster.kubernetes.io/service-name"
	labelSourceCluster = "multicluster.kubernetes.io/source-cluster"
	labelManagedBy     = "endpointslice.kubernetes.io/managed-by"
)

var (
	serviceImportResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceimports"}
	serviceExportResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"}
)

// serviceKey names a Service of some cluster: what is exported and imported.
type serviceKey struct{ namespace, name string }

type mcsCluster struct {
	name     string
	client   kubernetes.Interface
	dynamic  dynamic.Interface
	services corelisters.ServiceLister
	slices   discoverylisters.EndpointSliceLister
	exports  cache.GenericLister
}

type mcsImporter struct {
	clusters []*mcsCluster
	queue    workqueue.TypedRateLimitingInterface[serviceKey]
}

// runMCSImporter follows every cluster's Services, EndpointSlices and
// ServiceExports, and keeps the imports of each key (namespace, name) in
// step, one key at a time.
func runMCSImporter(ctx context.Context, clusters []*cluster) error {
	m := &mcsImporter{queue: workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[serviceKey](100*time.Millisecond, 5*time.Second))}
	for _, c := range clusters {
		config, err := c.restConfig(c.direct)
		if err != nil {
			return err
		}
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			return err
		}
		dyn, err := dynamic.NewForConfig(config)
		if err != nil {
			return err
		}
		factory := informers.NewSharedInformerFactory(client, 0)
		exportFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
		mc := &mcsCluster{
			name: c.name, client: client, dynamic: dyn,
			services: factory.Core().V1().Services().Lister(),
			slices:   factory.Discovery().V1().EndpointSlices().Lister(),
			exports:  exportFactory.ForResource(serviceExportResource).Lister(),
		}
		for _, informer := range []cache.SharedIndexInformer{
			factory.Core().V1().Services().Informer(),
			factory.Discovery().V1().EndpointSlices().Informer(),
			exportFactory.ForResource(serviceExportResource).Informer(),
		} {
			if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc:    m.enqueue,
				UpdateFunc: func(_, obj any) { m.enqueue(obj) },
				DeleteFunc: m.enqueue,
			}); err != nil {
				return err
			}
		}
		factory.Start(ctx.Done())
		exportFactory.Start(ctx.Done())
		factory.WaitForCacheSync(ctx.Done())
		exportFactory.WaitForCacheSync(ctx.Done())
		m.clusters = append(m.clusters, mc)
	}
	go func() {
		<-ctx.Done()
		m.queue.ShutDown()
	}()
	go m.work(ctx)
	return nil
}

// enqueue: the key an object belongs to (a slice's, ours or the
// cluster's own, by its service label).
func (m *mcsImporter) enqueue(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	name := accessor.GetName()
	if _, isSlice := obj.(*discoveryv1.EndpointSlice); isSlice {
		name = accessor.GetLabels()[discoveryv1.LabelServiceName]
		if name == "" {
			name = accessor.GetLabels()[labelMCSService]
		}
	}
	if name != "" {
		m.queue.Add(serviceKey{accessor.GetNamespace(), name})
	}
}

func (m *mcsImporter) work(ctx context.Context) {
	for {
		key, shutdown := m.queue.Get()
		if shutdown {
			return
		}
		if err := m.sync(ctx, key); err != nil && ctx.Err() == nil {
			if !apierrors.IsNotFound(err) {
				logf("MCS importer, %s/%s: %v", key.namespace, key.name, err)
			}
			m.queue.AddRateLimited(key)
		} else {
			m.queue.Forget(key)
		}
		m.queue.Done(key)
	}
}

// exporter is a cluster that exports key: its Service and its slices.
type exporter struct {
	cluster *mcsCluster
	service *corev1.Service
	slices  []*discoveryv1.EndpointSlice
}

func (m *mcsImporter) exporters(key serviceKey) []exporter {
	var found []exporter
	for _, c := range m.clusters {
		export, err := c.exports.ByNamespace(key.namespace).Get(key.name)
		if err != nil {
			continue
		}
		if u, ok := export.(*unstructured.Unstructured); ok && u.GetDeletionTimestamp() != nil {
			continue
		}
		service, err := c.services.Services(key.namespace).Get(key.name)
		if err != nil {
			continue
		}
		slices, _ := c.slices.EndpointSlices(key.namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.name}))
		found = append(found, exporter{cluster: c, service: service, slices: slices})
	}
	return found
}

// sync makes every cluster's import of key what the clusters export.
func (m *mcsImporter) sync(ctx context.Context, key serviceKey) error {
	sources := m.exporters(key)
	var errs []error
	for _, target := range m.clusters {
		if err := m.syncCluster(ctx, target, key, sources); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", target.name, err))
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

func (m *mcsImporter) syncCluster(ctx context.Context, target *mcsCluster, key serviceKey, sources []exporter) error {
	imports := target.dynamic.Resource(serviceImportResource).Namespace(key.namespace)
	slices := target.client.DiscoveryV1().EndpointSlices(key.namespace)
	want := map[string]*discoveryv1.EndpointSlice{}
	for _, source := range sources {
		for _, slice := range source.slices {
			copied := importedSlice(source.cluster.name, key, slice)
			want[copied.Name] = copied
		}
	}
	if len(sources) > 0 {
		if _, err := imports.Apply(ctx, key.name, serviceImport(key, sources), metav1.ApplyOptions{FieldManager: mcsManager, Force: true}); err != nil {
			return err
		}
		for _, slice := range want {
			current, err := target.slices.EndpointSlices(key.namespace).Get(slice.Name)
			if err == nil && equality.Semantic.DeepEqual(current.Endpoints, slice.Endpoints) &&
				equality.Semantic.DeepEqual(current.Ports, slice.Ports) && equality.Semantic.DeepEqual(current.Labels, slice.Labels) {
				continue
			}
			if err := applySlice(ctx, target.client, slice); err != nil {
				return err
			}
		}
	}
	ours, err := target.slices.EndpointSlices(key.namespace).List(labels.SelectorFromSet(labels.Set{labelMCSService: key.name, labelManagedBy: mcsManager}))
	if err != nil {
		return err
	}
	for _, slice := range ours {
		if want[slice.Name] == nil {
			if err := slices.Delete(ctx, slice.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	if len(sources) == 0 {
		if err := imports.Delete(ctx, key.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// serviceImport is the import of key from sources: headless if the
// exported Services are, else with their cluster IPs.
func serviceImport(key serviceKey, sources []exporter) *unstructured.Unstructured {
	kind, ips := "Headless", []any{}
	for _, source := range sources {
		if source.service.Spec.ClusterIP != corev1.ClusterIPNone {
			kind = "ClusterSetIP"
			ips = append(ips, source.service.Spec.ClusterIP)
		}
	}
	var ports []any
	for _, port := range sources[0].service.Spec.Ports {
		ports = append(ports, map[string]any{"name": port.Name, "protocol": string(port.Protocol), "port": port.Port})
	}
	clusters := make([]string, 0, len(sources))
	for _, source := range sources {
		clusters = append(clusters, source.cluster.name)
	}
	sort.Strings(clusters)
	spec := map[string]any{"type": kind, "ports": ports}
	if kind == "ClusterSetIP" {
		spec["ips"] = ips
	}
	return object(map[string]any{
		"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
		"metadata": map[string]any{"name": key.name, "namespace": key.namespace, "annotations": map[string]any{mcsManager + "/source-clusters": fmt.Sprint(clusters)}},
		"spec":     spec,
	})
}

// importedSlice is source's slice as target holds it: its endpoints'
// addresses, readiness and hostnames (nothing that names an object of
// the source cluster) under the MCS labels.
func importedSlice(source string, key serviceKey, slice *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	copied := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "imported-" + source + "-" + slice.Name, Namespace: key.namespace,
			Labels: map[string]string{labelMCSService: key.name, labelSourceCluster: source, labelManagedBy: mcsManager},
		},
		AddressType: slice.AddressType,
		Ports:       slice.Ports,
	}
	for _, endpoint := range slice.Endpoints {
		copied.Endpoints = append(copied.Endpoints, discoveryv1.Endpoint{
			Addresses: endpoint.Addresses, Conditions: endpoint.Conditions, Hostname: endpoint.Hostname,
		})
	}
	return copied
}

// applySlice creates the slice or replaces its endpoints and ports.
func applySlice(ctx context.Context, client kubernetes.Interface, slice *discoveryv1.EndpointSlice) error {
	slices := client.DiscoveryV1().EndpointSlices(slice.Namespace)
	_, err := slices.Create(ctx, slice, metav1.CreateOptions{FieldManager: mcsManager})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	current, err := slices.Get(ctx, slice.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	current.Endpoints, current.Ports, current.Labels = slice.Endpoints, slice.Ports, slice.Labels
	_, err = slices.Update(ctx, current, metav1.UpdateOptions{FieldManager: mcsManager})
	return err
}

// serviceExportCRD is the Multi-Cluster Services API's ServiceExport
// (multicluster.x-k8s.io/v1alpha1), served by every cluster of the run so
// that a member with `exportServices` can export its replicas' services.
func serviceExportCRD() *unstructured.Unstructured {
	return namespacedCRD("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports", "svcex")
}

// serviceImportCRD is the MCS API's ServiceImport (v1alpha1, the version
// CoreDNS 1.15 reads), on every cluster with a real node.
func serviceImportCRD() *unstructured.Unstructured {
	return namespacedCRD("multicluster.x-k8s.io", "v1alpha1", "ServiceImport", "serviceimports", "svcim",
		column{"Type", "string", ".spec.type"}, column{"IP", "string", ".spec.ips"})
}
