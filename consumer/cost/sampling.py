"""``SAMPLE_RATE``: is a trace judged, decided by a stable hash of its id (pure).

The decision must be the same on every worker, in every process and replay, and after an
upgrade of Python, so it hashes with BLAKE2b (``hashlib``), never with ``hash()``, which is
salted per process. The id's UTF-8 bytes hash to a 64-bit integer, read as a point in
[0, 2**64); a trace is kept when that point lies below ``rate * 2**64``. A trace kept at one
rate is therefore kept at every higher rate: a team raising its rate keeps what it had.
"""

from __future__ import annotations

import hashlib

_SPACE = 2**64
# Changing the person, the digest size or the encoding moves every trace in or out: the
# decisions pinned in tests/unit/cost/test_sampling.py catch it.
_PERSON = b"gw-sample-v1"


def sampled(trace_id: str, rate: float) -> bool:
    """True when the trace is judged at ``rate`` (0.0 judges none, 1.0 every trace)."""
    if not 0.0 <= rate <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"sample rate must be within 0-1, got {rate!r}")
    if rate >= 1.0:
        return True
    return sample_point(trace_id) < rate * _SPACE  # int against float: compared exactly


def sample_point(trace_id: str) -> int:
    """The trace id's place in [0, 2**64): the same for the same id, everywhere."""
    # surrogatepass: a JSON "\\ud800" decodes to a lone surrogate, which strict UTF-8 refuses;
    # its bytes are still the same on every worker.
    data = trace_id.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data, digest_size=8, person=_PERSON).digest()
    return int.from_bytes(digest, "big")

