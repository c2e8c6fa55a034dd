"""Smoke test: does a Kafka broker work with aiokafka for what the worker needs?

    .venv/bin/python scripts/kafka/smoke.py 127.0.0.1:9092
    .venv/bin/python scripts/kafka/smoke.py 127.0.0.1:9092 --sasl 9094
    .venv/bin/python scripts/kafka/smoke.py 127.0.0.1:9092 --persist-write   # before a restart
    .venv/bin/python scripts/kafka/smoke.py 127.0.0.1:9092 --persist-check   # after it

Checks, each against fresh topics and groups so reruns do not interfere:
  1. admin: create topics, list them;
  2. idempotent produce (enable_idempotence=True, so acks=all and InitProducerId);
  3. consume in a group with manual commit; the committed offset reads back, both through
     the consumer and through the admin client, and a new member resumes after it;
  4. transactions: an aborted one and a committed one that also moves the group's offsets
     with send_offsets_to_transaction; a read_committed consumer sees only the committed
     records, and the group's offset is the one sent in the transaction;
  5. with --sasl PORT: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 with the right credentials
     produce and consume, and a wrong password is refused for each.
--persist-write / --persist-check instead write a fixed topic and group offset, and check
they are still there (to test that a broker restart keeps its data).

Exits 0 when all checks pass, 1 on the first failure. Credentials for --sasl come from
KAFKA_SASL_USERNAME / KAFKA_SASL_PASSWORD (the defaults of scripts/kafka-local otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

T = TypeVar("T")

STEP_TIMEOUT_S = 60.0
PERSIST_TOPIC = "kafka-local-smoke-persist"
PERSIST_GROUP = "kafka-local-smoke-persist"
PERSIST_COUNT = 5


class SmokeError(Exception):
    pass


def ok(msg: str) -> None:
    print(f"ok    {msg}", flush=True)


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise SmokeError(msg)


async def within(aw: Awaitable[T], what: str, limit_s: float = STEP_TIMEOUT_S) -> T:
    try:
        return await asyncio.wait_for(aw, limit_s)
    except TimeoutError as exc:
        raise SmokeError(f"timed out after {limit_s:.0f}s: {what}") from exc


async def create_topics(bootstrap: str, names: list[str], partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await within(admin.start(), "admin start")
    try:
        await within(
            admin.create_topics([NewTopic(n, partitions, 1) for n in names]), "create topics"
        )
        listed = await within(admin.list_topics(), "list topics")
        check(set(names) <= set(listed), f"created topics not listed: {names} vs {listed}")
    finally:
        await admin.close()


async def group_offsets(bootstrap: str, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
    """The group's committed offsets, through the admin client.

    Unlike the consumer, aiokafka's admin client does not retry a coordinator that is not
    ready (GroupCoordinatorNotAvailable before __consumer_offsets exists, CoordinatorLoad-
    InProgress right after a broker restart), so retry retriable errors here.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await within(admin.start(), "admin start")
    try:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            try:
                result: dict[TopicPartition, OffsetAndMetadata] = await within(
                    admin.list_consumer_group_offsets(group), "list group offsets"
                )
                return result
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def consume(consumer: AIOKafkaConsumer, want: int, what: str) -> list[Any]:
    """Read until `want` records arrived (or fail after STEP_TIMEOUT_S)."""
    got: list[Any] = []
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while len(got) < want:
        if time.monotonic() > deadline:
            raise SmokeError(f"{what}: got {len(got)} of {want} records")
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            got.extend(records)
    return got


async def check_idempotent_produce(bootstrap: str, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await within(producer.start(), "idempotent producer start")
    try:
        for i in range(n):
            md = await within(
                producer.send_and_wait(topic, f"v{i}".encode(), key=f"k{i}".encode()),
                "idempotent send",
            )
            check(md.offset == i, f"idempotent send: offset {md.offset}, expected {i}")
    finally:
        await producer.stop()
    ok(f"idempotent produce: {n} records to {topic}")


async def check_group_commit(bootstrap: str, topic: str, group: str, n: int) -> None:
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await within(consumer.start(), "group consumer start")
    try:
        records = await consume(consumer, n, "group consume")
        check(
            [r.value for r in records] == [f"v{i}".encode() for i in range(n)],
            "group consume: wrong records",
        )
        await within(consumer.commit({tp: OffsetAndMetadata(n, "smoke")}), "commit")
        committed = await within(consumer.committed(tp), "committed()")
        check(committed == n, f"committed() = {committed}, expected {n}")
    finally:
        await consumer.stop()
    offsets = await group_offsets(bootstrap, group)
    check(
        tp in offsets and offsets[tp].offset == n and offsets[tp].metadata == "smoke",
        f"admin group offsets = {offsets}",
    )
    ok(f"group consume + manual commit: offset {n} (with metadata) reads back")

    # A new member of the same group resumes at the committed offset.
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await within(consumer.start(), "second group consumer start")
    try:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not consumer.assignment():
            check(time.monotonic() < deadline, "second consumer got no assignment")
            await consumer.getmany(timeout_ms=200)
        position = await within(consumer.position(tp), "position()")
        check(position == n, f"second consumer position {position}, expected {n}")
    finally:
        await consumer.stop()
    ok("a new group member resumes at the committed offset")


async def check_transactions(bootstrap: str, src: str, dst: str, group: str) -> None:
    src_tp = TopicPartition(src, 0)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"smoke-txn-{uuid.uuid4().hex[:8]}"
    )
    await within(producer.start(), "transactional producer start (InitProducerId)")
    try:
        # Aborted: must stay invisible to read_committed consumers.
        await within(producer.begin_transaction(), "begin transaction")
        await within(producer.send_and_wait(dst, b"aborted"), "send in aborted txn")
        await within(producer.abort_transaction(), "abort transaction")
        ok("transaction aborted")

        # Committed: two records plus the group's input offset, atomically.
        async with producer.transaction():
            await within(producer.send_and_wait(dst, b"committed-1"), "send in txn")
            await within(producer.send_and_wait(dst, b"committed-2"), "send in txn")
            await within(
                producer.send_offsets_to_transaction({src_tp: OffsetAndMetadata(3, "txn")}, group),
                "send_offsets_to_transaction",
            )
        ok("transaction with send_offsets_to_transaction committed")
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        dst,
        bootstrap_servers=bootstrap,
        group_id=f"{group}-reader",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await within(consumer.start(), "read_committed consumer start")
    try:
        records = await consume(consumer, 2, "read_committed consume")
        # Anything after the 2 committed records would be a leak of the aborted one.
        extra = await consumer.getmany(timeout_ms=1000)
        values = [r.value for r in records] + [r.value for rs in extra.values() for r in rs]
        check(values == [b"committed-1", b"committed-2"], f"read_committed saw {values}")
    finally:
        await consumer.stop()
    ok("read_committed consumer sees the committed records only")

    offsets = await group_offsets(bootstrap, group)
    check(
        src_tp in offsets and offsets[src_tp].offset == 3,
        f"offsets sent in the transaction not committed: {offsets}",
    )
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await within(consumer.start(), "consumer start")
    try:
        committed = await within(consumer.committed(src_tp), "committed()")
        check(committed == 3, f"committed() after txn = {committed}, expected 3")
    finally:
        await consumer.stop()
    ok("offsets sent in the transaction are the group's committed offsets")


def sasl_kwargs(mechanism: str, username: str, password: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": username,
        "sasl_plain_password": password,
    }


async def check_sasl(host: str, port: int, username: str, password: str) -> None:
    bootstrap = f"{host}:{port}"
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        topic = f"smoke-sasl-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
        creds = sasl_kwargs(mechanism, username, password)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, **creds)
        await within(producer.start(), f"{mechanism} producer start")
        try:
            await within(producer.send_and_wait(topic, b"sasl"), f"{mechanism} send")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"{topic}-g",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **creds,
        )
        await within(consumer.start(), f"{mechanism} consumer start")
        try:
            records = await consume(consumer, 1, f"{mechanism} consume")
            check(records[0].value == b"sasl", f"{mechanism}: wrong record")
            await within(consumer.commit(), f"{mechanism} commit")
        finally:
            await consumer.stop()
        ok(f"SASL {mechanism}: right credentials produce, consume and commit")

        bad = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            request_timeout_ms=10_000,
            **sasl_kwargs(mechanism, username, password + "-wrong"),
        )
        try:
            await within(bad.start(), f"{mechanism} start with a wrong password", 30)
        except KafkaError as exc:
            ok(f"SASL {mechanism}: wrong password refused ({type(exc).__name__})")
        else:
            raise SmokeError(f"SASL {mechanism}: a wrong password was accepted")
        finally:
            await bad.stop()


async def persist_write(bootstrap: str) -> None:
    await create_topics(bootstrap, [PERSIST_TOPIC])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await within(producer.start(), "producer start")
    try:
        for i in range(PERSIST_COUNT):
            await within(producer.send_and_wait(PERSIST_TOPIC, f"p{i}".encode()), "send")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        PERSIST_TOPIC,
        bootstrap_servers=bootstrap,
        group_id=PERSIST_GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await within(consumer.start(), "consumer start")
    try:
        await consume(consumer, PERSIST_COUNT, "persist consume")
        await within(consumer.commit(), "commit")
    finally:
        await consumer.stop()
    ok(f"wrote {PERSIST_COUNT} records to {PERSIST_TOPIC} and committed {PERSIST_GROUP}")


async def persist_check(bootstrap: str) -> None:
    tp = TopicPartition(PERSIST_TOPIC, 0)
    offsets = await group_offsets(bootstrap, PERSIST_GROUP)
    check(
        tp in offsets and offsets[tp].offset == PERSIST_COUNT,
        f"committed offset lost: {offsets}",
    )
    consumer = AIOKafkaConsumer(
        PERSIST_TOPIC,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await within(consumer.start(), "consumer start")
    try:
        records = await consume(consumer, PERSIST_COUNT, "persist re-read")
        check(
            [r.value for r in records][:PERSIST_COUNT]
            == [f"p{i}".encode() for i in range(PERSIST_COUNT)],
            "records lost",
        )
    finally:
        await consumer.stop()
    ok(f"{PERSIST_TOPIC} records and {PERSIST_GROUP} offset survived")


async def run(args: argparse.Namespace) -> None:
    bootstrap: str = args.bootstrap
    if args.persist_write:
        await persist_write(bootstrap)
        return
    if args.persist_check:
        await persist_check(bootstrap)
        return

    run_id = uuid.uuid4().hex[:8]
    topic, src, dst = (f"smoke-{name}-{run_id}" for name in ("data", "src", "dst"))
    group = f"smoke-group-{run_id}"
    await create_topics(bootstrap, [topic, src, dst])
    ok("admin: topics created and listed")
    await check_idempotent_produce(bootstrap, topic, 10)
    await check_group_commit(bootstrap, topic, group, 10)
    await check_transactions(bootstrap, src, dst, f"smoke-txn-group-{run_id}")
    if args.sasl is not None:
        host = bootstrap.rpartition(":")[0] or "127.0.0.1"
        await check_sasl(
            host,
            args.sasl,
            os.environ.get("KAFKA_SASL_USERNAME", "groundedness"),
            os.environ.get("KAFKA_SASL_PASSWORD", "groundedness-secret"),
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("bootstrap", help="PLAINTEXT bootstrap address, HOST:PORT")
    parser.add_argument("--sasl", type=int, metavar="PORT", help="also test this SASL port")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--persist-write", action="store_true", help="seed data for a restart")
    mode.add_argument("--persist-check", action="store_true", help="check the seeded data")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        asyncio.run(run(args))
    except (SmokeError, KafkaError) as exc:
        print(f"FAIL  {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"smoke passed in {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
