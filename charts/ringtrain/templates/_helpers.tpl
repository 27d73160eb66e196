{{/* The chart name, overridable. */}}
{{- define "ringtrain.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The base of every resource name: "ringtrain" when the release name contains the chart name
(`helm install ringtrain ...` gives the names in manifests/), else "<release>-ringtrain".
*/}}
{{- define "ringtrain.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "ringtrain.name" . -}}
{{- if contains $name .Release.Name -}}
{{- $name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ringtrain.controllerName" -}}
{{- printf "%s-controller" (include "ringtrain.fullname" .) -}}
{{- end -}}

{{- define "ringtrain.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "ringtrain.controllerName" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "ringtrain.labels" -}}
app.kubernetes.io/name: {{ include "ringtrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "ringtrain.controllerSelectorLabels" -}}
app.kubernetes.io/name: {{ include "ringtrain.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "ringtrain.controllerLabels" -}}
{{ include "ringtrain.labels" . }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "ringtrain.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
