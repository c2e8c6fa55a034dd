"""`python -m scripts.send_spans`: the bundled sample as an instrumented RAG service's spans
(``scripts/rag_spans.py``), sent over OTLP/HTTP with the OTel SDK's exporter to any collector,
e.g. the compose file's (``docker compose --profile spans up``).

Prints how many requests, other traces and spans went, and exits 1 when some did not leave.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from consumer.jsonl import read_labelled
from scripts.rag_spans import emit_traffic, from_labelled, resource
from scripts.span_transport import to_collector


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.send_spans", description=__doc__)
    parser.add_argument("--endpoint", default="http://localhost:4318",
                        help="the collector's OTLP/HTTP endpoint (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="send only the first N rows")
    args = parser.parse_args(argv)
    rows = read_labelled()[: args.limit]
    route = to_collector(args.endpoint.rstrip("/"), resource())
    traffic = emit_traffic(route.tracer, [from_labelled(row) for row in rows])
    try:
        route.flush()
    except RuntimeError as failed:
        print(f"send_spans: {failed} (is a collector listening on {args.endpoint}?)",
              file=sys.stderr)
        return 1
    print(f"sent {len(traffic.answered)} RAG requests and {len(traffic.other_trace_ids)} other "
          f"traces, {route.spans_ended} spans, to {args.endpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
