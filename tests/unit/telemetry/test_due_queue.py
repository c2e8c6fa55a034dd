"""The due queue: the earliest time first, whatever order times are set in; a time set
again or an id discarded leaves nothing stale behind."""

from __future__ import annotations

from consumer.telemetry.due_queue import DueQueue


def test_the_earliest_comes_first_whatever_the_order_of_setting() -> None:
    queue = DueQueue()
    for key, at in (("b", 100.0), ("a", 1.0), ("c", 50.0)):
        queue.set(key, at)
    assert queue.first() == ("a", 1.0)
    queue.set("a", 200.0)  # touched again, later
    assert queue.first() == ("c", 50.0)
    queue.discard("c")
    assert queue.first() == ("b", 100.0)
    queue.set("b", 10.0)  # earlier than before
    assert queue.first() == ("b", 10.0)
    assert (len(queue), "a" in queue, "c" in queue) == (2, True, False)


def test_ties_keep_the_order_they_were_set_in_and_leftovers_are_bounded() -> None:
    queue = DueQueue()
    queue.set("x", 5.0)
    queue.set("y", 5.0)
    assert queue.first() == ("x", 5.0)
    for n in range(10_000):  # one id touched over and over
        queue.set("x", 5.0 + n)
    assert len(queue._heap) <= 4 * len(queue) + 1_024 + 1
    assert queue.first() == ("y", 5.0)
    queue.clear()
    assert (queue.first(), len(queue)) == (None, 0)
