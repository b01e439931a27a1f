package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
)

// A cluster with a real node has CoreDNS as its DNS
// (docs/src/testing/real-nodes.md): a Deployment in kube-system on the real
// node behind the `kube-dns` Service at the address the kubelet's
// clusterDNS names, serving `cluster.local` and, from the ServiceImports and
// EndpointSlices the MCS importer (mcs.go) writes, `clusterset.local`. No
// upstream: names outside these zones fail, as nothing here reaches out.
const corednsImage = "localhost/tfjob-federator/coredns:1.15.0"

const corefile = `.:53 {
    errors
    ready :8181
    kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {
        pods insecure
        multicluster clusterset.local
        fallthrough in-addr.arpa ip6.arpa
    }
    loadbalance
}
`

func corednsImageSpec(bin string) imageSpec {
	return imageSpec{name: corednsImage, files: map[string]string{"coredns": filepath.Join(bin, "coredns")}, entrypoint: []string{"/coredns"}}
}

// corednsObjects: its identity (read what the kubernetes plugin watches),
// its Corefile, the Deployment and the Service.
func corednsObjects(dnsIP string) []*unstructured.Unstructured {
	labels := map[string]any{"k8s-app": "kube-dns"}
	return []*unstructured.Unstructured{
		object(map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}}),
		object(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "real-clusters:coredns"},
			"rules": []any{
				map[string]any{"apiGroups": []any{""}, "resources": []any{"endpoints", "services", "pods", "namespaces"}, "verbs": []any{"list", "watch"}},
				map[string]any{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"list", "watch"}},
				map[string]any{"apiGroups": []any{"multicluster.x-k8s.io"}, "resources": []any{"serviceimports"}, "verbs": []any{"list", "watch"}},
			},
		}),
		object(map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": map[string]any{"name": "real-clusters:coredns"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "real-clusters:coredns"},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}},
		}),
		object(map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system"}, "data": map[string]any{"Corefile": corefile}}),
		object(map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "coredns", "namespace": "kube-system", "labels": labels},
			"spec": map[string]any{
				"replicas": 1, "selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"serviceAccountName": "coredns", "dnsPolicy": "Default", "priorityClassName": "system-cluster-critical",
						"nodeSelector": map[string]any{realNodeLabel: realNodeMarker},
						"tolerations":  []any{map[string]any{"key": realNodeTaint, "operator": "Exists", "effect": "NoSchedule"}},
						"volumes":      []any{map[string]any{"name": "config", "configMap": map[string]any{"name": "coredns"}}},
						"containers": []any{map[string]any{
							"name": "coredns", "image": corednsImage, "imagePullPolicy": "Never",
							"args":           []any{"-conf", "/etc/coredns/Corefile"},
							"volumeMounts":   []any{map[string]any{"name": "config", "mountPath": "/etc/coredns", "readOnly": true}},
							"readinessProbe": map[string]any{"httpGet": map[string]any{"path": "/ready", "port": 8181}, "periodSeconds": 1},
						}},
					},
				},
			},
		}),
		object(map[string]any{
			"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "kube-dns", "namespace": "kube-system", "labels": labels},
			"spec": map[string]any{
				"clusterIP": dnsIP, "selector": labels,
				"ports": []any{
					map[string]any{"name": "dns", "port": 53, "protocol": "UDP"},
					map[string]any{"name": "dns-tcp", "port": 53, "protocol": "TCP"},
				},
			},
		}),
	}
}

// startCoreDNS applies the objects and waits until CoreDNS is ready.
func startCoreDNS(ctx context.Context, a *applier, client kubernetes.Interface, c *cluster) error {
	for _, obj := range corednsObjects(c.slot.dnsIP()) {
		if err := a.apply(ctx, obj); err != nil {
			return fmt.Errorf("CoreDNS %s: %w", obj.GetKind(), err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if d, err := client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{}); err == nil && d.Status.ReadyReplicas == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("CoreDNS of %s not ready within 60s", c.name)
}
