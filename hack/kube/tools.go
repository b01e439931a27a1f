//go:build tools

// Package tools pins the main packages this module builds: the control
// plane's components and the real nodes' kubelet and kube-proxy
// (hack/build-kube), kwok (the same), helm and crane
// (hack/build-deploy-tools). One module for all of them, so that the
// k8s.io packages they share are built once, not once per tool.
package tools

import (
	_ "github.com/google/go-containerregistry/cmd/crane"
	_ "helm.sh/helm/v3/cmd/helm"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
