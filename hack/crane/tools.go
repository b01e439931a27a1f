//go:build tools

// Package tools pins the crane command this module builds (hack/image-check
// assembles and inspects the OCI image with it, without a container engine).
package tools

import _ "github.com/google/go-containerregistry/cmd/crane"
