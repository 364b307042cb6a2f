// The plain Node client's own floor, beside the per-message figures: the
// same keep-alive client (http.mjs) calling GET /health, which touches
// neither Redis nor the journal, in the two shapes the per-message
// benchmarks use:
//   - sequential: `loops` loops, each awaiting one request after another
//     (the shape of consumer-bench.mjs --ack=per-message);
//   - in flight: `inflight` requests at a time, in rounds (the shape of
//     cancel-bench.mjs).
// What neither shape can beat on this machine, whatever the server does per
// message. One JSON line on stdout.
//   node bench/node/floor.mjs [--url=http://127.0.0.1:7070] [--count=20000] [--loops=4] [--inflight=500]
import http from 'node:http';
import { flags, requester } from './http.mjs';

const args = flags(process.argv.slice(2));
const base = new URL(args.url ?? 'http://127.0.0.1:7070');
const count = Number(args.count ?? 20000);
const loops = Number(args.loops ?? 4);
const inflight = Number(args.inflight ?? 500);

async function sequential() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: loops });
  const request = requester(base, agent);
  const each = Math.ceil(count / loops);
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: loops }, async () => {
      for (let i = 0; i < each; i++) {
        const r = await request('GET', '/health');
        if (r.status !== 200) throw new Error(`health: ${r.status}`);
      }
    }),
  );
  const ms = performance.now() - t0;
  agent.destroy();
  return { ms, n: each * loops };
}

async function concurrent() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: inflight });
  const request = requester(base, agent);
  const n = Math.ceil(count / 2);
  const t0 = performance.now();
  for (let i = 0; i < n; i += inflight) {
    const k = Math.min(inflight, n - i);
    const res = await Promise.all(Array.from({ length: k }, () => request('GET', '/health')));
    if (res.some((r) => r.status !== 200)) throw new Error('health: not 200');
  }
  const ms = performance.now() - t0;
  agent.destroy();
  return { ms, n };
}

const seq = await sequential();
const par = await concurrent();
console.log(
  JSON.stringify({
    scenario: 'floor',
    client: 'node:http',
    route: 'GET /health',
    loops,
    sequential_requests: seq.n,
    sequential_ms: Math.round(seq.ms),
    sequential_us_per_request: Math.round((seq.ms * 1000 * loops) / seq.n),
    inflight,
    inflight_requests: par.n,
    inflight_per_s: Math.round(par.n / (par.ms / 1000)),
  }),
);
