"""Run event streams: in-process broker and wake-ups."""

from pai_grpc.streams._broker import CHANNEL_WINDOW, Broker, RunChannel

__all__ = ["CHANNEL_WINDOW", "Broker", "RunChannel"]
