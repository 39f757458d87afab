{{/*
Prometheus (global.metrics, docs/operations.md). Args of each: ctx (a chart's context) and
kind (ServiceMonitor | PodMonitor) or port (the metrics port's name).
*/}}

{{/* "true" when a part's monitor of `kind` renders: the global switch, the part's own
metrics.enabled and the cluster serving prometheus-operator's kind; else "". */}}
{{- define "elasticctr.monitored" -}}
{{- $v := .ctx.Values -}}
{{- if and $v.global.metrics.serviceMonitor.enabled $v.metrics.enabled (.ctx.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" .kind)) -}}
true
{{- end -}}
{{- end -}}

{{/* One scrape endpoint's settings after its port: path, interval, and the target labels
the dashboard and the rules select on (`component`, `release`; never `scenario`, which
the metrics carry themselves). */}}
{{- define "elasticctr.monitorEndpoint" -}}
path: /metrics
{{- with .Values.global.metrics.serviceMonitor.interval }}
interval: {{ . }}
{{- end }}
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_component]
    targetLabel: component
  - sourceLabels: [__meta_kubernetes_pod_label_app_kubernetes_io_instance]
    targetLabel: release
{{- end -}}

{{/* A NetworkPolicy ingress rule admitting global.metrics.allowFromNamespaces (and
allowFromPods) to the metrics port, when the part is monitored; nothing otherwise. */}}
{{- define "elasticctr.metricsIngress" -}}
{{- $m := .ctx.Values.global.metrics -}}
{{- if and $m.allowFromNamespaces .ctx.Values.metrics.enabled }}
# Prometheus (global.metrics.allowFromNamespaces): the metrics port only.
- ports:
    - port: {{ .port }}
  from:
    - namespaceSelector:
        matchLabels:
          {{- toYaml $m.allowFromNamespaces | nindent 10 }}
      {{- with $m.allowFromPods }}
      podSelector:
        matchLabels:
          {{- toYaml . | nindent 10 }}
      {{- end }}
{{- end }}
{{- end -}}
