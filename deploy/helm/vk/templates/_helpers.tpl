{{/* vk lives in the namespace `vk`: its clients read the cluster identity there. */}}
{{- define "vk.namespace" -}}
{{- if ne .Release.Namespace "vk" -}}
{{- fail (printf "vk must be installed in the namespace vk, not %q: helm install vk deploy/helm/vk -n vk --create-namespace" .Release.Namespace) -}}
{{- end -}}
vk
{{- end -}}

{{- define "vk.clusterID" -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$" (.Values.clusterID | toString)) -}}
{{- fail (printf "clusterID must be a DNS label (lower case letters, digits and '-'), not %q: --set clusterID=<name>" (.Values.clusterID | toString)) -}}
{{- end -}}
{{- .Values.clusterID -}}
{{- end -}}

{{- define "vk.labels" -}}
app.kubernetes.io/name: vk
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "vk.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "vk.keyValues" -}}
{{- $pairs := list -}}
{{- range $key, $value := . -}}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The pod securityContext of every vk component: the image's non-root user. */}}
{{- define "vk.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "vk.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}

{{/* Where the API server calls the webhook running as a local process: an https URL, without
     a trailing slash (the webhook's paths are appended). */}}
{{- define "vk.localWebhookURL" -}}
{{- $url := .Values.localProcesses.webhookURL | toString | trimSuffix "/" -}}
{{- if not (hasPrefix "https://" $url) -}}
{{- fail (printf "localProcesses.webhookURL must be the webhook's https URL (https://127.0.0.1:<port>), not %q" $url) -}}
{{- end -}}
{{- $url -}}
{{- end -}}
