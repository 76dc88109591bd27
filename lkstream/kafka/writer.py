"""Writing large answers: small pieces through the transport, stored batches with ``sendfile(2)``.

A Fetch answer is Kafka's framing around each partition's records, and the records are the
stored batches exactly as they lie in the segment file (docs/format.md: one format on disk and on
the wire). On a plain TCP connection those bytes go from the page cache to the socket inside the
kernel (``os.sendfile`` on the socket once the transport's buffer is empty; ``loop.sendfile`` for
what the socket does not take at once), with the framing written before and after them; nothing
about them passes through Python. On TLS (the bytes must be encrypted) a range is read into memory and written like any
other piece: the copying path.

Memory: asyncio copies whatever the socket does not take at once into its buffer and shifts that
buffer after each send, so megabytes written in one call cost several copies; pieces in memory go
out a slice at a time, waiting for the socket in between.
"""

from __future__ import annotations

import asyncio
import logging
import os
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
        self._socket = writer.get_extra_info("socket")
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
        # The common case first: nothing of ours waits in the transport's buffer and the socket
        # takes the whole range at once, so one sendfile(2) call sends it (loop.sendfile costs a
        # future, a pause of reading, a writer registration and a loop turn per range: more than
        # the copy it saves on a 1 MiB answer, measured).
        sent = 0
        if self._transport.get_write_buffer_size() == 0:
            try:
                sent = os.sendfile(self._socket.fileno(), chunk.fd, chunk.position, chunk.length)
            except BlockingIOError:
                sent = 0
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise ConnectionResetError(str(exc)) from None
            except OSError as exc:  # e.g. a file system without sendfile
                await self._copy_instead(chunk, exc)
                return
        if sent < chunk.length:
            sent += await self._sendfile_rest(chunk, sent)
        self._stats.sendfiles += 1
        self._stats.sendfile_bytes += sent

    async def _sendfile_rest(self, chunk: FileRange, done: int) -> int:
        """Send the rest of ``chunk`` from ``done`` on, waiting for the socket (loop.sendfile)."""
        loop = asyncio.get_running_loop()
        count = chunk.length - done
        # closefd=False: the range owns the descriptor (a pin in the file budget).
        with open(chunk.fd, "rb", buffering=0, closefd=False) as file:
            try:
                sent = await loop.sendfile(self._transport, file, chunk.position + done, count, fallback=False)
            except asyncio.SendfileNotAvailableError as exc:
                if done:
                    raise ConnectionResetError(f"sendfile failed after {done} bytes: {exc}") from None
                await self._copy_instead(chunk, exc)
                return count
            except RuntimeError as exc:  # the transport closed meanwhile
                raise ConnectionResetError(str(exc)) from None
        if sent != count:
            raise ConnectionResetError(f"sendfile stopped after {done + sent} of {chunk.length} bytes")
        return sent

    async def _copy_instead(self, chunk: FileRange, reason: BaseException) -> None:
        log.warning("sendfile unavailable (%s): Kafka answers on this connection are copied", reason)
        self.zero_copy = False
        data = chunk.read()
        self._stats.copied_range_bytes += len(data)
        await self._write_large(data)
