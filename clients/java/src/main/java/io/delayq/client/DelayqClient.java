package io.delayq.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * A delayq cluster, reached at one or several base URLs (tried in turn): every route of its
 * HTTP API, over {@link java.net.http.HttpClient}. Thread-safe; share one.
 *
 * <pre>{@code
 * DelayqClient client = DelayqClient.builder()
 *         .urls("http://node-1:7070", "http://node-2:7070")
 *         .timeout(Duration.ofSeconds(10))
 *         .build();
 * client.push(Message.builder("sms", "hello").delayMs(5_000).bizKey("order-17").build());
 * }</pre>
 *
 * <p><b>Timeouts.</b> Every request is bounded by {@code timeout} (connecting included); a long
 * poll waits its own timeout plus {@code timeout}.
 *
 * <p><b>Several nodes.</b> A node that does not answer, or answers 502, 504, or 503
 * {@code node_stalled} / {@code node_unavailable}, is skipped for the next URL, and the node
 * that answered is tried first next time. Other error answers (a 400, a 404, a 409) are the
 * cluster's word and are thrown as {@link ApiException}; when no node answered,
 * {@link TransportException}. A 503 {@code node_stalled} / {@code node_unavailable} means the
 * node applied nothing, so every request goes on to the next node after one. After no answer,
 * a 502 or a 504, a push (single or batch) goes on only when every message has a bizKey, which
 * makes it idempotent: without one, the push may have been applied by the node that failed to
 * answer, and the exception says so.
 *
 * <p><b>Tokens.</b> {@code adminToken} goes as {@code Authorization: Bearer} to the routes
 * that change things (push, cancel, reschedule, pause, resume, requeue); {@code readToken}
 * (or else the admin token) to those that show messages (message, search, topics, dead).
 *
 * <p><b>TLS.</b> {@code https://} URLs are checked against the platform's CAs, or, with
 * {@code caFile}, against the CA certificates of that PEM file alone.
 */
public final class DelayqClient {
    private static final String JSON = "application/json";

    private final List<String> urls;
    private final Duration timeout;
    private final String adminToken;
    private final String readToken;
    private final HttpClient http;
    /** The node that answered last: tried first. */
    private volatile int first;

    private DelayqClient(Builder b) {
        this.urls = List.copyOf(b.urls);
        this.timeout = b.timeout;
        this.adminToken = b.adminToken;
        this.readToken = b.readToken;
        HttpClient.Builder h = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(timeout)
                .followRedirects(HttpClient.Redirect.NEVER);
        if (b.caFile != null) {
            h.sslContext(trusting(b.caFile));
        }
        this.http = h.build();
    }

    /** A client of the node (or balancer) at {@code url}, with the defaults. */
    public static DelayqClient of(String url) {
        return builder().url(url).build();
    }

    public static Builder builder() {
        return new Builder();
    }

    /** The base URLs, in the order given. */
    public List<String> urls() {
        return urls;
    }

    /** The bound of every request (a long poll: its own timeout plus this). */
    public Duration timeout() {
        return timeout;
    }

    // -- producing -------------------------------------------------------------------------

    /**
     * {@code POST /push}: answered once the message is durable. Without a bizKey it goes to the
     * next node only after a 503 {@code node_stalled} / {@code node_unavailable} (nothing
     * applied): when a node fails to answer (or a proxy answers 502/504), the message may or may
     * not be accepted ({@link TransportException}, {@link ApiException}). A duplicate pushed with
     * {@link OnDuplicate#REPLACE} or {@link OnDuplicate#EXTEND} carries what it did to the live
     * message ({@link Pushed#result()}, {@link Pushed#dueTime()}).
     */
    public Pushed push(Message message) {
        Map<String, Object> r = object(request("POST", "/push", message.toMap(), adminToken, 0,
                message.bizKey() != null));
        return Pushed.of(Json.string(r, "id"), Boolean.TRUE.equals(r.get("duplicate")), r);
    }

    /** A message due now with the server's defaults. */
    public Pushed push(String topic, String body) {
        return push(Message.of(topic, body));
    }

    /**
     * {@code POST /push/batch} (1 to 1000 messages): all durable, or none accepted. The answers
     * are in the order pushed; a message whose bizKey a live message held is
     * {@link Pushed#duplicate()}, and with {@link OnDuplicate#REPLACE} or
     * {@link OnDuplicate#EXTEND} carries its outcome (the answer's {@code updates}).
     */
    public List<Pushed> pushBatch(List<Message> messages) {
        List<Map<String, Object>> wire = new ArrayList<>(messages.size());
        boolean idempotent = !messages.isEmpty();
        for (Message m : messages) {
            wire.add(m.toMap());
            idempotent &= m.bizKey() != null;
        }
        Map<String, Object> r = object(request("POST", "/push/batch", Map.of("messages", wire), adminToken, 0,
                idempotent));
        List<Object> ids = Json.list(r.get("ids"));
        boolean[] dup = new boolean[ids.size()];
        for (Object n : Json.list(r.get("duplicates"))) {
            int i = ((Number) n).intValue();
            if (i >= 0 && i < dup.length) {
                dup[i] = true;
            }
        }
        List<Map<String, Object>> updates = new ArrayList<>();
        for (int i = 0; i < ids.size(); i++) {
            updates.add(Map.of());
        }
        for (Object u : Json.list(r.get("updates"))) {
            Map<String, Object> update = Json.object(u);
            int i = (int) Json.number(update, "index", -1);
            if (i >= 0 && i < updates.size()) {
                updates.set(i, update);
            }
        }
        List<Pushed> out = new ArrayList<>(ids.size());
        for (int i = 0; i < ids.size(); i++) {
            out.add(Pushed.of(String.valueOf(ids.get(i)), dup[i], updates.get(i)));
        }
        return out;
    }

    /**
     * {@code POST /cancel} of one message: {@code {"deleted", "results": [{"id", "result"}]}},
     * {@code result} one of {@code deleted}, {@code in_flight}, {@code already_consumed},
     * {@code dead}, {@code not_found}.
     */
    public Map<String, Object> cancel(String id) {
        return object(request("POST", "/cancel", Map.of("id", id), adminToken, 0, true));
    }

    /** {@code POST /cancel} of 1 to 1000 messages, a result per id as {@link #cancel}. */
    public Map<String, Object> cancelIds(Collection<String> ids) {
        return object(request("POST", "/cancel", Map.of("ids", List.copyOf(ids)), adminToken, 0, true));
    }

    /** The live message of the topic holding the bizKey; {@code not_found} (404) when none does. */
    public Map<String, Object> cancelBizKey(String topic, String bizKey) {
        return object(request("POST", "/cancel", ordered("topic", topic, "bizKey", bizKey), adminToken, 0, true));
    }

    /**
     * Every live message of the topic whose bizKey starts with {@code prefix} (compared exactly):
     * {@code {"matched", "results": {"deleted": n, "in_flight": n, ...}}}.
     */
    public Map<String, Object> cancelPrefix(String topic, String prefix) {
        return object(request("POST", "/cancel", ordered("topic", topic, "bizKeyPrefix", prefix), adminToken, 0,
                true));
    }

    /**
     * {@code POST /reschedule}: messages not handed out yet move and keep their ids, bodies and
     * attempts → {@code {"rescheduled", "results": [{"id", "result", "dueTime", "priority"}]}},
     * {@code result} one of {@code rescheduled}, {@code in_flight}, {@code already_consumed},
     * {@code deleted}, {@code dead}, {@code not_found}.
     */
    public Map<String, Object> reschedule(Collection<String> ids, Reschedule to) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("ids", List.copyOf(ids));
        to.into(body);
        return object(request("POST", "/reschedule", body, adminToken, 0, true));
    }

    // -- looking ---------------------------------------------------------------------------

    /**
     * {@code GET /messages/{id}}: {@code {"message": {..., "status", "attempts"}, "updatedTime",
     * "statusFrom", "history": [...]}}; {@code not_found} (404) for an unknown id.
     */
    public Map<String, Object> message(String id) {
        return object(request("GET", "/messages/" + path(id), null, readOr(), 0, true));
    }

    /**
     * {@code GET /messages?topic=...}, with any of the parameters {@code bizKey},
     * {@code bizKeyPrefix}, {@code status}, {@code limit}, {@code after} (others are refused,
     * {@code unknown_parameter}) → {@code {"messages": [...], "next"}}.
     */
    public Map<String, Object> search(String topic, Map<String, ?> params) {
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("topic", topic);
        q.putAll(params);
        return object(request("GET", "/messages" + query(q), null, readOr(), 0, true));
    }

    /** A topic's messages, first page. */
    public Map<String, Object> search(String topic) {
        return search(topic, Map.of());
    }

    /**
     * {@code GET /topics}: every topic with its {@code counts}, {@code paused}, limits and
     * {@code overdueMs}.
     */
    public List<Map<String, Object>> topics() {
        Map<String, Object> r = object(request("GET", "/topics", null, readOr(), 0, true));
        List<Map<String, Object>> out = new ArrayList<>();
        for (Object t : Json.list(r.get("topics"))) {
            out.add(Json.object(t));
        }
        return out;
    }

    /**
     * {@code GET /forecast} ({@code topic} null: every topic) or {@code GET
     * /topics/{topic}/forecast}: how many messages fall due per {@code bucket} (e.g. "1m") over
     * {@code span} (e.g. "24h"; null for either: the server's default) → {@code {"buckets":
     * [{"at", "count"[, "low", "high"]}], "total", "exact", ...}}. A topic's bucket too large to
     * read whole is an estimate with its 95 % interval ({@code low}, {@code high}).
     */
    public Map<String, Object> forecast(String topic, String bucket, String span) {
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("bucket", bucket);
        q.put("span", span);
        String p = topic == null ? "/forecast" : "/topics/" + path(topic) + "/forecast";
        return object(request("GET", p + query(q), null, readOr(), 0, true));
    }

    /**
     * {@code POST /topics/{topic}/pause}: nothing of the topic is handed out, on any node, from
     * the answer on → {@code {"topic", "paused", "pausedAt", "changed", "known"}}.
     */
    public Map<String, Object> pause(String topic) {
        return object(request("POST", "/topics/" + path(topic) + "/pause", null, adminToken, 0, true));
    }

    /** {@code POST /topics/{topic}/resume}: handed out again. */
    public Map<String, Object> resume(String topic) {
        return object(request("POST", "/topics/" + path(topic) + "/resume", null, adminToken, 0, true));
    }

    /**
     * {@code GET /dead/{topic}}: a page of dead letters in id order, each with its history →
     * {@code {"messages": [...], "next"}}. {@code limit} (1 to 1000) and {@code after} (the
     * previous page's {@code next}) may be null.
     */
    public Map<String, Object> dead(String topic, Integer limit, String after) {
        Map<String, Object> q = new LinkedHashMap<>();
        q.put("limit", limit);
        q.put("after", after);
        return object(request("GET", "/dead/" + path(topic) + query(q), null, readOr(), 0, true));
    }

    public Map<String, Object> dead(String topic) {
        return dead(topic, null, null);
    }

    /**
     * {@code POST /dead/{target}/requeue}: a dead message by id (→ {@code {"id", "result",
     * "status"}}), or up to 10 000 dead letters of a topic (→ {@code {"topic", "requeued",
     * "skipped", "more"}}); live again, due at once, attempts counted from 0.
     */
    public Map<String, Object> requeue(String target) {
        return object(request("POST", "/dead/" + path(target) + "/requeue", null, adminToken, 0, true));
    }

    /** A topic's dead letters, at most {@code limit} of them. */
    public Map<String, Object> requeue(String target, int limit) {
        return object(request("POST", "/dead/" + path(target) + "/requeue" + query(Map.of("limit", limit)), null,
                adminToken, 0, true));
    }

    /** {@code GET /health}: the process answers → {@code {"status": "ok", "version", "revision"}}. */
    public Map<String, Object> health() {
        return object(request("GET", "/health", null, null, 0, true));
    }

    /**
     * {@code GET /ready}: Redis and the journal answer and every shard this node owns can be
     * scanned; a node that is not ready answers 503, thrown as {@link ApiException} whose
     * {@link ApiException#body()} says what is wrong.
     */
    public Map<String, Object> ready() {
        return object(request("GET", "/ready", null, null, 0, true));
    }

    // -- consuming -------------------------------------------------------------------------

    /**
     * {@code POST /get/{topic}}: acks {@code ack} (each by its receipt), then long-polls up to
     * {@code timeoutSeconds} (0 to 300) for up to {@code count} (1 to 100) messages, in one round
     * trip. The request waits {@code timeoutSeconds} plus the client's timeout. The wait goes in
     * the query ({@code ?timeout=}), where a proxy in front of the nodes sees it and bounds the
     * request by it (the shipped nginx: by its bucket of 2, 5, 10, 30, 60 or 300 s).
     */
    public Polled poll(String topic, int count, int timeoutSeconds, Collection<Delivery> ack) {
        List<Map<String, Object>> acks = new ArrayList<>(ack.size());
        for (Delivery d : ack) {
            acks.add(receiptOf(d));
        }
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("ack", acks);
        body.put("count", count);
        String route = "/get/" + path(topic) + query(Map.of("timeout", timeoutSeconds));
        Map<String, Object> r = object(request("POST", route, body, null, timeoutSeconds, true));
        List<AckResult> results = new ArrayList<>();
        for (Object o : Json.list(r.get("results"))) {
            results.add(AckResult.of(Json.object(o)));
        }
        List<Delivery> messages = new ArrayList<>();
        for (Object o : Json.list(r.get("messages"))) {
            messages.add(Delivery.of(Json.object(o)));
        }
        return new Polled((int) Json.number(r, "acked", 0), results, messages);
    }

    /** A long poll that carries no acks. */
    public Polled poll(String topic, int count, int timeoutSeconds) {
        return poll(topic, count, timeoutSeconds, List.of());
    }

    /**
     * {@code POST /ack/{id}?receipt=}: → {@code {"id", "status": "Consumed"}}; 409
     * {@code stale_delivery} when another delivery holds the message now, 409
     * {@code not_in_flight} when it is not handed out.
     */
    public Map<String, Object> ack(Delivery d) {
        return object(request("POST", "/ack/" + path(d.id()) + query(receiptQuery(d)), null, null, 0, true));
    }

    /** {@code POST /ack}: 1 to 100 deliveries in one request and one journal commit, a result each. */
    public List<AckResult> ackAll(Collection<Delivery> deliveries) {
        List<Map<String, Object>> ids = new ArrayList<>(deliveries.size());
        for (Delivery d : deliveries) {
            ids.add(receiptOf(d));
        }
        Map<String, Object> r = object(request("POST", "/ack", Map.of("ids", ids), null, 0, true));
        List<AckResult> out = new ArrayList<>();
        for (Object o : Json.list(r.get("results"))) {
            out.add(AckResult.of(Json.object(o)));
        }
        return out;
    }

    /**
     * {@code POST /nack/{id}?receipt=}: back to {@code Delaying} by the message's retry policy
     * (or ready at once without one), {@code Dead} on its last attempt → {@code {"id", "result",
     * "status", "attempts"}}.
     */
    public Map<String, Object> nack(Delivery d) {
        return nack(d, null);
    }

    /** {@code POST /nack/{id}?receipt=&delay=}: delivered again after {@code delay} (at most a day). */
    public Map<String, Object> nack(Delivery d, Duration delay) {
        Map<String, Object> q = receiptQuery(d);
        q.put("delay", delay == null ? null : delay.toMillis());
        return object(request("POST", "/nack/" + path(d.id()) + query(q), null, null, 0, true));
    }

    // -- transport -------------------------------------------------------------------------

    private String readOr() {
        return readToken != null ? readToken : adminToken;
    }

    /** {@code receipt=} of a delivery (none for a delivery without one: the current delivery). */
    private static Map<String, Object> receiptQuery(Delivery d) {
        Map<String, Object> q = new LinkedHashMap<>();
        if (d.receipt() != null && !d.receipt().isEmpty()) {
            q.put("receipt", d.receipt());
        }
        return q;
    }

    private static Map<String, Object> receiptOf(Delivery d) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("id", d.id());
        if (d.receipt() != null && !d.receipt().isEmpty()) {
            m.put("receipt", d.receipt());
        }
        return m;
    }

    private static Map<String, Object> ordered(String k1, Object v1, String k2, Object v2) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put(k1, v1);
        m.put(k2, v2);
        return m;
    }

    private static Map<String, Object> object(Object reply) {
        if (reply instanceof Map<?, ?>) {
            return Json.object(reply);
        }
        throw new DelayqException("the server answered something other than a JSON object: " + reply);
    }

    private static String path(String segment) {
        return URLEncoder.encode(segment, StandardCharsets.UTF_8).replace("+", "%20");
    }

    private static String query(Map<String, ?> params) {
        StringBuilder q = new StringBuilder();
        for (Map.Entry<String, ?> e : params.entrySet()) {
            if (e.getValue() == null) {
                continue;
            }
            q.append(q.length() == 0 ? '?' : '&')
                    .append(URLEncoder.encode(e.getKey(), StandardCharsets.UTF_8))
                    .append('=')
                    .append(URLEncoder.encode(String.valueOf(e.getValue()), StandardCharsets.UTF_8));
        }
        return q.toString();
    }

    /**
     * Whether an error answer sends the request on to the next node: {@code node_stalled} and
     * {@code node_unavailable} (503) for any request, as that node applied nothing; 502 and 504
     * (a proxy that got no answer, which the node may still have applied) for idempotent
     * requests only.
     */
    static boolean skips(int status, String code, boolean idempotent) {
        if ("node_stalled".equals(code) || "node_unavailable".equals(code)) {
            return true;
        }
        return idempotent && (status == 502 || status == 504);
    }

    /**
     * Sends one request to the nodes in turn. {@code waitSeconds}: the long poll's own wait,
     * added to the timeout. {@code idempotent}: whether a second node may be asked after the
     * first failed to answer or a proxy answered 502/504 for it ({@link #skips}).
     */
    private Object request(String method, String path, Object body, String token, int waitSeconds,
            boolean idempotent) {
        Duration limit = timeout.plusSeconds(waitSeconds);
        String payload = body == null ? null : Json.write(body);
        DelayqException last = null;
        int start = first;
        for (int k = 0; k < urls.size(); k++) {
            int i = (start + k) % urls.size();
            String base = urls.get(i);
            HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + path))
                    .timeout(limit)
                    .header("Accept", JSON);
            if (payload != null) {
                rb.header("Content-Type", JSON)
                        .method(method, HttpRequest.BodyPublishers.ofString(payload, StandardCharsets.UTF_8));
            } else {
                rb.method(method, HttpRequest.BodyPublishers.noBody());
            }
            if (token != null) {
                rb.header("Authorization", "Bearer " + token);
            }
            HttpResponse<String> resp;
            try {
                resp = send(rb.build(), limit);
            } catch (TransportException e) {
                if (!idempotent) {
                    throw e;
                }
                last = e;
                continue;
            }
            int status = resp.statusCode();
            Object reply = parse(resp.body());
            if (status < 400) {
                first = i;
                if (reply instanceof String text) {
                    throw new DelayqException(base + path + " answered " + status + " with no JSON: " + text);
                }
                return reply;
            }
            ApiException error = error(status, reply);
            if (skips(status, error.code(), idempotent)) {
                last = error;
                continue;
            }
            throw error;
        }
        throw Objects.requireNonNull(last);
    }

    private HttpResponse<String> send(HttpRequest req, Duration limit) {
        String where = req.method() + " " + req.uri();
        CompletableFuture<HttpResponse<String>> f =
                http.sendAsync(req, HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        try {
            // The request's own timeout covers the answer's head; this bounds its body too.
            return f.get(limit.toMillis() + 1_000, TimeUnit.MILLISECONDS);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            throw new TransportException(where + ": " + describe(cause), cause);
        } catch (TimeoutException e) {
            f.cancel(true);
            throw new TransportException(where + ": no answer within " + limit.toMillis() + " ms", e);
        } catch (InterruptedException e) {
            f.cancel(true);
            Thread.currentThread().interrupt();
            throw new TransportException(where + ": interrupted", e);
        }
    }

    private static String describe(Throwable t) {
        if (t instanceof java.net.ConnectException && (t.getMessage() == null || t.getMessage().isBlank())) {
            return "ConnectException: could not connect";
        }
        String m = t.getMessage();
        return m == null || m.isBlank() ? t.getClass().getSimpleName() : t.getClass().getSimpleName() + ": " + m;
    }

    /** The reply as JSON; as text when it is not JSON; null when empty. */
    private static Object parse(String text) {
        if (text == null || text.isBlank()) {
            return null;
        }
        try {
            return Json.parse(text);
        } catch (IllegalArgumentException e) {
            return text;
        }
    }

    private static ApiException error(int status, Object reply) {
        if (reply instanceof Map<?, ?>) {
            Map<String, Object> m = Json.object(reply);
            String code = Json.string(m, "error");
            String message = Json.string(m, "message");
            return new ApiException(status, code == null || code.isEmpty() ? "http_" + status : code,
                    message == null ? "" : message, m);
        }
        return new ApiException(status, "http_" + status, reply == null ? "" : reply.toString().strip());
    }

    private static SSLContext trusting(Path caFile) {
        try (InputStream in = Files.newInputStream(caFile)) {
            Collection<? extends Certificate> certs = CertificateFactory.getInstance("X.509").generateCertificates(in);
            if (certs.isEmpty()) {
                throw new IllegalArgumentException("no certificate in " + caFile);
            }
            KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
            store.load(null, null);
            int n = 0;
            for (Certificate c : certs) {
                store.setCertificateEntry("delayq-ca-" + n++, c);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(store);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, tmf.getTrustManagers(), null);
            return ctx;
        } catch (IOException | GeneralSecurityException e) {
            throw new IllegalArgumentException("cannot read the CA file " + caFile + ": " + e.getMessage(), e);
        }
    }

    /** Builds a {@link DelayqClient}: at least one URL. */
    public static final class Builder {
        private final List<String> urls = new ArrayList<>();
        private Duration timeout = Duration.ofSeconds(10);
        private String adminToken;
        private String readToken;
        private Path caFile;

        private Builder() {}

        /** Adds a base URL ({@code http://host:port} or {@code https://…}, a path prefix allowed). */
        public Builder url(String url) {
            URI u = URI.create(Objects.requireNonNull(url, "url"));
            if (!("http".equals(u.getScheme()) || "https".equals(u.getScheme())) || u.getHost() == null) {
                throw new IllegalArgumentException("not an http(s) base URL: " + url);
            }
            String s = url;
            while (s.endsWith("/")) {
                s = s.substring(0, s.length() - 1);
            }
            urls.add(s);
            return this;
        }

        /** Adds base URLs, tried in turn. */
        public Builder urls(String... urls) {
            for (String u : urls) {
                url(u);
            }
            return this;
        }

        public Builder urls(Collection<String> urls) {
            urls.forEach(this::url);
            return this;
        }

        /** Bounds every request (default 10 s); a long poll waits its own timeout plus this. */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("the timeout must be positive");
            }
            this.timeout = timeout;
            return this;
        }

        /** Sent as {@code Authorization: Bearer} to the routes that change things. */
        public Builder adminToken(String token) {
            this.adminToken = token;
            return this;
        }

        /** Sent as {@code Authorization: Bearer} to the routes that show messages. */
        public Builder readToken(String token) {
            this.readToken = token;
            return this;
        }

        /** A PEM file of the CA certificates to trust for {@code https://} URLs (a private CA). */
        public Builder caFile(Path caFile) {
            this.caFile = caFile;
            return this;
        }

        public DelayqClient build() {
            if (urls.isEmpty()) {
                throw new IllegalArgumentException("give at least one base URL");
            }
            return new DelayqClient(this);
        }
    }
}
