//go:build tools

// Package tools pins the helm 4 command this module builds.
package tools

import _ "helm.sh/helm/v4/cmd/helm"
