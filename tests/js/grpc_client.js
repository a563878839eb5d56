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
// The client's own log goes to stderr when RMQ5_DEBUG is set (warnings and errors always).
const { Producer } = require('rocketmq-client-nodejs');

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

async function hold(endpoints, topic) {
  const producer = new Producer({ endpoints, namespace: '', topics: [ topic ], logger });
  await producer.startup();
  process.stdout.write(JSON.stringify({ ready: producer.clientId }) + '\n');
  for await (const _ of process.stdin); // eslint-disable-line no-unused-vars
  await producer.shutdown();
  process.stdout.write(JSON.stringify({ closed: producer.clientId }) + '\n');
}

const MODES = { produce, hold };

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
