"""Writing large answers: small pieces through the transport, stored batches with ``sendfile(2)``.

A Fetch answer is Kafka's framing around each partition's records, and the records are the
stored batches exactly as they lie in the segment file (docs/format.md: one format on disk and on
the wire). On a plain TCP connection those bytes go from the page cache to the socket inside the
kernel (``loop.sendfile``, which calls ``os.sendfile`` on the socket once the transport's buffer is
empty), with the framing written before and after them; nothing about them passes through
Python. On TLS (the bytes must be encrypted) a range is read into memory and written like any
other piece: the copying path.

Memory: asyncio copies whatever the socket does not take at once into its buffer and shifts that
buffer after each send, so megabytes written in one call cost several copies; pieces in memory go
out a slice at a time, waiting for the socket in between.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from lkstream.kafka.hot import ResponseChunks
from lkstream.storage.ranges import FileRange

log = logging.getLogger("lkstream.kafka")

#: Pieces in memory are handed to the socket this many bytes at a time.
WRITE_SLICE: Final = 1 << 20
#: Pieces below this size are gathered and written together (one send, not one per piece).
_GATHER_BYTES: Final = 64 * 1024


@dataclass
class SendStats:
    """Bytes a listener's answers sent, by path (for tests, benchmarks and operators)."""

    #: Stored batches sent by sendfile(2), and the calls that sent them.
    sendfile_bytes: int = 0
    sendfiles: int = 0
    #: Stored batches of file ranges copied through memory (TLS, or a file system without sendfile).
    copied_range_bytes: int = 0


class ChunkWriter:
    """Writes the chunked answers of one connection, in order (one at a time: the caller awaits each)."""

    def __init__(self, writer: asyncio.StreamWriter, stats: SendStats, *, zero_copy: bool) -> None:
        self._writer = writer
        self._transport = writer.transport
        self._stats = stats
        #: Whether file ranges go out with sendfile(2): a plain socket, and the listener allows it.
        self.zero_copy = zero_copy

    async def write(self, head: bytes, chunks: ResponseChunks) -> None:
        """Write ``head`` then every chunk; file ranges from their file when :attr:`zero_copy`."""
        gathered: list[bytes | bytearray | memoryview] = [head]
        size = len(head)
        for chunk in chunks:
            if isinstance(chunk, FileRange) and self.zero_copy:
                self._write_gathered(gathered)
                gathered, size = [], 0
                await self._send_range(chunk)
                continue
            if isinstance(chunk, FileRange):
                data: bytes | bytearray | memoryview = chunk.read()
                self._stats.copied_range_bytes += len(data)
            else:
                data = chunk
            if size + len(data) <= _GATHER_BYTES:
                gathered.append(data)
                size += len(data)
                continue
            self._write_gathered(gathered)
            gathered, size = [], 0
            await self._write_large(data)
        self._write_gathered(gathered)

    def _write_gathered(self, pieces: list[bytes | bytearray | memoryview]) -> None:
        if pieces:
            self._writer.write(pieces[0] if len(pieces) == 1 else b"".join(pieces))

    async def _write_large(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        for start in range(0, len(view), WRITE_SLICE):
            self._writer.write(view[start : start + WRITE_SLICE])
            if self._transport.get_write_buffer_size() > WRITE_SLICE:
                await self._writer.drain()

    async def _send_range(self, chunk: FileRange) -> None:
        if self._transport.is_closing():
            raise ConnectionResetError("the client closed the connection")
        loop = asyncio.get_running_loop()
        # closefd=False: the range owns the descriptor (a pin in the file budget).
        with open(chunk.fd, "rb", buffering=0, closefd=False) as file:
            try:
                sent = await loop.sendfile(self._transport, file, chunk.position, chunk.length, fallback=False)
            except asyncio.SendfileNotAvailableError as exc:  # e.g. a file system without sendfile
                log.warning("sendfile unavailable (%s): Kafka answers on this connection are copied", exc)
                self.zero_copy = False
                data = chunk.read()
                self._stats.copied_range_bytes += len(data)
                await self._write_large(data)
                return
            except RuntimeError as exc:  # the transport closed meanwhile
                raise ConnectionResetError(str(exc)) from None
        self._stats.sendfiles += 1
        self._stats.sendfile_bytes += sent
        if sent != chunk.length:
            raise ConnectionResetError(f"sendfile stopped after {sent} of {chunk.length} bytes")
