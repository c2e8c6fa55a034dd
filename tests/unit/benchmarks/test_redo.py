"""The redo benchmark's pure parts (``benchmarks/redo.py``): its judge's 429 cadence, and how
it reads the workers' and the broker's logs into expulsions and revocations.

The scenarios themselves run outside the test suite (``python -m benchmarks.redo``); these
pin that the figures count what they say, from log lines as the worker, aiokafka and the
broker write them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.redo import BrokerLog, RedoJudge, longest_gaps, worker_log_figures
from consumer.judge.prompt import FENCE_CLOSE, FENCE_OPEN

GROUP = "bench-1-group-rebalance-4"


def _scoring(answer: str) -> dict[str, Any]:
    data = json.dumps({"answer": answer, "context": ["A document."]})
    return {"messages": [{"role": "user", "content": f"{FENCE_OPEN}{data}{FENCE_CLOSE}"}]}


def test_every_nth_scoring_call_is_a_429_with_retry_after_and_probes_are_apart() -> None:
    judge = RedoJudge((0.2, 0.5), fail_every=7, retry_after_s=0.3)
    replies = [judge(_scoring(f"Answer {n}.")) for n in range(14)]
    probe = judge({"messages": [{"role": "user", "content": "ping"}]})

    assert [n for n, reply in enumerate(replies) if reply.status == 429] == [6, 13]
    assert replies[6].headers == {"Retry-After": "0.3"}
    assert replies[6].delay_s == 0.0, "a rate limiter answers at once"
    assert all(0.2 <= r.delay_s <= 0.5 for r in replies if r.status == 200)
    assert probe.status == 200
    assert judge.counts() == {"ok": 12, "rate_limited": 2, "probes": 1}


def _line(event: str, at: str, **fields: Any) -> str:
    return json.dumps({**fields, "event": event, "level": "info",
                       "timestamp": f"2026-12-01T22:{at}Z"})


def test_worker_logs_count_lost_memberships_once_per_episode_and_real_revocations(
    tmp_path: Path,
) -> None:
    log = tmp_path / "worker.log"
    log.write_text("\n".join([
        _line("partitions_revoked", "50:00.0", partitions=[]),  # the first join's: nothing
        _line("Heartbeat failed for group g because it is rebalancing", "51:40.0"),
        _line("Heartbeat failed: local member_id was not recognized; resetting and "
              "re-joining group", "51:51.4"),
        _line("OffsetCommit failed for group g due to group error ([Error 25] "
              "UnknownMemberIdError: g), will rejoin", "51:52.4"),
        _line("revoke_commit_failed", "51:52.4", error="CommitFailedError: ..."),
        _line("partitions_revoked", "51:52.5", partitions=["p0", "p1", "p2"]),
        _line("Heartbeat failed: local member_id was not recognized; resetting and "
              "re-joining group", "52:14.4"),  # 22 s later: a second expulsion
        "not JSON: a plain line",
    ]) + "\n")

    figures = worker_log_figures([log])

    assert figures["signs"] == {"revoke_commit_failed": 1, "commit_failed": 0,
                                "unknown_member_id": 3, "illegal_generation": 0,
                                "rebalance_in_progress": 1}
    assert figures["membership_lost_episodes"] == 2
    assert (figures["revocations"], figures["partitions_revoked"]) == (1, 3)


def test_the_broker_log_counts_this_groups_removals_since_the_start(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(f"[t] INFO Member a in group {GROUP} has failed, removing it from the "
                   "group. (GroupMetadataManager)\n")  # before the run: not counted
    broker = BrokerLog(log)
    prefix = "[t] INFO [GroupCoordinator id=1 topic=__consumer_offsets partition=0] "
    with log.open("a") as out:
        out.write("".join(prefix + line + "\n" for line in [
            f"Preparing to rebalance group {GROUP} in state PreparingRebalance with old "
            "generation 1 (reason: Adding new member m3)",
            f"Group {GROUP} removed dynamic members who haven't joined: [m1, m2]",
            f"Member m4 in group {GROUP} has failed, removing it from the group.",
            f"[Group {GROUP}] Member m5 has left group through explicit `LeaveGroup` "
            "request; client reason: not provided",
            f"Preparing to rebalance group {GROUP} in state PreparingRebalance with old "
            "generation 2 (reason: explicit `LeaveGroup` request for (m5))",
            "Member m9 in group another-group has failed, removing it from the group.",
        ]))

    figures = broker.figures(GROUP)

    assert figures["rebalances"] == 2
    assert figures["expelled_not_rejoined"] == 2
    assert figures["expelled_session_expired"] == 1
    assert figures["expelled"] == 3
    assert figures["left_by_leave_group"] == 1
    assert BrokerLog(tmp_path / "absent.log").figures(GROUP) == {"broker_log": None}


def test_longest_gaps_are_the_stretches_without_a_verdict() -> None:
    assert longest_gaps([100.0, 100.5, 112.0, 112.2, 115.0], since=100.0, top=2) == [
        [0.5, 11.5], [12.2, 2.8]]
