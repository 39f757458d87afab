{{/*
Names, labels and images of a component (a part of ElasticCTR: cube, fileserver, mlflow,
serving, trainer; the umbrella itself as "elasticctr"). Args of every
elasticctr.component.* define: ctx (a chart's context) and name (the component's name,
its chart's name: app.kubernetes.io/name, not the finer app.kubernetes.io/component).
*/}}

{{- define "elasticctr.component.name" -}}
{{- .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Always <release>-<name>: other parts reach a component by that name (no "contains"
shortcut). */}}
{{- define "elasticctr.component.fullname" -}}
{{- printf "%s-%s" .ctx.Release.Name .name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* helm.sh/chart: the chart that renders the object. */}}
{{- define "elasticctr.component.chart" -}}
{{- printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: name + instance only (selectors are immutable). */}}
{{- define "elasticctr.component.selectorLabels" -}}
app.kubernetes.io/name: {{ include "elasticctr.component.name" . }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{- define "elasticctr.component.labels" -}}
helm.sh/chart: {{ include "elasticctr.component.chart" . }}
{{ include "elasticctr.component.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/part-of: elasticctr
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The component's image (elasticctr.image of its chart's `image` values). */}}
{{- define "elasticctr.component.image" -}}
{{- include "elasticctr.image" (dict "ctx" .ctx "image" .ctx.Values.image) -}}
{{- end -}}

{{/* Image of a part: <registry>/<repository>/<name>, then `@<digest>` when the part's
image.digest is set (`make publish` records each image's digest), else `:<tag>` (the
part's tag, else global.image.tag, else the chart's appVersion). Args: ctx (a chart's
context), image (the part's image values: name, tag, digest). */}}
{{- define "elasticctr.image" -}}
{{- $g := .ctx.Values.global.image -}}
{{- $repo := printf "%s/%s" $g.repository .image.name -}}
{{- if $g.registry -}}{{- $repo = printf "%s/%s" $g.registry $repo -}}{{- end -}}
{{- if .image.digest -}}
{{- printf "%s@%s" $repo .image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo (.image.tag | default $g.tag | default .ctx.Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
