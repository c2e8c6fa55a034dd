"""Known secrets (the API key, the SASL password) cut out of text the worker writes: log
lines and verdicts alike (pure).

Texts are often cut to a length before they reach us (an error message to 300 characters),
which can leave the head of a secret at the end: that fragment is redacted too, for secrets
of 8 characters or more. A shorter secret (a SASL password ``admin``) is redacted only whole:
its head is an ordinary word, and cutting every text that ends in it would eat log lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

REDACTED = "[REDACTED]"
# A shorter head of a secret at the end of a text is left alone: "sk-" is every key's.
MIN_FRAGMENT_CHARS = 4
# Only a secret this long has its head at the end of a text redacted.
MIN_FRAGMENTED_SECRET_CHARS = 8


def known_secrets(values: Iterable[str | None]) -> tuple[str, ...]:
    """The non-empty secrets, each once, longest first (so one inside another goes whole)."""
    return tuple(sorted({value for value in values if value}, key=len, reverse=True))


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
