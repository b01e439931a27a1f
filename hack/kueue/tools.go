//go:build tools

// Package tools pins the main package hack/build-kueue builds: Kueue's
// manager (sigs.k8s.io/kueue/cmd/kueue), for the MultiKueue comparison of
// the benchmark (issue 26, item 5 (g)). A module of its own, apart from
// hack/kube: Kueue v0.17.0 and its controller-runtime v0.23.3 are built
// against k8s.io v0.35, hack/kube pins v0.37. Nothing of Kueue's is copied
// into this repository; hack/kueue-up reads its CRDs and webhook
// configurations from this module's copy in Go's module cache at run time.
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
