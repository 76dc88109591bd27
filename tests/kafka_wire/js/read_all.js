// KafkaJS reads a compacted topic from its first offset (tests/kafka_wire/test_compacted_reads.py).
//
//   node read_all.js BOOTSTRAP TOPIC GROUP
//
// Consumes partition 0 from the beginning until the record with key "end", and prints one JSON
// line: [[offset, key, value], ...] (key and value as strings, null for null).
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic, group] = process.argv.slice(2);
const kafka = new Kafka({ clientId: 'kafkajs-compacted', brokers: [bootstrap], logLevel: logLevel.NOTHING });

async function main() {
  const consumer = kafka.consumer({ groupId: group });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seen = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${seen.length} records, no "end" record`)), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        const key = message.key === null ? null : message.key.toString();
        seen.push([Number(message.offset), key, message.value === null ? null : message.value.toString()]);
        if (key === 'end') {
          clearTimeout(timer);
          resolve();
        }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  console.log(JSON.stringify(seen));
}

main().catch((error) => {
  console.error(error.stack || String(error));
  process.exit(1);
});
