"""`make demo`: the bundled sample through a real broker, the worker and a judge.

Starts Kafka (scripts/kafka-local) unless KAFKA_BOOTSTRAP_SERVERS is set, and the offline
local judge unless OPENAI_API_KEY is set; loads the sample into fresh topics; runs
`groundedness run` until every trace is judged; stops it with SIGTERM; prints a summary.

`--format otlp_proto|otlp_json` (`make demo FORMAT=...`): the sample goes in as the spans of an
instrumented RAG service instead (scripts/demo_spans.py: through the real OpenTelemetry
Collector when it can run here, else written directly as its Kafka exporter writes them), and
the worker assembles them into traces (TRACES_FORMAT) before judging: the same summary.

`--instrumentation openai-v2` (`make demo INSTRUMENTATION=openai-v2`, spans in otlp_proto
unless FORMAT says otlp_json): the service is traced by the OTel GenAI instrumentation, whose
spans carry no content: the messages are log records, on a logs topic of their own with as
many partitions, which the worker reads beside the spans (OTLP_LOGS_TOPIC).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

from aiokafka import AIOKafkaConsumer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
from rich.table import Table

from consumer.load_sample import sample_traces
from scripts.demo_spans import INSTRUMENTATIONS, VIAS, Instrumentation, Via, emit_sample
from scripts.kafka.broker import create_topics
from scripts.span_transport import SpanEncoding

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
console = Console()
FORMATS = ("trace_json", *get_args(SpanEncoding))
# Short for the demo, so it ends soon after the last span: a trace is judged this long after
# its last span arrived (the default, 10 s, leaves room for slow spans in production).
DEMO_QUIET_SECONDS = "2"
DEMO_MAX_WAIT_SECONDS = "30"
SPAN_PARTITIONS = 3  # of the spans topic and the logs topic alike: both keyed by trace id


@dataclass(frozen=True, slots=True)
class Sample:
    """The traces the demo put in: each one's label, and the ones that must get a verdict."""

    labels: dict[str, str]  # trace id (as the verdict names it) -> label
    judged: set[str]  # the trace ids with an answer (the rest are skipped: empty output)
    title: str


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
    bootstrap: str, topic: str, expected: set[str], timeout_s: float
) -> dict[str, dict[str, Any]]:
    """Every verdict on ``topic`` by trace id, until each of ``expected`` has one."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    verdicts: dict[str, dict[str, Any]] = {}
    columns = [*Progress.get_default_columns()[:-1], MofNCompleteColumn(), TimeElapsedColumn()]
    try:
        with Progress(*columns, BarColumn(bar_width=0), console=console) as progress:
            task = progress.add_task("judging", total=len(expected))
            deadline = time.monotonic() + timeout_s
            while not expected <= verdicts.keys() and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    for record in records:
                        verdict = json.loads(record.value or b"{}")
                        verdicts[verdict["trace_id"]] = verdict
                progress.update(task, completed=len(expected & verdicts.keys()))
    finally:
        await consumer.stop()
    return verdicts


def summarise(verdicts: list[dict[str, Any]], sample: Sample, elapsed_s: float) -> None:
    labels = sample.labels
    skipped = len(labels) - len(sample.judged)
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

    table = Table(title=sample.title)
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


def load_trace_events(env: dict[str, str], bootstrap: str) -> Sample:
    """The sample as trace events on TRACES_TOPIC (`groundedness load-sample`)."""
    traces = sample_traces()
    env["TRACES_FORMAT"] = "trace_json"  # whatever the caller's shell says
    # Traces over 3 partitions, so records finish out of order.
    topics = {env["TRACES_TOPIC"]: 3, env["VERDICTS_TOPIC"]: 1, env["DLQ_TOPIC"]: 1}
    asyncio.run(create_topics(bootstrap, topics))
    subprocess.run([str(BIN / "groundedness"), "load-sample"], env=env, check=True)
    return Sample(
        labels={t["trace_id"]: t["metadata"]["label"] for t in traces},
        judged={t["trace_id"] for t in traces if (t.get("output") or "").strip()},
        title=f"groundedness demo: {len(traces)} sample traces",
    )


def emit_spans(env: dict[str, str], bootstrap: str, encoding: SpanEncoding, via: Via,
               instrumentation: Instrumentation = "openinference") -> Sample:
    """The sample as an instrumented RAG service's spans on TRACES_TOPIC (and, with
    ``openai-v2``, its log records on OTLP_LOGS_TOPIC), and the worker set to read them."""
    logs_topic = env.get("OTLP_LOGS_TOPIC")  # set by main for openai-v2 only
    topics = {env["TRACES_TOPIC"]: SPAN_PARTITIONS, env["VERDICTS_TOPIC"]: 1, env["DLQ_TOPIC"]: 1}
    if logs_topic is not None:
        topics[logs_topic] = SPAN_PARTITIONS  # co-partitioned with the spans
    asyncio.run(create_topics(bootstrap, topics))
    emitted = emit_sample(bootstrap, env["TRACES_TOPIC"], encoding, via, console.print,
                          instrumentation=instrumentation, logs_topic=logs_topic)
    answered = emitted.traffic.answered
    logged = (f" and {emitted.logs} log records (their content)" if logs_topic is not None
              else "")
    console.print(
        f"{instrumentation}: {len(answered)} RAG requests and "
        f"{len(emitted.traffic.other_trace_ids)} other traces (index build, health checks, API "
        f"calls), {emitted.spans} spans{logged} in {encoding}"
        f"\n  {emitted.way} -> {', '.join(filter(None, [env['TRACES_TOPIC'], logs_topic]))}"
    )
    quiet = env.setdefault("TRACE_QUIET_SECONDS", DEMO_QUIET_SECONDS)
    env.setdefault("TRACE_MAX_WAIT_SECONDS", DEMO_MAX_WAIT_SECONDS)
    env["TRACES_FORMAT"] = encoding
    whose = "the demo's; the default is 10" if quiet == DEMO_QUIET_SECONDS else "yours"
    reads = f", OTLP_LOGS_TOPIC={logs_topic}" if logs_topic is not None else ""
    console.print(
        f"worker: TRACES_FORMAT={encoding}{reads}, TRACE_QUIET_SECONDS={quiet} ({whose}): a "
        "trace is judged that long after its last span"
    )
    return Sample(
        labels={t.trace_id: t.request.label or "" for t in answered},
        judged={t.trace_id for t in answered if t.request.answer.strip()},
        title=f"groundedness demo: {len(answered)} traces, {encoding}, {instrumentation}",
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scripts.demo", description=__doc__)
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="what the worker reads: trace events, or OTLP spans (default: "
                        "trace_json; otlp_proto with --instrumentation)")
    parser.add_argument("--via", choices=VIAS, default="auto",
                        help="spans only: through the collector, directly to Kafka, or the "
                        "collector when it can run here (default: auto)")
    parser.add_argument("--instrumentation", choices=INSTRUMENTATIONS, default=None,
                        help="spans only: how the service is traced, OpenInference (the "
                        "content on the spans) or the OTel GenAI instrumentation openai-v2 "
                        "(the content in log records, read from a logs topic) (default: "
                        "openinference)")
    args = parser.parse_args(argv)
    if args.format is None:
        args.format = "trace_json" if args.instrumentation is None else "otlp_proto"
    if args.instrumentation is not None and args.format == "trace_json":
        parser.error("--instrumentation is how spans are made: not with --format trace_json")
    args.instrumentation = args.instrumentation or "openinference"
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    env.setdefault("MIN_ACCEPTABLE_SCORE", "0.5")
    env.setdefault("LOG_LEVEL", "warning")
    env.setdefault("HEALTH_PORT", "0")
    bootstrap = start_kafka()
    tag = time.strftime("%Y%m%d-%H%M%S")
    kind = "traces" if args.format == "trace_json" else "spans"
    env |= {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "TRACES_TOPIC": f"demo-{kind}-{tag}",
        "VERDICTS_TOPIC": f"demo-verdicts-{tag}",
        "DLQ_TOPIC": f"demo-dlq-{tag}",
        "CONSUMER_GROUP": f"demo-{tag}",
    }
    env.pop("OTLP_LOGS_TOPIC", None)  # whatever the caller's shell says
    if args.instrumentation == "openai-v2":  # its content: log records, on a topic of their own
        env["OTLP_LOGS_TOPIC"] = f"demo-logs-{tag}"
    judge = start_local_judge(env)
    worker: subprocess.Popen[bytes] | None = None
    try:
        if args.format == "trace_json":
            sample = load_trace_events(env, bootstrap)
        else:
            sample = emit_spans(env, bootstrap, args.format, args.via, args.instrumentation)
        started = time.monotonic()
        worker = subprocess.Popen([str(BIN / "groundedness"), "run"], env=env)
        found = asyncio.run(collect(bootstrap, env["VERDICTS_TOPIC"], sample.judged, 900))
        elapsed = time.monotonic() - started
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=60)
        verdicts = [v for trace_id, v in found.items() if trace_id in sample.judged]
        summarise(verdicts, sample, elapsed)
        # A verdict for anything else (a health check, the index build) is a bug.
        stray = sorted(found.keys() - sample.judged)
        if len(verdicts) != len(sample.judged) or stray or code != 0:
            console.print(
                f"[red]incomplete: {len(verdicts)}/{len(sample.judged)} verdicts, "
                f"{len(stray)} for traces that must have none, worker exit {code}[/]"
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
