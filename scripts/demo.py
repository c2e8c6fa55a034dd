"""`make demo`: the bundled sample through a real broker, the worker and a judge.

Starts Kafka (scripts/kafka-local) unless KAFKA_BOOTSTRAP_SERVERS is set, and the offline
local judge unless OPENAI_API_KEY is set; loads the sample into fresh topics; runs
`groundedness run` until every trace is judged; stops it with SIGTERM; prints a summary.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from consumer.commands.sample import sample_traces
from scripts.kafka.broker import create_topics

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
console = Console()


def start_kafka() -> str:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    console.print("[bold]starting Kafka[/] (scripts/kafka-local; first run downloads the jars)")
    out = subprocess.run(
        [str(ROOT / "scripts" / "kafka-local"), "start"],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def start_local_judge(env: dict[str, str]) -> subprocess.Popen[bytes] | None:
    if env.get("OPENAI_API_KEY"):
        console.print(
            f"judge: {env.get('OPENAI_BASE_URL') or 'OpenAI'} "
            f"({env.get('JUDGE_MODEL', 'gpt-4o-mini')})"
        )
        return None
    # Port 0: the judge binds a free port, then prints "local judge listening on URL" first.
    judge = subprocess.Popen(
        [str(BIN / "groundedness"), "local-judge", "--port", "0"], stdout=subprocess.PIPE
    )
    line = (judge.stdout.readline() if judge.stdout is not None else b"").decode().strip()
    if not line.startswith("local judge listening on "):
        judge.kill()
        judge.wait()
        raise SystemExit(f"the local judge did not start: {line or 'it exited'}")
    url = line.rsplit(" ", 1)[1]
    env["OPENAI_API_KEY"] = "local-judge"
    env["OPENAI_BASE_URL"] = url
    env.setdefault("JUDGE_MODEL", "local-heuristic")  # a model the local judge lists
    port = urlsplit(url).port
    console.print(f"judge: no OPENAI_API_KEY, so the offline local judge on port {port}")
    return judge


async def collect(
    bootstrap: str, topic: str, expected: int, timeout_s: float
) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    verdicts: dict[str, dict[str, Any]] = {}
    columns = [*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeElapsedColumn()]
    try:
        with Progress(*columns, BarColumn(bar_width=0), console=console) as progress:
            task = progress.add_task("judging", total=expected)
            deadline = time.monotonic() + timeout_s
            while len(verdicts) < expected and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        verdict = json.loads(record.value or b"{}")
                        verdicts[verdict["trace_id"]] = verdict
                progress.update(task, completed=len(verdicts))
    finally:
        await consumer.stop()
    return list(verdicts.values())


def summarise(
    verdicts: list[dict[str, Any]], traces: list[dict[str, Any]], elapsed_s: float
) -> None:
    labels = {t["trace_id"]: t["metadata"]["label"] for t in traces}
    skipped = sum(1 for t in traces if not (t.get("output") or "").strip())
    counts = {
        kind: sum(1 for v in verdicts if v["verdict"] == kind) for kind in ("pass", "fail", "error")
    }
    decided = [v for v in verdicts if v["verdict"] != "error"]
    agree = sum(
        1 for v in decided if (v["verdict"] == "pass") == (labels[v["trace_id"]] == "grounded")
    )
    recalls = []
    for label, outcome in (("grounded", "pass"), ("ungrounded", "fail")):
        group = [v for v in verdicts if labels[v["trace_id"]] == label]
        if group:
            recalls.append(sum(1 for v in group if v["verdict"] == outcome) / len(group))

    table = Table(title=f"groundedness demo: {len(traces)} sample traces")
    table.add_column("outcome")
    table.add_column("traces", justify="right")
    for kind, count in counts.items():
        table.add_row(kind, str(count))
    table.add_row("skipped (empty output)", str(skipped))
    table.add_section()
    share = agree / max(1, len(decided))
    table.add_row("agreement with labels", f"{agree}/{len(decided)} ({share:.1%})")
    table.add_row("balanced accuracy", f"{sum(recalls) / max(1, len(recalls)):.3f}")
    table.add_row("wall time", f"{elapsed_s:.1f} s")
    console.print(table)


def main() -> int:
    env = dict(os.environ)
    env.setdefault("MIN_ACCEPTABLE_SCORE", "0.5")
    env.setdefault("LOG_LEVEL", "warning")
    env.setdefault("HEALTH_PORT", "0")
    bootstrap = start_kafka()
    tag = time.strftime("%Y%m%d-%H%M%S")
    env |= {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TRACES_TOPIC": f"demo-traces-{tag}",
        "VERDICTS_TOPIC": f"demo-verdicts-{tag}",
        "DLQ_TOPIC": f"demo-dlq-{tag}",
        "CONSUMER_GROUP": f"demo-{tag}",
    }
    judge = start_local_judge(env)
    worker: subprocess.Popen[bytes] | None = None
    try:
        traces = sample_traces()
        # Traces over 3 partitions, so records finish out of order.
        topics = {env["TRACES_TOPIC"]: 3, env["VERDICTS_TOPIC"]: 1, env["DLQ_TOPIC"]: 1}
        asyncio.run(create_topics(bootstrap, topics))
        subprocess.run([str(BIN / "groundedness"), "load-sample"], env=env, check=True)
        started = time.monotonic()
        worker = subprocess.Popen([str(BIN / "groundedness"), "run"], env=env)
        expected = sum(1 for t in traces if (t.get("output") or "").strip())
        verdicts = asyncio.run(collect(bootstrap, env["VERDICTS_TOPIC"], expected, 900))
        elapsed = time.monotonic() - started
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
        summarise(verdicts, traces, elapsed)
        if len(verdicts) != expected or code != 0:
            console.print(
                f"[red]incomplete: {len(verdicts)}/{expected} verdicts, worker exit {code}[/]"
            )
            return 1
        return 0
    finally:
        for process in (worker, judge):
            if process is not None and process.poll() is None:
                process.terminate()
                process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
