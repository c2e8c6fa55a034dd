"""Two judge loops written the way users write them, and a bare loop that judges nothing.

Same libraries as the worker (aiokafka, the openai SDK), same prompt size, same topics:

- ``sequential``: consume a record, await its judge call, produce the verdict, commit;
- ``batch-gather``: ``getmany`` up to ``BATCH_SIZE`` records, ``asyncio.gather`` their judge
  calls, produce the verdicts, commit;
- ``bare``: consume, produce a verdict-sized record, commit per batch, no judge at all: the
  floor of what a Python consume-produce-commit loop costs;
- ``read``: consume and commit per batch, nothing else, with the worker's consumer options:
  the most records a Python aiokafka loop reads (the span benchmarks' yardstick).

A timed-out or failed judge call becomes an error verdict (as a careful user would write it).
The SDK's own retries are off (``max_retries=0``), as in the worker, so a hang costs one
timeout everywhere; with the SDK default (2 retries) the loops would wait three times longer.

    python -m benchmarks.baselines sequential|batch-gather|bare|read

reads ``KAFKA_BOOTSTRAP_SERVERS``, ``TRACES_TOPIC``, ``VERDICTS_TOPIC``, ``CONSUMER_GROUP``,
``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``JUDGE_MODEL``, ``JUDGE_TIMEOUT_SECONDS`` and
``BATCH_SIZE``; runs until SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from typing import Any

import openai
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from openai import AsyncOpenAI

from consumer.judge.prompt import SYSTEM_PROMPT

THRESHOLD = 0.75


def _env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None:
        raise SystemExit(f"{name} is required")
    return value


def _clients() -> tuple[AIOKafkaConsumer, AIOKafkaProducer, AsyncOpenAI]:
    bootstrap = _env("KAFKA_BOOTSTRAP_SERVERS")
    consumer = AIOKafkaConsumer(
        _env("TRACES_TOPIC"), bootstrap_servers=bootstrap, group_id=_env("CONSUMER_GROUP"),
        enable_auto_commit=False, auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    client = AsyncOpenAI(
        api_key=_env("OPENAI_API_KEY"), base_url=_env("OPENAI_BASE_URL"),
        timeout=float(_env("JUDGE_TIMEOUT_SECONDS", "30")), max_retries=0,
    )
    return consumer, producer, client


async def judge(client: AsyncOpenAI, model: str, value: bytes) -> tuple[str, bytes]:
    """Ask the judge about one trace; (trace id, verdict JSON)."""
    trace = json.loads(value)
    data = {
        "task_instructions": trace.get("input"),
        "documents": [d if isinstance(d, str) else d.get("content", "")
                      for d in trace.get("retrieved_documents") or []],
        "answer": trace.get("output"),
    }
    verdict: dict[str, Any] = {"trace_id": trace["trace_id"], "judge_model": model}
    started = time.monotonic()
    try:
        response = await client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": "```json\n" + json.dumps(data) + "\n```"},
            ],
            temperature=0,
            response_format={"type": "json_object"},
        )
        answer = json.loads(response.choices[0].message.content or "{}")
        score = (int(answer["score"]) - 1) / 4
        verdict |= {
            "verdict": "pass" if score >= THRESHOLD else "fail", "score": score,
            "reason": answer.get("reason"), "unsupported_claims": answer.get("unsupported_claims"),
        }
    except (openai.OpenAIError, ValueError, KeyError) as exc:
        verdict |= {"verdict": "error", "score": None, "error": type(exc).__name__}
    verdict["latency_ms"] = round((time.monotonic() - started) * 1000)
    return trace["trace_id"], json.dumps(verdict).encode()


async def sequential(stop: asyncio.Event) -> None:
    """One record at a time: judge, produce and wait, commit."""
    consumer, producer, client = _clients()
    model, verdicts = _env("JUDGE_MODEL", "bench-judge"), _env("VERDICTS_TOPIC")
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=1)
            for records in batch.values():
                for record in records:
                    key, value = await judge(client, model, record.value)
                    await producer.send_and_wait(verdicts, value, key=key.encode())
                    await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()
        await client.close()


async def batch_gather(stop: asyncio.Event) -> None:
    """A batch at a time: gather its judge calls, produce them all, commit."""
    consumer, producer, client = _clients()
    model, verdicts = _env("JUDGE_MODEL", "bench-judge"), _env("VERDICTS_TOPIC")
    batch_size = int(_env("BATCH_SIZE", "64"))
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=batch_size)
            records = [record for part in batch.values() for record in part]
            if not records:
                continue
            results = await asyncio.gather(*(judge(client, model, r.value) for r in records))
            sent = [await producer.send(verdicts, value, key=key.encode())
                    for key, value in results]
            await asyncio.gather(*sent)
            await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()
        await client.close()


async def bare(stop: asyncio.Event) -> None:
    """Consume, produce a verdict-sized record per trace, commit per batch: no judging."""
    consumer, producer, client = _clients()
    await client.close()
    verdicts = _env("VERDICTS_TOPIC")
    payload = b"x" * 900  # about a verdict's size
    await consumer.start()
    await producer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            sent = [await producer.send(verdicts, payload, key=record.key)
                    for part in batch.values() for record in part]
            if sent:
                await asyncio.gather(*sent)
                await consumer.commit()
    finally:
        await consumer.stop()
        await producer.stop()


async def read(stop: asyncio.Event) -> None:
    """Consume and commit per batch: no decoding, no producing."""
    consumer = AIOKafkaConsumer(
        _env("TRACES_TOPIC"), bootstrap_servers=_env("KAFKA_BOOTSTRAP_SERVERS"),
        group_id=_env("CONSUMER_GROUP"), enable_auto_commit=False,
        auto_offset_reset="earliest", isolation_level="read_committed",
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            if batch:
                await consumer.commit()
    finally:
        await consumer.stop()


LOOPS = {"sequential": sequential, "batch-gather": batch_gather, "bare": bare, "read": read}


async def _main(kind: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await LOOPS[kind](stop)


def main(argv: list[str] | None = None) -> int:
    """Run one loop until SIGTERM."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in LOOPS:
        print(f"usage: python -m benchmarks.baselines {{{'|'.join(LOOPS)}}}", file=sys.stderr)
        return 2
    asyncio.run(_main(args[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
