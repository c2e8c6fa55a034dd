{{/*
Chart name, truncated to 63 characters (DNS label limit).
*/}}
{{- define "groundedness-worker.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: release name + chart name, unless the release already contains it.
*/}}
{{- define "groundedness-worker.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "groundedness-worker.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "groundedness-worker.labels" -}}
helm.sh/chart: {{ include "groundedness-worker.chart" . }}
{{ include "groundedness-worker.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: worker
{{- end }}

{{- define "groundedness-worker.selectorLabels" -}}
app.kubernetes.io/name: {{ include "groundedness-worker.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "groundedness-worker.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "groundedness-worker.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The rule names RULES takes (consumer/rules/registry.py's KNOWN_RULES). */}}
{{- define "groundedness-worker.knownRules" -}}
groundedness, missing_citation, answered_without_tool
{{- end }}

{{/*
"true" when groundedness is among the rules: only the judge needs OPENAI_API_KEY and
MIN_ACCEPTABLE_SCORE, so without it the chart asks for neither (the worker starts without them).
*/}}
{{- define "groundedness-worker.judging" -}}
{{- if and (kindIs "slice" .Values.rules) (has "groundedness" .Values.rules) }}true{{ end }}
{{- end }}

{{- define "groundedness-worker.scoreRequired" -}}
minAcceptableScore is required while rules include groundedness: set MIN_ACCEPTABLE_SCORE with --set minAcceptableScore=0.5 (a number between 0 and 1)
{{- end }}

{{/*
"true" when both judge prices are set (JUDGE_PRICE_*_PER_MILLION); the validation below
refuses one without the other.
*/}}
{{- define "groundedness-worker.priced" -}}
{{- $prices := .Values.cost.prices }}
{{- if and (not (kindIs "invalid" $prices.inputPerMillion)) (not (kindIs "invalid" $prices.outputPerMillion)) }}true{{ end }}
{{- end }}

{{/*
"true" when the chart creates its own Secret: no existingSecret, and something in it is read
(the judge's key while judging, the SASL password with SASL).
*/}}
{{- define "groundedness-worker.chartSecret" -}}
{{- if and (not .Values.existingSecret) (or (include "groundedness-worker.judging" .) (include "groundedness-worker.kafkaSasl" .)) }}true{{ end }}
{{- end }}

{{/*
Name of the Secret holding OPENAI_API_KEY / KAFKA_SASL_PASSWORD: existingSecret or the chart's.
*/}}
{{- define "groundedness-worker.secretName" -}}
{{- default (include "groundedness-worker.fullname" .) .Values.existingSecret }}
{{- end }}

{{- define "groundedness-worker.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) }}
{{- end }}

{{/* "true" when the Kafka connection uses SASL (SASL_PLAINTEXT / SASL_SSL). */}}
{{- define "groundedness-worker.kafkaSasl" -}}
{{- if hasPrefix "SASL_" (.Values.kafka.securityProtocol | default "PLAINTEXT") }}true{{ end }}
{{- end }}

{{/* "true" when the Kafka connection uses TLS (SSL / SASL_SSL). */}}
{{- define "groundedness-worker.kafkaTls" -}}
{{- if has (.Values.kafka.securityProtocol | default "PLAINTEXT") (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{/* "true" when a CA bundle is mounted from a Secret or a ConfigMap. */}}
{{- define "groundedness-worker.kafkaCa" -}}
{{- if or .Values.kafka.tls.caSecret .Values.kafka.tls.caConfigMap }}true{{ end }}
{{- end }}

{{/* Fixed in-container location of the Kafka CA bundle (KAFKA_SSL_CAFILE). */}}
{{- define "groundedness-worker.kafkaCaDir" -}}/etc/groundedness/kafka-ca{{- end }}
{{- define "groundedness-worker.kafkaCaFile" -}}{{ include "groundedness-worker.kafkaCaDir" . }}/ca.crt{{- end }}

{{/* KEDA's kafka scaler SASL mode for the worker's KAFKA_SASL_MECHANISM. */}}
{{- define "groundedness-worker.kedaSaslMode" -}}
{{- $modes := dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512" }}
{{- $mechanism := .Values.kafka.sasl.mechanism | default "" }}
{{- if not (hasKey $modes $mechanism) }}
{{- fail (printf "kafka.sasl.mechanism %q has no KEDA kafka scaler equivalent (use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)" $mechanism) }}
{{- end }}
{{- get $modes $mechanism }}
{{- end }}

{{/* "true" when KEDA needs a TriggerAuthentication (SASL and/or TLS towards Kafka). */}}
{{- define "groundedness-worker.kedaAuth" -}}
{{- if and .Values.keda.enabled (or (include "groundedness-worker.kafkaSasl" .) (include "groundedness-worker.kafkaTls" .)) }}true{{ end }}
{{- end }}

{{/*
Cross-field checks that a JSON schema cannot express. Included by the Deployment so that any
render (install, upgrade, template, lint) fails early with one clear message.
*/}}
{{- define "groundedness-worker.validate" -}}
{{- $known := include "groundedness-worker.knownRules" . }}
{{- if not (kindIs "slice" .Values.rules) }}
{{- fail (printf "rules must be a list, e.g. --set 'rules={groundedness,missing_citation}'; the known rules are %s" $known) }}
{{- end }}
{{- if not .Values.rules }}
{{- fail (printf "rules names no rule; the known rules are %s" $known) }}
{{- end }}
{{- range .Values.rules }}
{{- if not (has . (splitList ", " $known)) }}
{{- fail (printf "rules: unknown rule %q; the known rules are %s" (toString .) $known) }}
{{- end }}
{{- end }}
{{- if include "groundedness-worker.judging" . }}
{{- $_ := required (include "groundedness-worker.scoreRequired" .) .Values.minAcceptableScore }}
{{- end }}
{{- if not (kindIs "invalid" .Values.minAcceptableScore) }}
{{- $score := float64 .Values.minAcceptableScore }}
{{- if or (lt $score 0.0) (gt $score 1.0) }}
{{- fail (printf "minAcceptableScore must be between 0 and 1, got %v" .Values.minAcceptableScore) }}
{{- end }}
{{- end }}
{{- $rate := float64 .Values.cost.sampleRate }}
{{- if or (lt $rate 0.0) (gt $rate 1.0) }}
{{- fail (printf "cost.sampleRate must be between 0 and 1 (SAMPLE_RATE), got %v" .Values.cost.sampleRate) }}
{{- end }}
{{- if lt (int64 .Values.cost.judgeCacheSize) 0 }}
{{- fail (printf "cost.judgeCacheSize must be 0 (off) or more (JUDGE_CACHE_SIZE), got %v" .Values.cost.judgeCacheSize) }}
{{- end }}
{{- $prices := .Values.cost.prices }}
{{- if ne (kindIs "invalid" $prices.inputPerMillion) (kindIs "invalid" $prices.outputPerMillion) }}
{{- fail "cost.prices.inputPerMillion and cost.prices.outputPerMillion go together (JUDGE_PRICE_INPUT_PER_MILLION / JUDGE_PRICE_OUTPUT_PER_MILLION): set both, in USD per million tokens, or neither" }}
{{- end }}
{{- range $side, $price := $prices }}
{{- if and (not (kindIs "invalid" $price)) (lt (float64 $price) 0.0) }}
{{- fail (printf "cost.prices.%s cannot be negative, got %v" $side $price) }}
{{- end }}
{{- end }}
{{- $grace := int64 .Values.terminationGracePeriodSeconds }}
{{- $drain := int64 .Values.drainSeconds }}
{{- if le $grace $drain }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than drainSeconds (%d): Kubernetes kills the pod at the end of the grace period, before the worker has finished draining and committed its offsets" $grace $drain) }}
{{- end }}
{{- $quiet := float64 (.Values.assembly.quietSeconds | default 10) }}
{{- $maxWait := float64 (.Values.assembly.maxWaitSeconds | default 120) }}
{{- if lt $maxWait $quiet }}
{{- fail (printf "assembly.maxWaitSeconds (%v) must be at least assembly.quietSeconds (%v): a trace from spans closes by its quiet period only within its max wait (the worker refuses TRACE_MAX_WAIT_SECONDS below TRACE_QUIET_SECONDS)" .Values.assembly.maxWaitSeconds .Values.assembly.quietSeconds) }}
{{- end }}
{{- if and .Values.keda.enabled .Values.autoscaling.enabled }}
{{- fail "keda.enabled and autoscaling.enabled are mutually exclusive: KEDA creates and manages its own HorizontalPodAutoscaler; enable only one" }}
{{- end }}
{{- if .Values.keda.enabled }}
{{- $partitions := required "keda.partitionCount is required when keda.enabled: set it to the partition count of kafka.tracesTopic" .Values.keda.partitionCount | int64 }}
{{- if gt (int64 .Values.keda.maxReplicas) $partitions }}
{{- fail (printf "keda.maxReplicas (%d) must not exceed keda.partitionCount (%d): a consumer group cannot use more consumers than %s has partitions, extra replicas would sit idle" (int64 .Values.keda.maxReplicas) $partitions .Values.kafka.tracesTopic) }}
{{- end }}
{{- if gt (int64 .Values.keda.minReplicas) (int64 .Values.keda.maxReplicas) }}
{{- fail (printf "keda.minReplicas (%d) must not exceed keda.maxReplicas (%d)" (int64 .Values.keda.minReplicas) (int64 .Values.keda.maxReplicas)) }}
{{- end }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int64 .Values.autoscaling.minReplicas) (int64 .Values.autoscaling.maxReplicas)) }}
{{- fail (printf "autoscaling.minReplicas (%d) must not exceed autoscaling.maxReplicas (%d)" (int64 .Values.autoscaling.minReplicas) (int64 .Values.autoscaling.maxReplicas)) }}
{{- end }}
{{- if include "groundedness-worker.kafkaSasl" . }}
{{- if not .Values.kafka.sasl.mechanism }}
{{- fail (printf "kafka.securityProtocol is %s: set kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if not .Values.kafka.sasl.username }}
{{- fail (printf "kafka.securityProtocol is %s: set kafka.sasl.username" .Values.kafka.securityProtocol) }}
{{- end }}
{{- if and (not .Values.existingSecret) (not .Values.secrets.kafkaSaslPassword) }}
{{- fail (printf "kafka.securityProtocol is %s: set secrets.kafkaSaslPassword or existingSecret (key %s)" .Values.kafka.securityProtocol .Values.secretKeys.kafkaSaslPassword) }}
{{- end }}
{{- else if or .Values.kafka.sasl.mechanism .Values.kafka.sasl.username }}
{{- fail (printf "kafka.sasl.* is set but kafka.securityProtocol is %s: use SASL_SSL or SASL_PLAINTEXT" (.Values.kafka.securityProtocol | default "PLAINTEXT")) }}
{{- end }}
{{- if and .Values.kafka.tls.caSecret .Values.kafka.tls.caConfigMap }}
{{- fail "set only one of kafka.tls.caSecret and kafka.tls.caConfigMap" }}
{{- end }}
{{- if and (include "groundedness-worker.kafkaCa" .) (not (include "groundedness-worker.kafkaTls" .)) }}
{{- fail (printf "a Kafka CA is configured (kafka.tls.caSecret / caConfigMap) but kafka.securityProtocol is %s: use SSL or SASL_SSL" (.Values.kafka.securityProtocol | default "PLAINTEXT")) }}
{{- end }}
{{- end }}
