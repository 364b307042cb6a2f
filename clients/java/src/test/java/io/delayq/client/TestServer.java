package io.delayq.client;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A Redis and a delayq node of the test's own, on free ports: {@code redis-server} from the
 * PATH, {@code delayq serve} from {@code DELAYQ_BIN} (default: the checkout's
 * {@code target/debug/delayq}, found from this directory, {@code clients/java}), an SQLite
 * journal in a temporary directory, 2 shards. With {@code tls}, the node serves HTTPS with a
 * certificate signed by a CA made for it ({@link #caFile()}).
 */
final class TestServer implements AutoCloseable {
    final Path dir;
    final int redisPort;
    final int port;
    final boolean tls;
    private final Process redis;
    private Process node;

    private TestServer(boolean tls) throws IOException, InterruptedException {
        this.tls = tls;
        this.dir = Files.createTempDirectory("delayq-java-");
        this.redisPort = freePort();
        this.redis = new ProcessBuilder("redis-server", "--port", Integer.toString(redisPort), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", dir.toString())
                .redirectErrorStream(true)
                .redirectOutput(dir.resolve("redis.log").toFile())
                .start();
        this.port = freePort();
        if (tls) {
            makeCertificates();
        }
        try {
            startNode();
        } catch (IOException | InterruptedException | RuntimeException e) {
            close();
            throw e;
        }
    }

    /** A plain-HTTP node. */
    static TestServer start() throws IOException, InterruptedException {
        return new TestServer(false);
    }

    /** An HTTPS node whose certificate a private CA ({@link #caFile()}) signed. */
    static TestServer startTls() throws IOException, InterruptedException {
        return new TestServer(true);
    }

    String url() {
        return (tls ? "https" : "http") + "://127.0.0.1:" + port;
    }

    Path caFile() {
        return dir.resolve("ca.pem");
    }

    static Path binary() {
        String env = System.getenv("DELAYQ_BIN");
        if (env != null && !env.isEmpty()) {
            return Path.of(env);
        }
        // Maven runs the tests in clients/java.
        return Path.of("").toAbsolutePath().resolve("../../target/debug/delayq").normalize();
    }

    /** Starts the node (again) and waits until it is ready. */
    void startNode() throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(binary().toString(), "serve",
                "--bind", "127.0.0.1:" + port,
                "--redis-url", "redis://127.0.0.1:" + redisPort + "/0",
                "--database-url", "sqlite://" + dir.resolve("journal.db"),
                "--shards", "2"));
        if (tls) {
            cmd.addAll(List.of("--tls-cert", dir.resolve("server.pem").toString(),
                    "--tls-key", dir.resolve("server.key").toString()));
        }
        node = new ProcessBuilder(cmd)
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("node.log").toFile()))
                .start();
        DelayqClient probe = DelayqClient.builder().url(url()).timeout(Duration.ofSeconds(1))
                .caFile(tls ? caFile() : null).build();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (System.nanoTime() < deadline) {
            if (!node.isAlive()) {
                throw new IllegalStateException("delayq exited with " + node.exitValue() + "; see " + log());
            }
            try {
                probe.ready();
                return;
            } catch (DelayqException e) {
                Thread.sleep(100);
            }
        }
        throw new IllegalStateException("delayq did not get ready in 30 s; see " + log());
    }

    /** Stops the node as an operator would (SIGTERM), leaving Redis and the journal. */
    void stopNode() throws InterruptedException {
        node.destroy();
        if (!node.waitFor(10, TimeUnit.SECONDS)) {
            node.destroyForcibly().waitFor();
        }
    }

    Path log() {
        return dir.resolve("node.log");
    }

    @Override
    public void close() {
        for (Process p : new Process[] {node, redis}) {
            if (p != null && p.isAlive()) {
                p.destroyForcibly();
                try {
                    p.waitFor(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
        try (Stream<Path> files = Files.walk(dir)) {
            files.sorted(Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException e) {
            // a temporary directory left behind
        }
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        }
    }

    /** A CA, and a server certificate it signs for 127.0.0.1 and localhost (not a CA itself). */
    private void makeCertificates() throws IOException, InterruptedException {
        String script = String.join("\n",
                "set -e",
                "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=delayq-test-ca"
                        + " -keyout ca.key -out ca.pem",
                "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout server.key -out server.csr",
                "printf 'basicConstraints=CA:FALSE\\nsubjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ext.cnf",
                "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2"
                        + " -extfile ext.cnf -out server.pem");
        Process p = new ProcessBuilder("bash", "-c", script)
                .directory(dir.toFile())
                .redirectErrorStream(true)
                .redirectOutput(dir.resolve("openssl.log").toFile())
                .start();
        if (p.waitFor() != 0) {
            throw new IllegalStateException("openssl failed: " + Files.readString(dir.resolve("openssl.log")));
        }
    }
}
