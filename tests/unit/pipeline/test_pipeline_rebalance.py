"""``Pipeline``'s rebalance path, step by step, with a scripted consumer: revoked partitions
stop dispatching, wait a bounded time for their in-flight work, commit their watermark and
drop their state; a completion for a partition no longer owned is discarded; pauses are
restored after an assignment. (Workers joining and leaving a real group are in
``tests/integration/test_rebalance.py``.)

aiokafka calls the listener with every partition (eager protocol): revoked before the group
rejoins, assigned after; getmany returns nothing in between. The scripted consumer below is
less careful on purpose: it hands out whatever batch is queued for a partition that is not
paused, assigned or not, so the pipeline's own guards are what is tested.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from consumer.judge.prompt import Limits
from consumer.pipeline.pipeline import Pipeline, PipelineConfig
from consumer.rules.groundedness.evaluator import Evaluator
from consumer.rules.rule_set import RuleSet
from tests.support.pipeline_fakes import TP, Commits, GatedJudge, ListSink, Rec
from tests.support.streams import trace
from tests.support.waiting import until


class ScriptedConsumer:
    """Hands out queued batches; pause/resume/seek are recorded (assignment resets pauses)."""

    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = set(assigned)
        self.paused: set[TP] = set()
        self.queued: list[tuple[TP, list[Rec]]] = []
        self.seeks: list[tuple[TP, int]] = []

    async def getmany(
        self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[Any, list[Any]]:
        for i, (tp, records) in enumerate(self.queued):
            if tp not in self.paused:
                del self.queued[i]
                return {tp: records}
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def assignment(self) -> set[Any]:
        return set(self.assigned)

    def pause(self, *partitions: Any) -> None:
        self.paused |= set(partitions)

    def resume(self, *partitions: Any) -> None:
        self.paused -= set(partitions)

    def seek(self, partition: Any, offset: int) -> None:
        self.seeks.append((partition, offset))

    def reassign(self, assigned: set[TP]) -> None:
        """What aiokafka does between the listener's two calls: new assignment, no pauses."""
        self.assigned = set(assigned)
        self.paused.clear()


class Harness:
    """A running pipeline over the scripted consumer, judge and sink; commits are recorded."""

    def __init__(self, assigned: set[TP], **config: Any) -> None:
        self.consumer = ScriptedConsumer(assigned)
        self.judge = GatedJudge()
        self.sink = ListSink(allow_dead_letters=False)
        self.commits = Commits()
        # commit_interval_s: the fetch loop commits only when it stops, so every commit seen
        # before that is the rebalance path's.
        options = {"max_in_flight": 64, "commit_interval_s": math.inf, "fetch_timeout_ms": 5}
        self.pipeline = Pipeline(
            self.consumer, self.sink, RuleSet.groundedness(Evaluator(self.judge, 0.5, Limits())),
            self.commits,
            PipelineConfig(**(options | config)),
        )
        self._assigned = assigned
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def feed(self, tp: TP, offsets: range) -> None:
        """Queue one batch for ``tp``; each record's trace id and answer are "partition/offset"."""
        self.consumer.queued.append((tp, [
            Rec(tp.topic, tp.partition, o, 0, None, trace(_id(tp, o), _id(tp, o)), [])
            for o in offsets
        ]))

    async def start(self) -> None:
        await self.pipeline.on_partitions_assigned(self._assigned)
        self._task = asyncio.create_task(self.pipeline.run(self._stop))

    async def stop(self) -> None:
        self._stop.set()
        assert self._task is not None
        await asyncio.wait_for(self._task, 5)


def _id(tp: TP, offset: int) -> str:
    return f"{tp.partition}/{offset}"


P0, P1 = TP("traces", 0), TP("traces", 1)


async def test_revoke_waits_for_in_flight_work_then_commits_and_forgets() -> None:
    h = Harness({P0, P1})
    h.feed(P0, range(4))
    h.feed(P1, range(2))
    await h.start()
    await until(lambda: len(h.judge.started) == 6)

    revoke = asyncio.create_task(h.pipeline.on_partitions_revoked({P0}))
    await asyncio.sleep(0.1)
    assert not revoke.done(), "the revoke must wait for the partition's in-flight work"
    h.judge.open(*(f"0/{o}" for o in range(4)))
    await asyncio.wait_for(revoke, 5)
    assert h.commits == [{P0: 4}], "the revoked partition's watermark, and only it"
    assert sorted(h.sink.published) == ["0/0", "0/1", "0/2", "0/3"]

    # The state is gone: records still arriving for P0 are put back, not handled, until
    # P0 is assigned again (here a late batch from the old position).
    h.feed(P0, range(4, 6))
    await until(lambda: (P0, 4) in h.consumer.seeks)
    assert len(h.judge.started) == 6

    h.judge.open("1/0", "1/1")  # P1 was never touched
    await until(lambda: len(h.sink.published) == 6)
    await h.stop()
    assert h.commits[-1] == {P1: 2}


async def test_revoke_is_bounded_and_commits_only_below_unfinished_work() -> None:
    h = Harness({P0}, revoke_timeout_s=0.3)
    h.feed(P0, range(3))
    await h.start()
    await until(lambda: len(h.judge.started) == 3)
    h.judge.open("0/0", "0/2")  # 0/1 hangs
    await until(lambda: len(h.sink.published) == 2)

    began = time.monotonic()
    await h.pipeline.on_partitions_revoked({P0})
    took_s = time.monotonic() - began
    assert 0.3 <= took_s < 2.0, took_s
    # 0/2 is done but 0/1 is not: the watermark stays at 1, so the next owner redoes 1 and 2.
    assert h.commits == [{P0: 1}]

    # The abandoned call was cancelled: it publishes nothing, even once its answer would come.
    h.judge.open("0/1")
    await asyncio.sleep(0.1)
    assert sorted(h.sink.published) == ["0/0", "0/2"]

    # P0 comes back (say to this worker): it restarts from the commit, on fresh state; the
    # old generation's outcome can no longer touch the new one's watermark.
    h.consumer.reassign({P0})
    await h.pipeline.on_partitions_assigned({P0})
    h.feed(P0, range(1, 3))
    await until(lambda: len(h.sink.published) == 4)
    await h.stop()
    assert sorted(h.sink.published) == ["0/0", "0/1", "0/2", "0/2"]  # at least once
    assert h.commits[-1] == {P0: 3}


async def test_pause_is_restored_after_an_assignment() -> None:
    # Room comes back with commits, so here the fetch loop commits as often as it can.
    h = Harness({P0, P1}, max_in_flight=4, commit_interval_s=0.0)
    h.feed(P0, range(4))
    h.feed(P0, range(4, 6))
    await h.start()
    await until(lambda: h.consumer.paused == {P0, P1})  # 4 in flight: full
    assert len(h.judge.started) == 4

    # A rebalance that keeps this worker's partitions: aiokafka forgets the pauses...
    await h.pipeline.on_partitions_revoked(set())
    h.consumer.reassign({P0, P1})
    await h.pipeline.on_partitions_assigned({P0, P1})
    # ...and the pipeline, still full, pauses them again before the next fetch.
    assert h.consumer.paused == {P0, P1}
    await asyncio.sleep(0.1)
    assert len(h.judge.started) == 4, "fetched past max_in_flight after the rebalance"

    h.judge.open(*(f"0/{o}" for o in range(6)))
    await until(lambda: len(h.sink.published) == 6)  # resumed once there was room
    await h.stop()
    assert h.consumer.paused == {P0, P1}  # the drain pauses before it waits
    assert max(c[P0] for c in h.commits if P0 in c) == 6
