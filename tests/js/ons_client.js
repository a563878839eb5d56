'use strict';
// Drives the real ali-ons client (pure JS RocketMQ 4.x remoting) for
// tests/integration/test_remoting_clients.py.
// Usage: node ons_client.js NAMESRV OP...   where OP is route:TOPIC or send:TOPIC
// Prints one JSON line: [{op, topic, ok, route | result | error: {name, code, message}}, ...]
const { Producer, Message } = require('ali-ons');

const silent = { info() {}, warn() {}, error() {}, debug() {} };

async function main() {
  const [ nameSrv, ...ops ] = process.argv.slice(2);
  const producer = new Producer({
    nameSrv,
    producerGroup: 'PID_METALEDGER_TEST',
    // ali-ons asserts an httpclient even when nameSrv is given (it is only used for the
    // Aliyun address server); without it ready() never settles.
    httpclient: {},
    logger: silent,
    sendMsgTimeout: 3000,
  });
  producer.on('error', () => {}); // socket errors to an absent broker are reported per call
  await producer.ready();
  const out = [];
  for (const op of ops) {
    const sep = op.indexOf(':');
    const kind = op.slice(0, sep);
    const topic = op.slice(sep + 1);
    try {
      if (kind === 'route') {
        const route = await producer._mqClient.getTopicRouteInfoFromNameServer(topic, 3000);
        out.push({ op: kind, topic, ok: true, route });
      } else if (kind === 'send') {
        const result = await producer.send(new Message(topic, 'tagA', 'hello'));
        out.push({ op: kind, topic, ok: true, result });
      } else {
        throw new Error('unknown op ' + kind);
      }
    } catch (e) {
      out.push({ op: kind, topic, ok: false, error: { name: e.name, code: e.code, message: e.message } });
    }
  }
  await producer.close();
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(() => process.exit(0), e => {
  process.stderr.write(String(e && e.stack || e) + '\n');
  process.exit(2);
});
