"""Verdicts as OpenTelemetry ``gen_ai.evaluation.result`` events (``VERDICT_EVENTS=otlp``).

``attributes.py`` maps a verdict to the event's attributes and trace context; ``export.py``
is the bounded, best-effort export (the OTel SDK's logs pipeline and OTLP exporter);
``sink.py`` emits one event per verdict once the verdict topic has it. The verdict topic stays
the source of truth: an event that cannot be sent is dropped and counted, never waited for.
"""
