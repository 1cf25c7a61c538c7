"""Build the agents a process hosts from its settings."""

from __future__ import annotations

import logging
import os

from pai_grpc.config import Settings
from pai_grpc.models import OFFLINE_NOTICE, OfflineModel
from pai_grpc.runtime import DEFAULT_AGENT, Agent, AgentRegistry

log = logging.getLogger("pai_grpc")


def build_agents(settings: Settings) -> AgentRegistry:
    """The default agent: Claude when configured, else the labelled offline stand-in."""
    if not os.environ.get("ANTHROPIC_API_KEY"):
        log.warning("ANTHROPIC_API_KEY is not set: answering with the %s", OFFLINE_NOTICE)
    else:
        log.warning(
            "the Anthropic provider is not wired in yet: answering with the %s", OFFLINE_NOTICE
        )
    model = OfflineModel(chunk_delay=settings.offline_chunk_delay)
    return AgentRegistry([Agent(name=DEFAULT_AGENT, model=model)])
