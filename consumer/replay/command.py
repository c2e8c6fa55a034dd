"""``groundedness replay``: judge one time window of a topic again, outside any consumer group.

The window is a range of offsets per partition: from the first record at or after ``--from``
(``offsets_for_times``) up to, not including, the first record at or after ``--to`` (or the
end offsets read when the replay starts; records produced later are not replayed). A
consumer with no group (``assign`` + ``seek``) reads it, so the live ``CONSUMER_GROUP``'s
offsets never move. The real ``Pipeline`` judges it (same judge, limits, dead letters and
producer as ``run``) through the adapters in ``window.py``: the pipeline sees only
the window's records, and its commit callable records watermarks and stops the replay once every
record of the window has its outcome acknowledged. A dry run reads the same window and only
classifies records, without judging or publishing.

A span topic (``TRACES_FORMAT=otlp_proto|otlp_json``) replays the traces whose first GenAI
span is in the window, judged whole: past ``--to`` each partition is read on (up to its end
offset when the replay started) until the traces opened in the window have closed, and a
lead-in of ``TRACE_MAX_WAIT_SECONDS`` before ``--from`` is read only to learn which traces
began before the window (another window's: never judged here). Time is the log's, so traces
close as the live worker closed them (``spans.py``); at a partition's end, the present
is the replay's start, and a trace still open then is left to the live worker. Its dry run
goes through the same pipeline, with the closed traces counted instead of judged and a sink
that sends nothing (``dry_run.py``).

Every rule of ``RULES`` runs, as in ``run``, with its cost controls (``TRACE_FILTER``,
``SAMPLE_RATE``, the answer cache, prices): one verdict per trace and applicable rule, and a
summary per rule with what was left out and what the judge cost; without ``groundedness`` no
judge is built and no key is needed. A dry run runs the same rules with a judge that only
estimates (``dry_run.py``): the deterministic rules for real, the filter, sampling and
cache deciding as they would, the judge's calls counted and priced.

Verdict ids are deterministic, so replaying a window again overwrites rather than multiplies.

The window's offsets are read once (``open_reading``); each pass over them (``run_pass``) reads
exactly those records (``passes.py``). ``--batch`` makes two: one collecting the judge's
requests, one publishing the Batch API's answers (``batch/``).
"""

from __future__ import annotations

from typing import Any

from consumer import wiring
from consumer.errors import ConfigError
from consumer.replay.batch.command import replay_batch
from consumer.replay.dry_run import DryRun, DryRunPrices, dry_run_rules
from consumer.replay.passes import ReplayRequest, open_reading, run_pass
from consumer.settings import Settings


async def replay(settings: Settings, request: ReplayRequest) -> dict[str, Any]:
    """Replay the window; returns the summary (``complete`` is False if stopped early)."""
    if request.end is not None and request.end <= request.start:
        raise ConfigError("--to must be later than --from")
    if request.batch:
        return await replay_batch(settings, request)
    # Checked before any Kafka client exists, as for `run`; a dry run's judge only estimates.
    rules = dry_run_rules(settings) if request.dry_run else wiring.make_rules(settings)
    dry = (DryRun(rules, DryRunPrices.of(settings, request.price_per_million_tokens))
           if request.dry_run else None)
    try:
        async with open_reading(settings, request) as reading:
            # A dry run's log lines say so (a record it would dead-letter is logged as one).
            return await run_pass(settings, request, reading, rules, dry=dry,
                                  log_context={"dry_run": True} if dry else None)
    finally:
        await rules.close()
