"""uvicorn's HTTP protocol with TCP_NODELAY on every connection.

With ``workers > 1`` uvicorn binds the listening socket itself (protocol number 0), and asyncio
then skips TCP_NODELAY on the accepted connections: Nagle's algorithm plus delayed ACKs add
about 40 ms to every keep-alive request. Setting the option here gives every worker the same
latency as the single-process server (measured in notebook 08).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class NoDelayHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """The automatic uvicorn HTTP protocol (httptools or h11), with Nagle's algorithm off."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)
