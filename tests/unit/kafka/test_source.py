"""The one rebalance listener: the handler moves the partitions first, then the observers hear
of it; a handler that fails leaves the observers untold (health must not report a join that
did not complete)."""

from __future__ import annotations

from typing import Any

import pytest

from consumer.kafka.source import Listener


class Recorder:
    """A rebalance handler and observer at once, writing each call to a shared journal."""

    def __init__(self, name: str, journal: list[tuple[str, str, set[Any]]],
                 fail: bool = False) -> None:
        self.name, self.journal, self.fail = name, journal, fail

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        self.journal.append((self.name, "revoked", revoked))
        if self.fail:
            raise RuntimeError("handler failed")

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        self.journal.append((self.name, "assigned", assigned))
        if self.fail:
            raise RuntimeError("handler failed")

    def partitions_revoked(self, revoked: set[Any]) -> None:
        self.journal.append((self.name, "told revoked", revoked))

    def partitions_assigned(self, assigned: set[Any]) -> None:
        self.journal.append((self.name, "told assigned", assigned))


async def test_the_handler_moves_the_partitions_before_the_observers_hear_of_it() -> None:
    journal: list[tuple[str, str, set[Any]]] = []
    listener = Listener(Recorder("handler", journal),
                        [Recorder("health", journal), Recorder("other", journal)])
    assigned = {("t", 0), ("t", 1)}
    await listener.on_partitions_assigned(assigned)
    await listener.on_partitions_revoked({("t", 1)})
    assert journal == [
        ("handler", "assigned", {("t", 0), ("t", 1)}),
        ("health", "told assigned", {("t", 0), ("t", 1)}),
        ("other", "told assigned", {("t", 0), ("t", 1)}),
        ("handler", "revoked", {("t", 1)}),
        ("health", "told revoked", {("t", 1)}),
        ("other", "told revoked", {("t", 1)}),
    ]
    assert journal[0][2] is not assigned  # a copy: aiokafka keeps using its own set


@pytest.mark.parametrize("event", ["assigned", "revoked"])
async def test_a_failing_handler_leaves_the_observers_untold(event: str) -> None:
    journal: list[tuple[str, str, set[Any]]] = []
    listener = Listener(Recorder("handler", journal, fail=True), [Recorder("health", journal)])
    with pytest.raises(RuntimeError, match="handler failed"):
        await getattr(listener, f"on_partitions_{event}")({("t", 0)})
    assert journal == [("handler", event, {("t", 0)})]
