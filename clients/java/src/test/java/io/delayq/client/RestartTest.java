package io.delayq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A consumer whose node stops and starts again: it backs off, polls again, misses nothing. */
class RestartTest {
    @Test
    @Timeout(value = 90, unit = TimeUnit.SECONDS)
    void theConsumerRidesOutANodeRestart() throws Exception {
        try (TestServer server = TestServer.start()) {
            DelayqClient client = DelayqClient.builder().url(server.url()).timeout(Duration.ofSeconds(3)).build();
            String topic = "java-restart";
            Set<String> got = ConcurrentHashMap.newKeySet();
            try (Consumer consumer = Consumer.builder(client, topic, d -> got.add(d.body()))
                    .pollTimeout(Duration.ofSeconds(1)).build().start()) {
                client.pushBatch(messages(topic, "a"));
                ClientTest.await("the first 20", Duration.ofSeconds(20), () -> got.size() >= 20);
                server.stopNode();
                Thread.sleep(1_000);
                server.startNode();
                client.pushBatch(messages(topic, "b"));
                ClientTest.await("all 40", Duration.ofSeconds(30), () -> got.size() >= 40);
            }
            assertEquals(40, got.size(), new TreeSet<>(got).toString());
        }
    }

    private static List<Message> messages(String topic, String prefix) {
        List<Message> out = new ArrayList<>();
        for (int i = 0; i < 20; i++) {
            out.add(Message.of(topic, prefix + i));
        }
        return out;
    }
}
