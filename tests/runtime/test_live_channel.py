"""A live channel hands a reader the events after its cursor, however many it keeps."""

from __future__ import annotations

import sys

from pai_grpc.streams import Broker, EncodedRunEvent
from tests.runtime.support import lines_run


def _lines_to_read_the_newest(kept: int) -> int:
    """Lines the broker runs to hand a reader one event behind the newest two events."""
    channel = Broker().open("run_long", 1, scope="s", thread_id="thr")
    for seq in range(1, kept + 1):
        channel.publish(EncodedRunEvent(seq, b"x"))
    lines = lines_run(
        lambda: list(channel.since(kept - 2)), sys.modules[Broker.__module__].__file__
    )
    assert [e.seq for e in channel.since(kept - 2)] == [kept - 1, kept]
    return lines


def test_a_reader_keeping_up_costs_the_same_however_long_the_run() -> None:
    """A live channel keeps a long answer's events (up to its window) while
    they are not durable; a reader that keeps up asks it for the newest few,
    delta after delta. Each ask copied and walked every event kept: a reader
    of an answer of N deltas did work in N squared.

    Counted in lines the broker runs, not in time.
    """
    assert _lines_to_read_the_newest(4_000) == _lines_to_read_the_newest(10)
