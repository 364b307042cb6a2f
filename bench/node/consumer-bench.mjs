// delayq's benchmark with a consumer written the way a Node user would write
// one: node:http with a keep-alive agent, a few long-poll loops, no client
// library. Pushes a scenario's messages, consumes them, and prints one JSON
// line like delayq-bench's.
//
//   node bench/node/consumer-bench.mjs spread|burst|push [--url=http://127.0.0.1:7070]
//        [--count=20000] [--loops=4] [--ack=batch|per-message|none] [--background-push]
//        [--window-ms=N] [--lead-ms=N] [--wait-ms=36000] [--groups=N]
//
// --ack=batch        each loop acks its previous batch in the request that polls
//                    for the next (POST /get/{topic} {"ack": [...], "count": 100});
// --ack=per-message  GET /get/{topic}?count=100, then POST /ack/{id} for each
//                    message, one at a time per loop (what most clients do first);
// --ack=none         hand-out alone.
//
// spread: messages due uniformly 1-6 s after the push (--window-ms sets the
// width: 20,000 over --window-ms=4000 is 5,000 due per second); burst: all due
// at one instant 3 s + count/5 ms after the push starts (--lead-ms sets that
// lead, --window-ms spreads the burst uniformly over a window from that
// instant: a million due within one second is --count=1000000 --window-ms=1000).
// Lateness = receive time minus the message's dueTime. The run waits for the
// last delivery until --wait-ms after the last due time (those left are
// reported missing). push: pushes alone (batches of 500, one at a time,
// due in 10 minutes), nothing consumed: the push rate.
// --groups=N: message k belongs to ordered group k mod N (one of a group
// handed out at a time); the consumer counts as group_overlaps each
// message handed out while another of its group was handed out and not yet
// acked by any loop (the server must keep it 0).
// --background-push: a second producer pushes batches of 500 (to another
// topic, due in 10 minutes) at full speed from the first push of the scenario
// to its last delivery; its rate is reported as background_push_rate.
import http from 'node:http';
import { flags, requester } from './http.mjs';

const args = flags(process.argv.slice(3));
const scenario = process.argv[2];
if (!['spread', 'burst', 'push'].includes(scenario)) {
  console.error(
    'usage: consumer-bench.mjs spread|burst|push [--url=] [--count=] [--loops=] [--ack=batch|per-message|none] [--background-push] [--window-ms=] [--lead-ms=] [--wait-ms=]',
  );
  process.exit(2);
}
const base = new URL(args.url ?? 'http://127.0.0.1:7070');
const count = Number(args.count ?? 20000);
const loops = Number(args.loops ?? 4);
const ackMode = args.ack ?? 'batch';
const windowMs = Number(args['window-ms'] ?? (scenario === 'spread' ? 5000 : 0));
const leadMs = Number(args['lead-ms'] ?? 3000 + Math.floor(count / 5));
const waitMs = Number(args['wait-ms'] ?? 36000);
const groups = Number(args.groups ?? 0);
const agent = new http.Agent({ keepAlive: true, maxSockets: loops + 8 });
const topic = `node-${scenario}-${Date.now()}`;

const request = requester(base, agent);

const first = new Map(); // id -> { due, at }
let duplicates = 0;
// group -> the id of its message handed out and not yet acked.
const out_of_group = new Map();
let groupOverlaps = 0;
let ackErrors = 0;
let pollErrors = 0;
let stop = false;

function record(messages) {
  const at = Date.now();
  for (const m of messages) {
    if (first.has(m.id)) duplicates++;
    else first.set(m.id, { due: m.dueTime, at });
    if (m.group !== undefined) {
      if (out_of_group.has(m.group)) groupOverlaps++;
      out_of_group.set(m.group, m.id);
    }
  }
}

// The deliveries `ids` are being acked: their groups are free once sent.
function acking(messages) {
  for (const m of messages) {
    if (m.group !== undefined && out_of_group.get(m.group) === m.id) out_of_group.delete(m.group);
  }
}

async function loop() {
  let toAck = [];
  let held = [];
  while (!stop) {
    try {
      if (ackMode === 'batch') {
        acking(held);
        const r = await request('POST', `/get/${topic}`, { ack: toAck, count: 100, timeout: 1 });
        if (r.status !== 200) throw new Error(`POST /get: ${r.status} ${JSON.stringify(r.body)}`);
        ackErrors += r.body.results.filter((x) => x.result !== 'consumed').length;
        record(r.body.messages);
        held = r.body.messages;
        toAck = r.body.messages.map((m) => m.id);
      } else {
        const r = await request('GET', `/get/${topic}?count=100&timeout=1`);
        if (r.status !== 200) throw new Error(`GET /get: ${r.status} ${JSON.stringify(r.body)}`);
        record(r.body.messages);
        if (ackMode === 'per-message') {
          for (const m of r.body.messages) {
            acking([m]);
            const a = await request('POST', `/ack/${m.id}`);
            if (a.status !== 200) ackErrors++;
          }
        }
      }
    } catch (e) {
      if (pollErrors++ < 5) console.error(String(e));
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  if (toAck.length > 0) {
    const r = await request('POST', '/ack', { ids: toAck });
    ackErrors += r.body.results.filter((x) => x.result !== 'consumed').length;
  }
}

function percentiles(values) {
  if (values.length === 0) return null;
  values.sort((a, b) => a - b);
  const rank = (p) => values[Math.min(values.length, Math.max(1, Math.ceil((p / 100) * values.length))) - 1];
  return { p50: rank(50), p90: rank(90), p99: rank(99), 'p99.9': rank(99.9), max: rank(100) };
}

function batchOf(t, n, make) {
  const messages = [];
  for (let k = 0; k < n; k++) messages.push({ topic: t, body: 'x'.repeat(100), ...make(k) });
  return messages;
}

if (scenario === 'push') {
  const started = Date.now();
  for (let i = 0; i < count; i += 500) {
    const r = await request('POST', '/push/batch', { messages: batchOf(topic, Math.min(500, count - i), () => ({ delay: 600000 })) });
    if (r.status !== 200) throw new Error(`push: ${r.status} ${JSON.stringify(r.body)}`);
  }
  const ms = Date.now() - started;
  agent.destroy();
  console.log(JSON.stringify({ scenario, client: 'node:http', batch: 500, pushed: count, push_ms: ms, push_rate: Math.round((count / ms) * 1000) }));
  process.exit(0);
}

let background = null;
let backgroundPushed = 0;
let backgroundStop = false;
if (args['background-push'] === 'true') {
  background = (async () => {
    const started = Date.now();
    while (!backgroundStop) {
      const r = await request('POST', '/push/batch', { messages: batchOf(`${topic}-bg`, 500, () => ({ delay: 600000 })) });
      if (r.status !== 200) throw new Error(`background push: ${r.status} ${JSON.stringify(r.body)}`);
      backgroundPushed += 500;
    }
    return Math.round((backgroundPushed / (Date.now() - started)) * 1000);
  })();
}

const consumers = Array.from({ length: loops }, loop);
const started = Date.now();
const deliverAt = started + leadMs;
const ids = [];
const due = (k) =>
  scenario === 'spread'
    ? { delay: 1000 + Math.floor(Math.random() * windowMs) }
    : { deliverAt: deliverAt + (windowMs > 0 ? Math.floor((k * windowMs) / count) : 0) };
for (let i = 0; i < count; i += 500) {
  const messages = [];
  for (let k = i; k < Math.min(count, i + 500); k++) {
    messages.push({ topic, body: 'x'.repeat(100), ...due(k), ...(groups > 0 ? { group: `g${k % groups}` } : {}) });
  }
  const r = await request('POST', '/push/batch', { messages });
  if (r.status !== 200) throw new Error(`push: ${r.status} ${JSON.stringify(r.body)}`);
  ids.push(...r.body.ids);
}
const pushedAt = Date.now();
// Every delivery is of this run's topic: once `first` holds as many ids as
// were pushed, all were delivered.
const deadline = Math.max(pushedAt, deliverAt) + windowMs + waitMs;
while (Date.now() < deadline && first.size < ids.length) {
  await new Promise((r) => setTimeout(r, 50));
}
stop = true;
backgroundStop = true;
const backgroundRate = background ? await background : null;
await Promise.all(consumers);
agent.destroy();

const lateness = ids.filter((id) => first.has(id)).map((id) => first.get(id).at - first.get(id).due);
let last = -Infinity;
for (const id of ids) if (first.has(id)) last = Math.max(last, first.get(id).at);
const out = {
  scenario,
  client: 'node:http',
  ack: ackMode,
  loops,
  topic,
  pushed: count,
  push_rate: Math.round((count / (pushedAt - started)) * 1000),
  delivered: lateness.length,
  missing: count - lateness.length,
  early: lateness.filter((l) => l < 0).length,
  lateness_ms: percentiles(lateness),
  duplicates,
  ...(groups > 0 ? { groups, group_overlaps: groupOverlaps } : {}),
  ack_errors: ackErrors,
  poll_errors: pollErrors,
};
if (background) {
  out.background_pushed = backgroundPushed;
  out.background_push_rate = backgroundRate;
}
if (scenario === 'burst') {
  out.push_margin_ms = deliverAt - pushedAt;
  out.window_ms = windowMs;
  out.last_handout_ms = last - deliverAt;
}
console.log(JSON.stringify(out));
