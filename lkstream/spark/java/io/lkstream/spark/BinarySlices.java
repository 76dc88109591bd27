package io.lkstream.spark;

import java.nio.ByteBuffer;
import java.util.Arrays;

import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * A binary column whose values stay where the records lie (a segment's window, or an inflated batch):
 * a row is a slice of a buffer, copied out only when Spark asks for it. Spark copies every value it
 * reads into a row of its own anyway, so copying it into a column first would be a second copy.
 * Valid until the reader's next batch: the reader never refills a window a batch still points into.
 */
final class BinarySlices extends ColumnVector {
  private ByteBuffer[] sources;
  private int[] starts;
  /** A value's length, -1 for null. */
  private int[] lengths;

  private int rows;
  private int nulls;

  BinarySlices(int capacity) {
    super(DataTypes.BinaryType);
    sources = new ByteBuffer[capacity];
    starts = new int[capacity];
    lengths = new int[capacity];
  }

  /** Appends {@code source[start, start + length)}, or a null for a negative length. */
  void append(ByteBuffer source, int start, int length) {
    if (rows == lengths.length) {
      int capacity = 2 * rows;
      sources = Arrays.copyOf(sources, capacity);
      starts = Arrays.copyOf(starts, capacity);
      lengths = Arrays.copyOf(lengths, capacity);
    }
    sources[rows] = source;
    starts[rows] = start;
    lengths[rows] = length;
    if (length < 0) {
      nulls++;
    }
    rows++;
  }

  /** Forgets every row (and the buffers they point into). */
  void reset() {
    Arrays.fill(sources, 0, rows, null);
    rows = 0;
    nulls = 0;
  }

  @Override
  public byte[] getBinary(int rowId) {
    int length = lengths[rowId];
    if (length < 0) {
      return null;
    }
    byte[] value = new byte[length];
    sources[rowId].get(starts[rowId], value);
    return value;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return lengths[rowId] < 0;
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return nulls;
  }

  @Override
  public void close() {
    reset();
  }

  /** Kept when Spark moves past a batch (as Spark's own reused vectors are): the reader refills it. */
  @Override
  public void closeIfFreeable() {}

  private UnsupportedOperationException notBinary() {
    return new UnsupportedOperationException("a binary column has no other type's values");
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw notBinary();
  }

  @Override
  public byte getByte(int rowId) {
    throw notBinary();
  }

  @Override
  public short getShort(int rowId) {
    throw notBinary();
  }

  @Override
  public int getInt(int rowId) {
    throw notBinary();
  }

  @Override
  public long getLong(int rowId) {
    throw notBinary();
  }

  @Override
  public float getFloat(int rowId) {
    throw notBinary();
  }

  @Override
  public double getDouble(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    throw notBinary();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw notBinary();
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    throw notBinary();
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    throw notBinary();
  }
}
