package io.lkstream.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.Arrays;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Decodes the records of one range into columnar batches of Spark's Kafka source schema (docs/format.md,
 * section 3), with the values the Python source gives: offset, timestamp (the record's, or the batch's
 * max timestamp under LogAppendTime, bit 3), timestampType 0 or 1, and a null headers array for a record
 * without headers. Every record of a batch is walked and checked before the batch's rows are handed out,
 * as lkstream.format.validate.check_records does, so a bad batch never yields rows.
 */
final class RangeReader implements PartitionReader<ColumnarBatch> {
  /**
   * Rows per columnar batch (a batch of the log is never split, so a columnar batch may be larger; one
   * also ends early where the next batch of the log is not in the file's window yet, see BinarySlices).
   */
  private static final int ROWS_PER_BATCH = 8192;

  private final OffsetRange range;
  private final PartitionLog log;
  private final BinarySlices key;
  private final BinarySlices value;
  private final WritableColumnVector offset;
  private final WritableColumnVector timestamp;
  private final WritableColumnVector timestampType;
  private final WritableColumnVector headers;
  /** The other vectors refilled for every batch (all but the constant topic and partition). */
  private final WritableColumnVector[] filled;

  private final ColumnarBatch batch;

  RangeReader(OffsetRange range, boolean includeHeaders) {
    this.range = range;
    try {
      this.log = new PartitionLog(range);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    StructType schema = RangeSource.schema(includeHeaders);
    key = new BinarySlices(ROWS_PER_BATCH);
    value = new BinarySlices(ROWS_PER_BATCH);
    offset = new OnHeapColumnVector(ROWS_PER_BATCH, DataTypes.LongType);
    timestamp = new OnHeapColumnVector(ROWS_PER_BATCH, DataTypes.TimestampType);
    timestampType = new OnHeapColumnVector(ROWS_PER_BATCH, DataTypes.IntegerType);
    headers = includeHeaders ? new OnHeapColumnVector(ROWS_PER_BATCH, schema.apply("headers").dataType()) : null;
    filled = includeHeaders
        ? new WritableColumnVector[] {offset, timestamp, timestampType, headers}
        : new WritableColumnVector[] {offset, timestamp, timestampType};
    // Topic and partition are the same on every row: one value each, whatever the batch size.
    ConstantColumnVector topic = new ConstantColumnVector(1, DataTypes.StringType);
    topic.setUtf8String(UTF8String.fromString(range.topic()));
    ConstantColumnVector partition = new ConstantColumnVector(1, DataTypes.IntegerType);
    partition.setInt(range.partition());
    ColumnVector[] columns = {key, value, topic, partition, offset, timestamp, timestampType};
    batch = new ColumnarBatch(includeHeaders ? appendHeaders(columns) : columns);
  }

  private ColumnVector[] appendHeaders(ColumnVector[] columns) {
    ColumnVector[] all = Arrays.copyOf(columns, columns.length + 1);
    all[columns.length] = headers;
    return all;
  }

  @Override
  public boolean next() throws IOException {
    key.reset();
    value.reset();
    for (WritableColumnVector column : filled) {
      column.reset();
    }
    int rows = 0;
    while (rows < ROWS_PER_BATCH && (rows == 0 || log.nextIsInWindow())) {
      RecordBatch next = log.next();
      if (next == null) {
        break;
      }
      rows += decode(next, log.from(), range.end());
    }
    batch.setNumRows(rows);
    return rows > 0;
  }

  @Override
  public ColumnarBatch get() {
    return batch;
  }

  @Override
  public void close() throws IOException {
    batch.close();
    log.close();
  }

  /** Appends the records of {@code b} with {@code start <= offset < end}; returns how many. */
  private int decode(RecordBatch b, long start, long end) {
    Cursor in = new Cursor(b);
    boolean logAppendTime = (b.attributes & RecordBatch.TIMESTAMP_TYPE_MASK) != 0;
    long newest = Long.MIN_VALUE;
    int rows = 0;
    int previousDelta = -1;
    for (int index = 0; index < b.recordsCount; index++) {
      in.record(index);
      long timestampDelta = in.varlong("timestampDelta");
      newest = Math.max(newest, b.baseTimestamp + timestampDelta);
      // A cleaned batch keeps each record's offset: deltas increase within the batch, with gaps.
      int offsetDelta = in.varint("offsetDelta");
      if (offsetDelta <= previousDelta || offsetDelta > b.lastOffsetDelta) {
        throw in.fail("offsetDelta " + offsetDelta + " is not in " + (previousDelta + 1) + ".." + b.lastOffsetDelta);
      }
      previousDelta = offsetDelta;
      int keyLength = in.length("key", -1);
      int keyAt = in.skip(keyLength);
      int valueLength = in.length("value", -1);
      int valueAt = in.skip(valueLength);
      int headerCount = in.length("headerCount", 0);
      long recordOffset = b.baseOffset + offsetDelta;
      boolean wanted = recordOffset >= start && recordOffset < end;
      if (wanted) {
        key.append(b.records, keyAt, keyLength);
        value.append(b.records, valueAt, valueLength);
        offset.appendLong(recordOffset);
        // Spark timestamps are microseconds; Kafka's are milliseconds.
        timestamp.appendLong((logAppendTime ? b.maxTimestamp : b.baseTimestamp + timestampDelta) * 1000);
        timestampType.appendInt(logAppendTime ? 1 : 0);
        if (headers != null) {
          if (headerCount == 0) {
            headers.appendNull();
          } else {
            headers.appendArray(headerCount);
          }
        }
        rows++;
      }
      for (int h = 0; h < headerCount; h++) {
        int nameLength = in.length("header key", 0);
        int nameAt = in.skip(nameLength);
        int headerValueLength = in.length("header value", -1);
        int headerValueAt = in.skip(headerValueLength);
        if (wanted && headers != null) {
          WritableColumnVector pair = headers.arrayData();
          pair.appendStruct(false);
          append(pair.getChild(0), b.records, nameAt, nameLength);
          append(pair.getChild(1), b.records, headerValueAt, headerValueLength);
        }
      }
      in.endRecord();
    }
    in.endRecords();
    if (!logAppendTime && b.recordsCount > 0 && newest != b.maxTimestamp) {
      throw b.corrupt(
          "undecodable records: the largest record timestamp is " + newest + ", the header says " + b.maxTimestamp);
    }
    return rows;
  }

  private static void append(WritableColumnVector column, ByteBuffer bytes, int at, int length) {
    if (length < 0) {
      column.appendNull();
    } else {
      byte[] copy = new byte[length];
      bytes.get(at, copy);
      column.appendByteArray(copy, 0, length);
    }
  }

  /** Reads the varint-framed records of a batch, failing on anything outside the record it is in. */
  private static final class Cursor {
    private final RecordBatch batch;
    private final ByteBuffer b;
    private int pos;
    private int recordEnd;
    private int index;

    Cursor(RecordBatch batch) {
      this.batch = batch;
      this.b = batch.records;
      this.pos = batch.recordsStart;
    }

    void record(int index) {
      this.index = index;
      recordEnd = batch.recordsEnd;
      int length = varint("length");
      if (length < 6 || length > batch.recordsEnd - pos) {
        throw fail("length " + length + " does not fit the " + (batch.recordsEnd - pos) + " bytes left");
      }
      recordEnd = pos + length;
      if (b.get(pos) != 0) {
        throw fail("attributes " + b.get(pos) + " are not 0");
      }
      pos++;
    }

    void endRecord() {
      if (pos != recordEnd) {
        throw fail((recordEnd - pos) + " bytes left over inside the record");
      }
    }

    void endRecords() {
      if (pos != batch.recordsEnd) {
        throw batch.corrupt(
            "undecodable records: " + (batch.recordsEnd - pos) + " bytes after the last of "
                + batch.recordsCount + " record(s)");
      }
    }

    /** A length-prefixed field's length (at least {@code minimum}; -1 means null), its bytes inside the record. */
    int length(String what, int minimum) {
      int length = varint(what);
      if (length < minimum) {
        throw fail(what + " length " + length + " is negative");
      }
      if (length > recordEnd - pos) {
        throw fail(what + " of " + length + " bytes runs past the end of the record");
      }
      return length;
    }

    /** Skips a field of {@code length} bytes (nothing for null) and returns where it starts. */
    int skip(int length) {
      int at = pos;
      pos += Math.max(length, 0);
      return at;
    }

    int varint(String what) {
      long v = varlong(what);
      if (v != (int) v) {
        throw fail(what + " overflows a 32-bit varint");
      }
      return (int) v;
    }

    long varlong(String what) {
      // Most fields fit one byte (small deltas, short keys, a record's header count) or two (lengths
      // and offset deltas below 8,192); only longer ones take the loop.
      if (pos < recordEnd) {
        int first = b.get(pos);
        if (first >= 0) {
          pos++;
          return (first >>> 1) ^ -(first & 1);
        }
        if (pos + 1 < recordEnd) {
          int second = b.get(pos + 1);
          if (second >= 0) {
            pos += 2;
            int raw = (first & 0x7F) | second << 7;
            return (raw >>> 1) ^ -(raw & 1);
          }
        }
      }
      return longerVarlong(what);
    }

    private long longerVarlong(String what) {
      long raw = 0;
      for (int shift = 0; shift < 70; shift += 7) {
        if (pos >= recordEnd) {
          throw fail(what + " runs past the end of the record");
        }
        byte next = b.get(pos++);
        raw |= (long) (next & 0x7F) << shift;
        if (next >= 0) {
          return (raw >>> 1) ^ -(raw & 1);
        }
      }
      throw fail(what + " is a varint longer than 10 bytes");
    }

    LogReadException fail(String reason) {
      return batch.corrupt("undecodable records: record " + index + ": " + reason);
    }
  }
}
