'use strict';
// Drives RocketMQ 5's Node.js client (rocketmq-client-nodejs, gRPC apache.rocketmq.v2) against
// a real `metaledger broker`'s gRPC front for tests/integration/broker/test_node5.py.
// Usage:
//   node grpc_client.js produce ENDPOINT TOPIC < SPEC_JSON
//     SPEC_JSON: a list of {body_b64, tag, keys: [...], props: {...}}; prints one JSON line per
//     message: {message_id, offset} or {error: {name, code, message}} (what the client threw);
//     an item's optional group is its messageGroup (FIFO), at_ms its deliveryTimestamp (DELAY)
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
//     server's backoff; in a FIFO group the client would retry it before the group's next,
//     but it has no policy for a customized backoff: it forwards it to the DLQ at once).
//     One line per delivery, with its result
//   node grpc_client.js neglect ENDPOINT GROUP TOPIC ATTEMPTS TIMEOUT_MS
//     a SimpleConsumer never acks: a first delivery is left to its receive's invisible time
//     (10 s, the server's least), later ones get 1 s (ChangeInvisibleDuration). Once attempt
//     ATTEMPTS was seen, one more receive must find nothing (the message went to the DLQ).
//     One line per delivery with its action, then {idle: true} or {timeout: true}
//   node grpc_client.js transact ENDPOINT TOPIC WAIT_MS < SPEC_JSON
//     a transactional Producer sends each {body_b64, keys, action} in its own Transaction and
//     commits ("commit"), rolls back ("rollback") or leaves it ("check": the broker checks it
//     back; the TransactionChecker answers the message's "answer" property, COMMIT or
//     ROLLBACK). Prints {message_id, transaction_id} (or {error}) per message, then, once
//     every left one was checked (or WAIT_MS), {checked: [message_id, ...]} in check order
// The client's own log goes to stderr when RMQ5_DEBUG is set (warnings and errors always).
const crypto = require('crypto');
const { Producer, SimpleConsumer, PushConsumer, ConsumeResult } = require('rocketmq-client-nodejs');
const { TransactionResolution } = require('rocketmq-client-nodejs/proto/apache/rocketmq/v2/definition_pb');

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

function message(topic, item) {
  return {
    topic,
    body: Buffer.from(item.body_b64, 'base64'),
    tag: item.tag || undefined,
    keys: item.keys || [],
    properties: new Map(Object.entries(item.props || {})),
    messageGroup: item.group,
    deliveryTimestamp: item.at_ms === undefined ? undefined : new Date(item.at_ms),
  };
}

async function produce(endpoints, topic) {
  const spec = await readStdin();
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger, requestTimeout: 10000 });
  await producer.startup();
  try {
    for (const item of spec) {
      let out;
      try {
        const receipt = await producer.send(message(topic, item));
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
    group: m.messageGroup || '', delivery_ms: m.deliveryTimestamp ? m.deliveryTimestamp.getTime() : null,
    now_ms: Date.now(),
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

async function neglect(endpoints, consumerGroup, topic, attempts, timeoutMs) {
  const consumer = new SimpleConsumer({
    endpoints, namespace: '', consumerGroup, logger, awaitDuration: 5000,
    subscriptions: new Map([[ topic, '*' ]]),
  });
  await consumer.startup();
  const deadline = Date.now() + Number(timeoutMs);
  let last = 0;
  try {
    while (last < Number(attempts) && Date.now() < deadline) {
      for (const m of await consumer.receive(16, 10000)) {
        last = Math.max(last, m.deliveryAttempt);
        if (m.deliveryAttempt === 1) {
          print({ ...view(m), action: 'expire' });
        } else {
          await consumer.changeInvisibleDuration(m, 1000);
          print({ ...view(m), action: 'later' });
        }
      }
    }
    if (last >= Number(attempts)) {
      await new Promise(resolve => setTimeout(resolve, 1500)); // past the last 1 s
      const more = await consumer.receive(16, 10000);
      for (const m of more) print({ ...view(m), action: 'extra' });
      if (!more.length) print({ idle: true });
    } else {
      print({ timeout: true });
    }
  } finally {
    await consumer.shutdown();
  }
}

async function transact(endpoints, topic, waitMs) {
  const spec = await readStdin();
  const checked = [];
  const left = new Set();
  const checker = {
    async check(m) {
      checked.push(m.messageId);
      const answer = m.properties.get('answer') || 'COMMIT';
      return TransactionResolution[answer];
    },
  };
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger, checker, requestTimeout: 10000 });
  await producer.startup();
  try {
    for (const item of spec) {
      let out;
      try {
        const transaction = producer.beginTransaction();
        const receipt = await producer.send(message(topic, item), transaction);
        if (item.action === 'commit') await transaction.commit();
        else if (item.action === 'rollback') await transaction.rollback();
        else left.add(receipt.messageId);
        out = { message_id: receipt.messageId, transaction_id: receipt.transactionId };
      } catch (e) {
        out = failure(e);
      }
      print(out);
    }
    const deadline = Date.now() + Number(waitMs);
    const waiting = () => [ ...left ].some(id => !checked.includes(id));
    while (waiting() && Date.now() < deadline) await new Promise(resolve => setTimeout(resolve, 100));
    print({ checked });
  } finally {
    await producer.shutdown();
  }
}

async function hold(endpoints, topic) {
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger });
  await producer.startup();
  process.stdout.write(JSON.stringify({ ready: producer.clientId }) + '\n');
  for await (const _ of process.stdin); // eslint-disable-line no-unused-vars
  await producer.shutdown();
  process.stdout.write(JSON.stringify({ closed: producer.clientId }) + '\n');
}

const MODES = { produce, hold, simple, push, neglect, transact };

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
