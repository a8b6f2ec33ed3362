//go:build tools

// Package tools pins the kubeconform command this module builds (tests/integration/test_chart.py checks the
// chart's rendered manifests with it against schemas made from the pinned kube-apiserver's OpenAPI).
package tools

import _ "github.com/yannh/kubeconform/cmd/kubeconform"
