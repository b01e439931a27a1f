//go:build tools

// Package tools pins CoreDNS, the real nodes' cluster DNS
// (docs/src/testing/real-nodes.md), built by hack/build-kube. A module of
// its own: CoreDNS builds against the k8s.io release it names, hack/kube
// pins a newer one.
package tools

import (
	_ "github.com/coredns/coredns"
)
