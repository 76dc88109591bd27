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
 */
final class SegmentFile implements AutoCloseable {
  private static final int WINDOW_BYTES = 1 << 20;

  final String path;
  final long baseOffset;
  final long size;
  private final FileChannel channel;
  private byte[] window = new byte[WINDOW_BYTES];
  private long windowStart;
  private int windowLength;

  SegmentFile(Path path, long baseOffset) throws IOException {
    this.path = path.toString();
    this.baseOffset = baseOffset;
    this.channel = FileChannel.open(path, StandardOpenOption.READ);
    // The size when opened: bytes a broker appends later lie beyond every planned range.
    this.size = channel.size();
  }

  /** The window holding {@code [position, position + length)}; read {@link #at} for where it starts. */
  byte[] bytes(long position, int length) throws IOException {
    long windowEnd = windowStart + windowLength;
    if (position < windowStart || position + length > windowEnd) {
      int want = (int) Math.min(Math.max(length, WINDOW_BYTES), size - position);
      // The bytes already read from position on (a batch whose header was read) are kept, not read again.
      int kept = position >= windowStart && position < windowEnd ? (int) (windowEnd - position) : 0;
      byte[] into = window.length < want ? new byte[want] : window;
      if (kept > 0) {
        System.arraycopy(window, (int) (position - windowStart), into, 0, kept);
      }
      window = into;
      ByteBuffer rest = ByteBuffer.wrap(window, kept, want - kept);
      while (rest.hasRemaining()) {
        if (channel.read(rest, position + rest.position()) < 0) {
          throw new EOFException(path + " shrank to " + channel.size() + " bytes while it was read");
        }
      }
      windowStart = position;
      windowLength = want;
    }
    return window;
  }

  /** Where byte {@code position} sits in the array {@link #bytes} returned. */
  int at(long position) {
    return (int) (position - windowStart);
  }

  @Override
  public void close() throws IOException {
    channel.close();
  }
}
