/**
 * delayq's Java client: a producer ({@link io.delayq.client.DelayqClient}: push, cancel,
 * reschedule, look, manage) and a consumer loop ({@link io.delayq.client.Consumer}) that
 * carries its acks in its next long poll. JDK only: {@link java.net.http.HttpClient} and a
 * small JSON reader and writer ({@link io.delayq.client.Json}).
 *
 * <pre>{@code
 * DelayqClient client = DelayqClient.of("http://127.0.0.1:7070");
 * client.push(Message.builder("sms", "hello").delayMs(5_000).build());
 * Consumer.builder(client, "sms", d -> System.out.println(d.body())).build().run();
 * }</pre>
 */
package io.delayq.client;
