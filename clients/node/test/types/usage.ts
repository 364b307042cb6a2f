// Compiled (not run) by `npm run typecheck`: the declarations in
// src/index.d.ts take what a TypeScript user writes, and refuse a mistake.
import {
  ApiError, Client, Consumer, ERROR_CODES, message, outboxRow, type Delivery, type DuplicateResult, type ErrorCode, type OnDuplicate,
} from '../../src/index.js';

async function main(): Promise<void> {
  const client = new Client(['https://a:7070', 'https://b:7070'], { timeout: 5000, caFile: 'ca.pem', adminToken: 't' });
  const pushed = await client.push('orders', '{"id":1}', { delay: 30000, bizKey: 'order-1', retry: { delay: 1000, backoff: 'exponential' } });
  const id: string = pushed.id;
  const dup: boolean = pushed.duplicate;
  await client.pushBatch([message('orders', 'a', { deliverAt: Date.now() + 1000, priority: 5 })]);
  const view = await client.message(id);
  const status: 'WaitPut' | 'Delaying' | 'Ready' | 'Consuming' | 'Consumed' | 'Deleted' | 'Dead' = view.message.status;
  const counts = (await client.topics())[0].counts.ready;
  const coming: number = (await client.forecast('sms', { bucket: '1m' })).buckets[0].count;
  await client.reschedule([id], { delay: 1000 });
  await client.push('orders', 'b', { deliverAtLocal: '2027-03-28T09:00:00', tz: 'Europe/Berlin', dst: 'later' });
  const moved = await client.reschedule([id], { deliverAtLocal: '2027-10-31T02:30:00', tz: 'Europe/Berlin', dst: 'earlier', priority: 1 });
  const due: number | null | undefined = moved.results[0].dueTime;
  const on: OnDuplicate = 'replace';
  const replaced = await client.push('orders', 'c', { bizKey: 'order-1', delay: 500, onDuplicate: on });
  const outcome: DuplicateResult | undefined = replaced.result;
  const replacedDue: number | undefined = replaced.dueTime;
  const [batched] = await client.pushBatch([message('orders', 'd', { bizKey: 'order-1', onDuplicate: 'extend' })]);
  if (batched.result === 'not_later' || batched.result === 'in_flight') console.log(batched.dueTime);
  const row: string = outboxRow('reminders', 'order 42', { delay: 86400000, bizKey: 'order-42', onDuplicate: 'keep' });
  await client.push('orders', 'e', { group: 'customer-7' });
  const { messages } = await client.poll('orders', { count: 10, timeout: 5 });
  const first: Delivery | undefined = messages[0];
  const group: string | null | undefined = first?.group;
  const waiting: number | undefined = (await client.topics())[0]?.groups?.waiting;
  console.log(group, waiting);
  if (first) await client.ack(first);

  const consumer = new Consumer(client, 'orders', async (d, signal) => {
    if (signal.aborted) return;
    JSON.parse(d.body);
  }, { loops: 4, handlerTimeout: 10000 });
  consumer.start();
  await consumer.stop();

  try {
    await client.cancelBizKey('orders', 'order-1');
  } catch (e) {
    if (e instanceof ApiError && e.code === 'not_found') console.log(e.status, e.detail);
  }
  const code: ErrorCode = ERROR_CODES[0];
  console.log(dup, status, counts, coming, code, due, outcome, replacedDue, row);

  // @ts-expect-error: a misspelt option is a compile error
  await client.push('orders', 'x', { dealy: 5 });
  // @ts-expect-error: dst is reject, earlier or later
  await client.push('orders', 'x', { deliverAtLocal: '2027-10-31T02:30:00', tz: 'Europe/Berlin', dst: 'first' });
  // @ts-expect-error: a local time is a string, not a Date
  await client.reschedule([id], { deliverAtLocal: new Date(), tz: 'Europe/Berlin' });
  // @ts-expect-error: onDuplicate is keep, replace or extend
  await client.push('orders', 'x', { bizKey: 'order-1', onDuplicate: 'merge' });
  // @ts-expect-error: an outbox row refuses replace and extend
  outboxRow('reminders', 'x', { bizKey: 'order-1', onDuplicate: 'replace' });
  // @ts-expect-error: bodies are strings
  await client.push('orders', { id: 1 });
}

void main;
