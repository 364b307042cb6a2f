package io.delayq.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** A node serving HTTPS with a certificate of a private CA (made with openssl for the test). */
class TlsTest {
    @Test
    @Timeout(value = 60, unit = TimeUnit.SECONDS)
    void httpsWithAPrivateCa() throws Exception {
        try (TestServer server = TestServer.startTls()) {
            String topic = "java-tls";
            DelayqClient client = DelayqClient.builder().url(server.url()).caFile(server.caFile())
                    .timeout(Duration.ofSeconds(5)).build();
            String id = client.push(Message.builder(topic, "secret").bizKey("tls-1").build()).id();
            List<Delivery> got = client.poll(topic, 1, 5).messages();
            assertEquals(1, got.size());
            assertEquals(id, got.get(0).id());
            assertEquals("secret", got.get(0).body());
            assertEquals("Consumed", client.ack(got.get(0)).get("status"));

            // The platform's CAs do not know the private one: refused, and said so.
            DelayqClient untrusting = DelayqClient.builder().url(server.url()).timeout(Duration.ofSeconds(5)).build();
            TransportException refused = assertThrows(TransportException.class,
                    () -> untrusting.push(Message.builder(topic, "x").bizKey("tls-2").build()));
            assertTrue(refused.getMessage().contains("SSLHandshakeException"), refused.getMessage());

            // Plain HTTP to the HTTPS port is answered, and the answer says what to do.
            DelayqClient plain = DelayqClient.builder().url("http://127.0.0.1:" + server.port)
                    .timeout(Duration.ofSeconds(5)).build();
            ApiException e = assertThrows(ApiException.class, () -> plain.push(topic, "x"));
            assertEquals(Optional.of(ErrorCode.HTTPS_REQUIRED), e.errorCode());
        }
    }
}
