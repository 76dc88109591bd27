package io.lkstream.spark;

import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM reader alone, with no Spark job: {@code RangeReader} over one partition, nanoseconds a
 * row per pass, one line per pass on stdout. In the reader's package because its classes are
 * package-private. Used by benchmarks/micro_jvm_reader.py.
 *
 * <p>Modes: {@code decode} takes each columnar batch and reads nothing from it; {@code values} also
 * reads every row's key, value, offset, timestamp and timestamp type, as Spark's
 * {@code ColumnarToRow} does (a value copied out into an array of its own).
 */
public final class ReaderLoop {
  private ReaderLoop() {}

  public static void main(String[] args) throws Exception {
    String dir = args[0];
    long end = Long.parseLong(args[1]);
    boolean values = args[2].equals("values");
    int passes = Integer.parseInt(args[3]);
    long sink = 0;
    for (int pass = 0; pass < passes; pass++) {
      long started = System.nanoTime();
      long rows = 0;
      try (RangeReader reader = new RangeReader(new OffsetRange(dir, "t", 0, 0, end, true), false)) {
        while (reader.next()) {
          ColumnarBatch batch = reader.get();
          int n = batch.numRows();
          rows += n;
          for (int row = 0; values && row < n; row++) {
            sink += batch.column(0).isNullAt(row) ? 0 : batch.column(0).getBinary(row).length;
            sink += batch.column(1).getBinary(row).length;
            sink += batch.column(4).getLong(row) + batch.column(5).getLong(row) + batch.column(6).getInt(row);
          }
        }
      }
      System.out.println(rows + " " + (System.nanoTime() - started));
    }
    // Keeps the reads from being optimised away.
    System.err.println("checksum " + sink);
  }
}
