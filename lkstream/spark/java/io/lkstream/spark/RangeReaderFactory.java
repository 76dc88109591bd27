package io.lkstream.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/** Columnar readers only: Spark turns the batches into rows itself where a plan needs rows. */
final class RangeReaderFactory implements PartitionReaderFactory {
  private static final long serialVersionUID = 1L;

  private final boolean includeHeaders;

  RangeReaderFactory(boolean includeHeaders) {
    this.includeHeaders = includeHeaders;
  }

  @Override
  public boolean supportColumnarReads(InputPartition partition) {
    return true;
  }

  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    throw new UnsupportedOperationException("the lkstream range source reads columnar batches only");
  }

  @Override
  public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
    return new RangeReader((OffsetRange) partition, includeHeaders);
  }
}
