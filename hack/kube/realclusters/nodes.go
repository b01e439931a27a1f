package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kwokNodeStages are the node Stages of ours that kwok plays: a fake node is
// made Ready (keeping the capacity it was created with) and then heartbeats
// every 10 to 12 seconds (kwok's jitter is the upper bound), well inside the node-monitor grace period. No pod
// Stages: kubelet.go drives pods.
const kwokNodeStages = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $now | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      allocatable:
      {{ YAML .status.allocatable 1 }}
      capacity:
      {{ YAML .status.capacity 1 }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version | Quote }}
        containerRuntimeVersion: {{ printf "kwok-%s" Version | Quote }}
      phase: Running
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
    durationMilliseconds: 10000
    jitterDurationMilliseconds: 12000
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      {{ range .status.conditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ .lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
  immediateNextStage: true
`

// createNodes creates the nodes as the simulator names and labels them
// (src/sim/nodes.rs), with the annotation kwok manages.
func createNodes(ctx context.Context, client kubernetes.Interface, clusterName string, o options, kubeletPort int) error {
	capacity := corev1.ResourceList{}
	for name, value := range map[corev1.ResourceName]string{
		corev1.ResourceCPU: o.cpu, corev1.ResourceMemory: o.memory, corev1.ResourcePods: "110",
		"nvidia.com/gpu": fmt.Sprint(o.gpus), corev1.ResourceEphemeralStorage: "100Gi",
	} {
		quantity, err := resource.ParseQuantity(value)
		if err != nil {
			return fmt.Errorf("%s %q: %w", name, value, err)
		}
		capacity[name] = quantity
	}
	for i := range o.nodes {
		name := fmt.Sprintf("%s-node-%d", clusterName, i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{
					"kubernetes.io/hostname":           name,
					"kubernetes.io/os":                 "linux",
					"kubernetes.io/arch":               "amd64",
					"node.kubernetes.io/instance-type": "sim-gpu",
					"topology.kubernetes.io/region":    clusterName,
					"topology.kubernetes.io/zone":      fmt.Sprintf("%s-zone-%s", clusterName, []string{"a", "b"}[i%2]),
					"type":                             "kwok",
				},
			},
			Status: corev1.NodeStatus{
				Capacity:    capacity,
				Allocatable: capacity,
				Addresses: []corev1.NodeAddress{
					{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("172.18.0.%d", i+2)},
					{Type: corev1.NodeHostName, Address: name},
					// Where kube-apiserver finds the kubelet API (logs.go).
					{Type: corev1.NodeExternalIP, Address: "127.0.0.1"},
				},
				DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(kubeletPort)}},
			},
		}
		if _, err := client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// waitNodesReady waits until kwok made every node Ready and the node
// lifecycle controller lifted its not-ready taint, so pods schedule at once.
func waitNodesReady(ctx context.Context, client kubernetes.Interface, want int) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for _, node := range nodes.Items {
				if nodeReady(&node) && onlyOwnTaints(&node) {
					ready++
				}
			}
			if ready == want {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("nodes not ready and untainted after 60s")
}

// onlyOwnTaints: the node carries no taint but the real node's own (the
// node lifecycle's not-ready and unreachable taints are gone).
func onlyOwnTaints(node *corev1.Node) bool {
	for _, taint := range node.Spec.Taints {
		if taint.Key != realNodeTaint {
			return false
		}
	}
	return true
}

func nodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
