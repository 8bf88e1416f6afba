{{/* Names. */}}
{{- define "strata.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "strata.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "strata.labels" -}}
app.kubernetes.io/name: {{ include "strata.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strata.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "strata.image" -}}
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "strata.replicas" -}}
{{- if eq .Values.architecture "high-availability" -}}
{{- .Values.replicaCount -}}
{{- else if eq .Values.architecture "standalone" -}}
1
{{- else -}}
{{- fail (printf "architecture: %q is neither standalone nor high-availability" .Values.architecture) -}}
{{- end -}}
{{- end -}}

{{/* A Kubernetes quantity ("256Mi", "1.5Gi", "500M", "268435456") in MiB, rounded down. */}}
{{- define "strata.mib" -}}
{{- $q := toString . -}}
{{- $units := dict "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 "k" 1000.0 "M" 1000000.0 "G" 1000000000.0 "T" 1000000000000.0 -}}
{{- $bytes := 0.0 -}}
{{- $matched := false -}}
{{- range $suffix := list "Ki" "Mi" "Gi" "Ti" "k" "M" "G" "T" -}}
{{- if and (not $matched) (hasSuffix $suffix $q) -}}
{{- $bytes = mulf (trimSuffix $suffix $q | float64) (get $units $suffix) -}}
{{- $matched = true -}}
{{- end -}}
{{- end -}}
{{- if not $matched -}}
{{- $bytes = float64 $q -}}
{{- end -}}
{{- divf $bytes 1048576.0 | floor | int64 -}}
{{- end -}}

{{/* -m: maxMemoryMB, else 7/8 of the memory limit (or request), else auto. */}}
{{- define "strata.memory" -}}
{{- $res := .Values.resources | default dict -}}
{{- $mem := (get ($res.limits | default dict) "memory") | default (get ($res.requests | default dict) "memory") -}}
{{- if .Values.maxMemoryMB -}}
{{- .Values.maxMemoryMB | int64 -}}
{{- else if $mem -}}
{{- $mib := include "strata.mib" $mem | int64 -}}
{{- div (mul $mib 7) 8 | max 1 -}}
{{- else if .Values.memoryFile.enabled -}}
{{- fail "memoryFile.enabled needs a fixed -m: set maxMemoryMB or resources.limits.memory (-m auto is refused with -e)" -}}
{{- else -}}
auto
{{- end -}}
{{- end -}}

{{/* The memory file's emptyDir: -m, its page directory (16 bytes a 4 KiB page) and the journal, rounded up. */}}
{{- define "strata.memoryFileSizeLimit" -}}
{{- $m := include "strata.memory" . | int64 -}}
{{- printf "%dMi" (add $m (div $m 32) 16) -}}
{{- end -}}

{{- define "strata.flashSize" -}}
{{- if .Values.persistence.flashSize -}}
{{- .Values.persistence.flashSize -}}
{{- else -}}
{{- printf "%dm" (div (mul (include "strata.mib" .Values.persistence.size | int64) 9) 10) -}}
{{- end -}}
{{- end -}}

{{- define "strata.saslSecret" -}}
{{- .Values.auth.existingPasswordSecret | default (printf "%s-sasl" (include "strata.fullname" .)) -}}
{{- end -}}

{{/* The container's arguments, after the image's entrypoint. */}}
{{- define "strata.args" -}}
{{- if .Values.args -}}
{{- toYaml .Values.args -}}
{{- else -}}
- -p
- {{ .Values.containerPorts.memcached | quote }}
- -m
- {{ include "strata.memory" . | quote }}
- -c
- {{ .Values.maxConnections | quote }}
{{- if .Values.threads }}
- -t
- {{ .Values.threads | quote }}
{{- end }}
{{- if .Values.memoryFile.enabled }}
- -e
- {{ printf "%s/strata.mem" .Values.memoryFile.mountPath | quote }}
{{- end }}
{{- if .Values.persistence.enabled }}
- -o
- {{ printf "ext_path=%s/strata.flash:%s" .Values.persistence.mountPath (include "strata.flashSize" .) | quote }}
{{- end }}
{{- if .Values.metrics.enabled }}
- -o
- {{ printf "metrics_listen=0.0.0.0:%v" .Values.metrics.containerPorts.metrics | quote }}
{{- end }}
{{- if .Values.auth.enabled }}
- -S
- -o
- sasl_pwdb=/etc/strata/sasl/sasl-pwdb
{{- end }}
{{- if .Values.tls.enabled }}
- -Z
- -o
{{- if gt (int .Values.tls.verifyMode) 0 }}
- {{ printf "ssl_chain_cert=/etc/strata/tls/tls.crt,ssl_key=/etc/strata/tls/tls.key,ssl_ca_cert=/etc/strata/tls/ca.crt,ssl_verify_mode=%d" (int .Values.tls.verifyMode) | quote }}
{{- else }}
- ssl_chain_cert=/etc/strata/tls/tls.crt,ssl_key=/etc/strata/tls/tls.key
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
{{- end -}}
