{{/* Name of the release's objects: RELEASE-kcoll, or RELEASE when it already says kcoll. */}}
{{- define "kcoll.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 45 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 45 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kcoll.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "kcoll.libraryVersion" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kcoll
{{- end -}}

{{- define "kcoll.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{/* The libcoll version the image carries (and every job pins). */}}
{{- define "kcoll.libraryVersion" -}}
{{- .Values.libraryVersion | default .Chart.AppVersion -}}
{{- end -}}

{{/* repository:tag or repository@digest; a tag that starts with a version must carry
     libraryVersion, so that the image and the pin cannot drift apart. */}}
{{- define "kcoll.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
{{- $libv := include "kcoll.libraryVersion" . -}}
{{- $tagv := regexFind "^v?[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.]+)?" $tag | trimPrefix "v" -}}
{{- if and $tagv (not (hasPrefix $libv (trimPrefix "v" $tag))) -}}
{{- fail (printf "image.tag %q carries library version %s but libraryVersion is %s: set libraryVersion to the version inside the image" $tag $tagv $libv) -}}
{{- end -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "kcoll.webhook.serviceName" -}}
{{- printf "%s-webhook" (include "kcoll.fullname" .) -}}
{{- end -}}

{{- define "kcoll.webhook.secretName" -}}
{{- printf "%s-webhook-tls" (include "kcoll.fullname" .) -}}
{{- end -}}

{{- define "kcoll.webhook.certificateName" -}}
{{- printf "%s-webhook" (include "kcoll.fullname" .) -}}
{{- end -}}

{{/* DNS names the API server may use to reach the webhook Service. */}}
{{- define "kcoll.webhook.dnsNames" -}}
{{- $svc := include "kcoll.webhook.serviceName" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) | toJson -}}
{{- end -}}

{{/* Namespaces whose agents get the agent role: agentNamespaces and those of agentServiceAccounts. */}}
{{- define "kcoll.agentNamespaces" -}}
{{- $nss := list -}}
{{- range .Values.rbac.agentNamespaces }}{{ $nss = append $nss . }}{{ end -}}
{{- range .Values.rbac.agentServiceAccounts }}{{ $nss = append $nss .namespace }}{{ end -}}
{{- $nss | uniq | sortAlpha | toJson -}}
{{- end -}}

{{/* Whether the agent may get its Node (rbac.readNodes; unset: only when the default topology
     names a topologyKey). Renders "true" or "false". */}}
{{- define "kcoll.readNodes" -}}
{{- if kindIs "bool" .Values.rbac.readNodes -}}
{{- .Values.rbac.readNodes -}}
{{- else -}}
{{- and .Values.defaultTopology.enabled (ne (.Values.defaultTopology.topologyKey | default "") "") -}}
{{- end -}}
{{- end -}}
