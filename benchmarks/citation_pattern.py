"""How long ``missing_citation`` takes on an answer built against a backtracking
``CITATION_PATTERN`` (#28 item 4), by answer length, each in a child process with a timeout.

The pattern is ``\\{\\{cite:(\\w+-?)+\\}\\}``; the answer ``See {{cite:aaa...`` cut to the
length, a citation opened and never closed. On Python's ``re`` each character more nearly
doubles the time; on RE2 (``consumer/rules/linear_regex.py``) it is linear in the length.

    python -m benchmarks.citation_pattern [--code PATH] [--lengths 35,37,39,10000]
                                          [--timeout 60]

``--code`` is the checkout whose ``consumer`` is measured (default: this one), so the same
command gives the figures before a change (a checkout of the commit before) and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

PATTERN = r"\{\{cite:(\w+-?)+\}\}"
_CHILD = """
import sys, time
from consumer.rules.missing_citation import MissingCitation, compile_citation_pattern
from schemas.trace import TraceEvent
rule = MissingCitation(compile_citation_pattern(sys.argv[1]))
length = int(sys.argv[2])
trace = TraceEvent(trace_id="t", output=("See {{cite:" + "a" * length)[:length],
                   retrieved_documents=[{"content": "x"}])
started = time.perf_counter()
outcome = rule.check(trace, None)
print(f"{time.perf_counter() - started:.6f} {outcome.passed}")
"""


def seconds(code: Path, length: int, timeout_s: float) -> float | None:
    """The check's wall time for one answer length; None past ``timeout_s``."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    try:
        done = subprocess.run([sys.executable, "-c", _CHILD, PATTERN, str(length)],
                              capture_output=True, text=True, timeout=timeout_s, env=env,
                              cwd=code, check=True)
    except subprocess.TimeoutExpired:
        return None
    return float(done.stdout.split()[0])


def main(argv: list[str] | None = None) -> int:
    """Print one row per answer length: characters, and seconds or the timeout passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--lengths", default="35,37,39,10000")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per length")
    args = parser.parse_args(argv)
    print(f"CITATION_PATTERN={PATTERN}  code: {args.code}")
    print(f"{'answer chars':>12}  {'check':>12}")
    for length in (int(item) for item in args.lengths.split(",")):
        taken = seconds(args.code, length, args.timeout)
        shown = f"> {args.timeout:.0f} s" if taken is None else f"{taken * 1000:.3f} ms"
        print(f"{length:>12}  {shown:>12}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
