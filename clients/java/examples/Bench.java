import io.delayq.client.Consumer;
import io.delayq.client.DelayqClient;
import io.delayq.client.Json;
import io.delayq.client.Message;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

/**
 * The client's default consumer on delayq's benchmark scenarios (what scripts/bench-clients
 * runs for every client). One JSON line on stdout.
 *
 * <pre>
 *   examples/bench spread|burst [--url=http://127.0.0.1:7070] [--count=20000] [--loops=4]
 * </pre>
 *
 * <p>spread: due uniformly 1-6 s after the push; burst: all due at one instant, 3 s +
 * count/5 ms after the push starts. Pushed in batches of 500. Lateness = the handler's start
 * minus the message's dueTime; last_handout_ms (burst) = the last handler's start minus the due
 * instant; acked = messages the journal counts Consumed afterwards. Exits 0 when every message
 * was delivered once, none early, and all are counted consumed; 1 otherwise; 2 on bad usage.
 */
public final class Bench {
    private static final String USAGE = "usage: bench spread|burst [--url=] [--count=] [--loops=]";

    public static void main(String[] argv) throws Exception {
        String scenario = argv.length > 0 ? argv[0] : "";
        if (!scenario.equals("spread") && !scenario.equals("burst")) {
            System.err.println(USAGE);
            System.exit(2);
        }
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i < argv.length; i++) {
            String a = argv[i].startsWith("--") ? argv[i].substring(2) : argv[i];
            int eq = a.indexOf('=');
            if (eq >= 0) {
                args.put(a.substring(0, eq), a.substring(eq + 1));
            }
        }
        int count;
        int loops;
        try {
            count = Integer.parseInt(args.getOrDefault("count", "20000"));
            loops = Integer.parseInt(args.getOrDefault("loops", "4"));
        } catch (NumberFormatException e) {
            System.err.println(USAGE);
            System.exit(2);
            return;
        }
        DelayqClient client = DelayqClient.of(args.getOrDefault("url", "http://127.0.0.1:7070"));
        String topic = "bench-java-" + scenario + "-" + System.currentTimeMillis();

        long t0 = System.currentTimeMillis();
        long instant = t0 + 3000 + count / 5;
        long pushStart = System.nanoTime();
        ThreadLocalRandom random = ThreadLocalRandom.current();
        for (int i = 0; i < count; i += 500) {
            int n = Math.min(500, count - i);
            List<Message> batch = new ArrayList<>(n);
            for (int k = 0; k < n; k++) {
                Message.Builder m = Message.builder(topic, Integer.toString(i + k));
                batch.add(scenario.equals("spread")
                        ? m.delayMs(random.nextLong(1000, 6000)).build()
                        : m.deliverAt(instant).build());
            }
            client.pushBatch(batch);
        }
        double pushRate = count / ((System.nanoTime() - pushStart) / 1e9);

        // The handler runs on the consumer's loops at once: its bookkeeping under one lock.
        Object lock = new Object();
        Set<String> seen = new HashSet<>();
        List<Long> late = new ArrayList<>();
        long[] stats = new long[3]; // early, duplicates, last
        CountDownLatch allIn = new CountDownLatch(1);
        Consumer consumer = Consumer.builder(client, topic, d -> {
            long at = System.currentTimeMillis();
            synchronized (lock) {
                if (!seen.add(d.id())) {
                    stats[1]++;
                    return;
                }
                if (at < d.dueTime()) {
                    stats[0]++;
                }
                late.add(at - d.dueTime());
                stats[2] = Math.max(stats[2], at);
                if (seen.size() == count) {
                    allIn.countDown();
                }
            }
        }).loops(loops).build().start();
        allIn.await(60_000 + 6_000, TimeUnit.MILLISECONDS);
        consumer.close(); // graceful: the messages in hand are finished and acked

        // Every ack carried: the journal counts them all Consumed (it lags a little).
        long acked = 0;
        long deadline = System.currentTimeMillis() + 30_000;
        while (System.currentTimeMillis() < deadline) {
            acked = 0;
            for (Map<String, Object> t : client.topics()) {
                if (topic.equals(t.get("topic"))) {
                    if (t.get("counts") instanceof Map<?, ?> counts && counts.get("consumed") instanceof Number c) {
                        acked = c.longValue();
                    }
                    break;
                }
            }
            if (acked >= count) {
                break;
            }
            Thread.sleep(200);
        }

        int delivered;
        long early;
        long duplicates;
        long last;
        List<Long> sorted;
        synchronized (lock) {
            delivered = seen.size();
            early = stats[0];
            duplicates = stats[1];
            last = stats[2];
            sorted = new ArrayList<>(late);
        }
        Collections.sort(sorted);
        Map<String, Object> lateness = new LinkedHashMap<>();
        lateness.put("p50", quantile(sorted, 0.5));
        lateness.put("p99", quantile(sorted, 0.99));
        lateness.put("max", sorted.isEmpty() ? null : sorted.get(sorted.size() - 1));

        Map<String, Object> line = new LinkedHashMap<>();
        line.put("client", "java");
        line.put("scenario", scenario);
        line.put("loops", loops);
        line.put("count", count);
        line.put("push_rate", Math.round(pushRate));
        line.put("delivered", delivered);
        line.put("early", early);
        line.put("duplicates", duplicates);
        line.put("lateness_ms", lateness);
        if (scenario.equals("burst")) {
            line.put("last_handout_ms", last - instant);
        }
        line.put("acked", acked);
        System.out.println(Json.write(line));
        System.exit(delivered == count && early == 0 && duplicates == 0 && acked == count ? 0 : 1);
    }

    private static Long quantile(List<Long> sorted, double p) {
        if (sorted.isEmpty()) {
            return null;
        }
        return sorted.get(Math.min(sorted.size() - 1, (int) Math.floor(p * sorted.size())));
    }
}
