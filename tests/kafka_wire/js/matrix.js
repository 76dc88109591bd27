// The KafkaJS leg of the compatibility matrix (tests/kafka_wire/test_kafkajs.py).
//
//   node matrix.js BOOTSTRAP TOPIC GROUP
//
// Create a topic, produce keyed records with headers (idempotent producer), consume them in a group
// and commit, restart the member and resume without re-reading, look an offset up by timestamp,
// delete the topic. Prints one JSON line with what each step saw; exits non-zero on any failure.
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, group] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kafkajs-matrix', brokers: [bootstrap], logLevel: logLevel.NOTHING });

async function produce(start, count) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const messages = [];
  for (let i = start; i < start + count; i++) {
    messages.push({ key: `k${i % 5}`, value: `v${i}`, headers: { seq: String(i) }, timestamp: String(1000 + i) });
  }
  await producer.send({ topic, acks: -1, messages });
  await producer.disconnect();
}

async function consume(count) {
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seqs = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`consumed ${seqs.length} of ${count}`)), 30000);
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        seqs.push(Number(message.headers.seq.toString()));
        await consumer.commitOffsets([{ topic, partition, offset: (BigInt(message.offset) + 1n).toString() }]);
        if (seqs.length >= count) {
          clearTimeout(timer);
          resolve();
        }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  return seqs.sort((a, b) => a - b);
}

async function main() {
  const admin = kafka.admin();
  await admin.connect();
  const result = {};
  result.created = await admin.createTopics({ topics: [{ topic, numPartitions: 2 }], waitForLeaders: true });
  await produce(0, 40);
  result.first = await consume(40);
  await produce(40, 10);
  result.second = await consume(10);
  result.byTime = await admin.fetchTopicOffsetsByTimestamp(topic, 1000);
  await admin.deleteTopics({ topics: [topic] });
  result.deleted = !(await admin.listTopics()).includes(topic);
  await admin.disconnect();
  console.log(JSON.stringify(result));
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : error);
  process.exit(1);
});
