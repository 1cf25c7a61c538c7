"""Run event streams and thread head hints: in-process fan-out and wake-ups."""

from pai_grpc.streams._broker import (
    CHANNEL_WINDOW_BYTES,
    ENDED_EVENTS_SECONDS,
    Broker,
    EncodedRunEvent,
    EndedRun,
    RunChannel,
    RunFollower,
    event_size,
)
from pai_grpc.streams._threads import ThreadHint, ThreadHub, ThreadSubscription

__all__ = [
    "CHANNEL_WINDOW_BYTES",
    "ENDED_EVENTS_SECONDS",
    "Broker",
    "EncodedRunEvent",
    "EndedRun",
    "RunChannel",
    "RunFollower",
    "ThreadHint",
    "ThreadHub",
    "ThreadSubscription",
    "event_size",
]
