"""`groundedness verdicts` against a real broker, as a process of its own (stdout a pipe, so
JSON lines): verdicts published to a topic of three partitions read back through each filter,
from the beginning to the end and from now, a record that is not a verdict skipped in one
stderr line, and no consumer group created (a control consumer's group shows the listing
would see one)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from scripts.kafka import broker
from tests.support.published_verdicts import a_verdict, published
from tests.support.streams import produce
from tests.support.waiting import until
from tests.support.workers import GROUNDEDNESS, WORKER_VARIABLES

pytestmark = pytest.mark.integration

BEFORE = [
    a_verdict("t-1", "groundedness", "pass"),
    a_verdict("t-1", "missing_citation", "fail"),
    a_verdict("t-2", "groundedness", "fail"),
    a_verdict("t-3", "groundedness", "error"),
    a_verdict("t-4", "answered_without_tool", "pass"),
    a_verdict("t-2", "missing_citation", "pass"),
]
AFTER = [
    a_verdict("t-5", "missing_citation", "fail"),
    a_verdict("t-5", "groundedness", "fail"),
    a_verdict("t-6", "groundedness", "pass"),
]


async def start(bootstrap: str, tag: str, log: Path,
                *args: str) -> asyncio.subprocess.Process:
    """`groundedness verdicts ARGS` on the tag's topic; its stderr into ``log``."""
    env = {k: v for k, v in os.environ.items() if k.upper() not in WORKER_VARIABLES}
    env |= {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "VERDICTS_TOPIC": f"verdicts-{tag}",
            "CONSUMER_GROUP": f"group-{tag}",
            "LOG_LEVEL": "info" if "--limit" in args else "warning"}
    with log.open("wb") as stderr:
        return await asyncio.create_subprocess_exec(
            str(GROUNDEDNESS), "verdicts", *args, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=stderr)


async def verdicts(bootstrap: str, tag: str, tmp_path: Path,
                   *args: str) -> tuple[int, list[dict[str, Any]], list[str]]:
    """Run the command to its end: exit code, the JSON lines, stderr's lines."""
    log = tmp_path / f"{uuid.uuid4().hex}.log"
    process = await start(bootstrap, tag, log, *args)
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return (await process.wait(), [json.loads(line) for line in out.decode().splitlines()],
            log.read_text().splitlines())


def ids(lines: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((line["trace_id"], line["rule"]) for line in lines)


async def groups(bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {str(group[0]) for group in await admin.list_consumer_groups()}
    finally:
        await admin.close()


async def test_verdicts_are_read_back_through_the_filters_without_a_consumer_group(
    kafka: str, tmp_path: Path,
) -> None:
    tag = f"cli-{uuid.uuid4().hex[:8]}"
    topic = f"verdicts-{tag}"
    await broker.create_topics(kafka, {topic: 3})
    await produce(kafka, topic, [*map(published, BEFORE[:3]), b"not json",
                                 *map(published, BEFORE[3:])])
    groups_before = await groups(kafka)

    code, lines, errors = await verdicts(kafka, tag, tmp_path, "--from-beginning", "--until-end")
    assert code == 0
    assert sorted(lines, key=lambda v: v["verdict_id"]) == sorted(
        (json.loads(published(v)) for v in BEFORE), key=lambda v: v["verdict_id"]), \
        "every verdict, as published"
    assert errors == ["skipped partition 0 offset 1: not a verdict: not JSON (Expecting "
                      "value: line 1 column 1 (char 0))"]

    code, lines, _ = await verdicts(kafka, tag, tmp_path, "--from-beginning", "--until-end",
                                    "--rule", "groundedness", "--verdict", "fail",
                                    "--verdict", "error")
    assert (code, ids(lines)) == (0, [("t-2", "groundedness"), ("t-3", "groundedness")])
    code, lines, _ = await verdicts(kafka, tag, tmp_path, "--from-beginning", "--until-end",
                                    "--trace-id", "t-1", "--trace-id", "t-2", "--verdict",
                                    "pass")
    assert (code, ids(lines)) == (0, [("t-1", "groundedness"), ("t-2", "missing_citation")])
    code, lines, _ = await verdicts(kafka, tag, tmp_path, "--from-beginning", "--limit", "2")
    assert (code, len(lines)) == (0, 2), "stopped after two, though following"
    code, lines, _ = await verdicts(kafka, tag, tmp_path, "--until-end")
    assert (code, lines) == (0, []), "from now to the end at start: nothing"

    # From now: only what is published once it reads.
    log = tmp_path / "from-now.log"
    process = await start(kafka, tag, log, "--rule", "groundedness", "--limit", "2")
    try:
        await until(lambda: "verdicts_reading" in log.read_text(), timeout_s=30)
        await produce(kafka, topic, [published(v) for v in AFTER])
        out, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
    assert await process.wait() == 0
    assert ids([json.loads(line) for line in out.decode().splitlines()]) == [
        ("t-5", "groundedness"), ("t-6", "groundedness")]

    # Following, until stopped: SIGTERM (or Ctrl-C) ends it with 130, as replay's.
    log = tmp_path / "follow.log"
    process = await start(kafka, tag, log, "--limit", "100")
    try:
        await until(lambda: "verdicts_reading" in log.read_text(), timeout_s=30)
        process.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(process.communicate(), 30)
    finally:
        if process.returncode is None:
            process.kill()
    assert (await process.wait(), out) == (130, b"")

    created = await groups(kafka) - groups_before
    assert [group for group in created if tag in group] == [], "no group of its own"
    # The listing sees a group that reads the topic: the check above could fail.
    control = AIOKafkaConsumer(topic, bootstrap_servers=kafka, group_id=f"control-{tag}",
                               auto_offset_reset="earliest", enable_auto_commit=False)
    await control.start()
    try:
        await control.getmany(timeout_ms=5000)
        await control.commit()
    finally:
        await control.stop()
    assert f"control-{tag}" in await groups(kafka)
