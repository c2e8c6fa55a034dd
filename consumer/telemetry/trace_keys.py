"""A trace's short key: what the commit metadata lists of a finished trace (pure).

Assembly marks which finished traces still have spans in records not yet done; the progress
(``consumer.pipeline.progress``) writes their keys, and a new owner drops late spans of them.
"""

from __future__ import annotations

import hashlib

KEY_BYTES = 8


def trace_key(trace_id: str) -> bytes:
    """A trace's key in the metadata: 8 bytes of a hash of its id (about 400 fit; two of a
    partition's traces share one with odds of about 1 in 10^15)."""
    return hashlib.blake2b(trace_id.encode("utf-8", "surrogatepass"),
                           digest_size=KEY_BYTES).digest()
