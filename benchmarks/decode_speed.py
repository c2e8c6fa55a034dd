"""CPU per record of the span input path, part by part, without Kafka: a quick check of a
change to decoding or mapping, before the minute-long ``make bench BENCH_ARGS="--only spans"``.

On the span benchmark's own records (``span_records``: the mixed cycle, 5% of spans GenAI, and
the dense one, a RAG request per record), each a median over ``--passes`` of this process's
CPU time:

- ``parse_ms``: the protobuf parse alone (``TracesData.FromString``), per record;
- ``decode_ms``: all of ``decode_otlp`` (parse, keep test, kept spans built), per record;
- ``python_ms``: the difference, the Python work per record beyond the parse;
- ``map_ms``: ``map_trace`` per trace the records hold (for the mixed cycle, the traces judged).

    python -m benchmarks.decode_speed [--records 1000] [--passes 5] [--save FILE]
                                      [--baseline FILE]

``--save`` writes the figures as JSON; ``--baseline`` reads such a file (saved before a change)
and prints each figure beside it, with the ratio after / before.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from opentelemetry.proto.trace.v1.trace_pb2 import TracesData

from benchmarks.procs import cpu_ms_per_item
from benchmarks.span_records import dense_records, records
from consumer.inputs.otlp.decode import decode_otlp
from consumer.telemetry.conventions import map_trace
from consumer.telemetry.spans import Span

Figures = dict[str, dict[str, float]]


def traces(values: Sequence[bytes]) -> list[tuple[Span, ...]]:
    """The kept spans of ``values`` grouped by trace, those the mapping finds an answer in."""
    by_trace: dict[str, list[Span]] = {}
    for value in values:
        for span in decode_otlp(value, "otlp_proto").kept:
            by_trace.setdefault(span.trace_id, []).append(span)
    return [tuple(spans) for spans in by_trace.values() if map_trace(tuple(spans)) is not None]


def measure(values: Sequence[bytes], passes: int) -> dict[str, float]:
    """The figures of one set of records."""
    parse_ms = cpu_ms_per_item(TracesData.FromString, values, passes)
    decode_ms = cpu_ms_per_item(lambda value: decode_otlp(value, "otlp_proto"), values, passes)
    judged = traces(values)
    return {
        "parse_ms": round(parse_ms, 4),
        "decode_ms": round(decode_ms, 4),
        "python_ms": round(decode_ms - parse_ms, 4),
        "map_ms": round(cpu_ms_per_item(map_trace, judged, passes), 4),
        "judged_per_record": round(len(judged) / len(values), 3),
    }


def report(figures: Figures, baseline: Figures | None) -> str:
    """One line per figure; with a baseline, before, after and after / before."""
    lines = []
    for name, values in figures.items():
        for key, value in values.items():
            line = f"{name:6} {key:18} {value:9.4f}"
            before = (baseline or {}).get(name, {}).get(key)
            if before is not None:
                ratio = f"{value / before:6.3f}" if before else "     -"
                line += f"   before {before:9.4f}   after/before {ratio}"
            lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decode_speed")
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--baseline", type=Path)
    args = parser.parse_args()
    mixed = [record.value for record in records(args.records)]
    dense = [record.value for record in dense_records(args.records // 5)]
    figures = {"mixed": measure(mixed, args.passes), "dense": measure(dense, args.passes)}
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None
    print(report(figures, baseline))
    if args.save:
        args.save.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
