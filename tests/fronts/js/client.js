'use strict';
// Drives the unmodified npm `ali-ons` client for rtimer's remoting tests, one JSON object per line
// on stdin and stdout, like tests/fronts/java:
//
//   node client.js send NAMESRV GROUP
//   node client.js consume NAMESRV GROUP TOPIC EXPRESSION
//
// `send` reads {"topic","tag","keys","body","level","props":{}} per line and prints
// {"event":"sent",...} or {"event":"error",...}. `consume` prints {"event":"received",...} per
// message; a body starting with "fail" is answered ACTION_RETRY while its reconsumeTimes is 0. A
// "stop" line closes the client (offsets committed) and ends the process.

const readline = require('readline');
const { Producer, Consumer, Message } = require('ali-ons');

// ali-ons asks for an HTTP client to look NameServers up at Aliyun; with nameSrv given it never
// uses it.
const httpclient = {
  request() {
    throw new Error('no HTTP look-up: nameSrv is given');
  },
};

function emit(event) {
  process.stdout.write(JSON.stringify(event) + '\n');
}

function lines(onLine, onEnd) {
  const rl = readline.createInterface({ input: process.stdin });
  rl.on('line', text => {
    text = text.trim();
    if (text === 'stop') {
      rl.close();
    } else if (text) {
      onLine(JSON.parse(text));
    }
  });
  rl.on('close', onEnd);
}

async function send(namesrv, group) {
  const producer = new Producer({ httpclient, nameSrv: namesrv, producerGroup: group });
  await producer.ready();
  emit({ event: 'ready' });
  let chain = Promise.resolve();
  lines(line => {
    chain = chain.then(async () => {
      try {
        const msg = new Message(line.topic, line.tag, line.body);
        if (line.keys) msg.keys = line.keys.split(' ');
        if (line.level) msg.delayTimeLevel = line.level;
        for (const [name, value] of Object.entries(line.props || {})) {
          msg.properties[name] = value;
        }
        const result = await producer.send(msg);
        emit({
          event: 'sent', msgId: result.msgId, status: result.sendStatus,
          queueId: result.messageQueue.queueId, sentMs: Date.now(),
        });
      } catch (err) {
        emit({ event: 'error', error: String(err && err.message || err) });
      }
    });
  }, async () => {
    await chain;
    await producer.close();
    emit({ event: 'stopped' });
    process.exit(0);
  });
}

async function consume(namesrv, group, topic, expression) {
  const consumer = new Consumer({
    httpclient, nameSrv: namesrv, consumerGroup: group, pullBatchSize: 32,
  });
  consumer.subscribe(topic, expression, async msg => {
    const body = msg.body.toString();
    emit({
      event: 'received', receivedMs: Date.now(),
      msgId: (msg.properties && msg.properties.UNIQ_KEY) || msg.msgId, topic: msg.topic,
      tags: msg.tags, keys: Array.isArray(msg.keys) ? msg.keys.join(' ') : msg.keys, body,
      reconsumeTimes: msg.reconsumeTimes, queueId: msg.queueId, queueOffset: msg.queueOffset,
      bornMs: Number(msg.bornTimestamp), storeMs: Number(msg.storeTimestamp),
    });
    if (body.startsWith('fail') && msg.reconsumeTimes === 0) {
      return Consumer.ACTION_RETRY;
    }
  });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err && err.message}\n`));
  await consumer.ready();
  emit({ event: 'ready' });
  lines(() => {}, async () => {
    await consumer.close();
    emit({ event: 'stopped' });
    process.exit(0);
  });
}

const [mode, ...args] = process.argv.slice(2);
({ send, consume })[mode](...args).catch(err => {
  process.stderr.write(`${err && err.stack || err}\n`);
  process.exit(1);
});
