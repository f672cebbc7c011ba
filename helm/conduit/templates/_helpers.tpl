{{/*
Names, labels and small pieces every template shares.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "conduit.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The prefix of every object name: fullnameOverride, else "<release>" when the release name already holds the
chart name, else "<release>-<chart>". Cut to 52 characters so "-controller" and friends still fit in 63.
*/}}
{{- define "conduit.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "conduit-0.1.0", for the helm.sh/chart label. */}}
{{- define "conduit.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The labels that select one component's pods: never change them (selectors are immutable). */}}
{{- define "conduit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "conduit.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Standard labels of every object: call with (dict "ctx" $ "component" "agent"). */}}
{{- define "conduit.labels" -}}
{{ include "conduit.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: conduit
helm.sh/chart: {{ include "conduit.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* "repository:tag", the tag defaulting to the chart's appVersion: call with (dict "ctx" $ "image" .Values.agent.image). */}}
{{- define "conduit.image" -}}
{{- printf "%s:%s" .image.repository (default .ctx.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "conduit.agent.fullname" -}}
{{- printf "%s-agent" (include "conduit.fullname" .) -}}
{{- end -}}

{{- define "conduit.controller.fullname" -}}
{{- printf "%s-controller" (include "conduit.fullname" .) -}}
{{- end -}}

{{- define "conduit.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create -}}
{{- default (include "conduit.agent.fullname" .) .Values.agent.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.agent.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "conduit.controller.serviceAccountName" -}}
{{- if .Values.controller.serviceAccount.create -}}
{{- default (include "conduit.controller.fullname" .) .Values.controller.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.controller.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the agents' bearer token (key "token"). */}}
{{- define "conduit.tokenSecretName" -}}
{{- default (printf "%s-agent-token" (include "conduit.fullname" .)) .Values.agent.auth.existingSecret -}}
{{- end -}}

{{/* Where agent and controller mount that Secret. */}}
{{- define "conduit.tokenDir" -}}/etc/conduit/token{{- end -}}

{{/* The Secret holding the agents' TLS certificate (keys tls.crt, tls.key, ca.crt). */}}
{{- define "conduit.tlsSecretName" -}}
{{- default (printf "%s-agent-tls" (include "conduit.fullname" .)) .Values.agent.tls.existingSecret -}}
{{- end -}}

{{/* The name callers check the agents' certificate against: agent.tls.serverName, else the agent Service's. */}}
{{- define "conduit.tlsServerName" -}}
{{- default (include "conduit.agent.fullname" .) .Values.agent.tls.serverName -}}
{{- end -}}

{{/* The agent Service's port name: the controller builds https:// URLs from a port named "https". */}}
{{- define "conduit.agent.portName" -}}
{{- if .Values.agent.tls.enabled -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Where the agent mounts its TLS Secret, and where the controller mounts the CA alone. */}}
{{- define "conduit.tlsDir" -}}/etc/conduit/tls{{- end -}}
{{- define "conduit.agentCaDir" -}}/etc/conduit/agent-ca{{- end -}}

{{/* "true" when callers present client certificates to the agents (TLS on and agent.tls.clientCertificates.enabled). */}}
{{- define "conduit.clientCertificates" -}}
{{- and .Values.agent.tls.enabled .Values.agent.tls.clientCertificates.enabled | toString -}}
{{- end -}}

{{/* The Secret holding the agents' client certificate (CN conduit:agent; keys tls.crt, tls.key). */}}
{{- define "conduit.agentClientSecretName" -}}
{{- default (printf "%s-agent-client-tls" (include "conduit.fullname" .)) .Values.agent.tls.clientCertificates.agentSecret -}}
{{- end -}}

{{/* The Secret holding the controller's client certificate (CN conduit:controller; keys tls.crt, tls.key). */}}
{{- define "conduit.controllerClientSecretName" -}}
{{- default (printf "%s-controller-client-tls" (include "conduit.fullname" .)) .Values.agent.tls.clientCertificates.controllerSecret -}}
{{- end -}}

{{/* Where the agent mounts its client certificate, and where the controller mounts its own. */}}
{{- define "conduit.peerClientDir" -}}/etc/conduit/client-tls{{- end -}}
{{- define "conduit.agentClientDir" -}}/etc/conduit/agent-client{{- end -}}

{{/* "true" when each agent asks for a certificate naming its node (agent.tls.clientCertificates.perNode), which
the controller signs with the agent signer's CA: the chart makes that CA, so only with the chart's own TLS
Secret (with agent.tls.existingSecret the agents share agentSecret's certificate). */}}
{{- define "conduit.perNodeCertificates" -}}
{{- and (eq (include "conduit.clientCertificates" .) "true") .Values.agent.tls.clientCertificates.perNode (not .Values.agent.tls.existingSecret) | toString -}}
{{- end -}}

{{/* The Secret with the agent signer's CA certificate and key (tls.crt, tls.key): the controller's alone. */}}
{{- define "conduit.agentSignerSecretName" -}}
{{- printf "%s-agent-signer" (include "conduit.fullname" .) -}}
{{- end -}}

{{/* Where the controller mounts the agent signer, and where an agent keeps its node certificate (memory). */}}
{{- define "conduit.agentSignerDir" -}}/etc/conduit/agent-signer{{- end -}}
{{- define "conduit.nodeCertificateDir" -}}/var/run/conduit/identity{{- end -}}
