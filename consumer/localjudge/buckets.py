"""A per-minute limit as OpenAI keeps it for an account, and its durations as text (pure).

OpenAI's requests- and tokens-per-minute limits are buckets: the capacity is the per-minute
limit, refilled continuously at ``limit / 60`` a second, so a full bucket (an account left idle)
admits a whole minute's worth at once, and after that ``limit / 60`` a second. The caller
passes the time, so tests drive a bucket with any clock. ``duration_text`` writes a wait the
way OpenAI does in ``x-ratelimit-reset-*`` and in "Please try again in ..." (Go's duration
format: ``12ms``, ``1s``, ``1.5s``, ``6m0s``, ``2m3.5s``).
"""

from __future__ import annotations

import math

MS_PER_S = 1000


class Bucket:
    """Capacity ``per_minute``, refilling ``per_minute / 60`` a second; full unless ``level``."""

    def __init__(self, per_minute: int, now: float, level: float | None = None) -> None:
        if per_minute <= 0:
            raise ValueError(f"a per-minute limit must be positive, not {per_minute}")
        self.limit = per_minute
        self.capacity = float(per_minute)
        self.rate_per_s = per_minute / 60
        self._level = self.capacity if level is None else max(0.0, min(level, self.capacity))
        self._at = now

    def level(self, now: float) -> float:
        """What the bucket holds now."""
        self._refill(now)
        return self._level

    def wait_s(self, now: float, amount: float) -> float:
        """0 if ``amount`` can be taken now, else the seconds until it can (``math.inf`` if it
        exceeds the capacity: no wait makes it fit)."""
        if amount > self.capacity:
            return math.inf
        return max(0.0, (amount - self.level(now)) / self.rate_per_s)

    def take(self, now: float, amount: float) -> None:
        """Take ``amount`` (the caller checked ``wait_s`` first)."""
        self._refill(now)
        self._level = max(0.0, self._level - amount)

    def reset_s(self, now: float) -> float:
        """Seconds until the bucket is full again (OpenAI's ``x-ratelimit-reset-*``)."""
        return (self.capacity - self.level(now)) / self.rate_per_s

    def _refill(self, now: float) -> None:
        # A clock that steps back (another thread read it a moment earlier) refills nothing.
        if now > self._at:
            self._level = min(self.capacity, self._level + (now - self._at) * self.rate_per_s)
            self._at = now


def duration_text(seconds: float) -> str:
    """``seconds`` in Go's duration format at millisecond precision, rounded up (a client that
    waits as long finds the capacity there): ``0s``, ``12ms``, ``1s``, ``1.5s``, ``6m0s``."""
    # Rounded to the nanosecond first: 0.1 * 1000 is 100.00000000000001, not 101 ms.
    ms = math.ceil(round(seconds * MS_PER_S, 6))
    if ms <= 0:
        return "0s"
    if ms < MS_PER_S:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3600 * MS_PER_S)
    minutes, rest = divmod(rest, 60 * MS_PER_S)
    whole, fraction = divmod(rest, MS_PER_S)
    text = f"{whole}" + (f".{fraction:03d}".rstrip("0") if fraction else "") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


def whole_seconds(seconds: float) -> int:
    """A wait as ``retry-after`` gives it: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(round(seconds, 6)))


def whole_ms(seconds: float) -> int:
    """A wait as ``retry-after-ms`` gives it: whole milliseconds, rounded up, at least 1."""
    return max(1, math.ceil(round(seconds * MS_PER_S, 6)))
