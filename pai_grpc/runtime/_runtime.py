"""The runtime facade the server talks to: mutations, reads and streams over shared services."""

from __future__ import annotations

from pai_grpc.runtime._admin import Admin
from pai_grpc.runtime._agents import AgentRegistry
from pai_grpc.runtime._mutations import Mutations
from pai_grpc.runtime._reads import Reads
from pai_grpc.runtime._services import Services
from pai_grpc.runtime._validate import Limits
from pai_grpc.streams import Broker
from pai_grpc.telemetry import Telemetry
from storage import Store


class Runtime(Mutations, Reads, Admin):
    """Every operation takes the caller's resolved scope; outside it, nothing exists."""

    def __init__(
        self,
        store: Store,
        agents: AgentRegistry,
        *,
        limits: Limits | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.services = Services.create(store, agents, limits, telemetry)

    @property
    def store(self) -> Store:
        """The storage provider."""
        return self.services.store

    @property
    def agents(self) -> AgentRegistry:
        """The hosted agents."""
        return self.services.agents

    @property
    def broker(self) -> Broker:
        """The in-process run-event broker."""
        return self.services.broker
