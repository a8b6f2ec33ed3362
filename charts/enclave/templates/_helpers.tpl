{{/*
Shared helpers. Most take a context dict `(dict "root" $ "name" "<component>")`: `root` is the chart's top-level
context, `name` one of the component keys of values.yaml.
*/}}

{{/* The components, in dependency order, with what the chart must know about each. */}}
{{- define "enclave.components" -}}
config:
  module: enclave_config
  controller: true
tenants:
  module: enclave_tenants
  controller: true
  # admission subscribes to its snapshots: `--tenants-endpoint`
  admissionEndpoint: true
admission:
  module: enclave_admission
  controller: false
quotas:
  module: enclave_quotas
  controller: true
  # admission subscribes to its snapshots: `--quotas-endpoint`
  admissionEndpoint: true
globalquotas:
  module: enclave_globalquotas
  controller: true
  # admission subscribes to its snapshots: `--globalquotas-endpoint`
  admissionEndpoint: true
pools:
  module: enclave_pools
  controller: true
  # admission subscribes to its snapshots: `--pools-endpoint`
  admissionEndpoint: true
replication:
  module: enclave_replication
  controller: true
  # admission subscribes to its snapshots: `--replication-endpoint`
  admissionEndpoint: true
{{- end -}}

{{/* Facts about one component (module, controller) as a dict. */}}
{{- define "enclave.meta" -}}
{{- index (include "enclave.components" . | fromYaml) .name | toYaml -}}
{{- end -}}

{{/*
Whether a component runs inside the controllers' `enclave-host` pod (`controllers.colocated`, templates/controllers):
"true" or "". Admission never does.
*/}}
{{- define "enclave.hosted" -}}
{{- $meta := include "enclave.meta" . | fromYaml -}}
{{- if and $meta.controller .root.Values.controllers.colocated -}}true{{- end -}}
{{- end -}}

{{/* The ServiceAccount a component's pods run as: its own, or the host's when it is hosted. */}}
{{- define "enclave.serviceAccountName" -}}
{{- if include "enclave.hosted" . -}}enclave-controllers{{- else -}}{{ include "enclave.componentName" . }}{{- end -}}
{{- end -}}

{{/* A hosted controller's place in the host (its gRPC port is 9090 + place, its probes 127.0.0.1:8090 + place). */}}
{{- define "enclave.hostedPlace" -}}
{{- range $place, $name := list "config" "tenants" "quotas" "globalquotas" "pools" "replication" -}}
{{- if eq $name $.name }}{{ $place }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Chart label value: name-version. */}}
{{- define "enclave.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Name of a component's objects: `enclave-<component>`. Names are fixed, not derived from the release name: Enclave
is a cluster-wide singleton and other components address each other by these names
(`enclave-config.<namespace>.svc:9090`).
*/}}
{{- define "enclave.componentName" -}}
{{- printf "enclave-%s" .name -}}
{{- end -}}

{{/* Labels on objects that belong to no single component. */}}
{{- define "enclave.commonLabels" -}}
helm.sh/chart: {{ include "enclave.chart" . }}
app.kubernetes.io/name: enclave
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: enclave
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Labels of a component's objects. */}}
{{- define "enclave.labels" -}}
{{ include "enclave.commonLabels" .root }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* Selector labels of a component's pods: stable across upgrades, never include the version. */}}
{{- define "enclave.selectorLabels" -}}
app.kubernetes.io/name: enclave
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{/* Image reference of a component: component value, else global, else the chart's appVersion. */}}
{{- define "enclave.image" -}}
{{- $v := index .root.Values .name -}}
{{- $g := .root.Values.global.image -}}
{{- $repository := $v.image.repository | default $g.repository -}}
{{- $digest := $v.image.digest | default $g.digest -}}
{{- if $digest -}}
{{- printf "%s@%s" $repository $digest -}}
{{- else -}}
{{- printf "%s:%s" $repository ($v.image.tag | default $g.tag | default .root.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}

{{/* gRPC target of a component as other components dial it: `enclave-<name>.<namespace>.svc:<port>`. */}}
{{- define "enclave.grpcTarget" -}}
{{- $v := index .root.Values .name -}}
{{- printf "%s.%s.svc:%d" (include "enclave.componentName" .) .root.Release.Namespace (int $v.grpcPort) -}}
{{- end -}}

{{/* Whether a component runs more than one pod (so spreading and disruption budgets matter): "true" or "". */}}
{{- define "enclave.multiReplica" -}}
{{- $v := index .root.Values .name -}}
{{- if or (gt (int $v.replicas) 1) (and $v.autoscaling $v.autoscaling.enabled) -}}true{{- end -}}
{{- end -}}

{{/* Where the TLS Secret (ca.crt, tls.crt, tls.key) is mounted in every pod. */}}
{{- define "enclave.tlsDir" -}}/etc/enclave/tls{{- end -}}

{{/* Where a component's own client certificate Secret (tls.crt, tls.key) is mounted. */}}
{{- define "enclave.clientDir" -}}/etc/enclave/grpc-client{{- end -}}

{{/* The client certificate Secret of a component (enclave_config.tls.client_secret_name): <tls.secretName>-client-<name>.
Context: (dict "root" $ "name" "<component>"). */}}
{{- define "enclave.clientSecretName" -}}{{ .root.Values.tls.secretName }}-client-{{ .name }}{{- end -}}

{{/* Where admission mounts the CA of kube-apiserver's webhook client certificate. */}}
{{- define "enclave.clientCADir" -}}/etc/enclave/client-ca{{- end -}}

{{/*
The cluster roles enclave-tenants binds in every tenant namespace to Enclave's own service accounts (its
`--namespace-grant` flags and its `bind` rule), as a YAML list of {clusterRole, serviceAccount}: what a component
needs only inside tenant namespaces is granted there, not cluster-wide (README "RBAC").
*/}}
{{- define "enclave.namespaceGrants" -}}
{{- $grants := list -}}
{{- if .Values.tenants.enabled -}}
{{- if .Values.tenants.managedMetadata.enabled -}}
{{- $grants = append $grants (dict "clusterRole" "enclave-tenants-managed-metadata" "serviceAccount" (include "enclave.serviceAccountName" (dict "root" . "name" "tenants"))) -}}
{{- end -}}
{{- if .Values.replication.enabled -}}
{{- $replication := include "enclave.serviceAccountName" (dict "root" . "name" "replication") -}}
{{- $grants = append $grants (dict "clusterRole" "enclave-replication-impersonate" "serviceAccount" $replication) -}}
{{- $grants = append $grants (dict "clusterRole" "enclave-replication-read" "serviceAccount" $replication) -}}
{{- end -}}
{{- end -}}
{{- toYaml $grants -}}
{{- end -}}

{{/* The cluster role names of serviceConfiguration.spec.rbac, with the CRD defaults filled in. */}}
{{- define "enclave.rbacSpec" -}}
{{- $rbac := .Values.serviceConfiguration.spec.rbac | default dict -}}
provisioner: {{ $rbac.provisioner | default "enclave-namespace-provisioner" }}
deleter: {{ $rbac.deleter | default "enclave-namespace-deleter" }}
administrationClusterRoles: {{ $rbac.administrationClusterRoles | default (list "enclave-namespace-deleter") | toJson }}
promotionClusterRoles: {{ $rbac.promotionClusterRoles | default (list "enclave-namespace-provisioner" "enclave-namespace-deleter") | toJson }}
{{- end -}}

{{/*
The webhooks to render, as a YAML dict {mutating: [...], validating: [...]}. A webhook is rendered when it is
enabled, the admission server is enabled, and (when `requires` is set) one of the required components is enabled.
The chart-only keys are stripped. Every webhook's namespaceSelector gets
`kubernetes.io/metadata.name NotIn [excludedNamespaces..., <release namespace>]`, except the namespace hooks
(`skipControlPlane: true`): their selector matches the namespace object itself, so excluding kube-system
there would stop guarding it; they get the skip-control-plane matchCondition instead. The tenant-rules hooks
(`skipUnjudged: true`) get the skip-unjudged matchCondition of enclave_admission.defaults.skip_unjudged. A hook
with `everyNamespace: true` (the global quota reservations: a quota counts every namespace it selects) gets no
exclusion either (enclave_admission.defaults.EVERY_NAMESPACE).
*/}}
{{- define "enclave.webhooks" -}}
{{- $root := . -}}
{{- $admission := .Values.serviceConfiguration.admission -}}
{{- $excluded := concat ($admission.excludedNamespaces | default list) (list .Release.Namespace) | uniq -}}
{{- $exclusion := dict "key" "kubernetes.io/metadata.name" "operator" "NotIn" "values" $excluded -}}
{{- $out := dict "mutating" list "validating" list -}}
{{- if .Values.admission.enabled -}}
{{- range $id := keys ($admission.webhooks | default dict) | sortAlpha -}}
{{- $hook := index $admission.webhooks $id -}}
{{- $needed := true -}}
{{- with $hook.requires -}}
{{- $needed = false -}}
{{- range $component := . -}}
{{- if (index $root.Values $component).enabled -}}{{- $needed = true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $hook.enabled $needed -}}
{{- $entry := omit $hook "enabled" "type" "requires" "skipControlPlane" "skipUnjudged" "everyNamespace" -}}
{{- if $hook.skipUnjudged -}}
{{- $unjudged := printf "!request.userInfo.username.startsWith('system:serviceaccount:%s:') && !('system:masters' in request.userInfo.groups) && !(request.userInfo.username.startsWith('system:') && !request.userInfo.username.startsWith('system:serviceaccount:')) && !((request.resource.group == '' && request.resource.resource == 'events') || (request.resource.group == 'events.k8s.io' && request.resource.resource == 'events') || (request.resource.group == 'coordination.k8s.io' && request.resource.resource == 'leases') || (request.resource.group == '' && request.resource.resource == 'endpoints') || (request.resource.group == 'discovery.k8s.io' && request.resource.resource == 'endpointslices')) && !(request.resource.group == '' && request.resource.resource == 'configmaps' && has(request.name) && request.name == 'kube-root-ca.crt') && !(request.resource.group == '' && request.resource.resource == 'serviceaccounts' && has(request.name) && request.name == 'default')" $root.Release.Namespace -}}
{{- $_ := set $entry "matchConditions" (append ($hook.matchConditions | default list) (dict "name" "enclave.dev/skip-unjudged" "expression" $unjudged)) -}}
{{- end -}}
{{- if $hook.skipControlPlane -}}
{{- $user := "request.userInfo.username" -}}
{{- $expression := printf "!(%s.startsWith('system:') && !%s.startsWith('system:serviceaccount:')) && !%s.startsWith('system:serviceaccount:kube-system:') && !%s.startsWith('system:serviceaccount:%s:') && !('system:masters' in request.userInfo.groups)" $user $user $user $user $root.Release.Namespace -}}
{{- $skip := dict "name" "enclave.dev/skip-control-plane" "expression" $expression -}}
{{- $_ := set $entry "matchConditions" (append ($hook.matchConditions | default list) $skip) -}}
{{- end -}}
{{- if not (or $hook.skipControlPlane $hook.everyNamespace) -}}
{{- $selector := deepCopy ($hook.namespaceSelector | default dict) -}}
{{- $_ := set $selector "matchExpressions" (append ($selector.matchExpressions | default list) $exclusion) -}}
{{- $_ = set $entry "namespaceSelector" $selector -}}
{{- end -}}
{{- $_ := set $out $hook.type (append (index $out $hook.type) $entry) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The client kube-apiserver uses to reach the admission server. */}}
{{- define "enclave.webhookClient" -}}
{{- with .Values.serviceConfiguration.admission.client -}}
{{- toYaml . -}}
{{- else -}}
service:
  name: {{ .Values.admission.service.name }}
  namespace: {{ .Release.Namespace }}
  port: {{ .Values.admission.service.port }}
{{- end -}}
{{- end -}}

{{/*
Cross-field checks the JSON schema cannot express; each fails the render with a message saying what to change.
*/}}
{{- define "enclave.validate" -}}
{{- $v := .Values -}}
{{- if and $v.admission.enabled (not $v.config.enabled) -}}
{{- fail "admission.enabled requires config.enabled: the admission server takes its configuration from the config component's gRPC stream" -}}
{{- end -}}
{{- if and $v.admission.autoscaling.enabled (gt (int $v.admission.autoscaling.minReplicas) (int $v.admission.autoscaling.maxReplicas)) -}}
{{- fail (printf "admission.autoscaling.minReplicas (%d) must not exceed maxReplicas (%d)" (int $v.admission.autoscaling.minReplicas) (int $v.admission.autoscaling.maxReplicas)) -}}
{{- end -}}
{{- range $id, $hook := $v.serviceConfiguration.admission.webhooks -}}
{{- if and (eq $hook.type "validating") (hasKey $hook "reinvocationPolicy") -}}
{{- fail (printf "serviceConfiguration.admission.webhooks.%s: reinvocationPolicy is only valid on mutating webhooks" $id) -}}
{{- end -}}
{{- $components := include "enclave.components" $ | fromYaml -}}
{{- range $hook.requires -}}
{{- if not (hasKey $components .) -}}
{{- fail (printf "serviceConfiguration.admission.webhooks.%s.requires: unknown component %q" $id .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
