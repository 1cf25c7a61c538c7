"""A TCP proxy that loses replies and resets connections on demand."""

from __future__ import annotations

import asyncio


class CuttableProxy:
    """A TCP proxy in front of the server that can hold back its replies, then cut the line.

    Holding back and cutting is what a lost reply looks like to a client: the
    server did the work, the client only sees its connection drop (UNAVAILABLE).
    """

    def __init__(self, target: str) -> None:
        self.target_host, port = target.rsplit(":", 1)
        self.target_port = int(port)
        self.holding = False
        self.connections = 0
        self.open: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(self.target_host, self.target_port)
        self.connections += 1
        self.open.append((client_w, server_w))

        async def pipe(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool
        ) -> None:
            try:
                while data := await reader.read(65536):
                    if replies and self.holding:
                        continue  # the server's answer never reaches the client
                    writer.write(data)
                    await writer.drain()
            except OSError:
                pass
            finally:
                writer.close()

        await asyncio.gather(pipe(client_r, server_w, False), pipe(server_r, client_w, True))

    def cut(self) -> None:
        """Reset every connection (and stop holding replies back)."""
        for client_w, server_w in self.open:
            client_w.transport.abort()
            server_w.transport.abort()
        self.open.clear()
        self.holding = False

    async def close(self) -> None:
        self.cut()
        self.server.close()
        await self.server.wait_closed()
