package io.lkstream.spark;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.SnappyInputStream;

/**
 * One Kafka v2 record batch of a segment file (docs/format.md, section 2). The header is parsed from
 * the file's window; {@link #verify} and {@link #records} look at the whole batch, and are only called
 * for batches that hold offsets of the range, so batches before the range are skipped undecoded.
 */
final class RecordBatch {
  static final int HEADER_SIZE = 61;
  private static final int LOG_OVERHEAD = 12;
  private static final int CRC_AT = 17;
  private static final int ATTRIBUTES_AT = 21;
  static final int TIMESTAMP_TYPE_MASK = 0x08;
  /** What one batch may inflate to, as lkstream.format.validate.DEFAULT_MAX_DECOMPRESSED_BYTES. */
  private static final int MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024;

  final SegmentFile file;
  final long position;
  final long baseOffset;
  final int size;
  final int attributes;
  final int lastOffsetDelta;
  final long baseTimestamp;
  final long maxTimestamp;
  final int recordsCount;

  /**
   * The records section: {@code records[recordsStart, recordsEnd)}, in the file's window for an
   * uncompressed batch (valid until the window is refilled, see {@link SegmentFile}), in a
   * buffer of its own for an inflated one.
   */
  ByteBuffer records;

  int recordsStart;
  int recordsEnd;

  // A ByteBuffer's absolute reads are big-endian unless told otherwise, as the format's fields are.
  private RecordBatch(SegmentFile file, long position, ByteBuffer b) {
    this.file = file;
    this.position = position;
    this.baseOffset = b.getLong(0);
    this.size = LOG_OVERHEAD + b.getInt(8);
    this.attributes = b.getShort(ATTRIBUTES_AT);
    this.lastOffsetDelta = b.getInt(23);
    this.baseTimestamp = b.getLong(27);
    this.maxTimestamp = b.getLong(35);
    this.recordsCount = b.getInt(57);
  }

  /** The size of the batch at {@code position} if its header is in the window already, else -1. */
  static long sizeInWindow(SegmentFile file, long position) throws IOException {
    if (!file.holds(position, HEADER_SIZE)) {
      return -1;
    }
    return LOG_OVERHEAD + file.peek(position, HEADER_SIZE).getInt(8);
  }

  /** The header at {@code position}, with the checks that need no more than the header. */
  static RecordBatch header(SegmentFile file, long position) throws IOException {
    long available = file.size - position;
    if (available < HEADER_SIZE) {
      throw LogReadException.corrupt(file.path, position, "truncated header: " + available + " of 61 bytes");
    }
    ByteBuffer b = file.peek(position, HEADER_SIZE);
    RecordBatch batch = new RecordBatch(file, position, b);
    if (batch.size < HEADER_SIZE) {
      throw batch.corrupt("batch_length " + (batch.size - LOG_OVERHEAD) + " is smaller than a header");
    }
    if (batch.size > available) {
      throw batch.corrupt("truncated batch: " + available + " of " + batch.size + " bytes");
    }
    if (b.get(16) != 2) {
      throw batch.corrupt("unsupported magic " + b.get(16) + " (expected 2)");
    }
    return batch;
  }

  long nextOffset() {
    return baseOffset + lastOffsetDelta + 1;
  }

  LogReadException corrupt(String reason) {
    return LogReadException.corrupt(file.path, position, reason);
  }

  /** The rest of lkstream.format.batch.check_batch (counts, CRC-32C), then the records section, inflated. */
  void load() throws IOException {
    // An empty batch (no records) is a compacted log's: the cleaner writes one over removed offsets.
    if (recordsCount < 0 || lastOffsetDelta < Math.max(recordsCount - 1, 0)) {
      throw corrupt(
          "inconsistent counts: records_count=" + recordsCount + ", last_offset_delta=" + lastOffsetDelta);
    }
    ByteBuffer b = file.read(position, size);
    CRC32C crc = new CRC32C();
    crc.update(b.slice(ATTRIBUTES_AT, size - ATTRIBUTES_AT));
    long stored = b.getInt(CRC_AT) & 0xFFFFFFFFL;
    if (crc.getValue() != stored) {
      throw corrupt(String.format("CRC-32C mismatch: stored %#010x, computed %#010x", stored, crc.getValue()));
    }
    int codec = attributes & 0x07;
    if (codec == 0) {
      records = b;
      recordsStart = HEADER_SIZE;
      recordsEnd = size;
      return;
    }
    byte[] compressed = new byte[size - HEADER_SIZE];
    b.get(HEADER_SIZE, compressed);
    records = ByteBuffer.wrap(inflate(codec, new ByteArrayInputStream(compressed)));
    recordsStart = 0;
  }

  private byte[] inflate(int codec, ByteArrayInputStream compressed) throws IOException {
    try (InputStream in = decompressor(codec, compressed)) {
      byte[] out = new byte[Math.min(MAX_DECOMPRESSED_BYTES + 1, Math.max(4096, 4 * (size - HEADER_SIZE)))];
      int n = 0;
      while (true) {
        if (n == out.length) {
          // One byte past the bound tells a batch that inflates too far from one that fits exactly.
          if (n > MAX_DECOMPRESSED_BYTES) {
            throw corrupt("undecodable records: they inflate beyond " + MAX_DECOMPRESSED_BYTES + " bytes");
          }
          out = Arrays.copyOf(out, Math.min(MAX_DECOMPRESSED_BYTES + 1, 2 * n));
        }
        int read = in.read(out, n, out.length - n);
        if (read < 0) {
          break;
        }
        n += read;
      }
      recordsEnd = n;
      return out;
    } catch (IOException e) {
      // Every codec's stream reports bad input as an IOException (ZipException, SnappyIOException, ...).
      throw corrupt("undecodable records: compression codec " + codec + ": " + e.getMessage());
    }
  }

  private InputStream decompressor(int codec, InputStream in) throws IOException {
    return switch (codec) {
      case 1 -> new GZIPInputStream(in);
      // Kafka's framing (what aiokafka writes): xerial blocks, or one raw block without the header.
      case 2 -> new SnappyInputStream(in);
      // Kafka since magic 1 writes the standard LZ4 frame format.
      case 3 -> new LZ4FrameInputStream(in);
      case 4 -> new ZstdInputStreamNoFinalizer(in);
      default -> throw corrupt("undecodable records: unknown compression codec " + codec);
    };
  }
}
