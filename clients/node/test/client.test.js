// The Node client against a real delayq server and a real Redis.
//   cd clients/node && node --test test/
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { ApiError, Client, Consumer, TransportError, message, outboxRow } from '../src/index.js';
import { Server, freePort, privateCa, sleep, until } from './server.js';

const quiet = () => {};

describe('against one node', () => {
  let server;
  let client;
  before(async () => {
    server = await Server.start();
    client = new Client(server.url, { timeout: 5000 });
  });
  after(async () => {
    client.close();
    await server.close();
  });

  test('push, consume and ack: none early, none twice, every one Consumed', async () => {
    const pushedAt = Date.now();
    const msgs = Array.from({ length: 200 }, (_, i) => message('node-burst', String(i), { delay: 200 + (i % 5) * 100 }));
    const ids = (await client.pushBatch(msgs)).map((p) => p.id);
    const seen = new Map();
    let twice = 0;
    const consumer = new Consumer(client, 'node-burst', (d) => {
      if (seen.has(d.id)) twice++;
      seen.set(d.id, Date.now());
    }, { loops: 2 }).start();
    await until(() => seen.size === ids.length, 30000);
    await consumer.stop();
    assert.equal(twice, 0, 'handed out twice');
    assert.deepEqual(new Set(seen.keys()), new Set(ids));
    ids.forEach((id, i) => assert.ok(seen.get(id) >= pushedAt + 200 + (i % 5) * 100, `${id} early`));
    // Every ack was carried (the last ones alone at stop): each message ends Consumed.
    const consumed = await until(async () => {
      const views = await Promise.all(ids.map((id) => client.message(id)));
      return views.every((v) => v.message.status === 'Consumed');
    }, 10000);
    assert.ok(consumed, 'every message Consumed');
  });

  test('a stale receipt is refused with 409 stale_delivery', async () => {
    await client.push('node-stale', 'x', { ttl: 300 });
    const { messages: [first] } = await client.poll('node-stale', { timeout: 5 });
    await sleep(500);
    const { messages: [second] } = await client.poll('node-stale', { timeout: 5 });
    assert.equal(first.id, second.id);
    assert.notEqual(first.receipt, second.receipt);
    await assert.rejects(client.ack(first), (e) => e instanceof ApiError && e.status === 409 && e.code === 'stale_delivery');
    assert.equal((await client.ack(second)).status, 'Consumed');
  });

  test('a failing handler nacks, and the retry comes back', async () => {
    await client.push('node-nack', 'x', { retry: { delay: 100 } });
    const calls = [];
    const consumer = new Consumer(client, 'node-nack', (d) => {
      calls.push(d.attempts);
      if (calls.length === 1) throw new Error('first try fails');
    }, { pollTimeout: 1, onError: quiet }).start();
    await until(() => calls.length >= 2, 20000);
    await consumer.stop();
    assert.deepEqual(calls.slice(0, 2), [1, 2]);
  });

  test('a handler past its timeout is nacked and its signal aborted', async () => {
    await client.push('node-slow', 'x', { retry: { delay: 100 } });
    const calls = [];
    let aborted = false;
    const consumer = new Consumer(client, 'node-slow', async (d, signal) => {
      calls.push(d.attempts);
      if (calls.length === 1) {
        await new Promise((r) => signal.addEventListener('abort', r, { once: true }));
        aborted = true;
      }
    }, { pollTimeout: 1, handlerTimeout: 200, onError: quiet }).start();
    await until(() => calls.length >= 2, 20000);
    await consumer.stop();
    assert.ok(aborted);
    assert.deepEqual(calls.slice(0, 2), [1, 2]);
  });

  test('graceful stop finishes and acks the messages in hand', async () => {
    const ids = (await client.pushBatch(Array.from({ length: 10 }, (_, i) => message('node-stop', String(i))))).map((p) => p.id);
    // All ten ready before the consumer starts, so that its first poll
    // takes the whole batch into its hands.
    const ready = await until(async () => {
      const views = await Promise.all(ids.map((id) => client.message(id)));
      return views.every((v) => v.message.status === 'Ready');
    }, 10000);
    assert.ok(ready, 'all ten ready');
    const done = [];
    let stopping;
    const consumer = new Consumer(client, 'node-stop', async (d) => {
      if (done.length === 0) stopping = consumer.stop();
      await sleep(20);
      done.push(d.id);
    }, { batch: 10, pollTimeout: 1 }).start();
    await until(() => stopping !== undefined, 10000);
    await stopping;
    assert.equal(done.length, 10, 'the whole batch in hand was handled');
    const views = await Promise.all(done.map((id) => client.message(id)));
    assert.deepEqual(views.map((v) => v.message.status), Array(10).fill('Consumed'));
  });

  test('batches fit the ttl of a slow handler: each message handed out once', async () => {
    // 30 messages of 1 s ttl and a 60 ms handler: a whole batch of 30 in
    // one go would take 1.8 s, past the ttl, and every ack carried after
    // it would come too late.
    const ids = (await client.pushBatch(Array.from({ length: 30 }, (_, i) => message('node-slow', String(i), { ttl: 1000 })))).map((p) => p.id);
    const seen = [];
    const consumer = new Consumer(client, 'node-slow', async (d) => {
      await sleep(60);
      seen.push(d.id);
    }, { loops: 2, pollTimeout: 1, onError: quiet }).start();
    await until(() => new Set(seen).size === ids.length, 30000);
    await sleep(1500); // a lapsed delivery would come back meanwhile
    await consumer.stop();
    assert.deepEqual([...seen].sort(), [...ids].sort(), 'each handled once');
    const views = await Promise.all(ids.map((id) => client.message(id)));
    assert.deepEqual(views.map((v) => v.message.status), Array(30).fill('Consumed'));
  });

  test('cancel, reschedule, bizKey and error codes', async () => {
    const p = await client.push('node-manage', 'x', { delay: 600000, bizKey: 'order-1' });
    const again = await client.push('node-manage', 'y', { delay: 600000, bizKey: 'order-1' });
    assert.deepEqual(again, { id: p.id, duplicate: true });
    const r = await client.reschedule([p.id], { delay: 900000 });
    assert.equal(r.results[0].result, 'rescheduled');
    assert.equal((await client.cancel(p.id)).results[0].result, 'deleted');
    await assert.rejects(client.cancelBizKey('node-manage', 'order-1'), (e) => e.status === 404 && e.code === 'not_found');
    await assert.rejects(client.push('node-manage', 'x', { delay: -1 }), (e) => e.code === 'invalid_delay');
    assert.throws(() => message('node-manage', 'x', { dealy: 5 }), TypeError);
    const prefix = await client.pushBatch(['a-1', 'a-2', 'b-1'].map((k) => message('node-manage', k, { delay: 600000, bizKey: k })));
    assert.equal(prefix.length, 3);
    const counts = await client.cancelPrefix('node-manage', 'a-');
    assert.equal(counts.matched, 2);
    const page = await client.search('node-manage', { bizKeyPrefix: 'b-' });
    assert.deepEqual(page.messages.map((m) => m.bizKey), ['b-1']);
    assert.ok((await client.topics()).some((t) => t.topic === 'node-manage'));
    assert.equal((await client.pause('node-manage')).paused, true);
    assert.equal((await client.resume('node-manage')).paused, false);
  });

  test('ordered groups: one message of a group at a time, in due order', async () => {
    const a1 = await client.push('node-groups', 'a1', { group: 'a' });
    const a2 = await client.push('node-groups', 'a2', { group: 'a', delay: 5 });
    await client.push('node-groups', 'free', { delay: 5 });
    const got = [];
    while (got.length < 2) got.push(...(await client.poll('node-groups', { count: 10, timeout: 2 })).messages);
    assert.deepEqual(got.map((d) => [d.body, d.group]).sort(), [['a1', 'a'], ['free', null]]);
    assert.equal(got.find((d) => d.body === 'a1').id, a1.id);
    assert.deepEqual((await client.poll('node-groups', { count: 10, timeout: 1 })).messages, []);
    await client.ackAll(got);
    const next = (await client.poll('node-groups', { timeout: 5 })).messages;
    assert.deepEqual(next.map((d) => d.id), [a2.id]);
    await client.ack(next[0]);
    await assert.rejects(client.push('node-groups', 'x', { group: '' }), (e) => e.status === 400 && e.code === 'invalid_group');
  });

  test('forecast: what falls due per bucket, refused on a bad bucket', async () => {
    await client.push('node-forecast', 'x', { delay: 1800000 });
    const f = await client.forecast('node-forecast', { bucket: '20m', span: '1h' });
    assert.deepEqual(f.buckets.map((b) => b.count), [0, 1, 0]);
    assert.equal(f.exact, true);
    assert.equal((await client.forecast(null, { bucket: '1h', span: '2h' })).buckets.length, 2);
    await assert.rejects(client.forecast(null, { bucket: '0s' }), (e) => e.status === 400 && e.code === 'invalid_parameter');
  });

  test('local wall-clock times: a DST gap refused by default, read by dst', async () => {
    // Berlin's clock jumps from 02:00 to 03:00 on 2027-03-28: 02:30 does
    // not exist, and is refused unless dst says which instant it means.
    const gap = { deliverAtLocal: '2027-03-28T02:30:00', tz: 'Europe/Berlin' };
    await assert.rejects(client.push('node-local', 'x', gap), (e) => e instanceof ApiError && e.status === 400 && e.code === 'invalid_delay');
    const { id } = await client.push('node-local', 'x', { ...gap, dst: 'later' });
    // 03:30 +02:00.
    assert.equal((await client.message(id)).message.dueTime, 1806197400000);
    // 2027-10-31 02:30 happens twice in Berlin; earlier is its first pass, 02:30 +02:00.
    const r = await client.reschedule([id], { deliverAtLocal: '2027-10-31T02:30:00', tz: 'Europe/Berlin', dst: 'earlier' });
    assert.equal(r.results[0].result, 'rescheduled');
    assert.equal(r.results[0].dueTime, 1824942600000);
    await client.cancel(id);
  });

  test('onDuplicate: replace debounces a live message, extend only moves it later', async () => {
    const first = await client.push('node-debounce', 'v1', { delay: 60000, bizKey: 'k' });
    assert.deepEqual(first, { id: first.id, duplicate: false });
    const asked = Date.now();
    const again = await client.push('node-debounce', 'v2', { delay: 500, bizKey: 'k', onDuplicate: 'replace' });
    assert.equal(again.id, first.id);
    assert.equal(again.duplicate, true);
    assert.equal(again.result, 'replaced');
    assert.equal(typeof again.dueTime, 'number');
    assert.ok(again.dueTime >= asked + 500 && again.dueTime <= Date.now() + 500, `dueTime ${again.dueTime}`);
    // The live message now holds v2 under its first id, due in 500 ms.
    const { messages } = await client.poll('node-debounce', { timeout: 5 });
    assert.deepEqual(messages.map((d) => [d.id, d.body]), [[first.id, 'v2']]);
    assert.ok(Date.now() >= again.dueTime, 'delivered early');
    assert.equal((await client.ack(messages[0])).status, 'Consumed');
    // Extend to a time sooner than the live message's: left as it was.
    const held = await client.push('node-debounce', 'e', { delay: 60000, bizKey: 'k-extend' });
    const sooner = await client.push('node-debounce', 'e', { delay: 100, bizKey: 'k-extend', onDuplicate: 'extend' });
    const due = (await client.message(held.id)).message.dueTime;
    assert.deepEqual(sooner, { id: held.id, duplicate: true, result: 'not_later', dueTime: due });
    // A batch answers the same from its updates.
    const [b] = await client.pushBatch([message('node-debounce', 'e', { delay: 100, bizKey: 'k-extend', onDuplicate: 'extend' })]);
    assert.deepEqual(b, { id: held.id, duplicate: true, result: 'not_later', dueTime: due });
    // Without a bizKey there is no live message to act on: refused.
    await assert.rejects(
      client.push('node-debounce', 'x', { onDuplicate: 'replace' }),
      (e) => e instanceof ApiError && e.status === 400 && e.code === 'invalid_field',
    );
    await client.cancel(held.id);
  });

  test('an outbox row is the message push sends, and POST /push takes its text', async () => {
    const options = { delay: 600000, bizKey: 'order-42', priority: 3, ttl: 20000, maxAttempts: 4, retry: { delay: 1000 }, onDuplicate: 'keep' };
    const body = 'order "42" \u00e9';
    const row = outboxRow('node-outbox', body, options);
    assert.equal(typeof row, 'string');
    assert.deepEqual(JSON.parse(row), message('node-outbox', body, options));
    assert.deepEqual(JSON.parse(outboxRow('node-outbox', 'x')), { topic: 'node-outbox', body: 'x' });
    // The server refuses replace and extend in an outbox row: so does the client.
    for (const onDuplicate of ['replace', 'extend']) {
      assert.throws(() => outboxRow('node-outbox', 'x', { bizKey: 'k', onDuplicate }), TypeError);
    }
    assert.throws(() => outboxRow('node-outbox', 'x', { dealy: 5 }), TypeError);
    // The row's text, as is, is a message POST /push takes.
    const res = await fetch(`${server.url}/push`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: row });
    const answer = await res.json();
    assert.equal(res.status, 200, JSON.stringify(answer));
    assert.ok(answer.id);
    const got = (await client.message(answer.id)).message;
    assert.deepEqual([got.topic, got.body, got.bizKey], ['node-outbox', body, 'order-42']);
    await client.cancel(answer.id);
  });

  test('dead letters and requeue', async () => {
    const { id } = await client.push('node-dead', 'x', { maxAttempts: 1 });
    const { messages: [d] } = await client.poll('node-dead', { timeout: 5 });
    assert.equal((await client.nack(d)).result, 'dead');
    const page = await client.dead('node-dead');
    assert.deepEqual(page.messages.map((m) => m.id), [id]);
    const r = await client.requeue(id);
    assert.equal(r.id, id);
    const { messages: [back] } = await client.poll('node-dead', { timeout: 5 });
    assert.equal(back.id, id);
    await client.ack(back);
  });

  test('a second URL serves when the first does not answer; an unkeyed push is not sent twice', async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const c = new Client([dead, server.url], { timeout: 2000 });
    const p = await c.push('node-failover', 'x', { bizKey: 'k-1' });
    assert.ok(p.id);
    c.close();
    const lone = new Client([dead], { timeout: 2000 });
    await assert.rejects(lone.push('node-failover', 'y'), TransportError);
    lone.close();
  });
});

test('the consumer rides out a node restart', async () => {
  const server = await Server.start();
  const client = new Client(server.url, { timeout: 3000 });
  try {
    const got = new Set();
    const consumer = new Consumer(client, 'node-restart', (d) => {
      got.add(d.body);
    }, { pollTimeout: 1, onError: quiet }).start();
    await client.pushBatch(Array.from({ length: 20 }, (_, i) => message('node-restart', `a${i}`)));
    await until(() => got.size >= 20, 20000);
    await server.stopNode();
    await sleep(1000);
    await server.startNode();
    await client.pushBatch(Array.from({ length: 20 }, (_, i) => message('node-restart', `b${i}`)));
    await until(() => got.size >= 40, 30000);
    await consumer.stop();
    assert.equal(got.size, 40, [...got].sort().join(' '));
  } finally {
    client.close();
    await server.close();
  }
});

test('TLS with a private CA, and the tokens', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'delayq-node-ca-'));
  const pki = privateCa(dir);
  const server = await Server.start({ tls: pki, args: ['--admin-token', 'admin-secret', '--read-token', 'read-secret'] });
  try {
    const c = new Client(server.url, { caFile: pki.ca, timeout: 5000, adminToken: 'admin-secret' });
    const { id } = await c.push('node-tls', 'secret', { delay: 60000 });
    const { id: id2 } = await c.push('node-tls', 'secret');
    const { messages: [d] } = await c.poll('node-tls', { timeout: 5 });
    assert.equal(d.id, id2);
    await c.ack(d);
    // The read token looks, and may not act; the admin token acts.
    const reader = new Client(server.url, { caFile: pki.ca, timeout: 5000, readToken: 'read-secret' });
    assert.equal((await reader.message(id)).message.body, 'secret');
    await assert.rejects(reader.cancel(id), (e) => e instanceof ApiError && e.code === 'unauthorized');
    const nobody = new Client(server.url, { caFile: pki.ca, timeout: 5000 });
    await assert.rejects(nobody.topics(), (e) => e instanceof ApiError && e.code === 'unauthorized');
    assert.equal((await c.cancel(id)).deleted, 1);
    reader.close();
    nobody.close();
    c.close();
    // Without the CA the node's certificate is not trusted.
    const untrusting = new Client(server.url, { timeout: 5000 });
    await assert.rejects(untrusting.topics(), (e) => e instanceof TransportError && /certificate/i.test(e.message));
    untrusting.close();
  } finally {
    await server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
