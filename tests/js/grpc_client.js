'use strict';
// Drives RocketMQ 5's Node.js client (rocketmq-client-nodejs, gRPC apache.rocketmq.v2) against
// a real `metaledger broker`'s gRPC front for tests/integration/broker/test_node5.py.
// Usage:
//   node grpc_client.js produce ENDPOINT TOPIC < SPEC_JSON
//     SPEC_JSON: a list of {body_b64, tag, keys: [...], props: {...}}; prints one JSON line per
//     message: {message_id, offset} or {error: {name, code, message}} (what the client threw)
//   node grpc_client.js hold ENDPOINT TOPIC
//     starts a producer, prints {ready: CLIENT_ID}, and shuts it down (NotifyClientTermination)
//     when its stdin closes; then prints {closed: CLIENT_ID}
//   node grpc_client.js simple ENDPOINT GROUP TOPIC EXPECT TIMEOUT_MS
//     a SimpleConsumer receives until EXPECT distinct messages are acked (or TIMEOUT_MS): each
//     is acked at once, but one whose keys include "later" gets a 1 s invisible duration
//     (ChangeInvisibleDuration) on its first delivery and is acked on its second; then one
//     more receive must find nothing. Prints one line per delivery (see view()) with its
//     action, then {idle: true} when that last receive found nothing
//   node grpc_client.js push ENDPOINT GROUP TOPIC EXPECT TIMEOUT_MS
//     a PushConsumer consumes until EXPECT distinct messages succeeded (or TIMEOUT_MS); one
//     whose keys include "fail" fails its first delivery (FAILURE: redelivered after the
//     server's backoff). One line per delivery, with its result
// The client's own log goes to stderr when RMQ5_DEBUG is set (warnings and errors always).
const crypto = require('crypto');
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');

const toStderr = (...args) => process.stderr.write(args.map(String).join(' ') + '\n');
const logger = {
  info: process.env.RMQ5_DEBUG ? toStderr : () => {},
  debug: process.env.RMQ5_DEBUG ? toStderr : () => {},
  warn: toStderr,
  error: toStderr,
};

function failure(e) {
  return { error: { name: e && e.name, code: e && e.code, message: String(e && e.message || e) } };
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function produce(endpoints, topic) {
  const spec = await readStdin();
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger, requestTimeout: 10000 });
  await producer.startup();
  try {
    for (const item of spec) {
      let out;
      try {
        const receipt = await producer.send({
          topic,
          body: Buffer.from(item.body_b64, 'base64'),
          tag: item.tag || undefined,
          keys: item.keys || [],
          properties: new Map(Object.entries(item.props || {})),
        });
        out = { message_id: receipt.messageId, offset: receipt.offset };
      } catch (e) {
        out = failure(e);
      }
      process.stdout.write(JSON.stringify(out) + '\n');
    }
  } finally {
    await producer.shutdown();
  }
}

function view(m) {
  return {
    message_id: m.messageId, topic: m.topic, tag: m.tag || '', keys: m.keys,
    props: Object.fromEntries(m.properties), len: m.body.length,
    sha256: crypto.createHash('sha256').update(m.body).digest('hex'),
    attempt: m.deliveryAttempt, corrupted: Boolean(m.corrupted), offset: m.offset,
  };
}

const print = obj => process.stdout.write(JSON.stringify(obj) + '\n');

async function simple(endpoints, consumerGroup, topic, expect, timeoutMs) {
  const consumer = new SimpleConsumer({
    endpoints, namespace: '', consumerGroup, logger, awaitDuration: 5000,
    subscriptions: new Map([[ topic, '*' ]]),
  });
  await consumer.startup();
  const acked = new Set();
  const deadline = Date.now() + Number(timeoutMs);
  try {
    while (acked.size < Number(expect) && Date.now() < deadline) {
      for (const m of await consumer.receive(16, 15000)) {
        if (m.keys.includes('later') && m.deliveryAttempt === 1) {
          await consumer.changeInvisibleDuration(m, 1000);
          print({ ...view(m), action: 'later' });
        } else {
          await consumer.ack(m);
          acked.add(m.messageId);
          print({ ...view(m), action: 'ack' });
        }
      }
    }
    if (acked.size >= Number(expect)) {
      const more = await consumer.receive(16, 15000);
      for (const m of more) print({ ...view(m), action: 'extra' });
      if (!more.length) print({ idle: true });
    }
  } finally {
    await consumer.shutdown();
  }
}

async function push(endpoints, consumerGroup, topic, expect, timeoutMs) {
  const done = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  const consumer = new PushConsumer({
    endpoints, namespace: '', consumerGroup, logger,
    subscriptions: new Map([[ topic, '*' ]]),
    messageListener: {
      consume(m) {
        const fail = m.keys.includes('fail') && m.deliveryAttempt === 1;
        print({ ...view(m), result: fail ? 'FAILURE' : 'SUCCESS' });
        if (!fail) done.add(m.messageId);
        if (done.size >= Number(expect)) finish();
        return fail ? ConsumeResult.FAILURE : ConsumeResult.SUCCESS;
      },
    },
  });
  await consumer.startup();
  const timer = setTimeout(finish, Number(timeoutMs));
  await finished;
  clearTimeout(timer);
  await consumer.shutdown();
}

async function hold(endpoints, topic) {
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger });
  await producer.startup();
  process.stdout.write(JSON.stringify({ ready: producer.clientId }) + '\n');
  for await (const _ of process.stdin); // eslint-disable-line no-unused-vars
  await producer.shutdown();
  process.stdout.write(JSON.stringify({ closed: producer.clientId }) + '\n');
}

const MODES = { produce, hold, simple, push };

async function main() {
  const [ mode, ...args ] = process.argv.slice(2);
  const run = MODES[mode];
  if (!run) throw new Error(`unknown mode ${mode} (one of ${Object.keys(MODES).join(', ')})`);
  await run(...args);
}

main().then(() => process.exit(0), e => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(2);
});
