package io.lkstream.spark;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * One open segment file, read through a window of at least 1 MiB so that small batches do not cost a
 * system call each. Positional reads only: the file is never written, mapped or locked, so a live
 * broker may append to it (or retention delete it) while it is read.
 *
 * <p>The window is direct memory: the kernel copies the file into it once and the reader decodes the
 * records where they lie (a heap array costs a second copy, through a temporary direct buffer). A
 * refill overwrites the window, so {@link RangeReader} ends a columnar batch, whose values point into
 * the window, before any refill. One window, reused, stays in the core's cache; the tail of a batch
 * that the window held only in part is read again rather than kept in a second one.
 *
 * <p>Not mapped: a mapping would save the copy (about a tenth of a Spark read's CPU time, measured),
 * but a mapped page the file no longer has (truncated by another process, or unreadable on disk)
 * raises SIGBUS, which the JVM turns into an exception for plain buffer reads but not inside the
 * CRC-32C intrinsic: a task that should fail with an error could take the executor down.
 */
final class SegmentFile implements AutoCloseable {
  private static final int WINDOW_BYTES = 1 << 20;

  final String path;
  final long baseOffset;
  final long size;
  private final FileChannel channel;
  private ByteBuffer window = ByteBuffer.allocateDirect(WINDOW_BYTES);
  private long windowStart;
  private int windowLength;

  SegmentFile(Path path, long baseOffset) throws IOException {
    this.path = path.toString();
    this.baseOffset = baseOffset;
    this.channel = FileChannel.open(path, StandardOpenOption.READ);
    // The size when opened: bytes a broker appends later lie beyond every planned range.
    this.size = channel.size();
  }

  /** Whether {@code [position, position + length)} is in the window already (no read needed). */
  boolean holds(long position, long length) {
    return position >= windowStart && length >= 0 && position + length <= windowStart + windowLength;
  }

  /**
   * {@code [position, position + length)} as a buffer of its own (index 0 is {@code position}), from
   * the window, which is refilled from {@code position} on if it does not hold them all.
   */
  ByteBuffer read(long position, int length) throws IOException {
    if (!holds(position, length)) {
      refill(position, length);
    }
    return window.slice((int) (position - windowStart), length);
  }

  /**
   * A few bytes (a batch header) as {@link #read} gives them, but read on their own if the window
   * does not hold them: the window is then refilled once the batch's size is known, from its start.
   */
  ByteBuffer peek(long position, int length) throws IOException {
    if (holds(position, length)) {
      return window.slice((int) (position - windowStart), length);
    }
    ByteBuffer bytes = ByteBuffer.allocate(length);
    fill(bytes, position);
    return bytes.clear();
  }

  private void refill(long position, int length) throws IOException {
    int want = (int) Math.min(Math.max(length, WINDOW_BYTES), size - position);
    if (window.capacity() < want) {
      window = ByteBuffer.allocateDirect(want);
    }
    fill(window.clear().limit(want), position);
    windowStart = position;
    windowLength = want;
  }

  /** Fills {@code into} (from its index 0 to its limit) with the file's bytes from {@code position} on. */
  private void fill(ByteBuffer into, long position) throws IOException {
    while (into.hasRemaining()) {
      if (channel.read(into, position + into.position()) < 0) {
        throw new EOFException(path + " shrank to " + channel.size() + " bytes while it was read");
      }
    }
  }

  @Override
  public void close() throws IOException {
    channel.close();
  }
}
