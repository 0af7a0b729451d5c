"""A peer of a bounded port (`vk.kube.serving`), byte by byte: how the tests of the webhook's
ports and of the metrics port read answers and tell a connection the server has ended."""

from __future__ import annotations

import asyncio
import ssl


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """The status and body of the next answer on the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if line)
    body = await reader.readexactly(int(headers.get("Content-Length", "0")))
    return int(lines[0].split(" ")[1]), body


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server ends the connection within `seconds` (what it sends first is read)."""
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(1 << 16):
                pass
    except TimeoutError:
        return False
    except (ConnectionError, ssl.SSLError):
        pass
    return True
