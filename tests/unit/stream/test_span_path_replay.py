"""The span path on a replay's clock: when a stalled replay may close traces early, and when
it must not (the pause would lift by itself, and closing then would make the verdicts
depend on how fast the judge answered)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

from consumer.evaluate import Evaluator
from consumer.judge.prompt import Limits
from consumer.stream.offsets import OffsetTracker
from consumer.stream.record_path import RecordPath
from consumer.stream.span_path import SpanPath, Tasks
from consumer.telemetry.assembly import AssemblyLimits
from tests.support.otel_spans import otlp_proto
from tests.support.pipeline_fakes import TP, GatedJudge, ListSink, Rec
from tests.support.span_pipeline import ANSWER, rag_spans

P0 = TP("spans", 0)


class StoppedClock:
    """A replay's time, which does not pass while nothing is read: record n came at n s."""

    def arrival(self, partition: Hashable, offset: int, timestamp_ms: int) -> float:
        return float(offset)

    def now(self, partition: Hashable) -> float:
        return 1.0


def stalled_path(max_open_traces: int = 10) -> tuple[SpanPath, OffsetTracker[Hashable], Tasks,
                                                     GatedJudge]:
    """A span path holding two open traces of partition 0 (records 0 and 1)."""
    judge, tracker, tasks = GatedJudge(), OffsetTracker[Hashable](), Tasks()
    evaluator = Evaluator(judge, 0.5, Limits())
    limits = AssemblyLimits(quiet_s=10.0, max_wait_s=60.0, max_open_traces=max_open_traces)
    path = SpanPath(RecordPath(ListSink(), evaluator), evaluator, "otlp_proto", limits,
                    tracker, tasks)
    path.read_log(StoppedClock(), {P0: 100})
    path.assigned(P0)
    records = [Rec(P0.topic, P0.partition, n, 0, None, otlp_proto(rag_spans(f"Q{n}?")[:-1]), [])
               for n in range(2)]
    path.accept(P0, tracker.partition(P0), records)
    return path, tracker, tasks, judge


async def test_a_stall_closes_nothing_while_work_or_a_commit_can_still_lift_the_pause() -> None:
    path, tracker, tasks, judge = stalled_path()
    busy = asyncio.get_running_loop().create_future()
    tasks[P0] = {asyncio.ensure_future(busy)}
    assert path.close_stalled() == 0, "a trace being judged will free room"
    busy.cancel()
    await asyncio.gather(*tasks.pop(P0), return_exceptions=True)

    judge.holding = True
    assert path.close_stalled() == 0, "the judge is down: the pause is for it"
    judge.holding = False

    assert tracker.to_commit() == {P0: 0}
    assert path.close_stalled() == 0, "a watermark waits to be committed"
    tracker.committed({P0: 0})

    assert path.close_stalled() == 2, "only time could free it now: every open trace closes"
    assert path.open_traces == 0
    assert path.counts.closed_early == 2
    judge.open(ANSWER)
    await asyncio.wait_for(asyncio.gather(*tasks[P0]), 5)


async def test_at_max_open_traces_a_stall_closes_the_next_due_even_while_judging() -> None:
    path, _, tasks, _ = stalled_path(max_open_traces=2)
    busy = asyncio.get_running_loop().create_future()
    tasks.setdefault(P0, set()).add(asyncio.ensure_future(busy))
    assert path.close_stalled() == 1
    assert path.open_traces == 1
    busy.cancel()
    for task in tasks[P0]:
        task.cancel()
    await asyncio.gather(*tasks[P0], return_exceptions=True)

