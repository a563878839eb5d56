'use strict';
// Drives the real ali-ons producer and push consumer against a real `metaledger broker`
// for tests/integration/broker/test_ali_ons.py.
// Usage:
//   node ons_broker.js produce NAMESRV < SPEC_JSON   (a list of {topic, keys, tags, body_b64, props})
//     prints one JSON line per message: {keys, ok, status, msgId | error}
//   node ons_broker.js consume NAMESRV GROUP TOPIC EXPECT TIMEOUT_MS FAIL_KEYS MAX_RECONSUME
//     prints one JSON line per message received: {keys, tags, topic, reconsumeTimes, len,
//     sha256, props, failed}; a message whose keys are in FAIL_KEYS (comma-separated) fails
//     (the handler throws); it stops once EXPECT distinct keys were consumed or at TIMEOUT_MS.
const crypto = require('crypto');
const { Producer, Consumer, Message } = require('ali-ons');

const silent = { info() {}, warn() {}, error() {}, debug() {} };
const logger = process.env.ONS_DEBUG ? console : silent;
const common = { httpclient: {}, logger };

async function produce(nameSrv) {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const specText = Buffer.concat(chunks).toString('utf8');
  const producer = new Producer({ ...common, nameSrv, producerGroup: 'PID_ONS_BROKER', sendMsgTimeout: 5000 });
  producer.on('error', () => {});
  await producer.ready();
  for (const item of JSON.parse(specText)) {
    const msg = new Message(item.topic, item.tags || '', Buffer.from(item.body_b64, 'base64'));
    if (item.keys) msg.keys = [ item.keys ];
    for (const [ k, v ] of Object.entries(item.props || {})) msg.properties[k] = v;
    try {
      const r = await producer.send(msg);
      process.stdout.write(JSON.stringify({ keys: item.keys, ok: true, status: r.sendStatus, msgId: r.msgId }) + '\n');
    } catch (e) {
      process.stdout.write(JSON.stringify({ keys: item.keys, ok: false, error: e.message }) + '\n');
    }
  }
  await producer.close();
}

async function consume(nameSrv, group, topic, expect, timeoutMs, failKeys, maxReconsume) {
  const fail = new Set(failKeys ? failKeys.split(',') : []);
  const consumer = new Consumer({ ...common, nameSrv, consumerGroup: group, maxReconsumeTimes: maxReconsume });
  consumer.on('error', e => logger.error('consumer error', e));
  const done = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  consumer.subscribe(topic, '*', async msg => {
    const keys = Array.isArray(msg.keys) ? msg.keys.join(' ') : String(msg.keys || '');
    const failed = fail.has(keys);
    const body = msg.body || Buffer.alloc(0); // ali-ons leaves an empty body undefined
    process.stdout.write(JSON.stringify({
      keys, tags: msg.tags, topic: msg.topic, reconsumeTimes: msg.reconsumeTimes, len: body.length,
      sha256: crypto.createHash('sha256').update(body).digest('hex'), props: msg.properties, failed,
    }) + '\n');
    // thrown, not ACTION_RETRY: ali-ons' retry-topic handler drops the handler's return value
    if (failed) throw new Error('failed on purpose');
    done.add(keys);
    if (expect && done.size >= expect) finish();
  });
  await consumer.ready();
  await Promise.race([ finished, new Promise(resolve => setTimeout(resolve, timeoutMs)) ]);
  await new Promise(resolve => setTimeout(resolve, 500));
  await consumer.close(); // persists the offsets (UPDATE_CONSUMER_OFFSET)
}

const [ mode, ...args ] = process.argv.slice(2);
const run = mode === 'produce'
  ? produce(args[0])
  : consume(args[0], args[1], args[2], Number(args[3]), Number(args[4]), args[5], Number(args[6] || 16));
run.then(() => process.exit(0), e => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(2);
});
