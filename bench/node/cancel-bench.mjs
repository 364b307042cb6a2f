// Cancels by id as a plain Node client writes them: push N messages (due in
// a minute), then cancel every other one with its own GET /delete?id=,
// `inflight` requests at a time (the shape of BullMQ's bench: Promise.all
// over chunks of 500 queue.remove calls). One JSON line on stdout.
//   node bench/node/cancel-bench.mjs [--url=http://127.0.0.1:7070] [--count=10000] [--inflight=500]
import http from 'node:http';
import { flags, requester } from './http.mjs';

const args = flags(process.argv.slice(2));
const base = new URL(args.url ?? 'http://127.0.0.1:7070');
const count = Number(args.count ?? 10000);
const inflight = Number(args.inflight ?? 500);
const agent = new http.Agent({ keepAlive: true, maxSockets: inflight });
const topic = `node-cancel-${Date.now()}`;

const request = requester(base, agent);

const ids = [];
for (let i = 0; i < count; i += 500) {
  const messages = [];
  for (let k = i; k < Math.min(count, i + 500); k++) {
    messages.push({ topic, body: 'x'.repeat(100), delay: 60000 });
  }
  const r = await request('POST', '/push/batch', { messages });
  if (r.status !== 200) throw new Error(`push: ${r.status} ${JSON.stringify(r.body)}`);
  ids.push(...r.body.ids);
}
const victims = ids.filter((_, i) => i % 2 === 0);
const t0 = performance.now();
let deleted = 0;
let other = 0;
for (let i = 0; i < victims.length; i += inflight) {
  const res = await Promise.all(
    victims.slice(i, i + inflight).map((id) => request('GET', `/delete?id=${id}`)),
  );
  for (const r of res) {
    if (r.status === 200 && r.body.result === 'deleted') deleted++;
    else other++;
  }
}
const ms = performance.now() - t0;
agent.destroy();
console.log(
  JSON.stringify({
    scenario: 'cancel',
    client: 'node:http',
    inflight,
    pushed: count,
    cancelled: victims.length,
    deleted,
    other,
    cancel_ms: Math.round(ms),
    cancels_per_s: Math.round(victims.length / (ms / 1000)),
  }),
);
