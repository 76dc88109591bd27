// Java kafka-clients read a compacted topic from an offset (tests/kafka_wire/test_compacted_reads.py).
//
//   java -cp JARS ReadAll.java BOOTSTRAP TOPIC START_OFFSET
//
// Assigns partition 0, seeks to START_OFFSET (which may hold no record any more) and polls until the
// record with key "end"; prints one line per record: RECORD offset key value ("null" for null).
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

public class ReadAll {
  public static void main(String[] args) throws Exception {
    Properties props = new Properties();
    props.put("bootstrap.servers", args[0]);
    props.put("enable.auto.commit", "false");
    props.put("key.deserializer", StringDeserializer.class.getName());
    props.put("value.deserializer", StringDeserializer.class.getName());
    TopicPartition partition = new TopicPartition(args[1], 0);
    long deadline = System.currentTimeMillis() + 60_000;
    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
      consumer.assign(List.of(partition));
      consumer.seek(partition, Long.parseLong(args[2]));
      while (System.currentTimeMillis() < deadline) {
        for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
          System.out.println("RECORD " + r.offset() + " " + r.key() + " " + r.value());
          if ("end".equals(r.key())) {
            return;
          }
        }
      }
    }
    System.err.println("no \"end\" record within 60 s");
    System.exit(1);
  }
}
