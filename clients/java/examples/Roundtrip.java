import io.delayq.client.Consumer;
import io.delayq.client.DelayqClient;
import io.delayq.client.Message;
import io.delayq.client.Pushed;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Pushes 1,000 messages due in 1 to 3 s to the server at DELAYQ_URL (default
 * http://127.0.0.1:7070) with one pushBatch on a topic of its own, consumes and acks them
 * with the default consumer (4 loops), and says what it saw:
 * {@code 1000 delivered, 0 early, 0 duplicates}. Exits non-zero on any miss (60 s limit).
 */
public final class Roundtrip {
    static final int N = 1000;

    public static void main(String[] args) throws Exception {
        String url = System.getenv().getOrDefault("DELAYQ_URL", "http://127.0.0.1:7070");
        DelayqClient client = DelayqClient.of(url);
        ThreadLocalRandom random = ThreadLocalRandom.current();
        String topic = "roundtrip-java-" + Integer.toHexString(random.nextInt(1 << 30));

        List<Message> batch = new ArrayList<>(N);
        long[] delays = new long[N];
        for (int i = 0; i < N; i++) {
            delays[i] = random.nextLong(1_000, 3_001);
            batch.add(Message.builder(topic, Integer.toString(i)).delayMs(delays[i]).build());
        }
        long now = System.currentTimeMillis();
        List<Pushed> pushed = client.pushBatch(batch);
        Map<String, Long> due = new ConcurrentHashMap<>();
        for (int i = 0; i < N; i++) {
            due.put(pushed.get(i).id(), now + delays[i]);
        }

        Set<String> seen = ConcurrentHashMap.newKeySet();
        AtomicInteger early = new AtomicInteger();
        AtomicInteger twice = new AtomicInteger();
        CountDownLatch all = new CountDownLatch(N);
        Consumer consumer = Consumer.builder(client, topic, d -> {
            long at = System.currentTimeMillis();
            if (at < due.getOrDefault(d.id(), 0L)) {
                early.incrementAndGet();
            }
            if (seen.add(d.id())) {
                all.countDown();
            } else {
                twice.incrementAndGet();
            }
        }).loops(4).build().start();
        all.await(60, TimeUnit.SECONDS);
        consumer.stop(java.time.Duration.ofSeconds(10));

        System.out.printf("%d delivered, %d early, %d duplicates%n", seen.size(), early.get(), twice.get());
        System.exit(seen.size() == N && early.get() == 0 && twice.get() == 0 ? 0 : 1);
    }
}
