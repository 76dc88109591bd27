// The Java kafka-clients leg of the compatibility matrix (tests/kafka_wire/test_java_client.py).
//
// Launched as a source file (`java -cp <jars> KafkaMatrix.java BOOTSTRAP TOPIC GROUP`), so no build step:
// that needs a JDK's compiler module (scripts/install-system-deps.sh installs openjdk-17-jdk-headless).
// The jars (kafka-clients 3.9.1 and its compression and logging jars) come from the PyPI wheel
// shigawire-apache-flink-libraries (the `dev` extra). Each step prints one `STEP key=value` line
// that the Python test checks; any failure exits non-zero with the exception.
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.*;

public class KafkaMatrix {
    static final int COUNT = 50;
    static String groupProtocol = "classic";

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        // "classic" (the default) or "consumer" (KIP-848; needs the listener's topic-id switch)
        groupProtocol = args.length > 3 ? args[3] : "classic";
        try (Admin admin = Admin.create(common)) {
            admin.createTopics(List.of(new NewTopic(topic, 2, (short) 1))).all().get();
            System.out.println("CREATED topic=" + topic);
            produce(common, topic, 0, COUNT);
            System.out.println("CONSUMED first=" + consume(common, topic, group, COUNT));
            produce(common, topic, COUNT, 10);
            System.out.println("CONSUMED second=" + consume(common, topic, group, 10));
            try (KafkaConsumer<byte[], byte[]> consumer = consumer(common, null)) {
                TopicPartition p0 = new TopicPartition(topic, 0);
                Map<TopicPartition, OffsetAndTimestamp> found =
                        consumer.offsetsForTimes(Map.of(p0, 1_000L), Duration.ofSeconds(30));
                System.out.println("BY_TIME offset=" + found.get(p0).offset());
            }
            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("DELETED topic=" + topic);
        }
    }

    static void produce(Properties common, String topic, int start, int count) throws Exception {
        Properties props = new Properties();
        props.putAll(common);
        props.put("enable.idempotence", "true"); // the default in 3.x; stated, since it needs InitProducerId
        props.put("acks", "all");
        try (KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = start; i < start + count; i++) {
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(
                        topic, null, 1_000L + i, bytes("k" + (i % 5)), bytes("v" + i));
                record.headers().add("seq", bytes(Integer.toString(i)));
                producer.send(record).get();
            }
        }
    }

    static String consume(Properties common, String topic, String group, int count) {
        List<Integer> seqs = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = consumer(common, group)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 30_000;
            while (seqs.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<byte[], byte[]> record : consumer.poll(Duration.ofMillis(500))) {
                    Header seq = record.headers().lastHeader("seq");
                    seqs.add(Integer.parseInt(new String(seq.value(), StandardCharsets.UTF_8)));
                }
            }
            consumer.commitSync();
        }
        Collections.sort(seqs);
        StringBuilder out = new StringBuilder();
        for (int seq : seqs) out.append(out.length() == 0 ? "" : ",").append(seq);
        return out.toString();
    }

    static KafkaConsumer<byte[], byte[]> consumer(Properties common, String group) {
        Properties props = new Properties();
        props.putAll(common);
        if (group != null) {
            props.put("group.id", group);
            props.put("group.protocol", groupProtocol);
        }
        props.put("auto.offset.reset", "earliest");
        props.put("enable.auto.commit", "false");
        return new KafkaConsumer<>(props, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }
}
