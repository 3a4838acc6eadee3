{{/*
Names. They are fixed, not derived from the release name: documentation, alerts and the
NetworkPolicy name these objects and their app.kubernetes.io/name labels.
*/}}
{{- define "edgedrain.coordinator" -}}edgedrain-coordinator{{- end }}
{{- define "edgedrain.agent" -}}edgedrain-agent{{- end }}
{{- define "edgedrain.nats" -}}edgedrain-nats{{- end }}

{{/*
Labels of every object: the base's part-of label and Helm's standard ones. Pod templates and
selectors carry only app.kubernetes.io/name, as in deploy/base.
*/}}
{{- define "edgedrain.labels" -}}
app.kubernetes.io/part-of: edgedrain
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end }}

{{/*
An image reference from {repository, tag, digest}; the tag defaults to the chart's appVersion
unless a digest alone is given. Call with (dict "image" .Values.image "root" $).
*/}}
{{- define "edgedrain.imageRef" -}}
{{- $img := .image -}}
{{- if and $img.digest (not $img.tag) -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else if $img.digest -}}
{{- printf "%s:%s@%s" $img.repository $img.tag $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end }}

{{/* The coordinator's image. */}}
{{- define "edgedrain.image" -}}
{{- include "edgedrain.imageRef" (dict "image" .Values.image "root" .) -}}
{{- end }}

{{/*
The agent's commands per operation (reboot, shutdown, update, decommission): the value given,
else for reboot and shutdown the rebootMethod's. A dict of operation to command; empty commands
are left out.
*/}}
{{- define "edgedrain.agentCommands" -}}
{{- $nsenter := "nsenter --target 1 --mount --uts --ipc --net --pid -- systemctl" -}}
{{- $defaults := dict -}}
{{- if eq .Values.agent.rebootMethod "logind" -}}
{{- $defaults = dict "reboot" "logind:reboot" "shutdown" "logind:poweroff" -}}
{{- else if eq .Values.agent.rebootMethod "command" -}}
{{- $defaults = dict "reboot" (printf "%s reboot" $nsenter) "shutdown" (printf "%s poweroff" $nsenter) -}}
{{- else -}}
{{- fail (printf "agent.rebootMethod %q: want logind or command" .Values.agent.rebootMethod) -}}
{{- end -}}
{{- $out := dict -}}
{{- range $op := list "reboot" "shutdown" "update" "decommission" -}}
{{- $cmd := default (get $defaults $op) (get $.Values.agent.commands $op) -}}
{{- if $cmd }}{{- $_ := set $out $op $cmd -}}{{- end -}}
{{- end -}}
{{- toJson $out -}}
{{- end }}

{{/*
The agent's image: commandImage when a command needs a shell (edgedrain's own image has none),
else the chart's image.
*/}}
{{- define "edgedrain.agentImage" -}}
{{- $shell := false -}}
{{- range $op, $cmd := include "edgedrain.agentCommands" . | fromJson -}}
{{- if not (hasPrefix "logind:" $cmd) }}{{ $shell = true }}{{ end -}}
{{- end -}}
{{- if $shell -}}
{{- if not .Values.agent.commandImage.repository -}}
{{- fail "agent: a shell command (agent.rebootMethod=command, or a command in agent.commands not starting with logind:) needs an image with /bin/sh (and nsenter for rebootMethod=command), e.g. one built from the repository's Dockerfile: set agent.commandImage.repository" -}}
{{- end -}}
{{- include "edgedrain.imageRef" (dict "image" .Values.agent.commandImage "root" .) -}}
{{- else -}}
{{- include "edgedrain.image" . -}}
{{- end -}}
{{- end }}

{{/* The URL agents reach the bus at. */}}
{{- define "edgedrain.agentNATSURL" -}}
{{- if .Values.nats.external.enabled -}}
{{- include "edgedrain.externalNATSURL" . -}}
{{- else -}}
{{- printf "nats://%s.%s.svc:4222" (include "edgedrain.nats" .) .Release.Namespace -}}
{{- end -}}
{{- end }}

{{/* The external NATS cluster's URL, required with nats.external.enabled. */}}
{{- define "edgedrain.externalNATSURL" -}}
{{- required "nats.external.url is required with nats.external.enabled=true: the NATS servers' URL, e.g. tls://nats.nats.svc:4222" .Values.nats.external.url -}}
{{- end }}

{{/* An EDGEDRAIN_LISTEN variable when port differs from the program's default (dict "port" "default"). */}}
{{- define "edgedrain.listenEnv" -}}
{{- if ne (int .port) (int .default) -}}
- name: EDGEDRAIN_LISTEN
  value: {{ printf ":%d" (int .port) | quote }}
{{- end }}
{{- end }}
