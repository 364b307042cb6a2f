// Types of delayq's Node client. The shapes are those of the server's
// OpenAPI document (GET /openapi.json); times are Unix milliseconds.

/** A message's place in its life. */
export type Status = 'WaitPut' | 'Delaying' | 'Ready' | 'Consuming' | 'Consumed' | 'Deleted' | 'Dead';

/** The server's stable error codes, then those of the nginx in front of a cluster. */
export type ErrorCode =
  | 'biz_key_taken' | 'body_too_large' | 'forbidden' | 'https_required' | 'internal'
  | 'invalid_batch' | 'invalid_biz_key' | 'invalid_body' | 'invalid_cancel' | 'invalid_content_type'
  | 'invalid_delay' | 'invalid_field' | 'invalid_group' | 'invalid_id' | 'invalid_ids' | 'invalid_json'
  | 'invalid_max_attempts' | 'invalid_message' | 'invalid_parameter' | 'invalid_path' | 'invalid_priority'
  | 'invalid_receipt' | 'invalid_repeat' | 'invalid_retry' | 'invalid_shard' | 'invalid_topic'
  | 'invalid_ttl' | 'journal_behind' | 'journal_refused' | 'journal_unavailable' | 'missing_body'
  | 'missing_id' | 'missing_to' | 'missing_topic' | 'no_such_node' | 'no_such_route'
  | 'no_such_shard' | 'node_stalled' | 'node_unavailable' | 'not_dead' | 'not_found'
  | 'not_in_flight' | 'not_possible' | 'payload_too_large' | 'redis_unavailable' | 'stale_delivery'
  | 'unauthorized' | 'unknown_field' | 'unknown_parameter'
  | 'no_answer' | 'no_node';

export declare const ERROR_CODES: readonly ErrorCode[];

export declare class DelayqError extends Error {}

/** The server answered with an error document `{"error", "message"}`. */
export declare class ApiError extends DelayqError {
  readonly status: number;
  /** What to branch on; `http_<status>` when the answer carried no code. */
  readonly code: ErrorCode | `http_${number}` | (string & {});
  /** The server's sentence for people. */
  readonly detail: string;
  /** Whether the same request may succeed later (502, 503, 504). */
  readonly retryable: boolean;
}

/** No node answered: refused, timed out, or TLS refused. */
export declare class TransportError extends DelayqError {}

export type Backoff = 'fixed' | 'exponential';

export interface Retry {
  /** ms before the first retry */
  delay?: number;
  /** the longest wait between retries, ms */
  max?: number;
  backoff?: Backoff;
}

export interface Repeat {
  /** every so many ms */
  every?: number;
  /** a cron expression, in `tz` */
  cron?: string;
  tz?: string;
  times?: number;
  until?: number;
  /** what missed occurrences come to (default `one`) */
  misfire?: 'one' | 'all' | 'skip';
}

/**
 * Which instant a local time means when its zone's clock jumps over it (a
 * gap) or passes it twice (a fold): `reject` (the default) refuses it with
 * 400 `invalid_delay`; `earlier` is a fold's first pass, or a gap time read
 * with the offset after the jump (Berlin's 02:30 on its spring day is 01:30
 * +01:00); `later` is a fold's second pass, or a gap time read with the
 * offset before the jump (03:30 +02:00).
 */
export type Dst = 'reject' | 'earlier' | 'later';

/** A new time (one of `delay`, `deliverAt`, `deliverAtLocal`), as a push or a reschedule takes it. */
export interface TimeOptions {
  /** ms from now */
  delay?: number;
  /** Unix ms (in the past: now) */
  deliverAt?: number;
  /** a wall-clock time `YYYY-MM-DDTHH:MM[:SS[.fff]]`, no offset, read in `tz` by the server */
  deliverAtLocal?: string;
  /** the IANA zone of `deliverAtLocal` (e.g. `Europe/Berlin`); only with it */
  tz?: string;
  /** only with `deliverAtLocal` */
  dst?: Dst;
}

/**
 * What a push with a bizKey does to the live message of its topic holding
 * the key: `keep` (the default) leaves it as it is; `replace` (debounce)
 * gives it the push's body, due time and priority, keeping its id;
 * `extend` moves only its due time, and only later.
 */
export type OnDuplicate = 'keep' | 'replace' | 'extend';

/**
 * What a push with `onDuplicate` `replace` or `extend` did to the live
 * message: `replaced` (it took the push's body, due time and priority),
 * `extended` (its due time moved later), `not_later` (the push's time was
 * not later than its own: left as it was), `in_flight` (handed to a
 * consumer: left alone).
 */
export type DuplicateResult = 'replaced' | 'extended' | 'not_later' | 'in_flight';

/** What POST /push takes beside topic and body; left out: the server's defaults. */
export interface MessageOptions extends TimeOptions {
  bizKey?: string;
  priority?: number;
  /** ms a delivery has to be acked in before it is handed out again */
  ttl?: number;
  maxAttempts?: number;
  retry?: Retry;
  repeat?: Repeat;
  /** only with `bizKey` (400 `invalid_field` otherwise) */
  onDuplicate?: OnDuplicate;
  /**
   * its ordered group in the topic (1–256 characters): one message of the
   * group is handed out at a time (the next once it is acked, dead or
   * cancelled), in due order
   */
  group?: string;
}

export interface NewMessage extends MessageOptions {
  topic: string;
  body: string;
}

export declare function message(topic: string, body: string, options?: MessageOptions): NewMessage;

/** What an outbox row takes beside topic and body: a push's options, but `onDuplicate` only `keep`. */
export interface OutboxOptions extends Omit<MessageOptions, 'onDuplicate'> {
  /** `replace` and `extend` are refused in an outbox row */
  onDuplicate?: 'keep';
}

/**
 * The JSON text of a row of the transactional outbox's `message` column
 * (`INSERT INTO delayq_outbox (message) VALUES ($1::json)` in the
 * application's own transaction): the message `push` would send. Throws
 * TypeError for `onDuplicate` `replace` or `extend`.
 */
export declare function outboxRow(topic: string, body: string, options?: OutboxOptions): string;

export interface Pushed {
  id: string;
  /** A live message of the topic held the bizKey: `id` is that message's. */
  duplicate: boolean;
  /** A duplicate pushed with `onDuplicate` `replace` or `extend`: what it did to the live message. */
  result?: DuplicateResult;
  /** With `result`: the live message's due time now (absent when `in_flight`). */
  dueTime?: number;
}

export interface Occurrence {
  number: number;
  dueTime: number;
}

export interface MessageView {
  id: string;
  topic: string;
  bizKey?: string | null;
  group?: string | null;
  body: string;
  priority: number;
  ttl: number;
  delay: number;
  createTime: number;
  dueTime: number;
  maxAttempts?: number;
  retry?: Record<string, unknown> | null;
  repeat?: Record<string, unknown> | null;
  occurrence?: Occurrence | null;
  status: Status;
  attempts: number;
  receipt?: string | null;
}

/** A message handed to this consumer, with the receipt that names the delivery. */
export interface Delivery {
  id: string;
  topic: string;
  body: string;
  receipt: string;
  attempts: number;
  dueTime: number;
  bizKey: string | null;
  group: string | null;
  priority: number;
  /** ms this delivery may take before the message is handed out again */
  ttl: number;
  raw: MessageView;
}

export interface FlowRow {
  status: Status;
  attempts: number;
  time: number;
  shard: string;
  nodeId: string;
  host: string;
  dueTime?: number | null;
}

export interface MessageReply {
  message: MessageView;
  updatedTime: number;
  /** Whose the status is: `redis` (ahead of the journal) or `journal`. */
  statusFrom: 'redis' | 'journal' | (string & {});
  history: FlowRow[];
}

export interface MessagePage {
  messages: MessageView[];
  next?: string | null;
}

export type CancelResult = 'deleted' | 'in_flight' | 'already_consumed' | 'dead' | 'not_found';

/** By id, ids or bizKey: a result per message. */
export interface CancelEach {
  deleted: number;
  results: { id: string; result: CancelResult; [key: string]: unknown }[];
}

/** By prefix: how many matched and the count per outcome. */
export interface CancelCounts {
  matched: number;
  results: Record<string, number>;
}

export interface RescheduleEach {
  rescheduled: number;
  results: { id: string; result: string; dueTime?: number | null; priority?: number | null }[];
}

export interface TopicCounts {
  waiting: number;
  delaying: number;
  ready: number;
  inFlight: number;
  dead: number;
  consumed?: number;
  deleted?: number;
}

export interface TopicView {
  topic: string;
  counts: TopicCounts;
  paused: boolean;
  pausedAt?: number | null;
  limitPerSecond?: number | null;
  limitConcurrency?: number | null;
  oldestReadyDueTime?: number | null;
  overdueMs?: number | null;
  /** its ordered groups, when some are due or handed out */
  groups?: GroupCounts;
}

export interface GroupCounts {
  /** groups holding their turn: a message ready, handed out or waiting to retry */
  active: number;
  /** of those, groups with due messages waiting behind it */
  waiting: number;
  /** due messages waiting behind their group's */
  held: number;
}

export interface PauseState {
  topic: string;
  paused: boolean;
  pausedAt?: number | null;
  changed: boolean;
  known?: boolean;
}

export interface DeadPage {
  messages: (MessageView & { history: FlowRow[] })[];
  next?: string | null;
}

export interface RequeueOne {
  id: string;
  result: string;
  status?: Status | null;
  holder?: string | null;
}

export interface RequeueTopic {
  topic: string;
  requeued: number;
  skipped: RequeueOne[];
  more: boolean;
}

export interface AckResult {
  id: string;
  result: 'consumed' | 'not_in_flight' | 'stale_delivery' | 'not_found';
  status?: Status | null;
  nextOccurrence?: Occurrence | null;
}

export interface AckReply {
  id: string;
  status: Status;
  nextOccurrence?: Occurrence | null;
}

export interface NackReply {
  id: string;
  result: 'ready' | 'delaying' | 'dead' | 'deleted' | 'not_in_flight' | 'stale_delivery' | 'not_found';
  status?: Status | null;
  attempts?: number | null;
  dueTime?: number | null;
}

export interface ClientOptions {
  /** ms every request but a long poll waits for its answer (default 10000) */
  timeout?: number;
  adminToken?: string;
  readToken?: string;
  /** a PEM file of the private CA to trust for https:// URLs */
  caFile?: string;
  /** the same, as PEM text */
  ca?: string | Buffer;
  /** kept-alive connections per node (default 64) */
  maxSockets?: number;
}

export interface SearchParams {
  bizKey?: string;
  bizKeyPrefix?: string;
  status?: Status;
  limit?: number;
  after?: string;
}

export interface ForecastBucket {
  /** the bucket's start (epoch ms) */
  at: number;
  count: number;
  /** an estimate's 95 % interval (a topic's bucket too large to read whole) */
  low?: number;
  high?: number;
}

export interface Forecast {
  topic: string | null;
  now: number;
  from: number;
  bucket: number;
  span: number;
  overdue: ForecastBucket;
  buckets: ForecastBucket[];
  total: number;
  exact: boolean;
  journalCountedUntil: number | null;
  sampled: number;
  journalRows: number;
}

export declare class Client {
  constructor(urls: string | string[], options?: ClientOptions);
  /** Closes the kept-alive connections. */
  close(): void;

  push(topic: string, body: string, options?: MessageOptions): Promise<Pushed>;
  pushBatch(messages: Iterable<NewMessage>): Promise<Pushed[]>;
  cancel(id: string): Promise<CancelEach>;
  cancelIds(ids: Iterable<string>): Promise<CancelEach>;
  cancelBizKey(topic: string, bizKey: string): Promise<CancelEach>;
  cancelPrefix(topic: string, bizKeyPrefix: string): Promise<CancelCounts>;
  reschedule(ids: Iterable<string>, to: TimeOptions & { priority?: number }): Promise<RescheduleEach>;

  message(id: string): Promise<MessageReply>;
  search(topic: string, params?: SearchParams): Promise<MessagePage>;
  topics(): Promise<TopicView[]>;
  /** bucket and span are durations such as '1m' and '24h' (the defaults) */
  forecast(topic?: string | null, range?: { bucket?: string; span?: string }): Promise<Forecast>;
  pause(topic: string): Promise<PauseState>;
  resume(topic: string): Promise<PauseState>;
  dead(topic: string, page?: { limit?: number; after?: string }): Promise<DeadPage>;
  requeue(target: string): Promise<RequeueOne | RequeueTopic>;

  poll(
    topic: string,
    options?: { count?: number; timeout?: number; ack?: Pick<Delivery, 'id' | 'receipt'>[] },
  ): Promise<{ results: AckResult[]; messages: Delivery[] }>;
  ack(d: Pick<Delivery, 'id' | 'receipt'>): Promise<AckReply>;
  /** POST /ack of up to 100 deliveries: a result each. */
  ackAll(ds: Pick<Delivery, 'id' | 'receipt'>[]): Promise<AckResult[]>;
  nack(d: Pick<Delivery, 'id' | 'receipt'>, options?: { delay?: number }): Promise<NackReply>;
}

export interface ConsumerOptions {
  /** long polls at once: the concurrency (default 1) */
  loops?: number;
  /** the most messages a poll takes, 1 to 100 (default 100; fewer while handlers are slow against the ttl) */
  batch?: number;
  /** seconds a long poll waits (default 5) */
  pollTimeout?: number;
  /** ms a handler may take; keep it below the messages' ttl */
  handlerTimeout?: number;
  /** ms a failed message waits before it is handed out again (default: its retry policy) */
  nackDelay?: number;
  /** hears what the loops ride out (default: console.warn) */
  onError?: (error: unknown, context: string) => void;
}

export type Handler = (delivery: Delivery, signal: AbortSignal) => unknown | Promise<unknown>;

export declare class Consumer {
  constructor(client: Client, topic: string, handler: Handler, options?: ConsumerOptions);
  start(): this;
  /** Graceful stop: no new poll; messages in hand are finished and acked. */
  stop(): Promise<void>;
  /** Starts the loops and resolves once stop() has ended them. */
  run(): Promise<void>;
}
