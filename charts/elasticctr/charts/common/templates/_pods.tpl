{{/*
Conventions every workload shares (docs/chart.md "Pod settings of every workload"): the
subcharts call these with their own values, so there is one copy of each. Args named `v`
are a part's values (a subchart's `.Values`, or the umbrella's `.Values.tests`).
*/}}

{{/* The ServiceAccount a workload runs as: serviceAccount.name when set, else the part's
own account when the chart creates it, else `default`. Args: sa (serviceAccount values:
create, name), name (the part's own account name). */}}
{{- define "elasticctr.serviceAccountName" -}}
{{- if .sa.name -}}{{ .sa.name }}{{- else if .sa.create -}}{{ .name }}{{- else -}}default{{- end -}}
{{- end -}}

{{/* Pod template labels or annotations: the chart's own (`own`, YAML text, rendered as
given), then those of `extra` (a part's podLabels or podAnnotations) whose keys the chart
does not set itself: selectors, NetworkPolicies, monitors and config checksums keep
working whatever a user adds. */}}
{{- define "elasticctr.podMetadata" -}}
{{- $own := fromYaml .own -}}
{{- $extra := dict -}}
{{- range $key, $value := .extra -}}
{{- if not (hasKey $own $key) }}{{ $_ := set $extra $key (toString $value) }}{{ end -}}
{{- end -}}
{{ .own }}
{{- with $extra }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The helpers below render nothing, or text without a leading newline for
`{{- with include ... }}{{ . | nindent N }}{{ end }}`. */}}

{{/* Container env entries of v.extraEnv (Kubernetes EnvVar objects: `value` or
`valueFrom`), appended after the chart's own: for a name the chart sets too, the container
gets the user's (the last entry). */}}
{{- define "elasticctr.extraEnv" -}}
{{- with .v.extraEnv }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* A container's `envFrom:` of v.extraEnvFrom (ConfigMaps and Secrets as variables). */}}
{{- define "elasticctr.extraEnvFrom" -}}
{{- with .v.extraEnvFrom }}{{ printf "envFrom:\n%s" (toYaml . | indent 2) }}{{ end -}}
{{- end -}}

{{/* Volume mount entries of v.extraVolumeMounts, appended to a container's own. */}}
{{- define "elasticctr.extraVolumeMounts" -}}
{{- with .v.extraVolumeMounts }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Volume entries of v.extraVolumes, appended to a pod's own. */}}
{{- define "elasticctr.extraVolumes" -}}
{{- with .v.extraVolumes }}{{ toYaml . }}{{ end -}}
{{- end -}}

{{/* Where a pod runs: v.nodeSelector, v.tolerations, v.affinity and
v.topologySpreadConstraints; a constraint without a labelSelector gets the workload's own
pod labels (`selector`, a dict), so that it spreads the pods of this workload. */}}
{{- define "elasticctr.podPlacement" -}}
{{- $v := .v -}}
{{- $out := list -}}
{{- range $key := list "nodeSelector" "tolerations" "affinity" -}}
{{- with index $v $key }}{{ $out = append $out (printf "%s:\n%s" $key (toYaml . | indent 2)) }}{{ end -}}
{{- end -}}
{{- with $v.topologySpreadConstraints -}}
{{- $constraints := list -}}
{{- range . -}}
{{- $c := . -}}
{{- if not (hasKey $c "labelSelector") -}}
{{- $c = merge (dict "labelSelector" (dict "matchLabels" $.selector)) $c -}}
{{- end -}}
{{- $constraints = append $constraints $c -}}
{{- end -}}
{{- $out = append $out (printf "topologySpreadConstraints:\n%s" (toYaml $constraints | indent 2)) -}}
{{- end -}}
{{- join "\n" $out -}}
{{- end -}}

{{/*
Root-owned volumes (global.volumePermissions, docs/chart.md "Shared volumes"): an init
container that gives the mount root of each writable volume (the directory itself, never
what is in it) to the pod's runAsUser and fsGroup. NFS-like ReadWriteMany classes (EFS,
CFS, SFS csi-nas, NFS) hand out root-owned volumes and ignore fsGroup, and every part runs
as uid 10001. It runs as root with CAP_CHOWN and CAP_FOWNER only (the root it starts with
cannot read or write files it does not own) and does nothing when the root already belongs
to the pod's user with rwx for user and group. When the server refuses the chown but lets
this container write there (an EFS access point maps every client to its own uid), the
volume is left as it is; otherwise the pod stops here with the reason. Args: ctx (a chart's context), image (that
part's own image: every one has a shell and coreutils), volumes (volume name -> mount
path). Renders `initContainers:` with the container, or nothing when off or no volume.
*/}}
{{- define "elasticctr.volumePermissions" -}}
{{- $v := .ctx.Values -}}
{{- if and $v.global.volumePermissions.enabled .volumes -}}
{{- $pod := $v.podSecurityContext -}}
{{- $uid := int64 (default 10001 $pod.runAsUser) -}}
{{- $gid := int64 (default (default $uid $pod.runAsGroup) $pod.fsGroup) -}}
initContainers:
  - name: volume-permissions
    image: {{ .image }}
    imagePullPolicy: {{ $v.global.image.pullPolicy }}
    command:
      - /bin/sh
      - -c
      - |
        want={{ $uid }}:{{ $gid }}
        for dir; do
          before=$(stat -c '%u:%g %A' "$dir")
          case "$before" in
            "$want "?rw[xs]rw[xs]*) echo "$dir: $before, nothing to change"; continue ;;
          esac
          if err=$(chown "$want" "$dir" 2>&1 && chmod u+rwx,g+rwx "$dir" 2>&1); then
            echo "$dir: $before -> $(stat -c '%u:%g %A' "$dir")"
          elif mkdir "$dir/.volume-permissions-$$" 2>/dev/null && rmdir "$dir/.volume-permissions-$$"; then
            # The server maps every client to one identity that may write (an EFS access point).
            echo "$dir: $before kept: the server refuses the change ($err) but lets writers in"
          else
            echo "$dir: cannot give it to $want ($before): $err. An export that maps root to nobody (root_squash) refuses this: give the export to $want or use the class's uid/gid options (docs/chart.md, Shared volumes)" >&2
            exit 1
          fi
        done
      - volume-permissions
    args:
      {{- range $name := keys .volumes | sortAlpha }}
      - {{ get $.volumes $name }}
      {{- end }}
    resources:
      requests: {cpu: 10m, memory: 16Mi}
      limits: {cpu: 100m, memory: 64Mi}
    securityContext:
      runAsUser: 0
      runAsNonRoot: false
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities: {drop: [ALL], add: [CHOWN, FOWNER]}
      seccompProfile: {type: RuntimeDefault}
    volumeMounts:
      {{- range $name := keys .volumes | sortAlpha }}
      - name: {{ $name }}
        mountPath: {{ get $.volumes $name }}
      {{- end }}
{{- end -}}
{{- end -}}
