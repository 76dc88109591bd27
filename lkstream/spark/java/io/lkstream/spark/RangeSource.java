package io.lkstream.spark;

import java.util.List;
import java.util.Map;

import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Reads offset ranges of LKSTREAM partition directories, planned by {@code lkstream.spark.jvm.read_path}.
 *
 * <p>Options: {@code ranges}, a JSON list of {@code {"dir", "topic", "partition", "start", "end",
 * "failOnDataLoss"}} (one Spark task each), and {@code includeHeaders}. Planning (topics, offsets,
 * minPartitions) stays in Python so both sources agree on what a query reads; this side only reads.
 */
public final class RangeSource implements TableProvider, DataSourceRegister {
  /** Spark's Kafka source schema, as the Python source declares it (lkstream/spark/arrow.py). */
  static final String SCHEMA_DDL =
      "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int";

  static final String HEADERS_DDL = "headers array<struct<key: string, value: binary>>";

  static StructType schema(boolean includeHeaders) {
    return StructType.fromDDL(includeHeaders ? SCHEMA_DDL + ", " + HEADERS_DDL : SCHEMA_DDL);
  }

  static boolean includeHeaders(Map<String, String> options) {
    return Boolean.parseBoolean(new CaseInsensitiveStringMap(options).getOrDefault("includeHeaders", "false"));
  }

  @Override
  public String shortName() {
    return "lkstream-ranges";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(includeHeaders(options));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    List<OffsetRange> ranges = OffsetRange.parseAll(new CaseInsensitiveStringMap(properties).get("ranges"));
    return new RangeTable(schema, ranges, includeHeaders(properties));
  }
}
