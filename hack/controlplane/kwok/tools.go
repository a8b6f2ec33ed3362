//go:build tools

// Package tools pins the kwok command this module builds (simulated Nodes and Pods for the scale suite and
// `helm install --wait`; see enclave_testing.kwok).
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
