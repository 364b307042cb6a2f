// The HTTP client: every route of delayq's API, over node:http and
// node:https with keep-alive connections.
//
// Every request is bounded by its own timeout. With several base URLs, a
// node that answers 503 `node_stalled` (nothing applied) is skipped for the
// next one; one that does not answer, or answers 502 or 504, too, but for a
// push without a bizKey (it may have been applied: it is never sent twice).
// Other answers (a 400, a 404, a 409) are the cluster's word and are thrown
// as ApiError.
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import { ApiError, TransportError } from './errors.js';

// Answers that say "this node cannot serve now; another may".
const SKIP_STATUS = new Set([502, 504]);
const SKIP_CODES = new Set(['node_stalled', 'node_unavailable']);

// The fields of a message as POST /push takes them. The due time is one of
// `delay` (ms from now), `deliverAt` (Unix ms) or `deliverAtLocal` (a
// wall-clock time, no offset) with `tz` (its IANA zone) and `dst`.
// `onDuplicate` (with a bizKey) is what the push does to a live message of
// the topic holding the key: `keep` (the default), `replace` or `extend`.
// `group` puts it in an ordered group of its topic: one message of the
// group handed out at a time, in due order.
const MESSAGE_FIELDS = [
  'delay', 'deliverAt', 'deliverAtLocal', 'tz', 'dst', 'bizKey', 'priority', 'ttl', 'maxAttempts', 'retry', 'repeat',
  'onDuplicate', 'group',
];

/**
 * A message as POST /push takes it; options left out (or undefined) take
 * the server's defaults. An option the server does not know is refused
 * here, before anything is sent.
 */
export function message(topic, body, options = {}) {
  const m = { topic, body };
  for (const [key, value] of Object.entries(options)) {
    if (!MESSAGE_FIELDS.includes(key)) {
      throw new TypeError(`unknown message option ${JSON.stringify(key)}; known: ${MESSAGE_FIELDS.join(', ')}`);
    }
    if (value !== undefined && value !== null) m[key] = value;
  }
  return m;
}

/**
 * The JSON text of a row of the transactional outbox's `message` column:
 * the message POST /push would take from `push(topic, body, options)`.
 * Insert it in the application's own transaction (PostgreSQL `INSERT INTO
 * delayq_outbox (message) VALUES ($1::json)`, MySQL `... VALUES (?)`); a
 * delayq node started with `--outbox-url` pushes each committed row once.
 * `onDuplicate` `replace` and `extend` are refused (TypeError): the server
 * refuses them in an outbox row, so only `keep` or none is taken. See
 * "Transactional enqueue: the outbox" in docs/src/operating.md.
 */
export function outboxRow(topic, body, options = {}) {
  const m = message(topic, body, options);
  if ('onDuplicate' in m && m.onDuplicate !== 'keep') {
    throw new TypeError(`onDuplicate ${JSON.stringify(m.onDuplicate)} is refused in an outbox row: only "keep" or none`);
  }
  return JSON.stringify(m);
}

function query(params) {
  const given = Object.entries(params).filter(([, v]) => v !== undefined && v !== null);
  return given.length ? `?${new URLSearchParams(given.map(([k, v]) => [k, String(v)]))}` : '';
}

const seg = encodeURIComponent;

// A delivery as the ack routes take it: its id, and its receipt when it has one.
const ref = (d) => (d.receipt ? { id: d.id, receipt: d.receipt } : { id: d.id });

/**
 * A push's answer: the id, whether a live message held the bizKey, and for
 * such a duplicate pushed with `onDuplicate` `replace` or `extend` what it
 * did to that message (`result`) and its due time now (`dueTime`, none when
 * it is in flight).
 */
function pushed(id, duplicate, update) {
  const p = { id, duplicate: Boolean(duplicate) };
  if (update?.result !== undefined && update.result !== null) p.result = update.result;
  if (update?.dueTime !== undefined && update.dueTime !== null) p.dueTime = update.dueTime;
  return p;
}

/** A message handed to a consumer, with the receipt that names this delivery. */
function delivery(m) {
  return {
    id: m.id,
    topic: m.topic,
    body: m.body,
    receipt: m.receipt ?? '',
    attempts: m.attempts ?? 0,
    dueTime: m.dueTime ?? 0,
    bizKey: m.bizKey ?? null,
    group: m.group ?? null,
    priority: m.priority ?? 0,
    ttl: m.ttl || 30000,
    raw: m,
  };
}

/**
 * A delayq cluster, reached at one or several base URLs (tried in turn).
 *
 * `timeout` (ms) bounds every request but long polls, which wait their own
 * timeout plus `timeout`. `caFile` (or `ca`, PEM text) trusts a private CA
 * for https:// URLs; `adminToken` and `readToken` go as
 * `Authorization: Bearer` to the routes that need them.
 */
export class Client {
  constructor(urls, options = {}) {
    const { timeout = 10000, adminToken, readToken, caFile, ca, maxSockets = 64, ...rest } = options;
    if (Object.keys(rest).length) throw new TypeError(`unknown client option ${Object.keys(rest).join(', ')}`);
    const list = typeof urls === 'string' ? [urls] : [...urls];
    if (list.length === 0) throw new TypeError('give at least one base URL');
    this.nodes = list.map((u) => {
      const url = new URL(u.replace(/\/+$/, ''));
      if ((url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
        throw new TypeError(`not an http(s) base URL: ${u}`);
      }
      return url;
    });
    this.timeout = timeout;
    this.adminToken = adminToken;
    this.readToken = readToken;
    const pem = ca ?? (caFile ? fs.readFileSync(caFile) : undefined);
    this.httpAgent = new http.Agent({ keepAlive: true, maxSockets });
    this.httpsAgent = new https.Agent({ keepAlive: true, maxSockets, ...(pem ? { ca: pem } : {}) });
    this.first = 0;
  }

  /** Closes the kept-alive connections (the process can then exit at once). */
  close() {
    this.httpAgent.destroy();
    this.httpsAgent.destroy();
  }

  // -- transport -----------------------------------------------------------

  async request(method, path, body, { token, wait = 0, idempotent = true } = {}) {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = { accept: 'application/json' };
    if (payload !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = Buffer.byteLength(payload);
    }
    if (token) headers.authorization = `Bearer ${token}`;
    let last;
    for (let k = 0; k < this.nodes.length; k++) {
      const i = (this.first + k) % this.nodes.length;
      const node = this.nodes[i];
      let status;
      let reply;
      try {
        ({ status, reply } = await this.send(node, method, path, payload, headers, this.timeout + wait * 1000, idempotent));
      } catch (e) {
        last = new TransportError(`${node.host}: ${e.message}`, { cause: e });
        if (!idempotent) throw last;
        continue;
      }
      if (status < 400) {
        if (reply === null || typeof reply !== 'object') {
          // Not delayq's answer (a proxy's page?): what happened is unknown.
          throw new TransportError(`${node.host} answered ${status} without a JSON object: ${String(reply).slice(0, 200)}`);
        }
        this.first = i;
        return reply;
      }
      const isDoc = reply !== null && typeof reply === 'object';
      const code = (isDoc && reply.error) || `http_${status}`;
      const error = new ApiError(status, code, isDoc ? reply.message ?? '' : String(reply ?? ''));
      // 503 node_stalled/node_unavailable: nothing was applied, any request
      // may go to the next node. 502/504 (no node, or no answer in time): it
      // may have been applied, so only an idempotent one.
      if (SKIP_CODES.has(code) || (SKIP_STATUS.has(status) && idempotent)) {
        last = error;
        continue;
      }
      throw error;
    }
    throw last;
  }

  // A kept-alive socket the server closed meanwhile fails at once with
  // ECONNRESET or EPIPE: the request is sent again on a fresh socket when it
  // is idempotent (an unkeyed push is never sent twice).
  async send(node, method, path, payload, headers, timeoutMs, idempotent) {
    try {
      return await this.sendOnce(node, method, path, payload, headers, timeoutMs);
    } catch (e) {
      if (!e.reusedSocket || !idempotent || !['ECONNRESET', 'EPIPE'].includes(e.code)) throw e;
      return this.sendOnce(node, method, path, payload, headers, timeoutMs);
    }
  }

  sendOnce(node, method, path, payload, headers, timeoutMs) {
    const tls = node.protocol === 'https:';
    return new Promise((resolve, reject) => {
      const req = (tls ? https : http).request(
        {
          host: node.hostname,
          port: node.port || (tls ? 443 : 80),
          method,
          path: node.pathname.replace(/\/$/, '') + path,
          headers,
          agent: tls ? this.httpsAgent : this.httpAgent,
        },
        (res) => {
          const chunks = [];
          res.on('data', (c) => chunks.push(c));
          res.on('error', reject);
          res.on('end', () => {
            clearTimeout(timer);
            const text = Buffer.concat(chunks).toString();
            let reply = null;
            if (text) {
              try {
                reply = JSON.parse(text);
              } catch {
                reply = text;
              }
            }
            resolve({ status: res.statusCode, reply });
          });
        },
      );
      const timer = setTimeout(() => req.destroy(new Error(`no answer in ${timeoutMs} ms`)), timeoutMs);
      req.on('error', (e) => {
        clearTimeout(timer);
        e.reusedSocket = req.reusedSocket;
        reject(e);
      });
      req.end(payload);
    });
  }

  get reader() {
    return this.readToken ?? this.adminToken;
  }

  // -- producing -----------------------------------------------------------

  /**
   * POST /push: answered once the message is durable. Without a bizKey a
   * push is sent to one node only: when that node fails to answer, the
   * message may or may not be accepted (TransportError).
   */
  async push(topic, body, options = {}) {
    const m = message(topic, body, options);
    const r = await this.request('POST', '/push', m, { token: this.adminToken, idempotent: 'bizKey' in m });
    return pushed(r.id, r.duplicate, r);
  }

  /**
   * POST /push/batch (1 to 1000 messages made by message()): all durable or
   * none. A duplicate pushed with `onDuplicate` `replace` or `extend`
   * carries its `result` and `dueTime` (the answer's `updates`).
   */
  async pushBatch(messages) {
    const msgs = [...messages];
    const idempotent = msgs.every((m) => m.bizKey !== undefined && m.bizKey !== null);
    const r = await this.request('POST', '/push/batch', { messages: msgs }, { token: this.adminToken, idempotent });
    const dup = new Set(r.duplicates ?? []);
    const updates = new Map((r.updates ?? []).map((u) => [u.index, u]));
    return r.ids.map((id, n) => pushed(id, dup.has(n), updates.get(n)));
  }

  /** POST /cancel of one message: `{deleted, results: [{id, result}]}`. */
  cancel(id) {
    return this.request('POST', '/cancel', { id }, { token: this.adminToken });
  }

  cancelIds(ids) {
    return this.request('POST', '/cancel', { ids: [...ids] }, { token: this.adminToken });
  }

  /** The live message holding the key; ApiError `not_found` when none does. */
  cancelBizKey(topic, bizKey) {
    return this.request('POST', '/cancel', { topic, bizKey }, { token: this.adminToken });
  }

  cancelPrefix(topic, bizKeyPrefix) {
    return this.request('POST', '/cancel', { topic, bizKeyPrefix }, { token: this.adminToken });
  }

  /**
   * POST /reschedule: messages not handed out yet move and keep their ids.
   * The new time is `delay`, `deliverAt`, or `deliverAtLocal` with `tz` and
   * `dst` (as a push takes them); each result that moved has its `dueTime`.
   */
  reschedule(ids, { delay, deliverAt, deliverAtLocal, tz, dst, priority } = {}) {
    const body = { ids: [...ids] };
    if (delay !== undefined) body.delay = delay;
    if (deliverAt !== undefined) body.deliverAt = deliverAt;
    if (deliverAtLocal !== undefined) body.deliverAtLocal = deliverAtLocal;
    if (tz !== undefined) body.tz = tz;
    if (dst !== undefined) body.dst = dst;
    if (priority !== undefined) body.priority = priority;
    return this.request('POST', '/reschedule', body, { token: this.adminToken });
  }

  // -- looking -------------------------------------------------------------

  /** GET /messages/{id}: the message, its status and its history. */
  message(id) {
    return this.request('GET', `/messages/${seg(id)}`, undefined, { token: this.reader });
  }

  /** GET /messages?topic=… with bizKey, bizKeyPrefix, status, limit, after. */
  search(topic, params = {}) {
    return this.request('GET', `/messages${query({ topic, ...params })}`, undefined, { token: this.reader });
  }

  async topics() {
    return (await this.request('GET', '/topics', undefined, { token: this.reader })).topics;
  }

  /**
   * GET /forecast (no topic) or GET /topics/{topic}/forecast: how many
   * messages fall due per bucket over the span from now on. A topic's
   * bucket too large to read whole is an estimate with `low` and `high`.
   */
  forecast(topic, { bucket, span } = {}) {
    const path = topic == null ? '/forecast' : `/topics/${seg(topic)}/forecast`;
    return this.request('GET', `${path}${query({ bucket, span })}`, undefined, { token: this.reader });
  }

  pause(topic) {
    return this.request('POST', `/topics/${seg(topic)}/pause`, undefined, { token: this.adminToken });
  }

  resume(topic) {
    return this.request('POST', `/topics/${seg(topic)}/resume`, undefined, { token: this.adminToken });
  }

  dead(topic, { limit, after } = {}) {
    return this.request('GET', `/dead/${seg(topic)}${query({ limit, after })}`, undefined, { token: this.reader });
  }

  /** POST /dead/{target}/requeue: a dead message by id, or a topic's dead letters. */
  requeue(target) {
    return this.request('POST', `/dead/${seg(target)}/requeue`, undefined, { token: this.adminToken });
  }

  // -- consuming -----------------------------------------------------------

  /**
   * POST /get/{topic}: acks `ack` (by their receipts), then long-polls up
   * to `timeout` seconds for up to `count` messages.
   */
  async poll(topic, { count = 1, timeout = 30, ack = [] } = {}) {
    if (!(Number.isInteger(timeout) && timeout >= 0 && timeout <= 300)) throw new RangeError('timeout must be 0 to 300 seconds');
    // The wait goes in the query, where a load balancer in front of the
    // nodes (cluster/nginx-proxy.conf) bounds the poll by it.
    const body = { ack: ack.map(ref), count };
    const r = await this.request('POST', `/get/${seg(topic)}?timeout=${timeout}`, body, { wait: timeout });
    return { results: r.results ?? [], messages: (r.messages ?? []).map(delivery) };
  }

  /** POST /ack/{id}?receipt=: 409 `stale_delivery` when another delivery holds it now. */
  ack(d) {
    return this.request('POST', `/ack/${seg(d.id)}${query({ receipt: d.receipt || undefined })}`);
  }

  /** POST /ack of up to 100 deliveries (by their receipts): a result each. */
  async ackAll(ds) {
    const r = await this.request('POST', '/ack', { ids: ds.map(ref) });
    return r.results ?? [];
  }

  /** POST /nack/{id}: back to Delaying for `delay` ms, or by the message's retry policy. */
  nack(d, { delay } = {}) {
    return this.request('POST', `/nack/${seg(d.id)}${query({ receipt: d.receipt || undefined, delay })}`);
  }
}
