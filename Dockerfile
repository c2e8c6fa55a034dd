# syntax=docker/dockerfile:1
# groundedness-worker image: `groundedness run` (the worker), also `local-judge`, `replay`, ...
#
#   docker build -t groundedness-worker:local .
#   docker build --build-arg EXTRAS=msk -t groundedness-worker:local-msk .   # + Amazon MSK IAM
#   docker run --read-only --tmpfs /tmp -e MIN_ACCEPTABLE_SCORE=0.5 ... groundedness-worker:local

# ---- builder: build the project wheel and install it with its dependencies into a venv ----
FROM python:3.11-slim AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN python -m venv /opt/venv \
 && pip install --upgrade pip

WORKDIR /src
COPY pyproject.toml README.md ./
COPY consumer ./consumer
COPY schemas ./schemas

# Optional extras of pyproject.toml, comma-separated: e.g. EXTRAS=msk for Amazon MSK IAM
# (KAFKA_SASL_OAUTH_PROVIDER=aws_msk_iam, AWS's signer). Empty by default: a lean image.
ARG EXTRAS=""

# Build a wheel (pyproject's build backend, in isolation), then install it non-editable: the
# runtime stage gets the venv only, not the sources. pip byte-compiles the installed modules, so
# nothing needs to be written at run time (the root filesystem is read-only there). pip takes
# extras on a wheel's path too (`name.whl[msk]`).
RUN pip wheel --no-deps --wheel-dir /wheels . \
 && set -- /wheels/*.whl \
 && pip install "$1${EXTRAS:+[$EXTRAS]}" \
 && groundedness --help >/dev/null

# ---- runtime: the venv and an unprivileged user, nothing else ----
FROM python:3.11-slim AS runtime

LABEL org.opencontainers.image.title="groundedness-worker" \
      org.opencontainers.image.description="Kafka-native groundedness evaluator for LLM / RAG telemetry" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HOME=/tmp

# Fixed uid/gid 10001 (matched by the Helm chart's securityContext). Home is /tmp, the only
# writable path when the root filesystem is mounted read-only.
RUN groupadd --system --gid 10001 app \
 && useradd --system --uid 10001 --gid 10001 --home-dir /tmp --no-create-home \
      --shell /usr/sbin/nologin app

# Same path as in the builder: the venv's scripts and symlinks point at /opt/venv.
COPY --from=builder /opt/venv /opt/venv

WORKDIR /tmp
USER 10001

# HEALTH_PORT: /healthz, /readyz, /metrics
EXPOSE 8080

# The worker drains on SIGTERM (stop fetching, finish in-flight, commit, exit 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["groundedness"]
CMD ["run"]
