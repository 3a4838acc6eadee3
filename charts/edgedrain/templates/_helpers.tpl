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
An image reference from {repository, tag, digest}; the tag defaults to defaultTag (else the
chart's appVersion) unless a digest alone is given. Call with (dict "image" .Values.image "root"
$), with "defaultTag" as well for another default.
*/}}
{{- define "edgedrain.imageRef" -}}
{{- $img := .image -}}
{{- if and $img.digest (not $img.tag) -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else if $img.digest -}}
{{- printf "%s:%s@%s" $img.repository $img.tag $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default (default .root.Chart.AppVersion (get . "defaultTag")) $img.tag) -}}
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
{{- $ref := include "edgedrain.imageRef" (dict "image" .Values.agent.commandImage "root" . "defaultTag" (printf "%s-debian" .Chart.AppVersion)) -}}
{{- if eq $ref (include "edgedrain.image" .) -}}
{{- fail (printf "agent.commandImage resolves to %s, the chart's image, which has no /bin/sh: name an image with a shell (its tag defaults to %s-debian, the variant the repository's Dockerfile builds)" $ref .Chart.AppVersion) -}}
{{- end -}}
{{- $ref -}}
{{- else -}}
{{- include "edgedrain.image" . -}}
{{- end -}}
{{- end }}

{{/* The URL agents reach the bus at. */}}
{{- define "edgedrain.agentNATSURL" -}}
{{- if .Values.nats.external.enabled -}}
{{- include "edgedrain.externalNATSURL" . -}}
{{- else -}}
{{- printf "nats://%s:4222" (include "edgedrain.nats" .) -}}
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

{{/*
Checks of the agent's commands and sentinels, failing where the agent would refuse to start:
a sentinel without a command for its operation; a logind command other than logind:reboot and
logind:poweroff; a logind command for a decommission (which must stop the kubelet first); a
logind command for an update without --update-reboots (the agent would count the update over
when logind answers and uncordon a node going down).
*/}}
{{- define "edgedrain.checkAgentCommands" -}}
{{- $commands := include "edgedrain.agentCommands" . | fromJson -}}
{{- $args := .Values.agent.extraArgs | default list -}}
{{- $updateReboots := false -}}
{{- range $flag := list "--update-reboots" "--update-reboots=true" "-update-reboots" "-update-reboots=true" -}}
{{- if has $flag $args }}{{ $updateReboots = true }}{{ end -}}
{{- end -}}
{{- range $op := list "reboot" "shutdown" "update" "decommission" -}}
{{- $cmd := get $commands $op -}}
{{- with get $.Values.agent.sentinels $op -}}
{{- if not $cmd -}}
{{- fail (printf "agent.sentinels.%s is set (%s) but no %s command is, and the agent would refuse to start: set agent.commands.%s too, or leave the sentinel empty" $op . $op $op) -}}
{{- end -}}
{{- end -}}
{{- if hasPrefix "logind:" $cmd -}}
{{- if not (has $cmd (list "logind:reboot" "logind:poweroff")) -}}
{{- fail (printf "agent.commands.%s=%s: the logind commands are logind:reboot and logind:poweroff" $op $cmd) -}}
{{- else if eq $op "decommission" -}}
{{- fail (printf "agent.commands.decommission=%s: the agent refuses logind commands for a decommission, which needs a shell command that stops the kubelet first (with agent.commandImage)" $cmd) -}}
{{- else if and (eq $op "update") (not $updateReboots) -}}
{{- fail (printf "agent.commands.update=%s takes the node down, and the agent refuses it unless told that updates reboot: add --update-reboots to agent.extraArgs (an update is then over when the node is back)" $cmd) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
Refuses extraEnv entries that would give a variable twice, which server-side apply (Helm 4)
refuses ("duplicate entries for key"): EDGEDRAIN_ names (the chart's own, and the flags'), the
names in reserved that the chart sets, and a name given twice. Call with (dict "what"
"agent.extraEnv" "env" .Values.agent.extraEnv "reserved" (list ...) "example" "--command-timeout=30m").
*/}}
{{- define "edgedrain.checkExtraEnv" -}}
{{- $what := .what -}}
{{- $example := .example -}}
{{- $reserved := .reserved -}}
{{- $seen := dict -}}
{{- range .env -}}
{{- $name := .name -}}
{{- if hasPrefix "EDGEDRAIN_" $name -}}
{{- fail (printf "%s: %s: EDGEDRAIN_ variables are the chart's (a name the chart sets as well makes server-side apply fail with duplicate entries): give the flag in %sextraArgs instead (e.g. %s; flags given on the command line win over EDGEDRAIN_ variables), or the chart's own value" $what $name (trimSuffix "extraEnv" $what) $example) -}}
{{- else if has $name $reserved -}}
{{- fail (printf "%s: %s is set by the chart itself (a name given twice makes server-side apply fail with duplicate entries)" $what $name) -}}
{{- else if hasKey $seen $name -}}
{{- fail (printf "%s: %s is given twice (server-side apply fails with duplicate entries)" $what $name) -}}
{{- end -}}
{{- $_ := set $seen $name true -}}
{{- end -}}
{{- end }}

{{/*
The annotations that make an object of the Job edgedrain-keys a hook before install and upgrade
(dict "weight" W): lower weights first, so the RBAC exists when the Job starts. Deleted before
the next run and once all succeeded; Helm deletes succeeded hooks only after the last one.
*/}}
{{- define "edgedrain.keysHook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}
