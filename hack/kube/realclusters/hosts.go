package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// The names a process pod resolves, as on clusters with a multi-cluster
// service implementation: its own cluster's `<svc>.<ns>.svc` and
// `<svc>.<ns>.svc.cluster.local`, and `<svc>.<ns>.svc.clusterset.local`
// for every Service some cluster of the run exports with a ServiceExport,
// each mapped to the addresses of the pods behind the Service as the
// cluster's EndpointSlices (kube-controller-manager's) list them. `ip netns
// exec` mounts /etc/netns/<ns>/hosts over /etc/hosts, so the file is
// rewritten in place (the mount holds its inode) whenever a slice or an
// export changes: a process started before its peers resolves them later.
type serviceKey struct{ namespace, name string }

type hostsRegistry struct {
	mu sync.Mutex
	// per cluster: service → slice name → ready addresses
	endpoints map[string]map[serviceKey]map[string][]string
	exported  map[string]map[serviceKey]bool
	// the process pods' namespaces: netns name → (cluster, pod name, address)
	pods    map[string]hostsPod
	written map[string]string
	dirty   chan struct{}
}

type hostsPod struct{ cluster, name, ip string }

var serviceExportResource = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "serviceexports"}

func newHostsRegistry(ctx context.Context) *hostsRegistry {
	r := &hostsRegistry{
		endpoints: map[string]map[serviceKey]map[string][]string{},
		exported:  map[string]map[serviceKey]bool{},
		pods:      map[string]hostsPod{},
		written:   map[string]string{},
		dirty:     make(chan struct{}, 1),
	}
	go r.writer(ctx)
	return r
}

func (r *hostsRegistry) changed() {
	select {
	case r.dirty <- struct{}{}:
	default:
	}
}

// writer rewrites the hosts files that changed, at most every 50 ms.
func (r *hostsRegistry) writer(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.dirty:
		}
		r.writeAll()
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *hostsRegistry) writeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for netns, pod := range r.pods {
		text := r.hostsLocked(pod)
		if r.written[netns] == text {
			continue
		}
		if err := writeInPlace(filepath.Join("/etc/netns", netns, "hosts"), text); err != nil {
			logf("hosts file of %s: %v", netns, err)
			continue
		}
		r.written[netns] = text
	}
}

// writeInPlace rewrites path's content keeping its inode (a bind mount of
// it sees the new content).
func writeInPlace(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(text), 0); err != nil {
		return err
	}
	return f.Truncate(int64(len(text)))
}

// hostsLocked is the hosts file of pod.
func (r *hostsRegistry) hostsLocked(pod hostsPod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by real-clusters for pod %s of cluster %s\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", pod.name, pod.cluster, pod.ip, pod.name)
	lines := map[string][]string{} // name → addresses
	for key, slices := range r.endpoints[pod.cluster] {
		for _, ip := range union(slices) {
			base := key.name + "." + key.namespace + ".svc"
			lines[base] = append(lines[base], ip)
			lines[base+".cluster.local"] = append(lines[base+".cluster.local"], ip)
		}
	}
	for cluster, exports := range r.exported {
		for key := range exports {
			name := key.name + "." + key.namespace + ".svc.clusterset.local"
			lines[name] = append(lines[name], union(r.endpoints[cluster][key])...)
		}
	}
	names := make([]string, 0, len(lines))
	for name := range lines {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		ips := lines[name]
		sort.Strings(ips)
		for i, ip := range ips {
			if i > 0 && ips[i-1] == ip {
				continue
			}
			fmt.Fprintf(&b, "%s\t%s\n", ip, name)
		}
	}
	return b.String()
}

func union(slices map[string][]string) []string {
	var all []string
	for _, ips := range slices {
		all = append(all, ips...)
	}
	sort.Strings(all)
	return all
}

// addPod writes pod's hosts file now and keeps it current.
func (r *hostsRegistry) addPod(netns string, pod hostsPod) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods[netns] = pod
	text := r.hostsLocked(pod)
	if err := writeInPlace(filepath.Join("/etc/netns", netns, "hosts"), text); err != nil {
		return err
	}
	r.written[netns] = text
	return nil
}

func (r *hostsRegistry) removePod(netns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pods, netns)
	delete(r.written, netns)
}

// watch follows cluster's EndpointSlices and ServiceExports.
func (r *hostsRegistry) watch(ctx context.Context, cluster string, client kubernetes.Interface, config *rest.Config) error {
	r.mu.Lock()
	r.endpoints[cluster] = map[serviceKey]map[string][]string{}
	r.exported[cluster] = map[serviceKey]bool{}
	r.mu.Unlock()
	factory := informers.NewSharedInformerFactory(client, 0)
	slices := factory.Discovery().V1().EndpointSlices().Informer()
	_, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.slice(cluster, obj, false) },
		UpdateFunc: func(_, obj any) { r.slice(cluster, obj, false) },
		DeleteFunc: func(obj any) { r.slice(cluster, obj, true) },
	})
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	exportFactory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	exports := exportFactory.ForResource(serviceExportResource).Informer()
	_, err = exports.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.export(cluster, obj, false) },
		UpdateFunc: func(_, obj any) { r.export(cluster, obj, false) },
		DeleteFunc: func(obj any) { r.export(cluster, obj, true) },
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	exportFactory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	exportFactory.WaitForCacheSync(ctx.Done())
	return nil
}

func (r *hostsRegistry) slice(cluster string, obj any, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = tombstone.Obj, true
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	service := slice.Labels[discoveryv1.LabelServiceName]
	if service == "" {
		return
	}
	key := serviceKey{slice.Namespace, service}
	var ips []string
	if !deleted {
		for _, endpoint := range slice.Endpoints {
			if endpoint.Conditions.Ready != nil && !*endpoint.Conditions.Ready {
				continue
			}
			ips = append(ips, endpoint.Addresses...)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	byService := r.endpoints[cluster]
	if byService[key] == nil {
		byService[key] = map[string][]string{}
	}
	if len(ips) == 0 {
		delete(byService[key], slice.Name)
		if len(byService[key]) == 0 {
			delete(byService, key)
		}
	} else {
		byService[key][slice.Name] = ips
	}
	r.changed()
}

func (r *hostsRegistry) export(cluster string, obj any, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj, deleted = tombstone.Obj, true
	}
	export, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	key := serviceKey{export.GetNamespace(), export.GetName()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if deleted || export.GetDeletionTimestamp() != nil {
		delete(r.exported[cluster], key)
	} else {
		r.exported[cluster][key] = true
	}
	r.changed()
}

// serviceExportCRD is the Multi-Cluster Services API's ServiceExport
// (multicluster.x-k8s.io/v1alpha1), served by every cluster of the run so
// that a member with `exportServices` can export its replicas' services.
func serviceExportCRD() *unstructured.Unstructured {
	return namespacedCRD("multicluster.x-k8s.io", "v1alpha1", "ServiceExport", "serviceexports", "svcex")
}
