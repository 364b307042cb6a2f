// The client's default consumer on delayq's benchmark scenarios (what
// scripts/bench-clients runs for every client). One JSON line on stdout.
//   node examples/bench.mjs spread|burst [--url=http://127.0.0.1:7070] [--count=20000] [--loops=4]
// spread: due uniformly 1-6 s after the push; burst: all due at one instant,
// 3 s + count/5 ms after the push starts. Pushed in batches of 500. Lateness
// = the handler's start minus the message's dueTime; last_handout_ms (burst)
// = the last handler's start minus the due instant; acked = messages the
// journal counts Consumed afterwards.
import { Client, Consumer, message } from '../src/index.js';

const args = Object.fromEntries(process.argv.slice(3).map((a) => a.replace(/^--/, '').split('=')));
const scenario = process.argv[2];
if (!['spread', 'burst'].includes(scenario)) {
  console.error('usage: bench.mjs spread|burst [--url=] [--count=] [--loops=]');
  process.exit(2);
}
const count = Number(args.count ?? 20000);
const loops = Number(args.loops ?? 4);
const client = new Client(args.url ?? 'http://127.0.0.1:7070');
const topic = `bench-node-${scenario}-${Date.now()}`;

const t0 = Date.now();
const instant = t0 + 3000 + Math.floor(count / 5);
const pushStart = performance.now();
for (let i = 0; i < count; i += 500) {
  const n = Math.min(500, count - i);
  await client.pushBatch(Array.from({ length: n }, (_, k) => (scenario === 'spread'
    ? message(topic, String(i + k), { delay: 1000 + Math.floor(Math.random() * 5000) })
    : message(topic, String(i + k), { deliverAt: instant }))));
}
const pushRate = count / ((performance.now() - pushStart) / 1000);

const seen = new Set();
const late = [];
let early = 0;
let duplicates = 0;
let last = 0;
let allIn;
const done = new Promise((r) => {
  allIn = r;
});
const consumer = new Consumer(client, topic, (d) => {
  const at = Date.now();
  if (seen.has(d.id)) {
    duplicates++;
    return;
  }
  seen.add(d.id);
  if (at < d.dueTime) early++;
  late.push(at - d.dueTime);
  last = Math.max(last, at);
  if (seen.size === count) allIn();
}, { loops }).start();
await Promise.race([done, new Promise((r) => setTimeout(r, 60000 + 6000))]);
await consumer.stop();

// Every ack carried: the journal counts them all Consumed (it lags a little).
let acked = 0;
const deadline = Date.now() + 30000;
while (Date.now() < deadline) {
  const t = (await client.topics()).find((x) => x.topic === topic);
  acked = t?.counts.consumed ?? 0;
  if (acked >= count) break;
  await new Promise((r) => setTimeout(r, 200));
}
client.close();

late.sort((a, b) => a - b);
const q = (p) => (late.length ? late[Math.min(late.length - 1, Math.floor(p * late.length))] : null);
console.log(JSON.stringify({
  client: 'node',
  scenario,
  loops,
  count,
  push_rate: Math.round(pushRate),
  delivered: seen.size,
  early,
  duplicates,
  lateness_ms: { p50: q(0.5), p99: q(0.99), max: late[late.length - 1] ?? null },
  ...(scenario === 'burst' ? { last_handout_ms: last - instant } : {}),
  acked,
}));
process.exit(seen.size === count && early === 0 && duplicates === 0 && acked === count ? 0 : 1);
