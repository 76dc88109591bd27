package io.lkstream.spark;

import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/** The planned ranges as a batch-readable table: one input partition per range, no pushdown. */
final class RangeTable implements SupportsRead, ScanBuilder, Scan, Batch {
  private final StructType schema;
  private final List<OffsetRange> ranges;
  private final boolean includeHeaders;

  RangeTable(StructType schema, List<OffsetRange> ranges, boolean includeHeaders) {
    this.schema = schema;
    this.ranges = ranges;
    this.includeHeaders = includeHeaders;
  }

  @Override
  public String name() {
    return "lkstream ranges";
  }

  @Override
  @SuppressWarnings("deprecation") // Spark derives columns() from it; the replacement is Spark-internal
  public StructType schema() {
    return schema;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
    return this;
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public Batch toBatch() {
    return this;
  }

  @Override
  public InputPartition[] planInputPartitions() {
    return ranges.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReaderFactory(includeHeaders);
  }
}
