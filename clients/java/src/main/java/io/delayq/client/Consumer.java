package io.delayq.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Runs a {@link Handler} on the messages of a topic: the fast path by default.
 *
 * <p>Each of {@code loops} threads long-polls {@code POST /get/{topic}} for up to
 * {@code batch} messages (default 100), carrying the acks (with their receipts) of the
 * messages its handler finished since its last poll, so a burst costs one round trip per
 * batch, not one per message; it then runs the handler on each message in turn (set
 * {@code loops} to the concurrency wanted). A handler that throws nacks its message, which
 * then follows the message's retry policy (or is dead on its last attempt). With a
 * {@code handlerTimeout} the handler runs on an executor and one that takes longer counts as
 * failed: it is interrupted and its message nacked. A poll that fails is tried again after
 * 0.1 s, doubling up to 5 s.
 *
 * <p><b>Batches fit the ttl.</b> A loop asks for 10 messages at first, twice as many (up to
 * {@code batch}) while a batch takes under an eighth of the messages' ttl, and fewer when one
 * takes over a quarter, so a slow handler does not hold messages past their ttl. A message
 * still in hand when its delivery is about to lapse is not started (it is handed out again
 * after its ttl), and acks held for the next poll go on their own ({@code POST /ack}) once half
 * the ttl has passed since the poll.
 *
 * <p><b>Semantics: at least once.</b> A message whose handler finished but whose ack did not
 * reach the server (the process stopped, the node failed before the next poll) is handed out
 * again after its ttl; a handler that takes longer than the ttl may see its message handed to
 * another consumer, and its late ack is refused ({@code stale_delivery}) and changes nothing.
 * Make handlers idempotent, and keep {@code handlerTimeout} below the messages' ttl (and a
 * batch's handling time too: the acks of a batch ride in the poll after it).
 *
 * <p><b>Stopping.</b> {@link #close()} or {@link #stop(Duration)} is graceful: no new poll
 * (a long poll under way ends by its timeout, {@code pollTimeout}), the messages in hand are
 * finished, and their acks are sent in one {@code POST /ack}.
 *
 * <pre>{@code
 * try (Consumer consumer = Consumer.builder(client, "sms", d -> send(d.body()))
 *         .loops(4)
 *         .handlerTimeout(Duration.ofSeconds(20))
 *         .build()
 *         .start()) {
 *     awaitShutdownSignal();
 * } // close(): finishes the messages in hand and acks them
 * }</pre>
 */
public final class Consumer implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("io.delayq.client");
    private static final long FIRST_BACKOFF_MS = 100;
    private static final long LAST_BACKOFF_MS = 5_000;
    /** The first poll of a loop asks for this many messages (or {@code batch}). */
    private static final int FIRST_BATCH = 10;
    /** The most deliveries one {@code POST /ack} carries. */
    private static final int ACKS_PER_REQUEST = 100;

    /** The work done on one message; throwing anything nacks it. */
    @FunctionalInterface
    public interface Handler {
        void handle(Delivery delivery) throws Exception;
    }

    private final DelayqClient client;
    private final String topic;
    private final Handler handler;
    private final int loops;
    private final int batch;
    private final int pollTimeoutSeconds;
    private final Duration handlerTimeout;
    private final Duration nackDelay;
    private final ExecutorService pool;
    private final CountDownLatch stopping = new CountDownLatch(1);
    private final List<Thread> threads = new ArrayList<>();
    private volatile boolean ttlWarned;
    private boolean started;

    private Consumer(Builder b) {
        this.client = b.client;
        this.topic = b.topic;
        this.handler = b.handler;
        this.loops = b.loops;
        this.batch = b.batch;
        this.pollTimeoutSeconds = b.pollTimeoutSeconds;
        this.handlerTimeout = b.handlerTimeout;
        this.nackDelay = b.nackDelay;
        this.pool = handlerTimeout == null ? null : Executors.newCachedThreadPool(named("delayq-handler-" + topic));
    }

    /** A consumer of {@code topic} running {@code handler}; see {@link Builder} for the options. */
    public static Builder builder(DelayqClient client, String topic, Handler handler) {
        return new Builder(client, topic, handler);
    }

    /** Starts the loops in background (daemon) threads; returns this. */
    public synchronized Consumer start() {
        if (started) {
            throw new IllegalStateException("already started");
        }
        started = true;
        ThreadFactory f = named("delayq-" + topic);
        for (int n = 0; n < loops; n++) {
            Thread t = f.newThread(this::loop);
            threads.add(t);
            t.start();
        }
        return this;
    }

    /** Runs the loops until {@link #close()} or {@link #stop(Duration)} from another thread. */
    public void run() throws InterruptedException {
        start();
        for (Thread t : threads()) {
            t.join();
        }
    }

    /**
     * Graceful stop: no new poll; the messages in hand are finished and acked. Waits up to
     * {@code limit} for the loops to end.
     *
     * @return whether every loop ended within {@code limit}
     */
    public boolean stop(Duration limit) throws InterruptedException {
        stopping.countDown();
        long deadline = System.nanoTime() + limit.toNanos();
        boolean ended = true;
        for (Thread t : threads()) {
            long left = deadline - System.nanoTime();
            if (left > 0) {
                TimeUnit.NANOSECONDS.timedJoin(t, left);
            }
            ended &= !t.isAlive();
        }
        if (ended && pool != null) {
            pool.shutdown();
        }
        return ended;
    }

    /** Graceful stop ({@link #stop(Duration)}), waiting for the loops as long as they take. */
    @Override
    public void close() {
        stopping.countDown();
        boolean interrupted = false;
        for (Thread t : threads()) {
            while (t.isAlive()) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (pool != null) {
            pool.shutdown();
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    private synchronized List<Thread> threads() {
        return List.copyOf(threads);
    }

    private boolean stopping() {
        return stopping.getCount() == 0;
    }

    /**
     * The next poll's count: twice {@code want} (up to {@code most}) when a full batch took under
     * an eighth of the ttl, as many as fit a quarter of it when it took longer than that,
     * {@code want} otherwise. {@code spentMs} is the batch's handling time, {@code ttlMs} the
     * smallest ttl of its messages.
     */
    static int nextBatch(int want, int got, double spentMs, double ttlMs, int most) {
        if (spentMs > ttlMs / 4) {
            return Math.max(1, Math.min(want, (int) Math.floor(got * (ttlMs / 4) / spentMs)));
        }
        if (got >= want && spentMs < ttlMs / 8) {
            return Math.min(most, want * 2);
        }
        return want;
    }

    private static double msSince(long nanos) {
        return (System.nanoTime() - nanos) / 1e6;
    }

    private void loop() {
        List<Delivery> done = new ArrayList<>();
        long backoff = FIRST_BACKOFF_MS;
        int want = Math.min(FIRST_BATCH, batch);
        while (true) {
            if (stopping()) {
                // The last acks, with no poll behind them.
                ackAlone(done);
                return;
            }
            List<Delivery> got;
            long sent = System.nanoTime();
            try {
                Polled polled = client.poll(topic, want, pollTimeoutSeconds, done);
                warnUnconsumed(polled.results());
                got = polled.messages();
                done = new ArrayList<>();
                backoff = FIRST_BACKOFF_MS;
            } catch (RuntimeException e) { // DelayqException, or a reply this client could not read
                LOG.log(Level.WARNING, "delayq: poll of {0} failed ({1}); trying again", topic, e.toString());
                if (e instanceof ApiException a && a.status() == 400 && !done.isEmpty()) {
                    // The poll itself was refused: not carrying these acks again keeps the
                    // loop from being refused for ever; their messages come back after the ttl.
                    LOG.log(Level.WARNING, "delayq: dropping {0} carried acks", done.size());
                    done = new ArrayList<>();
                }
                try {
                    stopping.await(backoff, TimeUnit.MILLISECONDS);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    stopping.countDown();
                }
                backoff = Math.min(backoff * 2, LAST_BACKOFF_MS);
                continue;
            }
            if (got.isEmpty()) {
                continue;
            }
            long ttl = Long.MAX_VALUE;
            for (Delivery d : got) {
                ttl = Math.min(ttl, d.ttlMs());
            }
            // A delivery lapses ttl ms after the server handed it out, which is after `sent`.
            double lapsesAt = ttl - Math.min(ttl / 10.0, 1000.0);
            long started = System.nanoTime();
            for (Delivery d : got) {
                double now = msSince(sent);
                if (now > lapsesAt) {
                    LOG.log(Level.WARNING, "delayq: message {0} not started: its delivery lapses (ttl {1} ms); "
                            + "it is handed out again", d.id(), ttl);
                    continue;
                }
                if (!done.isEmpty() && now > ttl / 2.0) {
                    // Held acks must reach the server within the ttl.
                    ackAlone(done);
                    done = new ArrayList<>();
                }
                if (handle(d)) {
                    done.add(d);
                } else {
                    nack(d);
                }
            }
            want = nextBatch(want, got.size(), msSince(started), ttl, batch);
        }
    }

    /** Runs the handler on one message: whether it succeeded. */
    private boolean handle(Delivery d) {
        try {
            if (pool == null) {
                handler.handle(d);
            } else {
                warnIfTtlShort(d);
                Future<?> f = pool.submit(() -> {
                    handler.handle(d);
                    return null;
                });
                try {
                    f.get(handlerTimeout.toMillis(), TimeUnit.MILLISECONDS);
                } catch (TimeoutException e) {
                    f.cancel(true);
                    LOG.log(Level.WARNING, "delayq: handler of message {0} took over {1} ms; nacked", d.id(),
                            handlerTimeout.toMillis());
                    return false;
                } catch (InterruptedException e) {
                    f.cancel(true);
                    Thread.currentThread().interrupt();
                    stopping.countDown();
                    return false;
                } catch (ExecutionException e) {
                    throw e.getCause() == null ? e : e.getCause();
                }
            }
            return true;
        } catch (VirtualMachineError e) {
            throw e;
        } catch (Throwable e) { // the handler's failure is the message's
            LOG.log(Level.WARNING, "delayq: handler of message " + d.id() + " failed; nacked", e);
            return false;
        }
    }

    private void warnIfTtlShort(Delivery d) {
        long ttl = d.ttlMs();
        if (!ttlWarned && ttl > 0 && handlerTimeout.toMillis() >= ttl) {
            ttlWarned = true;
            LOG.log(Level.WARNING, "delayq: handler timeout {0} ms is not below the ttl of message {1} ({2} ms): "
                    + "a slow handler's message may be handed out again meanwhile", handlerTimeout.toMillis(), d.id(),
                    ttl);
        }
    }

    /**
     * Logs each ack that did not consume its message ({@code not_in_flight},
     * {@code stale_delivery}, {@code not_found}): another delivery holds it, or it was nacked,
     * cancelled or handed out again meanwhile.
     */
    private static void warnUnconsumed(List<AckResult> results) {
        for (AckResult r : results) {
            if (!r.consumed()) {
                LOG.log(Level.WARNING, "delayq: ack of {0} answered {1} (status {2})", r.id(), r.result(),
                        r.status());
            }
        }
    }

    /** Sends held acks on their own: {@code POST /ack}, up to 100 deliveries a request. */
    private void ackAlone(List<Delivery> done) {
        for (int i = 0; i < done.size(); i += ACKS_PER_REQUEST) {
            List<Delivery> part = done.subList(i, Math.min(done.size(), i + ACKS_PER_REQUEST));
            try {
                warnUnconsumed(client.ackAll(part));
            } catch (ApiException e) {
                LOG.log(Level.WARNING, "delayq: acks of {0} messages refused: {1}", part.size(), e.getMessage());
            } catch (DelayqException e) {
                LOG.log(Level.WARNING, "delayq: acks of {0} messages not sent ({1}); they are handed out again "
                        + "after their ttl", part.size(), e.getMessage());
            }
        }
    }

    private void nack(Delivery d) {
        try {
            client.nack(d, nackDelay);
        } catch (DelayqException e) {
            LOG.log(Level.WARNING, "delayq: nack of {0} not taken ({1}); it comes back after its ttl", d.id(),
                    e.getMessage());
        }
    }

    private static ThreadFactory named(String prefix) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, prefix + "-" + n.getAndIncrement());
            t.setDaemon(true);
            return t;
        };
    }

    /** Builds a {@link Consumer}. */
    public static final class Builder {
        private final DelayqClient client;
        private final String topic;
        private final Handler handler;
        private int loops = 1;
        private int batch = 100;
        private int pollTimeoutSeconds = 5;
        private Duration handlerTimeout;
        private Duration nackDelay;

        private Builder(DelayqClient client, String topic, Handler handler) {
            this.client = Objects.requireNonNull(client, "client");
            this.topic = Objects.requireNonNull(topic, "topic");
            this.handler = Objects.requireNonNull(handler, "handler");
        }

        /** Long polls at once, each handling its batch one message after another (default 1). */
        public Builder loops(int loops) {
            if (loops < 1) {
                throw new IllegalArgumentException("loops must be at least 1");
            }
            this.loops = loops;
            return this;
        }

        /**
         * The most messages a poll takes (1 to 100, default 100). A loop asks for 10 at first
         * (or {@code batch}, if fewer) and fewer or more after each batch, so that a batch's
         * handling fits the messages' ttl (see {@link Consumer}).
         */
        public Builder batch(int batch) {
            if (batch < 1 || batch > 100) {
                throw new IllegalArgumentException("batch must be 1 to 100");
            }
            this.batch = batch;
            return this;
        }

        /** How long a poll waits for messages (whole seconds, 1 to 300; default 5 s); a stop waits it out. */
        public Builder pollTimeout(Duration timeout) {
            long s = timeout.toSeconds();
            if (s < 1 || s > 300) {
                throw new IllegalArgumentException("the poll timeout must be 1 to 300 s");
            }
            this.pollTimeoutSeconds = (int) s;
            return this;
        }

        /**
         * Bounds each handler: one that takes longer is interrupted, counted failed and its
         * message nacked. Keep it below the messages' ttl. Default: none.
         */
        public Builder handlerTimeout(Duration timeout) {
            if (timeout != null && (timeout.isNegative() || timeout.isZero())) {
                throw new IllegalArgumentException("the handler timeout must be positive");
            }
            this.handlerTimeout = timeout;
            return this;
        }

        /** The wait before a failed message comes back; default: its own retry policy. */
        public Builder nackDelay(Duration delay) {
            this.nackDelay = delay;
            return this;
        }

        public Consumer build() {
            return new Consumer(this);
        }
    }
}
