"""A span topic's replay: the pipeline's span path set to the window, in the log's time.

Replaying spans runs the same ``Pipeline`` and ``SpanPath`` as ``run``, with these changes
(``SpanPath.read_log``). Time is the log's (``telemetry/clock.LogClock``), so the same records
close the same traces however fast they are read, and no trace waits
``TRACE_QUIET_SECONDS`` of wall time. Traces open only inside each partition's window: the
window reads on past its stop until they close, and starts with a lead-in that tells which
traces began before it (``window.py``). At ``MAX_OPEN_TRACES`` the traces due next
close early, as records are added. A dry run is the same pipeline with its closed traces
counted instead of judged (``dry_run.py``).
"""

from __future__ import annotations

from consumer.pipeline.pipeline import Pipeline
from consumer.pipeline.spans import ClosedTraces, SpanPath
from consumer.replay.window import Window, WindowConsumer
from consumer.telemetry.clock import LogClock


def read_log(pipeline: Pipeline, consumer: WindowConsumer, window: Window, started_at: float,
             traces: ClosedTraces | None = None) -> SpanPath:
    """Set a span topic's pipeline (before its partitions are assigned) to replay ``window``
    read through ``consumer``. ``started_at``: the wall-clock time the replay read its end
    offsets (seconds since the epoch), the present at a partition's end; ``traces``: where
    closed traces go instead of the judge (a dry run)."""
    span_path = pipeline.span_path
    if span_path is None:
        raise ValueError("the pipeline reads no span format")
    span_path.read_log(LogClock(window, started_at), window.ranges(), traces)
    consumer.open_traces = span_path.open_on
    return span_path
