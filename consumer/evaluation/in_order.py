"""Evaluations run concurrently and taken in input order: ``check``'s and ``eval``'s loop."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


async def evaluate_in_order(
    evaluations: Iterable[Coroutine[Any, Any, T]], limit: int
) -> AsyncIterator[T]:
    """Run the evaluations concurrently, at most ``limit`` started ahead; yield them in input
    order. ``evaluations`` is lazy (a generator): each is created when its turn comes."""
    pending: deque[asyncio.Task[T]] = deque()
    upcoming = iter(evaluations)
    try:
        # The next evaluation is created only once there is room: one created and left when
        # the reader stops (``check | head``) would be a coroutine never awaited.
        while True:
            if len(pending) >= limit:
                yield await pending.popleft()
                continue
            evaluation = next(upcoming, None)
            if evaluation is None:
                break
            pending.append(asyncio.create_task(evaluation))
        while pending:
            yield await pending.popleft()
    finally:
        for task in pending:
            task.cancel()
