"""`python -m scripts.send_spans`: the bundled sample as an instrumented RAG service's spans
(``scripts/rag_spans.py``), sent over OTLP/HTTP with the OTel SDK's exporter to any collector,
e.g. the compose file's (``docker compose --profile spans up``).

``--instrumentation openai-v2``: traced by the OTel GenAI instrumentation instead
(``scripts/openai_v2_spans.py``): spans without content, and the messages as log records sent
to the same collector (``/v1/logs``), whose logs pipeline writes the logs topic.

Prints how many requests, other traces, spans and log records went, and exits 1 when some did
not leave.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from consumer.jsonl import read_labelled
from scripts import log_transport
from scripts.demo_spans import INSTRUMENTATIONS
from scripts.openai_v2_spans import INSTRUMENTATION_SCOPE, OpenAIv2Service
from scripts.rag_spans import emit_traffic, from_labelled, resource
from scripts.span_transport import to_collector


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.send_spans", description=__doc__)
    parser.add_argument("--endpoint", default="http://localhost:4318",
                        help="the collector's OTLP/HTTP endpoint (default: %(default)s)")
    parser.add_argument("--limit", type=int, default=None, help="send only the first N rows")
    parser.add_argument("--instrumentation", choices=INSTRUMENTATIONS, default="openinference",
                        help="how the service is traced (default: %(default)s)")
    args = parser.parse_args(argv)
    rows = [from_labelled(row) for row in read_labelled()[: args.limit]]
    endpoint = args.endpoint.rstrip("/")
    route = to_collector(endpoint, resource())
    logs = (log_transport.to_collector(endpoint, resource())
            if args.instrumentation == "openai-v2" else None)
    if logs is None:
        traffic = emit_traffic(route.tracer, rows)
    else:
        service = OpenAIv2Service(logs.logger(INSTRUMENTATION_SCOPE))
        traffic = service.emit_traffic(route.tracer, rows)
    try:
        route.flush()
        if logs is not None:
            logs.flush()
    except RuntimeError as failed:
        print(f"send_spans: {failed} (is a collector listening on {args.endpoint}?)",
              file=sys.stderr)
        return 1
    logged = f" and {logs.emitted} log records" if logs is not None else ""
    print(f"sent {len(traffic.answered)} RAG requests and {len(traffic.other_trace_ids)} other "
          f"traces, {route.spans_ended} spans{logged}, to {args.endpoint}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
