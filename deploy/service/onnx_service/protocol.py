"""uvicorn's HTTP protocol with TCP_NODELAY on every connection.

asyncio sets TCP_NODELAY on accepted connections only when the listening socket's protocol number
is IPPROTO_TCP. ``__main__._listen`` binds the socket itself (``socket.socket(family, SOCK_STREAM)``:
protocol number 0) in every mode, one worker or several (uvicorn's own ``--workers`` has the same
gap: uvicorn issue #3149), so without this Nagle's algorithm plus delayed ACKs would add about
40 ms to every keep-alive request (measured in notebook 08).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from uvicorn.protocols.http.auto import AutoHTTPProtocol

from .edge import malformed_request_response


class NoDelayHTTPProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """The automatic uvicorn HTTP protocol (httptools or h11), with Nagle's algorithm off."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    def send_400_response(self, msg: str) -> None:
        """Bytes that are not an HTTP request: uvicorn's 400 in the service's ``{"error", "detail"}`` shape."""
        self.transport.write(malformed_request_response(msg))
        self.transport.close()
