// Pushes 1,000 messages due in 1 to 3 s to the server at DELAYQ_URL,
// consumes and acks them with the default consumer, and says what it saw:
// `1000 delivered, 0 early, 0 duplicates`. Exits non-zero on any miss.
import { Client, Consumer, message } from '../src/index.js';

const N = 1000;
const client = new Client(process.env.DELAYQ_URL ?? 'http://127.0.0.1:7070');
const topic = `roundtrip-node-${Math.floor(Math.random() * 2 ** 30).toString(16)}`;
const batch = Array.from({ length: N }, (_, i) => message(topic, String(i), { delay: 1000 + Math.floor(Math.random() * 2001) }));
const now = Date.now();
const pushed = await client.pushBatch(batch);
const due = new Map(pushed.map((p, i) => [p.id, now + batch[i].delay]));

const seen = new Set();
let early = 0;
let twice = 0;
let allIn;
const done = new Promise((resolve) => {
  allIn = resolve;
});
const consumer = new Consumer(client, topic, (d) => {
  if (seen.has(d.id)) twice++;
  seen.add(d.id);
  if (Date.now() < Math.max(due.get(d.id) ?? 0, d.dueTime)) early++;
  if (seen.size === N) allIn();
}, { loops: 4 }).start();
await Promise.race([done, new Promise((r) => setTimeout(r, 60000))]);
await consumer.stop();
client.close();
console.log(`${seen.size} delivered, ${early} early, ${twice} duplicates`);
process.exit(seen.size === N && early === 0 && twice === 0 ? 0 : 1);
