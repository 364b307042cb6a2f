package io.delayq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import java.util.logging.SimpleFormatter;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The Java client against a real delayq node and a real Redis, started for this class
 * ({@link TestServer}). Each test uses topics of its own.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS)
class ClientTest {
    static TestServer server;
    static DelayqClient client;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start();
        client = DelayqClient.builder().url(server.url()).timeout(Duration.ofSeconds(5)).build();
    }

    @AfterAll
    static void stop() {
        if (server != null) {
            server.close();
        }
    }

    static long now() {
        return System.currentTimeMillis();
    }

    static void await(String what, Duration limit, BooleanSupplier done) throws InterruptedException {
        long deadline = System.nanoTime() + limit.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within " + limit + ": " + what);
            }
            Thread.sleep(50);
        }
    }

    static String status(String id) {
        return (String) Json.object(client.message(id).get("message")).get("status");
    }

    /** The ids of the topic's messages in a status, by the journal (a few ms behind Redis). */
    static Set<String> inStatus(String topic, String status) {
        Set<String> ids = new HashSet<>();
        String after = null;
        do {
            Map<String, Object> page = client.search(topic, after == null
                    ? Map.of("status", status, "limit", 1000)
                    : Map.of("status", status, "limit", 1000, "after", after));
            for (Object m : Json.list(page.get("messages"))) {
                ids.add((String) Json.object(m).get("id"));
            }
            after = (String) page.get("next");
        } while (after != null);
        return ids;
    }

    @Test
    void pushConsumeAckNoneEarlyNoneTwice() throws Exception {
        String topic = "java-burst";
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 200; i++) {
            batch.add(Message.builder(topic, Integer.toString(i)).delayMs(200 + (i % 5) * 100).build());
        }
        long pushedAt = now();
        List<String> ids = client.pushBatch(batch).stream().map(Pushed::id).toList();
        assertEquals(200, new HashSet<>(ids).size());
        Map<String, Long> seen = new ConcurrentHashMap<>();
        List<String> twice = new CopyOnWriteArrayList<>();
        CountDownLatch allIn = new CountDownLatch(ids.size());
        Consumer consumer = Consumer.builder(client, topic, d -> {
            if (seen.putIfAbsent(d.id(), now()) == null) {
                allIn.countDown();
            } else {
                twice.add(d.id());
            }
        }).loops(2).build().start();
        boolean all = allIn.await(30, TimeUnit.SECONDS);
        consumer.close();
        assertTrue(all, seen.size() + " of " + ids.size() + " delivered");
        assertEquals(List.of(), twice, "handed out twice");
        assertEquals(new HashSet<>(ids), seen.keySet());
        for (int i = 0; i < ids.size(); i++) {
            long due = pushedAt + 200 + (i % 5) * 100;
            assertTrue(seen.get(ids.get(i)) >= due, "message " + i + " early by " + (due - seen.get(ids.get(i))));
        }
        // Every ack was carried (or sent at the stop): each message ends Consumed.
        Set<String> want = new HashSet<>(ids);
        await("all 200 Consumed", Duration.ofSeconds(10), () -> inStatus(topic, "Consumed").equals(want));
        assertEquals("Consumed", status(ids.get(0)));
    }

    @Test
    void batchesFitTheTtlOfASlowHandler() throws Exception {
        // 30 messages of 1 s ttl and a 60 ms handler: a whole batch of 30 handled in one go
        // would take 1.8 s, past the ttl, and every ack carried after it would come too late
        // (each message handed out twice). Batches that fit the ttl hand each out once.
        String topic = "java-slow";
        List<Message> batch = new ArrayList<>();
        for (int i = 0; i < 30; i++) {
            batch.add(Message.builder(topic, Integer.toString(i)).ttlMs(1000).build());
        }
        List<String> ids = client.pushBatch(batch).stream().map(Pushed::id).toList();
        List<String> seen = new CopyOnWriteArrayList<>();
        Consumer consumer = Consumer.builder(client, topic, d -> {
            Thread.sleep(60);
            seen.add(d.id());
        }).loops(2).pollTimeout(Duration.ofSeconds(1)).build().start();
        try {
            await("all 30 handled", Duration.ofSeconds(30), () -> new HashSet<>(seen).size() == ids.size());
            Thread.sleep(1500); // a lapsed delivery would come back meanwhile
        } finally {
            consumer.stop(Duration.ofSeconds(10));
        }
        List<String> handled = new ArrayList<>(seen);
        List<String> want = new ArrayList<>(ids);
        handled.sort(null);
        want.sort(null);
        assertEquals(want, handled, "each handled once");
        for (String id : ids) {
            assertEquals("Consumed", status(id));
        }
    }

    @Test
    void aStaleReceiptIsRefused() throws Exception {
        String topic = "java-stale";
        client.push(Message.builder(topic, "x").ttlMs(300).build());
        List<Delivery> one = client.poll(topic, 1, 5).messages();
        assertEquals(1, one.size());
        Delivery first = one.get(0);
        Thread.sleep(500);
        List<Delivery> again = client.poll(topic, 1, 5).messages();
        assertEquals(1, again.size());
        Delivery second = again.get(0);
        assertEquals(first.id(), second.id());
        assertEquals(2, second.attempts());
        ApiException e = assertThrows(ApiException.class, () -> client.ack(first));
        assertEquals(409, e.status());
        assertEquals("stale_delivery", e.code());
        assertEquals(Optional.of(ErrorCode.STALE_DELIVERY), e.errorCode());
        assertFalse(e.retryable());
        assertEquals("Consumed", client.ack(second).get("status"));
    }

    @Test
    void aFailingHandlerNacksAndTheRetryComesBack() throws Exception {
        String topic = "java-nack";
        client.push(Message.builder(topic, "x").retry(Retry.fixed(100)).build());
        List<Integer> calls = new CopyOnWriteArrayList<>();
        Consumer consumer = Consumer.builder(client, topic, d -> {
            calls.add(d.attempts());
            if (calls.size() == 1) {
                throw new IllegalStateException("first try fails");
            }
        }).pollTimeout(Duration.ofSeconds(1)).build().start();
        try {
            await("a second delivery", Duration.ofSeconds(20), () -> calls.size() >= 2);
        } finally {
            consumer.close();
        }
        assertEquals(List.of(1, 2), calls.subList(0, 2));
    }

    @Test
    void aHandlerOverItsTimeoutIsNackedAndInterrupted() throws Exception {
        String topic = "java-slow";
        String id = client.push(Message.builder(topic, "x").ttlMs(20_000).build()).id();
        List<Integer> calls = new CopyOnWriteArrayList<>();
        CountDownLatch interrupted = new CountDownLatch(1);
        Consumer consumer = Consumer.builder(client, topic, d -> {
            calls.add(d.attempts());
            if (calls.size() == 1) {
                try {
                    Thread.sleep(10_000);
                } catch (InterruptedException e) {
                    interrupted.countDown();
                    throw e;
                }
            }
        }).handlerTimeout(Duration.ofMillis(300)).pollTimeout(Duration.ofSeconds(1)).build().start();
        try {
            // Nacked at 300 ms, not left to its 20 s ttl.
            await("the retry", Duration.ofSeconds(5), () -> calls.size() >= 2);
        } finally {
            consumer.close();
        }
        assertEquals(List.of(1, 2), calls.subList(0, 2));
        assertTrue(interrupted.await(1, TimeUnit.SECONDS), "the slow handler was interrupted");
        await("Consumed", Duration.ofSeconds(5), () -> status(id).equals("Consumed"));
    }

    @Test
    void aGracefulStopFinishesAndAcksTheMessagesInHand() throws Exception {
        String topic = "java-stop";
        List<String> ids = client.pushBatch(List.of(Message.of(topic, "a"), Message.of(topic, "b"),
                Message.of(topic, "c"))).stream().map(Pushed::id).toList();
        CountDownLatch inHand = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        Set<String> handled = ConcurrentHashMap.newKeySet();
        // One poll takes all three; the handler holds the first until the stop has begun.
        Consumer consumer = Consumer.builder(client, topic, d -> {
            inHand.countDown();
            release.await();
            handled.add(d.id());
        }).batch(10).pollTimeout(Duration.ofSeconds(1)).build();
        await("all three due", Duration.ofSeconds(5), () -> inStatus(topic, "Ready").size() == 3);
        consumer.start();
        assertTrue(inHand.await(10, TimeUnit.SECONDS));
        Thread stopper = new Thread(consumer::close);
        stopper.start();
        Thread.sleep(200);
        release.countDown();
        stopper.join(10_000);
        assertFalse(stopper.isAlive(), "close() returned");
        assertEquals(new HashSet<>(ids), handled, "the messages in hand were finished");
        // Their acks went in a POST /ack of their own: Consumed now, not after a ttl.
        for (String id : ids) {
            assertEquals("Consumed", status(id));
        }
    }

    @Test
    void cancelRescheduleAndErrorCodes() {
        String topic = "java-manage";
        Pushed p = client.push(Message.builder(topic, "x").delayMs(600_000).bizKey("order-1").build());
        Pushed again = client.push(Message.builder(topic, "y").delayMs(600_000).bizKey("order-1").build());
        assertEquals(p.id(), again.id());
        assertTrue(again.duplicate());
        assertFalse(p.duplicate());

        Map<String, Object> r = client.reschedule(List.of(p.id()), Reschedule.delayMs(900_000).withPriority(7));
        Map<String, Object> one = Json.object(Json.list(r.get("results")).get(0));
        assertEquals("rescheduled", one.get("result"));
        assertEquals(7L, one.get("priority"));
        assertEquals(1L, r.get("rescheduled"));

        Map<String, Object> found = client.search(topic, Map.of("bizKey", "order-1"));
        assertEquals(p.id(), Json.object(Json.list(found.get("messages")).get(0)).get("id"));

        Map<String, Object> c = client.cancel(p.id());
        assertEquals("deleted", Json.object(Json.list(c.get("results")).get(0)).get("result"));
        assertEquals("Deleted", status(p.id()));

        ApiException notFound = assertThrows(ApiException.class, () -> client.cancelBizKey(topic, "order-1"));
        assertEquals(404, notFound.status());
        assertEquals("not_found", notFound.code());
        assertEquals(Optional.of(ErrorCode.NOT_FOUND), notFound.errorCode());

        ApiException badDelay = assertThrows(ApiException.class,
                () -> client.push(Message.builder(topic, "x").delayMs(-1).build()));
        assertEquals(400, badDelay.status());
        assertEquals(Optional.of(ErrorCode.INVALID_DELAY), badDelay.errorCode());

        ApiException unknownId = assertThrows(ApiException.class, () -> client.message("12345"));
        assertEquals(Optional.of(ErrorCode.NOT_FOUND), unknownId.errorCode());

        ApiException badParameter = assertThrows(ApiException.class,
                () -> client.search(topic, Map.of("bizkey", "order-1")));
        assertEquals(Optional.of(ErrorCode.UNKNOWN_PARAMETER), badParameter.errorCode());

        assertTrue(client.topics().stream().anyMatch(t -> topic.equals(t.get("topic"))));
    }

    @Test
    void orderedGroupsHandOutOneAtATimeInDueOrder() {
        String topic = "java-groups";
        String a1 = client.push(Message.builder(topic, "a1").group("a").build()).id();
        String a2 = client.push(Message.builder(topic, "a2").group("a").delayMs(5).build()).id();
        client.push(Message.builder(topic, "free").delayMs(5).build());
        List<Delivery> got = new ArrayList<>();
        while (got.size() < 2) {
            got.addAll(client.poll(topic, 10, 2).messages());
        }
        Map<String, String> groups = new java.util.HashMap<>();
        for (Delivery d : got) {
            groups.put(d.body(), d.group());
        }
        assertEquals(2, got.size());
        assertEquals("a", groups.get("a1"));
        assertTrue(groups.containsKey("free") && groups.get("free") == null);
        assertTrue(client.poll(topic, 10, 1).messages().isEmpty(), "a2 waits behind a1");
        for (Delivery d : got) {
            client.ack(d);
        }
        List<Delivery> next = client.poll(topic, 1, 5).messages();
        assertEquals(List.of(a2), next.stream().map(Delivery::id).toList());
        assertNotEquals(a1, a2);
        client.ack(next.get(0));
        ApiException bad =
                assertThrows(ApiException.class, () -> client.push(Message.builder(topic, "x").group("").build()));
        assertEquals(400, bad.status());
        assertEquals(Optional.of(ErrorCode.INVALID_GROUP), bad.errorCode());
    }

    @Test
    void forecastCountsWhatFallsDue() {
        client.push(Message.builder("java-forecast", "x").delayMs(1_800_000).build());
        Map<String, Object> f = client.forecast("java-forecast", "20m", "1h");
        List<Object> counts = new ArrayList<>();
        for (Object b : Json.list(f.get("buckets"))) {
            counts.add(((Number) Json.object(b).get("count")).longValue());
        }
        assertEquals(List.of(0L, 1L, 0L), counts);
        assertEquals(Boolean.TRUE, f.get("exact"));
        assertEquals(2, Json.list(client.forecast(null, "1h", "2h").get("buckets")).size());
        ApiException bad = assertThrows(ApiException.class, () -> client.forecast(null, "0s", null));
        assertEquals(400, bad.status());
        assertEquals(Optional.of(ErrorCode.INVALID_PARAMETER), bad.errorCode());
    }

    @Test
    void localWallClockTimesAndDst() {
        String topic = "java-local";
        // Berlin's clock jumps from 02:00 to 03:00 on 2027-03-28: 02:30 does not exist, and is
        // refused unless dst says which instant it means.
        ApiException gap = assertThrows(ApiException.class, () -> client.push(
                Message.builder(topic, "x").deliverAtLocal("2027-03-28T02:30:00", "Europe/Berlin").build()));
        assertEquals(400, gap.status());
        assertEquals(Optional.of(ErrorCode.INVALID_DELAY), gap.errorCode());
        String id = client.push(Message.builder(topic, "x").deliverAtLocal("2027-03-28T02:30:00", "Europe/Berlin")
                .dst(Dst.LATER).build()).id();
        // 03:30 +02:00.
        assertEquals(1806197400000L, Json.object(client.message(id).get("message")).get("dueTime"));
        // 2027-10-31 02:30 happens twice in Berlin; EARLIER is its first pass, 02:30 +02:00.
        Map<String, Object> r = client.reschedule(List.of(id),
                Reschedule.local("2027-10-31T02:30:00", "Europe/Berlin", Dst.EARLIER));
        Map<String, Object> one = Json.object(Json.list(r.get("results")).get(0));
        assertEquals("rescheduled", one.get("result"));
        assertEquals(1824942600000L, one.get("dueTime"));
        client.cancel(id);
    }

    @Test
    void onDuplicateReplaceAndExtend() {
        String topic = "java-debounce";
        Pushed first = client.push(Message.builder(topic, "v1").delayMs(60_000).bizKey("k").build());
        assertEquals(new Pushed(first.id(), false, null, null), first);
        long asked = now();
        Pushed again = client.push(Message.builder(topic, "v2").delayMs(500).bizKey("k")
                .onDuplicate(OnDuplicate.REPLACE).build());
        assertEquals(first.id(), again.id());
        assertTrue(again.duplicate());
        assertEquals(DuplicateOutcome.REPLACED, again.result());
        assertNotNull(again.dueTime());
        assertTrue(again.dueTime() >= asked + 500 && again.dueTime() <= now() + 500, again.toString());
        // The live message now holds v2 under its first id, due in 500 ms.
        List<Delivery> got = client.poll(topic, 1, 5).messages();
        assertEquals(List.of(first.id() + " v2"), got.stream().map(d -> d.id() + " " + d.body()).toList());
        assertTrue(now() >= again.dueTime(), "delivered before its dueTime");
        assertEquals("Consumed", client.ack(got.get(0)).get("status"));

        // Extend to a time sooner than the live message's: left as it was.
        Pushed held = client.push(Message.builder(topic, "e").delayMs(60_000).bizKey("k-extend").build());
        Message sooner = Message.builder(topic, "e").delayMs(100).bizKey("k-extend")
                .onDuplicate(OnDuplicate.EXTEND).build();
        Pushed kept = client.push(sooner);
        long due = (Long) Json.object(client.message(held.id()).get("message")).get("dueTime");
        Pushed want = new Pushed(held.id(), true, DuplicateOutcome.NOT_LATER, due);
        assertEquals(want, kept);
        // A batch answers the same from its updates.
        assertEquals(List.of(want), client.pushBatch(List.of(sooner)));

        // Without a bizKey there is no live message to act on: refused.
        ApiException noKey = assertThrows(ApiException.class, () -> client.push(
                Message.builder(topic, "x").onDuplicate(OnDuplicate.REPLACE).build()));
        assertEquals(400, noKey.status());
        assertEquals(Optional.of(ErrorCode.INVALID_FIELD), noKey.errorCode());
        client.cancel(held.id());
    }

    @Test
    void anOutboxRowIsWhatPushSends() throws Exception {
        String topic = "java-outbox";
        Message m = Message.builder(topic, "order \"42\" \u00e9").delayMs(600_000).bizKey("order-42").priority(3)
                .ttlMs(20_000).maxAttempts(4).retry(Retry.fixed(1_000)).onDuplicate(OnDuplicate.KEEP).build();
        String row = m.outboxRow();
        // The row parses as the JSON of the body push sends for the message.
        List<String> seen = new CopyOnWriteArrayList<>();
        HttpServer stand = stub(200, "{\"id\":\"7\"}", seen);
        try {
            DelayqClient.builder().url(url(stand)).timeout(Duration.ofSeconds(2)).build().push(m);
        } finally {
            stand.stop(0);
        }
        assertEquals(1, seen.size());
        assertTrue(seen.get(0).startsWith("POST /push {"), seen.get(0));
        assertEquals(Json.parse(seen.get(0).substring("POST /push ".length())), Json.parse(row));
        assertEquals("{\"topic\":\"java-outbox\",\"body\":\"x\"}", Message.of(topic, "x").outboxRow());
        // The server refuses replace and extend in an outbox row: so does the client.
        for (OnDuplicate refused : List.of(OnDuplicate.REPLACE, OnDuplicate.EXTEND)) {
            assertThrows(IllegalArgumentException.class,
                    () -> Message.builder(topic, "x").bizKey("k").onDuplicate(refused).build().outboxRow(),
                    refused.wire());
        }
        // The row's text, as is, is a message POST /push takes.
        HttpResponse<String> r = HttpClient.newHttpClient().send(
                HttpRequest.newBuilder(URI.create(server.url() + "/push")).timeout(Duration.ofSeconds(5))
                        .header("Content-Type", "application/json")
                        .POST(HttpRequest.BodyPublishers.ofString(row, StandardCharsets.UTF_8)).build(),
                HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        assertEquals(200, r.statusCode(), r.body());
        String id = Json.string(Json.object(Json.parse(r.body())), "id");
        assertNotNull(id, r.body());
        Map<String, Object> got = Json.object(client.message(id).get("message"));
        assertEquals(List.of(topic, m.body(), "order-42"),
                List.of(got.get("topic"), got.get("body"), got.get("bizKey")));
        client.cancel(id);
    }

    @Test
    void batchesByIdsAndByPrefix() {
        String topic = "java-batch";
        List<Pushed> pushed = client.pushBatch(List.of(
                Message.builder(topic, "a").delayMs(600_000).bizKey("user-7-a").build(),
                Message.builder(topic, "b").delayMs(600_000).bizKey("user-7-b").build(),
                Message.builder(topic, "c").delayMs(600_000).bizKey("user-7-a").build(),
                Message.builder(topic, "d").delayMs(600_000).bizKey("user-8").build(),
                Message.builder(topic, "e").delayMs(600_000).build()));
        assertEquals(List.of(false, false, true, false, false), pushed.stream().map(Pushed::duplicate).toList());
        assertEquals(pushed.get(0).id(), pushed.get(2).id());

        Map<String, Object> byPrefix = client.cancelPrefix(topic, "user-7-");
        assertEquals(2L, byPrefix.get("matched"));
        assertEquals(2L, Json.object(byPrefix.get("results")).get("deleted"));

        // A message cancelled already answers deleted again (and counts): cancels are idempotent.
        Map<String, Object> byIds = client.cancelIds(List.of(pushed.get(3).id(), pushed.get(4).id(),
                pushed.get(0).id()));
        assertEquals(3L, byIds.get("deleted"));
        for (Object o : Json.list(byIds.get("results"))) {
            assertEquals("deleted", Json.object(o).get("result"));
        }
        assertEquals(Set.of(), inStatus(topic, "Delaying"));
        assertEquals(4, inStatus(topic, "Deleted").size());
    }

    @Test
    void pauseResumeDeadAndRequeue() throws Exception {
        String topic = "java-dead";
        String id = client.push(Message.builder(topic, "x").maxAttempts(1).build()).id();
        Delivery d = client.poll(topic, 1, 5).messages().get(0);
        assertEquals(id, d.id());
        Map<String, Object> nacked = client.nack(d);
        assertEquals("dead", nacked.get("result"));
        await("listed dead", Duration.ofSeconds(5), () -> {
            List<Object> dead = Json.list(client.dead(topic).get("messages"));
            return dead.size() == 1 && id.equals(Json.object(dead.get(0)).get("id"));
        });

        assertEquals(true, client.pause(topic).get("paused"));
        assertEquals("requeued", client.requeue(id).get("result"));
        assertEquals(List.of(), client.poll(topic, 1, 1).messages(), "a paused topic hands nothing out");
        assertEquals(false, client.resume(topic).get("paused"));
        Delivery back = client.poll(topic, 1, 5).messages().get(0);
        assertEquals(id, back.id());
        assertEquals(1, back.attempts());
        ApiException notDead = assertThrows(ApiException.class, () -> client.requeue(id));
        assertEquals(Optional.of(ErrorCode.NOT_DEAD), notDead.errorCode());
        Polled last = client.poll(topic, 1, 0, List.of(back));
        assertEquals(List.of(new AckResult(id, "consumed", null)), last.results());
        assertEquals(1, last.acked());
        assertEquals("Consumed", status(id));
    }

    @Test
    void aSecondUrlServesWhenTheFirstDoesNotAnswer() throws Exception {
        String nobody = "http://127.0.0.1:" + TestServer.freePort();
        DelayqClient both = DelayqClient.builder().urls(nobody, server.url()).timeout(Duration.ofSeconds(2)).build();
        Pushed p = both.push(Message.builder("java-failover", "x").bizKey("k-1").build());
        assertNotNull(p.id());
        List<Pushed> batch = both.pushBatch(List.of(Message.builder("java-failover", "y").bizKey("k-2").build()));
        assertEquals(1, batch.size());
        // The node that answered is asked first from now on, also without a bizKey.
        assertNotNull(both.push("java-failover", "z").id());

        // Without a bizKey a push is not sent twice: the exception says it may have been.
        DelayqClient lone = DelayqClient.builder().urls(nobody, server.url()).timeout(Duration.ofSeconds(2)).build();
        assertThrows(TransportException.class, () -> lone.push("java-failover", "w"));
        assertThrows(TransportException.class, () -> lone.pushBatch(List.of(
                Message.builder("java-failover", "v").bizKey("k-3").build(), Message.of("java-failover", "u"))));
        assertEquals(3, inStatusCount("java-failover"));
    }

    /**
     * A stand-in node on a free port that answers every request {@code status} with
     * {@code reply}, and keeps each request's method, URI and body ("POST /push?x=1 {...}").
     */
    static HttpServer stub(int status, String reply, List<String> seen) throws IOException {
        HttpServer http = HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0), 0);
        http.createContext("/", exchange -> {
            try {
                String body = new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
                seen.add(exchange.getRequestMethod() + " " + exchange.getRequestURI() + " " + body);
                byte[] out = reply.getBytes(StandardCharsets.UTF_8);
                exchange.getResponseHeaders().set("Content-Type", "application/json");
                exchange.sendResponseHeaders(status, out.length);
                exchange.getResponseBody().write(out);
            } finally {
                exchange.close();
            }
        });
        http.start();
        return http;
    }

    static String url(HttpServer http) {
        return "http://127.0.0.1:" + http.getAddress().getPort();
    }

    @Test
    void anUnkeyedPushMovesOnAfterNodeStalledNotAfter502() throws Exception {
        String topic = "java-stalled";
        List<String> seen = new CopyOnWriteArrayList<>();
        HttpServer stalled = stub(503, "{\"error\":\"node_stalled\",\"message\":\"resumed after a stall\"}", seen);
        HttpServer unavailable = stub(503, "{\"error\":\"node_unavailable\",\"message\":\"no worker id\"}", seen);
        HttpServer gateway = stub(502, "{\"error\":\"no_answer\",\"message\":\"no node answered\"}", seen);
        try {
            // 503 node_stalled: nothing applied there, so the push without a bizKey goes on.
            DelayqClient c = DelayqClient.builder().urls(url(stalled), server.url())
                    .timeout(Duration.ofSeconds(2)).build();
            String id = c.push(topic, "x").id();
            assertEquals(1, seen.size(), "the stalled node was asked first: " + seen);
            assertTrue(seen.get(0).startsWith("POST /push "), seen.get(0));
            assertNotNull(client.message(id), "the second node took it");

            DelayqClient b = DelayqClient.builder().urls(url(unavailable), server.url())
                    .timeout(Duration.ofSeconds(2)).build();
            List<Pushed> batch = b.pushBatch(List.of(Message.of(topic, "y"), Message.of(topic, "z")));
            assertEquals(2, batch.size());
            assertEquals(2, seen.size(), "the unavailable node was asked first: " + seen);

            // 502 from a proxy: the node behind it may have applied the push, so without a
            // bizKey it is not sent again; with one it is.
            seen.clear();
            DelayqClient g = DelayqClient.builder().urls(url(gateway), server.url())
                    .timeout(Duration.ofSeconds(2)).build();
            ApiException e = assertThrows(ApiException.class, () -> g.push(topic, "w"));
            assertEquals(502, e.status());
            assertEquals("no_answer", e.code());
            assertEquals(1, seen.size());
            assertNotNull(g.push(Message.builder(topic, "v").bizKey("k-502").build()).id());
            assertEquals(2, seen.size());
            await("4 messages, none pushed twice", Duration.ofSeconds(5), () -> inStatusCount(topic) == 4);
            Thread.sleep(200);
            assertEquals(4, inStatusCount(topic));
        } finally {
            stalled.stop(0);
            unavailable.stop(0);
            gateway.stop(0);
        }
        assertTrue(DelayqClient.skips(503, "node_stalled", false));
        assertTrue(DelayqClient.skips(503, "node_unavailable", false));
        assertFalse(DelayqClient.skips(503, "journal_unavailable", true));
        assertFalse(DelayqClient.skips(502, "no_answer", false));
        assertFalse(DelayqClient.skips(504, "no_answer", false));
        assertTrue(DelayqClient.skips(502, "no_answer", true));
        assertTrue(DelayqClient.skips(504, "http_504", true));
    }

    @Test
    void aPollSendsItsTimeoutInTheQueryAndWaitsIt() throws Exception {
        // What goes on the wire: ?timeout= where a proxy sees it; no timeout in the body.
        List<String> seen = new CopyOnWriteArrayList<>();
        HttpServer http = stub(200, "{\"acked\":0,\"results\":[],\"messages\":[]}", seen);
        try {
            DelayqClient c = DelayqClient.of(url(http));
            c.poll("java-wire", 7, 3);
        } finally {
            http.stop(0);
        }
        assertEquals(1, seen.size());
        String[] request = seen.get(0).split(" ", 3);
        assertEquals("POST", request[0]);
        assertEquals("/get/java-wire?timeout=3", request[1]);
        Map<String, Object> body = Json.object(Json.parse(request[2]));
        assertEquals(Map.of("ack", List.of(), "count", 7L), body);

        // The node waits the query's timeout: 1 s on an empty topic (not 0, not the default 30).
        String topic = "java-wait";
        long t0 = System.nanoTime();
        assertEquals(List.of(), client.poll(topic, 1, 1).messages());
        long waited = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(waited >= 900 && waited < 4_000, "an empty poll of 1 s took " + waited + " ms");

        // And answers as soon as a message is due within it.
        Thread pusher = new Thread(() -> {
            try {
                Thread.sleep(500);
                client.push(topic, "late");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        t0 = System.nanoTime();
        pusher.start();
        List<Delivery> got = client.poll(topic, 1, 5).messages();
        waited = (System.nanoTime() - t0) / 1_000_000;
        pusher.join();
        assertEquals(1, got.size());
        assertEquals("late", got.get(0).body());
        assertTrue(waited >= 400 && waited < 4_000, "the poll answered after " + waited + " ms");
        client.ack(got.get(0));
    }

    @Test
    void anAckThePollDidNotApplyIsLoggedAtWarning() throws Exception {
        String topic = "java-unapplied";
        String id = client.push(topic, "x").id();
        List<LogRecord> records = new CopyOnWriteArrayList<>();
        Handler capture = new Handler() {
            @Override
            public void publish(LogRecord r) {
                records.add(r);
            }

            @Override
            public void flush() {}

            @Override
            public void close() {}
        };
        Logger jul = Logger.getLogger("io.delayq.client");
        jul.addHandler(capture);
        SimpleFormatter text = new SimpleFormatter();
        // The handler nacks its message itself (ready at once), takes it again with a poll of
        // its own and returns: the consumer's ack, carried in its next poll, names a delivery
        // that another one followed, and is refused (stale_delivery).
        AtomicReference<Delivery> taken = new AtomicReference<>();
        Consumer consumer = Consumer.builder(client, topic, d -> {
            if (taken.get() == null) {
                client.nack(d, Duration.ZERO);
                taken.set(client.poll(topic, 1, 5).messages().get(0));
            }
        }).pollTimeout(Duration.ofSeconds(1)).build().start();
        try {
            await("a warning about the ack of " + id, Duration.ofSeconds(10), () -> records.stream().anyMatch(
                    r -> r.getLevel() == java.util.logging.Level.WARNING
                            && text.formatMessage(r).startsWith("delayq: ack of " + id
                                    + " answered stale_delivery")));
        } finally {
            consumer.close();
            jul.removeHandler(capture);
        }
        assertEquals(id, taken.get().id());
        assertEquals(2, taken.get().attempts());
        assertEquals("Consuming", status(id));
        assertEquals("Consumed", client.ack(taken.get()).get("status"));
    }

    /** The topic's live messages: statuses asked in life order, so one moving on is not missed. */
    private static int inStatusCount(String topic) {
        Set<String> all = new TreeSet<>();
        for (String s : List.of("WaitPut", "Delaying", "Ready", "Consuming")) {
            all.addAll(inStatus(topic, s));
        }
        return all.size();
    }

    @Test
    void theErrorCodesAreTheServers() {
        // The server's list, from its OpenAPI document, and the proxy's two.
        Map<String, Object> doc = fetchOpenApi();
        List<Object> wire = Json.list(Json.object(Json.object(Json.object(doc.get("components")).get("schemas"))
                .get("ErrorCode")).get("enum"));
        Set<String> expected = new TreeSet<>();
        wire.forEach(c -> expected.add((String) c));
        expected.add("no_answer");
        expected.add("no_node");
        Set<String> ours = new TreeSet<>();
        for (ErrorCode c : ErrorCode.values()) {
            ours.add(c.wire());
            assertEquals(Optional.of(c), ErrorCode.of(c.wire()));
        }
        assertEquals(expected, ours);
        assertEquals(Optional.empty(), ErrorCode.of("no_such_code"));
    }

    private static Map<String, Object> fetchOpenApi() {
        try {
            var http = java.net.http.HttpClient.newHttpClient();
            var resp = http.send(java.net.http.HttpRequest.newBuilder(java.net.URI.create(server.url()
                    + "/openapi.json")).build(), java.net.http.HttpResponse.BodyHandlers.ofString());
            return Json.object(Json.parse(resp.body()));
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }
}
