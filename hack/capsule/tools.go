//go:build tools

// Package tools pins Capsule's manager, the peer of Enclave's side-by-side benchmark, so `go mod tidy` keeps
// its dependencies. Built by enclave_testing.binaries ("capsule") into the shared cache.
package tools

import (
	_ "github.com/projectcapsule/capsule/cmd/controller"
)
