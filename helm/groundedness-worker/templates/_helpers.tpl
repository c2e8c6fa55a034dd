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
(the judge's key while judging, the SASL password or the OAuth client secret).
*/}}
{{- define "groundedness-worker.chartSecret" -}}
{{- if and (not .Values.existingSecret) (or (include "groundedness-worker.judging" .) (include "groundedness-worker.kafkaSecret" .)) }}true{{ end }}
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

{{/*
"true" with SASL OAUTHBEARER: the worker fetches its token with the OAuth client credentials
(kafka.sasl.oauth.*, the client secret from the Secret) instead of a username and password.
*/}}
{{- define "groundedness-worker.kafkaOauth" -}}
{{- if and (include "groundedness-worker.kafkaSasl" .) (eq (.Values.kafka.sasl.mechanism | default "") "OAUTHBEARER") }}true{{ end }}
{{- end }}

{{/*
"true" with OAUTHBEARER through Amazon MSK IAM (kafka.sasl.oauth.provider aws_msk_iam): AWS's
signer makes the token from the pod's AWS credentials; no client id or secret.
*/}}
{{- define "groundedness-worker.kafkaMskIam" -}}
{{- if and (include "groundedness-worker.kafkaOauth" .) (eq (.Values.kafka.sasl.oauth.provider | default "client_credentials") "aws_msk_iam") }}true{{ end }}
{{- end }}

{{/*
"true" with OAUTHBEARER's client-credentials flow: the token endpoint and client id are
configured, KAFKA_SASL_OAUTH_CLIENT_SECRET is read.
*/}}
{{- define "groundedness-worker.kafkaOauthClient" -}}
{{- if and (include "groundedness-worker.kafkaOauth" .) (not (include "groundedness-worker.kafkaMskIam" .)) }}true{{ end }}
{{- end }}

{{/* "true" when the pod reads a Kafka secret (SASL password or OAuth client secret). */}}
{{- define "groundedness-worker.kafkaSecret" -}}
{{- if or (include "groundedness-worker.kafkaSaslPassword" .) (include "groundedness-worker.kafkaOauthClient" .) }}true{{ end }}
{{- end }}

{{/* "true" with a SASL username and password (PLAIN / SCRAM): KAFKA_SASL_PASSWORD is read. */}}
{{- define "groundedness-worker.kafkaSaslPassword" -}}
{{- if and (include "groundedness-worker.kafkaSasl" .) (not (include "groundedness-worker.kafkaOauth" .)) }}true{{ end }}
{{- end }}

{{/*
"true" when a client certificate and key (mutual TLS) are mounted from kafka.tls.clientSecret,
e.g. the Secret Strimzi's User Operator makes for a KafkaUser (user.crt, user.key).
*/}}
{{- define "groundedness-worker.kafkaClientCert" -}}
{{- if .Values.kafka.tls.clientSecret }}true{{ end }}
{{- end }}

{{/* "true" when the client key is encrypted and its password is read from kafka.tls.clientSecret. */}}
{{- define "groundedness-worker.kafkaKeyPassword" -}}
{{- if and (include "groundedness-worker.kafkaClientCert" .) .Values.kafka.tls.keyPasswordKey }}true{{ end }}
{{- end }}

{{/*
Fixed in-container location of the client certificate and key (KAFKA_SSL_CERTFILE /
KAFKA_SSL_KEYFILE): the Secret's keys are mapped to these names whatever they are called in it.
*/}}
{{- define "groundedness-worker.kafkaClientDir" -}}/etc/groundedness/kafka-client{{- end }}
{{- define "groundedness-worker.kafkaCertFile" -}}{{ include "groundedness-worker.kafkaClientDir" . }}/client.crt{{- end }}
{{- define "groundedness-worker.kafkaKeyFile" -}}{{ include "groundedness-worker.kafkaClientDir" . }}/client.key{{- end }}

{{/* "true" when a CA bundle is mounted from a Secret or a ConfigMap. */}}
{{- define "groundedness-worker.kafkaCa" -}}
{{- if or .Values.kafka.tls.caSecret .Values.kafka.tls.caConfigMap }}true{{ end }}
{{- end }}

{{/* Fixed in-container location of the Kafka CA bundle (KAFKA_SSL_CAFILE). */}}
{{- define "groundedness-worker.kafkaCaDir" -}}/etc/groundedness/kafka-ca{{- end }}
{{- define "groundedness-worker.kafkaCaFile" -}}{{ include "groundedness-worker.kafkaCaDir" . }}/ca.crt{{- end }}

{{/* KEDA's kafka scaler SASL mode for the worker's KAFKA_SASL_MECHANISM. */}}
{{- define "groundedness-worker.kedaSaslMode" -}}
{{- $modes := dict "PLAIN" "plaintext" "SCRAM-SHA-256" "scram_sha256" "SCRAM-SHA-512" "scram_sha512" "OAUTHBEARER" "oauthbearer" }}
{{- $mechanism := .Values.kafka.sasl.mechanism | default "" }}
{{- if not (hasKey $modes $mechanism) }}
{{- fail (printf "kafka.sasl.mechanism %q has no KEDA kafka scaler equivalent (use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)" $mechanism) }}
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
{{- /* With events on, after the drain the worker also stops its producer (consumer/worker.py
PRODUCER_STOP_TIMEOUT_S, 5 s) and sends the queued events (consumer/pipeline/delivery/events: 5 s, and 1 s for
the export in flight): all of it before the grace period ends, or the pod is killed. */}}
{{- $afterDrain := 11 }}
{{- if and (eq (toString .Values.verdictEvents.exporter) "otlp") (le $grace (add $drain $afterDrain)) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be greater than drainSeconds (%d) + %d with verdictEvents.exporter otlp: after the drain the worker stops its producer (up to 5 s) and sends the verdict events still queued (up to 6 s), and Kubernetes kills the pod at the end of the grace period" $grace $drain $afterDrain) }}
{{- end }}
{{- $quiet := float64 (.Values.assembly.quietSeconds | default 10) }}
{{- $maxWait := float64 (.Values.assembly.maxWaitSeconds | default 120) }}
{{- if lt $maxWait $quiet }}
{{- fail (printf "assembly.maxWaitSeconds (%v) must be at least assembly.quietSeconds (%v): a trace from spans closes by its quiet period only within its max wait (the worker refuses TRACE_MAX_WAIT_SECONDS below TRACE_QUIET_SECONDS)" .Values.assembly.maxWaitSeconds .Values.assembly.quietSeconds) }}
{{- end }}
{{- include "groundedness-worker.validateLogsTopic" . }}
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
{{- include "groundedness-worker.validateKafkaSecurity" . }}
{{- end }}

{{/*
The logs topic (OTLP_LOGS_TOPIC) beside the spans, as the worker's settings take it: OTLP
spans, a topic of its own, at-least-once delivery (the worker refuses the rest at start).
*/}}
{{- define "groundedness-worker.validateLogsTopic" -}}
{{- with .Values.kafka.logsTopic }}
{{- $format := $.Values.kafka.tracesFormat | default "trace_json" }}
{{- if not (has $format (list "otlp_proto" "otlp_json")) }}
{{- fail (printf "kafka.logsTopic (OTLP_LOGS_TOPIC) is set but kafka.tracesFormat is %s: log records join spans, so use otlp_proto or otlp_json (the logs topic's encoding too)" $format) }}
{{- end }}
{{- if eq (toString .) (toString $.Values.kafka.tracesTopic) }}
{{- fail (printf "kafka.logsTopic is kafka.tracesTopic (%s): the collector writes spans and logs to topics of their own" .) }}
{{- end }}
{{- if eq ($.Values.kafka.delivery | default "at_least_once") "exactly_once" }}
{{- fail "kafka.logsTopic (OTLP_LOGS_TOPIC) does not work with kafka.delivery exactly_once yet (a trace's two topics would commit in two transactions): use at_least_once" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The Kafka security checks (SASL, OAUTHBEARER, TLS, mutual TLS), part of the validation above:
what values.schema.json cannot say (it sees one block at a time and no chart defaults), and
everything again for `--skip-schema-validation`.
*/}}
{{- define "groundedness-worker.validateKafkaSecurity" -}}
{{- $protocol := .Values.kafka.securityProtocol | default "PLAINTEXT" }}
{{- $sasl := .Values.kafka.sasl }}
{{- $oauth := $sasl.oauth | default dict }}
{{- $tls := .Values.kafka.tls }}
{{- if include "groundedness-worker.kafkaSasl" . }}
{{- if not $sasl.mechanism }}
{{- fail (printf "kafka.securityProtocol is %s: set kafka.sasl.mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)" $protocol) }}
{{- end }}
{{- if include "groundedness-worker.kafkaOauth" . }}
{{- if $sasl.username }}
{{- fail "kafka.sasl.username is not used with OAUTHBEARER: the worker authenticates as the OAuth client, kafka.sasl.oauth.clientId" }}
{{- end }}
{{- if include "groundedness-worker.kafkaMskIam" . }}
{{- if ne $protocol "SASL_SSL" }}
{{- fail (printf "kafka.sasl.oauth.provider is aws_msk_iam but kafka.securityProtocol is %s: Amazon MSK takes IAM only over TLS, use SASL_SSL" $protocol) }}
{{- end }}
{{- if not $oauth.awsRegion }}
{{- fail "kafka.sasl.oauth.provider is aws_msk_iam: set kafka.sasl.oauth.awsRegion (the cluster's AWS region, AWS_REGION)" }}
{{- end }}
{{- if or $oauth.tokenEndpointUrl $oauth.clientId $oauth.scope }}
{{- fail "kafka.sasl.oauth.tokenEndpointUrl / clientId / scope are not used with kafka.sasl.oauth.provider aws_msk_iam: AWS's signer makes the token from the pod's AWS credentials" }}
{{- end }}
{{- else }}
{{- if $oauth.awsRegion }}
{{- fail "kafka.sasl.oauth.awsRegion is set but kafka.sasl.oauth.provider is not aws_msk_iam: the region is used only for Amazon MSK IAM" }}
{{- end }}
{{- if not $oauth.tokenEndpointUrl }}
{{- fail "kafka.sasl.mechanism is OAUTHBEARER: set kafka.sasl.oauth.tokenEndpointUrl (the OAuth token endpoint, KAFKA_SASL_OAUTH_TOKEN_ENDPOINT_URL)" }}
{{- end }}
{{- if not (regexMatch "^https?://" $oauth.tokenEndpointUrl) }}
{{- fail (printf "kafka.sasl.oauth.tokenEndpointUrl must be an http(s) URL, got %q" $oauth.tokenEndpointUrl) }}
{{- end }}
{{- if not $oauth.clientId }}
{{- fail "kafka.sasl.mechanism is OAUTHBEARER: set kafka.sasl.oauth.clientId (KAFKA_SASL_OAUTH_CLIENT_ID)" }}
{{- end }}
{{- if and (not .Values.existingSecret) (not .Values.secrets.kafkaSaslOauthClientSecret) }}
{{- fail (printf "kafka.sasl.mechanism is OAUTHBEARER: set secrets.kafkaSaslOauthClientSecret or existingSecret (key %s)" .Values.secretKeys.kafkaSaslOauthClientSecret) }}
{{- end }}
{{- end }}
{{- else }}
{{- if not $sasl.username }}
{{- fail (printf "kafka.securityProtocol is %s: set kafka.sasl.username" $protocol) }}
{{- end }}
{{- if and (not .Values.existingSecret) (not .Values.secrets.kafkaSaslPassword) }}
{{- fail (printf "kafka.securityProtocol is %s: set secrets.kafkaSaslPassword or existingSecret (key %s)" $protocol .Values.secretKeys.kafkaSaslPassword) }}
{{- end }}
{{- end }}
{{- else if or $sasl.mechanism $sasl.username }}
{{- fail (printf "kafka.sasl.* is set but kafka.securityProtocol is %s: use SASL_SSL or SASL_PLAINTEXT" $protocol) }}
{{- end }}
{{- if and (not (include "groundedness-worker.kafkaOauth" .)) (or $oauth.tokenEndpointUrl $oauth.clientId $oauth.scope $oauth.awsRegion (eq ($oauth.provider | default "client_credentials") "aws_msk_iam")) }}
{{- fail (printf "kafka.sasl.oauth.* is set but kafka.sasl.mechanism is %q: the OAuth client is used only with OAUTHBEARER (and kafka.securityProtocol SASL_SSL or SASL_PLAINTEXT)" ($sasl.mechanism | default "")) }}
{{- end }}
{{- if and (kindIs "bool" $tls.checkHostname) (not $tls.checkHostname) (not (include "groundedness-worker.kafkaTls" .)) }}
{{- fail (printf "kafka.tls.checkHostname is false but kafka.securityProtocol is %s: there is no certificate to check without SSL or SASL_SSL" $protocol) }}
{{- end }}
{{- if and $tls.caSecret $tls.caConfigMap }}
{{- fail "set only one of kafka.tls.caSecret and kafka.tls.caConfigMap" }}
{{- end }}
{{- if and (include "groundedness-worker.kafkaCa" .) (not (include "groundedness-worker.kafkaTls" .)) }}
{{- fail (printf "a Kafka CA is configured (kafka.tls.caSecret / caConfigMap) but kafka.securityProtocol is %s: use SSL or SASL_SSL" $protocol) }}
{{- end }}
{{- if and (include "groundedness-worker.kafkaClientCert" .) (not (include "groundedness-worker.kafkaTls" .)) }}
{{- fail (printf "a client certificate is configured (kafka.tls.clientSecret) but kafka.securityProtocol is %s: use SSL or SASL_SSL" $protocol) }}
{{- end }}
{{- if include "groundedness-worker.kafkaClientCert" . }}
{{- if not $tls.certKey }}
{{- fail "kafka.tls.clientSecret is set without kafka.tls.certKey: a client key needs its certificate (Strimzi's key is user.crt)" }}
{{- end }}
{{- if not $tls.keyKey }}
{{- fail "kafka.tls.clientSecret is set without kafka.tls.keyKey: a client certificate needs its key (Strimzi's key is user.key)" }}
{{- end }}
{{- else if $tls.keyPasswordKey }}
{{- fail "kafka.tls.keyPasswordKey is set without kafka.tls.clientSecret: a key password needs the client certificate and key it unlocks" }}
{{- end }}
{{- end }}
