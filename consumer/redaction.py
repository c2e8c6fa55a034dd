"""Known secrets (the API key, the SASL password) cut out of text the worker writes: log
lines and verdicts alike (pure).

Texts are often cut to a length before they reach us (an error message to 300 characters),
which can leave the head of a secret at the end: that fragment is redacted too, for secrets
of 8 characters or more. A shorter secret (a SASL password ``admin``) is redacted only whole:
its head is an ordinary word, and cutting every text that ends in it would eat log lines.

A text can also quote a secret's long random part without the rest: a judge that splits an
answer into words quotes ``2184db7b14a4d049fda2fd98`` out of ``sk-oc15-2184db7b14a4d049fda2fd98``.
So the parts of a secret between its punctuation, when 12 characters or longer (too long to be
an ordinary word), are secrets of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

REDACTED = "[REDACTED]"
# A shorter head of a secret at the end of a text is left alone: "sk-" is every key's.
MIN_FRAGMENT_CHARS = 4
# Only a secret this long has its head at the end of a text redacted.
MIN_FRAGMENTED_SECRET_CHARS = 8
# A part of a secret between its punctuation this long is a secret of its own.
MIN_SECRET_PART_CHARS = 12
_PUNCTUATION = re.compile(r"[^0-9A-Za-z]+")


def known_secrets(values: Iterable[str | None]) -> tuple[str, ...]:
    """The non-empty secrets and their long parts, each once, longest first (so one inside
    another goes whole)."""
    secrets = {value for value in values if value}
    parts = {
        part
        for secret in secrets
        for part in _PUNCTUATION.split(secret)
        if len(part) >= MIN_SECRET_PART_CHARS
    }
    return tuple(sorted(secrets | parts, key=len, reverse=True))


def redact(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every secret, and a long secret's head ending the text, as
    ``[REDACTED]``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    for secret in secrets:
        if len(secret) < MIN_FRAGMENTED_SECRET_CHARS:
            continue
        # Where the secret's first characters appear within its length of the end (found in
        # C: this runs on every log line), check whether the rest of the text is its head.
        head = secret[:MIN_FRAGMENT_CHARS]
        at = text.find(head, max(0, len(text) - len(secret) + 1))
        while at >= 0:
            if secret.startswith(text[at:]):
                return text[:at] + REDACTED
            at = text.find(head, at + 1)
    return text
