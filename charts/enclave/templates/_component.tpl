{{/*
The objects every component has, written once. Each component's directory (templates/<component>/) includes
them behind `<component>.enabled` and adds what is its own: arguments (enclave.args) and RBAC rules.
Context: (dict "root" $ "name" "<component>").
*/}}

{{/* Command-line arguments of a component. */}}
{{- define "enclave.args" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $v := index $root.Values $name -}}
{{- $meta := include "enclave.meta" . | fromYaml -}}
{{- $tls := include "enclave.tlsDir" . -}}
- --namespace={{ $root.Release.Namespace }}
- --probe-address=0.0.0.0:8081
{{- if $meta.controller }}
- --grpc-address=0.0.0.0:{{ $v.grpcPort }}
{{- if eq $name "config" }}
{{- /* config maintains the Secret itself, so it reads it through the API rather than a mount it would wait on. */}}
- --grpc-tls-secret={{ $root.Values.tls.secretName }}
{{- else }}
- --grpc-tls-cert={{ $tls }}/tls.crt
- --grpc-tls-key={{ $tls }}/tls.key
{{- end }}
- --leader-elect
{{- end }}
{{- if eq $name "config" }}
- --service-configuration-name={{ $root.Values.serviceConfiguration.name }}
{{- /* Generated webhook configurations and RBAC are owned by config's own ClusterRole: `helm uninstall` removes
them, deleting the ServiceConfiguration does not (the fence must survive that). */}}
- --owner-cluster-role={{ include "enclave.componentName" . }}
- --manage-crds
{{- else if $root.Values.config.enabled }}
- --config-endpoint={{ include "enclave.grpcTarget" (dict "root" $root "name" "config") }}
{{- /* Mutual TLS on the snapshot streams: verify publishers (and, serving, clients) with the service CA, and
present this component's own client certificate (its Secret, mounted in this pod alone), which publishers
authorise by the component it names. */}}
- --grpc-ca-file={{ $tls }}/ca.crt
- --grpc-client-cert={{ include "enclave.clientDir" . }}/tls.crt
- --grpc-client-key={{ include "enclave.clientDir" . }}/tls.key
{{- end }}
{{- if eq $name "admission" }}
- --webhook-address=0.0.0.0:{{ $v.webhookPort }}
- --tls-cert-file={{ $tls }}/tls.crt
- --tls-key-file={{ $tls }}/tls.key
{{- /* Only publishers admission subscribes to (`admissionEndpoint` in enclave.components): a flag admission
does not know would crash-loop it behind fail-closed hooks. */}}
{{- range $other, $otherMeta := include "enclave.components" $root | fromYaml }}
{{- if and $otherMeta.admissionEndpoint (index $root.Values $other).enabled }}
- --{{ $other }}-endpoint={{ include "enclave.grpcTarget" (dict "root" $root "name" $other) }}
{{- end }}
{{- end }}
{{- with $v.clientAuthentication }}
{{- if .caConfigMap }}
- --client-ca-file={{ include "enclave.clientCADir" $ }}/ca.crt
{{- with .allowedNames }}
- --client-allowed-names={{ join "," . }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.limits }}
{{- with .maxConnections }}
- --max-connections={{ int . }}
{{- end }}
{{- with .maxBufferedBytes }}
- --max-buffered-bytes={{ int64 . }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq $name "replication" }}
{{- with $v.render }}
- --render-cpu-seconds={{ .cpuSeconds }}
- --render-wall-seconds={{ .wallSeconds }}
- --render-memory-mib={{ int .memoryMiB }}
- --render-workers={{ int .workers }}
{{- end }}
{{- with $v.adoptFieldManagers }}
- --adopt-field-managers={{ join "," . }}
{{- end }}
{{- end }}
{{- if and (eq $name "tenants") (not $v.managedMetadata.enabled) }}
- --no-managed-metadata
{{- end }}
{{- if eq $name "tenants" }}
{{- range include "enclave.namespaceGrants" $root | fromYamlArray }}
- --namespace-grant={{ .clusterRole }}={{ .serviceAccount }}
{{- end }}
{{- end }}
{{- with $v.extraArgs }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "enclave.deployment" -}}
{{- $root := .root -}}
{{- $name := .name -}}
{{- $v := index $root.Values $name -}}
{{- $meta := include "enclave.meta" . | fromYaml -}}
{{- $g := $root.Values.global -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "enclave.componentName" . }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" . | nindent 4 }}
spec:
  {{- if not (and $v.autoscaling $v.autoscaling.enabled) }}
  replicas: {{ $v.replicas }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "enclave.selectorLabels" . | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # Start the replacement before stopping the old pod. Controllers: the new pod stands by (ready, serving
      # gRPC from its own watch) and takes the Lease, which the old pod releases on SIGTERM, within one retry
      # period. Admission: capacity never drops during a rollout.
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "enclave.selectorLabels" . | nindent 8 }}
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- with $v.podAnnotations }}
      annotations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
    spec:
      serviceAccountName: {{ include "enclave.componentName" . }}
      automountServiceAccountToken: true
      enableServiceLinks: false
      {{- with ($v.priorityClassName | default $g.priorityClassName) }}
      priorityClassName: {{ . }}
      {{- end }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with $g.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $g.podSecurityContext | nindent 8 }}
      containers:
        - name: {{ $name }}
          image: {{ include "enclave.image" . }}
          imagePullPolicy: {{ $v.image.pullPolicy | default $g.image.pullPolicy }}
          command: [python, -m, {{ $meta.module }}]
          args:
            {{- include "enclave.args" . | nindent 12 }}
          env:
            - name: ENCLAVE_LOG_LEVEL
              value: {{ $v.logLevel | default $g.logLevel | quote }}
            - name: ENCLAVE_LOG_FORMAT
              value: {{ $g.logFormat | quote }}
            {{- if $meta.controller }}
            # The replica's name in the Lease: the pod name, so `kubectl get lease` tells which pod leads.
            - name: ENCLAVE_IDENTITY
              valueFrom:
                fieldRef:
                  fieldPath: metadata.name
            {{- end }}
            # The root filesystem is read-only: no .pyc writes, and logs straight to stdout.
            - name: PYTHONDONTWRITEBYTECODE
              value: "1"
            - name: PYTHONUNBUFFERED
              value: "1"
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          ports:
            - name: metrics
              containerPort: 8081
              protocol: TCP
            {{- if $meta.controller }}
            - name: grpc
              containerPort: {{ $v.grpcPort }}
              protocol: TCP
            {{- end }}
            {{- if eq $name "admission" }}
            - name: https
              containerPort: {{ $v.webhookPort }}
              protocol: TCP
            {{- end }}
          startupProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 2
            failureThreshold: 30
          livenessProbe:
            httpGet:
              path: /healthz
              port: metrics
            periodSeconds: 10
            timeoutSeconds: 2
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: metrics
            periodSeconds: {{ if eq $name "admission" }}2{{ else }}5{{ end }}
            timeoutSeconds: 2
            failureThreshold: 3
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $g.containerSecurityContext | nindent 12 }}
          volumeMounts:
            - name: tmp
              mountPath: /tmp
            - name: tls
              mountPath: {{ include "enclave.tlsDir" . }}
              readOnly: true
            {{- if ne $name "config" }}
            - name: client
              mountPath: {{ include "enclave.clientDir" . }}
              readOnly: true
            {{- end }}
            {{- if and (eq $name "admission") $v.clientAuthentication $v.clientAuthentication.caConfigMap }}
            - name: client-ca
              mountPath: {{ include "enclave.clientCADir" . }}
              readOnly: true
            {{- end }}
      volumes:
        - name: tmp
          emptyDir:
            medium: Memory
            sizeLimit: 64Mi
        # Optional: the config component creates the Secret (TLS reconciler), so pods must start before it
        # exists; the kubelet fills the volume in when it appears and components re-read certificates on renewal.
        - name: tls
          secret:
            secretName: {{ $root.Values.tls.secretName }}
            optional: true
            defaultMode: 0440
            # The CA's private key (ca.key) stays in the Secret: no pod mounts it, so a pod's files cannot sign a
            # certificate the others would trust. Through the API, the config component reads it, and so can
            # enclave-replication when enabled (it reads every resource; README "RBAC").
            items:
              - key: tls.crt
                path: tls.crt
              - key: tls.key
                path: tls.key
              - key: ca.crt
                path: ca.crt
        {{- if ne $name "config" }}
        # This component's client certificate for the snapshot streams (enclave-config issues one per component
        # and subscribes to nothing itself): no other pod mounts it, so a compromised pod speaks for itself only.
        - name: client
          secret:
            secretName: {{ include "enclave.clientSecretName" . }}
            optional: true
            defaultMode: 0440
            items:
              - key: tls.crt
                path: tls.crt
              - key: tls.key
                path: tls.key
        {{- end }}
        {{- if and (eq $name "admission") $v.clientAuthentication $v.clientAuthentication.caConfigMap }}
        # The CA of kube-apiserver's webhook client certificate (not optional: without it no call is accepted).
        - name: client-ca
          configMap:
            name: {{ $v.clientAuthentication.caConfigMap }}
            items:
              - key: ca.crt
                path: ca.crt
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- if $v.topologySpreadConstraints }}
      topologySpreadConstraints:
        {{- toYaml $v.topologySpreadConstraints | nindent 8 }}
      {{- else if include "enclave.multiReplica" . }}
      # Default spread: replicas on different nodes, then zones. ScheduleAnyway keeps small clusters working.
      topologySpreadConstraints:
        {{- range $key := list "kubernetes.io/hostname" "topology.kubernetes.io/zone" }}
        - maxSkew: 1
          topologyKey: {{ $key }}
          whenUnsatisfiable: ScheduleAnyway
          labelSelector:
            matchLabels:
              {{- include "enclave.selectorLabels" $ | nindent 14 }}
          matchLabelKeys: [pod-template-hash]
        {{- end }}
      {{- end }}
{{- end -}}

{{- define "enclave.serviceAccount" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ include "enclave.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" . | nindent 4 }}
  {{- with (index .root.Values .name).serviceAccount.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/* The component's Service: metrics for every component, gRPC for controllers. */}}
{{- define "enclave.service" -}}
{{- $v := index .root.Values .name -}}
{{- $meta := include "enclave.meta" . | fromYaml -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "enclave.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" . | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- if include "enclave.hosted" . }}
    {{- include "enclave.selectorLabels" (dict "root" .root "name" "controllers") | nindent 4 }}
    {{- else }}
    {{- include "enclave.selectorLabels" . | nindent 4 }}
    {{- end }}
  ports:
    - name: metrics
      port: 8081
      targetPort: metrics
      protocol: TCP
    {{- if $meta.controller }}
    - name: grpc
      port: {{ $v.grpcPort }}
      targetPort: {{ if include "enclave.hosted" . }}{{ add 9090 (include "enclave.hostedPlace" .) }}{{ else }}grpc{{ end }}
      protocol: TCP
      appProtocol: grpc
    {{- end }}
{{- end -}}

{{- define "enclave.podDisruptionBudget" -}}
{{- $pdb := (index .root.Values .name).podDisruptionBudget -}}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "enclave.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" . | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $pdb.minAvailable) }}
  minAvailable: {{ $pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $pdb.maxUnavailable }}
  {{- end }}
  # Evict a pod that is not ready even when the budget is exhausted: a crash-looping pod must not block drains.
  unhealthyPodEvictionPolicy: AlwaysAllow
  selector:
    matchLabels:
      {{- include "enclave.selectorLabels" . | nindent 6 }}
{{- end -}}

{{- define "enclave.serviceMonitor" -}}
{{- $sm := .root.Values.metrics.serviceMonitor -}}
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata:
  name: {{ include "enclave.componentName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" . | nindent 4 }}
    {{- with $sm.labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  selector:
    matchLabels:
      {{- include "enclave.selectorLabels" . | nindent 6 }}
  namespaceSelector:
    matchNames: [{{ .root.Release.Namespace }}]
  endpoints:
    - port: metrics
      path: /metrics
      scheme: http
      interval: {{ $sm.interval }}
      scrapeTimeout: {{ $sm.scrapeTimeout }}
{{- end -}}

{{/*
RBAC plumbing: ClusterRole `enclave-<name>` with `rules` (a YAML list string) plus `extraRules` from values,
bound cluster-wide; and a Role in the release namespace with `namespacedRules`, bound there. Controllers get the
Lease rules in the Role: get/update only on their own Lease `enclave-<name>`, create (which cannot be narrowed by
name) on leases in this namespace only; and `get` on their own namespace, which the leader elector checks.
Context: (dict "root" $ "name" "<component>" "rules" "<yaml>" "namespacedRules" "<yaml>").
*/}}
{{- define "enclave.rbac" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .name -}}
{{- $meta := include "enclave.meta" . | fromYaml -}}
{{- $ctx := dict "root" $root "name" .name -}}
{{- $rules := concat (.rules | default "[]" | fromYamlArray) ($v.rbac.extraRules | default list) -}}
{{- if $meta.controller }}
{{- $rules = append $rules (dict "apiGroups" (list "") "resources" (list "namespaces") "resourceNames" (list $root.Release.Namespace) "verbs" (list "get")) -}}
{{- end }}
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {{ include "enclave.componentName" $ctx }}
  labels:
    {{- include "enclave.labels" $ctx | nindent 4 }}
rules:
  {{- toYaml $rules | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {{ include "enclave.componentName" $ctx }}
  labels:
    {{- include "enclave.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ include "enclave.componentName" $ctx }}
subjects:
  - kind: ServiceAccount
    name: {{ include "enclave.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- $namespaced := .namespacedRules | default "[]" | fromYamlArray -}}
{{- if $meta.controller }}
{{- $namespaced = concat $namespaced (list
      (dict "apiGroups" (list "coordination.k8s.io") "resources" (list "leases") "resourceNames" (list (include "enclave.componentName" $ctx)) "verbs" (list "get" "update"))
      (dict "apiGroups" (list "coordination.k8s.io") "resources" (list "leases") "verbs" (list "create"))) -}}
{{- end }}
{{- if $namespaced }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ include "enclave.componentName" $ctx }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" $ctx | nindent 4 }}
rules:
  {{- toYaml $namespaced | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ include "enclave.componentName" $ctx }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    {{- include "enclave.labels" $ctx | nindent 4 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ include "enclave.componentName" $ctx }}
subjects:
  - kind: ServiceAccount
    name: {{ include "enclave.serviceAccountName" $ctx }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}
{{- end -}}

{{/* The whole common set of one component, each document behind its own switch. */}}
{{- define "enclave.component" -}}
{{- $v := index .root.Values .name -}}
{{- if include "enclave.hosted" . }}
{{- /* Hosted in the controllers' enclave-host pod (templates/controllers): its Service selects that pod. */}}
{{ include "enclave.service" . }}
{{- else }}
{{ include "enclave.serviceAccount" . }}
---
{{ include "enclave.deployment" . }}
---
{{ include "enclave.service" . }}
{{- if $v.podDisruptionBudget.enabled }}
---
{{ include "enclave.podDisruptionBudget" . }}
{{- end }}
{{- if .root.Values.metrics.serviceMonitor.enabled }}
---
{{ include "enclave.serviceMonitor" . }}
{{- end }}
{{- end }}
{{- end -}}
