"""``SAMPLE_RATE`` and ``<RULE>_SAMPLE_RATE``: does a rule look at a trace, decided by a
stable hash of its id (pure).

The decision must be the same on every worker, in every process and replay, and after an
upgrade of Python, so it hashes with BLAKE2b (``hashlib``), never with ``hash()``, which is
salted per process. The id's UTF-8 bytes hash to a 64-bit integer, read as a point in
[0, 2**64); a trace is kept when that point lies below ``rate * 2**64``. A trace kept at one
rate is therefore kept at every higher rate: a team raising its rate keeps what it had.

A rule's ``salt`` keys the hash, so that two rules at 0.1 do not pick the same tenth of the
traces. The judge's salt is empty, the hash it has always had: a team upgrading keeps the
traces it sampled.
"""

from __future__ import annotations

import hashlib

_SPACE = 2**64
# Changing the person, the digest size or the encoding moves every trace in or out: the
# decisions pinned in tests/unit/cost/test_sampling.py catch it.
_PERSON = b"gw-sample-v1"
_MAX_KEY = 64  # BLAKE2b's longest key; rule names are far shorter


def sampled(trace_id: str, rate: float, salt: str = "") -> bool:
    """True when the trace is kept at ``rate`` (0.0 keeps none, 1.0 every trace)."""
    if not 0.0 <= rate <= 1.0:  # NaN fails both comparisons
        raise ValueError(f"sample rate must be within 0-1, got {rate!r}")
    if rate >= 1.0:
        return True
    return sample_point(trace_id, salt) < rate * _SPACE  # int against float: compared exactly


def sample_point(trace_id: str, salt: str = "") -> int:
    """The trace id's place in [0, 2**64) for ``salt``: the same for the same id, everywhere.
    An empty salt is an empty key, which BLAKE2b defines as no key at all."""
    # surrogatepass: a JSON "\\ud800" decodes to a lone surrogate, which strict UTF-8 refuses;
    # its bytes are still the same on every worker.
    data = trace_id.encode("utf-8", "surrogatepass")
    key = salt.encode("utf-8")[:_MAX_KEY]
    digest = hashlib.blake2b(data, digest_size=8, person=_PERSON, key=key).digest()
    return int.from_bytes(digest, "big")

