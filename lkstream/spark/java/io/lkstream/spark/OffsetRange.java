package io.lkstream.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.spark.sql.connector.read.InputPartition;

/** One task: offsets {@code [start, end)} of the partition stored in {@code dir}. */
record OffsetRange(String dir, String topic, int partition, long start, long end, boolean failOnDataLoss)
    implements InputPartition {

  static List<OffsetRange> parseAll(String json) {
    if (json == null) {
      throw new IllegalArgumentException("option ranges is missing: build this source with lkstream.spark.jvm.read_path");
    }
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException("option ranges is not valid JSON", e);
    }
    List<OffsetRange> out = new ArrayList<>();
    for (JsonNode r : root) {
      out.add(
          new OffsetRange(
              r.get("dir").asText(),
              r.get("topic").asText(),
              r.get("partition").asInt(),
              r.get("start").asLong(),
              r.get("end").asLong(),
              r.get("failOnDataLoss").asBoolean()));
    }
    return out;
  }
}
