{{/*
Service ports: one home in the chart. Every template that needs a port (containers,
Services, probes' targets, URLs other parts reach, NOTES) calls this instead of a number;
the numbers are elasticctr.constants' (FILESERVER_PORT, MLFLOW_PORT, CUBE_PORT,
CUBE_TRANSFER_PORT, SERVING_PORT), which tests/chart/test_ports.py keeps equal and which
no other template spells out. Arg: the port's name, one of the keys below.
*/}}
{{- define "elasticctr.port" -}}
{{- $ports := dict "fileserver" 8080 "mlflow" 5000 "cube" 8500 "cubeTransfer" 8510 "serving" 8600 "console" 8700 -}}
{{- if not (hasKey $ports .) -}}
{{- fail (printf "elasticctr.port: no port named %q (known: %s)" . (keys $ports | sortAlpha | join ", ")) -}}
{{- end -}}
{{- get $ports . -}}
{{- end -}}
