package io.lkstream.spark;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The batches of one partition directory that hold offsets of a range, in offset order.
 *
 * <p>The reader invariants of lkstream/storage/reader.py, for the part of the log a planned range covers:
 * batch base offsets continue one another within and across segments, and every batch handed out has
 * passed its header, count and CRC-32C checks; anything else is corruption, reported with the file and
 * byte position. Beyond {@code end} nothing is read: the planner found a valid log up to there, so a
 * torn tail a live broker is still writing is never touched.
 *
 * <p>Retention may delete segments after planning: a range whose first offsets are gone fails with the
 * Python source's data-loss message when failOnDataLoss is set, and otherwise resumes at the new log start.
 */
final class PartitionLog implements AutoCloseable {
  private static final Pattern SEGMENT_NAME = Pattern.compile("(\\d{20})\\.seg");
  private static final int INDEX_ENTRY_BYTES = 16;

  private final OffsetRange range;
  private final Path dir;
  private long[] bases;
  private SegmentFile segment;
  private int segmentIndex;
  /** Where the next batch starts in {@link #segment}. */
  private long position;
  /** The base offset that batch must have: batches continue one another. */
  private long nextBase;
  /** The first offset still to hand out: the range's start, or where retention left the log. */
  private long from;

  private boolean done;

  PartitionLog(OffsetRange range) throws IOException {
    this.range = range;
    this.dir = Path.of(range.dir());
    this.from = range.start();
    this.bases = listSegments();
    this.done = from >= range.end();
  }

  /** The next batch with records in {@code [from, end)}, loaded and checked; null after the last one. */
  RecordBatch next() throws IOException {
    while (!done) {
      if (segment == null) {
        openSegmentHolding(from);
      } else if (position == segment.size) {
        nextSegment();
      } else {
        RecordBatch batch = RecordBatch.header(segment, position);
        if (batch.baseOffset != nextBase) {
          throw batch.corrupt("batch base offset " + batch.baseOffset + " does not continue at offset " + nextBase);
        }
        position += batch.size;
        nextBase = batch.nextOffset();
        if (nextBase <= from) {
          continue; // wholly before the range: skipped without reading its records
        }
        batch.load();
        done = nextBase >= range.end();
        return batch;
      }
    }
    return null;
  }

  /**
   * Whether the next batch lies wholly in the current segment's window already, so that reading it
   * leaves the bytes of the batches read before it where they are.
   */
  boolean nextIsInWindow() throws IOException {
    if (done || segment == null || position >= segment.size) {
      return false;
    }
    long size = RecordBatch.sizeInWindow(segment, position);
    return size >= RecordBatch.HEADER_SIZE && segment.holds(position, size);
  }

  long from() {
    return from;
  }

  private void openSegmentHolding(long offset) throws IOException {
    if (bases.length == 0 || bases[0] > offset) {
      lost(offset, bases.length == 0 ? offset : bases[0]);
      return;
    }
    int index = Arrays.binarySearch(bases, offset);
    open(index >= 0 ? index : -index - 2, offset);
    if (segment != null) {
      long[] start = seek(offset);
      position = start[0];
      nextBase = start[1];
    }
  }

  private void nextSegment() throws IOException {
    long expected = nextBase;
    closeSegment();
    if (segmentIndex + 1 == bases.length) {
      lost(expected, expected); // the log ends before the range does: its tail was removed
      return;
    }
    if (bases[segmentIndex + 1] != expected) {
      throw LogReadException.corrupt(
          segmentPath(bases[segmentIndex + 1]).toString(),
          0,
          "segment starts at offset " + bases[segmentIndex + 1] + ", but the previous one ends before " + expected);
    }
    open(segmentIndex + 1, expected);
    if (segment != null) {
      position = 0;
      nextBase = expected;
    }
  }

  /** Opens segment {@code index}; a file retention deleted since the listing is data loss from {@code offset}. */
  private void open(int index, long offset) throws IOException {
    try {
      segment = new SegmentFile(segmentPath(bases[index]), bases[index]);
      segmentIndex = index;
    } catch (NoSuchFileException e) {
      bases = listSegments();
      if (bases.length > 0 && bases[0] <= offset) {
        throw e;
      }
      lost(offset, bases.length == 0 ? offset : bases[0]);
    }
  }

  /** Records {@code [lostFrom, available)} are gone: fail, or go on at {@code available} (failOnDataLoss=false). */
  private void lost(long lostFrom, long available) throws IOException {
    if (range.failOnDataLoss()) {
      throw LogReadException.dataLoss(range.topic(), range.partition(), lostFrom, available);
    }
    closeSegment();
    from = available;
    done = available <= lostFrom || available >= range.end();
  }

  /**
   * A batch boundary {@code (position, base offset)} at or before {@code offset}'s batch: the segment's
   * start, or the sparse index's last entry at or below {@code offset} if the batch there has the offset
   * the entry claims (the index is a hint, as in the Python reader; the walk checks what follows).
   */
  private long[] seek(long offset) throws IOException {
    long[] best = {0, segment.baseOffset};
    if (offset <= segment.baseOffset) {
      return best;
    }
    Path idx = dir.resolve(String.format("%020d.idx", segment.baseOffset));
    try (FileChannel index = FileChannel.open(idx, StandardOpenOption.READ)) {
      long low = 0;
      long high = index.size() / INDEX_ENTRY_BYTES - 1;
      long[] found = null;
      while (low <= high) {
        long middle = (low + high) >>> 1;
        long[] entry = readEntry(index, middle);
        if (entry[1] <= offset) {
          found = entry;
          low = middle + 1;
        } else {
          high = middle - 1;
        }
      }
      if (found != null && found[1] >= segment.baseOffset && found[0] >= 0
          && found[0] + RecordBatch.HEADER_SIZE <= segment.size) {
        RecordBatch there = RecordBatch.header(segment, found[0]);
        if (there.baseOffset == found[1]) {
          return found;
        }
      }
    } catch (NoSuchFileException | EOFException e) {
      // No index, or one cut short while it was read: walk from the segment's start.
    } catch (LogReadException e) {
      // The entry points at no batch: the index is damaged, walk from the segment's start.
    }
    return best;
  }

  /** Index entry {@code i} as {@code (position, offset)}: the file holds {@code (offset, position)} pairs. */
  private static long[] readEntry(FileChannel index, long i) throws IOException {
    ByteBuffer entry = ByteBuffer.allocate(INDEX_ENTRY_BYTES);
    while (entry.hasRemaining()) {
      if (index.read(entry, i * INDEX_ENTRY_BYTES + entry.position()) < 0) {
        throw new EOFException(i + " is past the end of the index");
      }
    }
    return new long[] {entry.getLong(8), entry.getLong(0)};
  }

  private long[] listSegments() throws IOException {
    List<Long> found = new ArrayList<>();
    try (DirectoryStream<Path> names = Files.newDirectoryStream(dir)) {
      for (Path name : names) {
        Matcher m = SEGMENT_NAME.matcher(name.getFileName().toString());
        if (m.matches()) {
          found.add(Long.parseLong(m.group(1)));
        }
      }
    } catch (NoSuchFileException e) {
      // A partition directory not created yet (or deleted with its topic) holds no records.
    }
    return found.stream().mapToLong(Long::longValue).sorted().toArray();
  }

  private Path segmentPath(long base) {
    return dir.resolve(String.format("%020d.seg", base));
  }

  private void closeSegment() throws IOException {
    if (segment != null) {
      segment.close();
      segment = null;
    }
  }

  @Override
  public void close() throws IOException {
    closeSegment();
  }
}
