// The consumer loop: the fast path by default.
//
// Each loop long-polls POST /get/{topic} carrying the acks of the messages
// its handler finished since the last poll (with their receipts), so a
// burst costs one round trip per batch, not one per message. A handler
// that throws (or rejects) nacks its message, which then follows the
// message's retry policy (or is dead on its last attempt).
//
// Batches fit the ttl: a loop asks for 10 messages at first, twice as many
// (up to `batch`) while a batch takes under an eighth of the messages' ttl,
// and fewer when one takes over a quarter, so a slow handler does not hold
// messages past their ttl. A message still in hand when its delivery is
// about to lapse is not started (it is handed out again after its ttl), and
// acks held for the next poll go on their own once half the ttl has passed.
//
// Semantics: at least once. A message whose handler finished but whose ack
// did not reach the server (the process stopped, the node failed before
// the next poll) is handed out again after its ttl; a handler that takes
// longer than the ttl may see its message handed to another consumer, and
// its late ack is refused (`stale_delivery`) and changes nothing. Make
// handlers idempotent, and keep `handlerTimeout` below the messages' ttl.
import { ApiError, DelayqError } from './errors.js';

// The first poll of a loop asks for this many messages (or `batch`).
const FIRST_BATCH = 10;

// The next poll's count: twice `want` (up to `most`) when a full batch took
// under an eighth of the ttl, as many as fit a quarter of it when it took
// longer than that, `want` otherwise.
export function nextBatch(want, got, spent, ttl, most) {
  if (spent > ttl / 4) return Math.max(1, Math.min(want, Math.floor((got * (ttl / 4)) / spent)));
  if (got >= want && spent < ttl / 8) return Math.min(most, want * 2);
  return want;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Runs `handler(delivery, signal)` on the messages of `topic`.
 *
 * `loops` long polls run at once, each taking up to `batch` messages a poll
 * and handling them one after another (set `loops` to the concurrency
 * wanted). `handlerTimeout` (ms) bounds a handler: one that takes longer is
 * counted failed, its `signal` is aborted and its message nacked.
 * `onError(error, context)` hears what the loops ride out (failed polls,
 * refused acks, failed handlers); by default they go to console.warn.
 */
export class Consumer {
  constructor(client, topic, handler, options = {}) {
    const {
      loops = 1,
      batch = 100,
      pollTimeout = 5,
      handlerTimeout,
      nackDelay,
      onError = (e, context) => console.warn(`delayq: ${context}: ${e?.message ?? e}`),
      ...rest
    } = options;
    if (Object.keys(rest).length) throw new TypeError(`unknown consumer option ${Object.keys(rest).join(', ')}`);
    if (!(loops >= 1) || !(batch >= 1 && batch <= 100)) throw new RangeError('loops must be at least 1 and batch 1 to 100');
    this.client = client;
    this.topic = topic;
    this.handler = handler;
    this.loops = loops;
    this.batch = batch;
    this.pollTimeout = pollTimeout;
    this.handlerTimeout = handlerTimeout;
    this.nackDelay = nackDelay;
    this.onError = onError;
    if (!(Number.isInteger(pollTimeout) && pollTimeout >= 1 && pollTimeout <= 300)) throw new RangeError('pollTimeout must be 1 to 300 seconds');
    this.stopping = new AbortController();
    this.running = [];
  }

  // onError, kept from ending a loop when it throws.
  report(error, context) {
    try {
      this.onError(error, context);
    } catch {
      // the loop goes on
    }
  }

  /** Starts the loops; returns this. */
  start() {
    if (this.running.length) throw new Error('the consumer is running already');
    for (let n = 0; n < this.loops; n++) this.running.push(this.loop());
    return this;
  }

  /**
   * Graceful stop: no new poll; messages in hand are finished and acked.
   * Resolves when every loop has ended. A long poll under way is left to
   * end on its own (at most `pollTimeout` seconds), and what it hands out
   * is handled and acked too.
   */
  async stop() {
    this.stopping.abort();
    await Promise.all(this.running);
  }

  /** Starts the loops and resolves once stop() has ended them. */
  async run() {
    this.start();
    await Promise.all(this.running);
  }

  async handle(d) {
    const ctl = new AbortController();
    let timer;
    try {
      const work = Promise.resolve().then(() => this.handler(d, ctl.signal));
      if (this.handlerTimeout === undefined) {
        await work;
      } else {
        const late = new Promise((_, reject) => {
          timer = setTimeout(() => {
            ctl.abort();
            reject(new DelayqError(`handler of message ${d.id} took over ${this.handlerTimeout} ms`));
          }, this.handlerTimeout);
        });
        work.catch(() => {}); // a handler that fails after its timeout has been nacked already
        await Promise.race([work, late]);
      }
      return true;
    } catch (e) {
      this.report(e, `handler of message ${d.id} failed; nacked`);
      return false;
    } finally {
      clearTimeout(timer);
    }
  }

  async loop() {
    let done = [];
    let backoff = 100;
    let want = Math.min(FIRST_BATCH, this.batch);
    const signal = this.stopping.signal;
    for (;;) {
      if (signal.aborted) {
        // The last acks, with no poll behind them.
        await this.ackAlone(done);
        return;
      }
      let got;
      const sent = performance.now();
      try {
        const polled = await this.client.poll(this.topic, { count: want, timeout: this.pollTimeout, ack: done });
        got = polled.messages;
        done = [];
        backoff = 100;
        for (const r of polled.results) {
          if (r.result !== 'consumed') this.report(new DelayqError(`${r.result} (status ${r.status})`), `ack of ${r.id}`);
        }
      } catch (e) {
        // Any failure (an outage, a refusal, an answer not understood)
        // leaves the loop running: tried again after a backoff.
        this.report(e, `poll of ${this.topic} failed; trying again`);
        if (e instanceof ApiError && !e.retryable && done.length) {
          // The poll was refused (bad input, not an outage): its acks go
          // alone, once, lest they keep every poll refused.
          await this.ackAlone(done);
          done = [];
        }
        await sleep(backoff, signal);
        backoff = Math.min(backoff * 2, 5000);
        continue;
      }
      if (got.length === 0) continue;
      const ttl = Math.min(...got.map((d) => d.ttl));
      const started = performance.now();
      for (const d of got) {
        const now = performance.now();
        if (now > sent + ttl - Math.min(ttl / 10, 1000)) {
          this.report(new DelayqError(`its delivery lapses (ttl ${ttl} ms)`), `message ${d.id} not started; it is handed out again`);
          continue;
        }
        if (done.length && now > sent + ttl / 2) {
          // Held acks must reach the server within the ttl.
          await this.ackAlone(done);
          done = [];
        }
        if (await this.handle(d)) {
          done.push(d);
        } else {
          await this.nack(d, this.nackDelay);
        }
      }
      want = nextBatch(want, got.length, performance.now() - started, ttl, this.batch);
    }
  }

  async ackAlone(done) {
    for (let i = 0; i < done.length; i += 100) {
      const part = done.slice(i, i + 100);
      try {
        for (const r of await this.client.ackAll(part)) {
          if (r.result !== 'consumed') this.report(new DelayqError(r.result), `ack of ${r.id}`);
        }
      } catch (e) {
        const context = e instanceof ApiError
          ? `acks of ${part.length} messages refused`
          : `acks of ${part.length} messages not sent; they are handed out again after their ttl`;
        this.report(e, context);
      }
    }
  }

  async nack(d, delay) {
    try {
      await this.client.nack(d, { delay });
    } catch (e) {
      this.report(e, `nack of ${d.id} not taken; it comes back after its ttl`);
    }
  }
}
