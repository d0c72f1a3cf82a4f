// The burst cell of bench/rocketmq/compare.py (issue 29): COUNT timer messages all due at the same
// moment, sent and then consumed by the unmodified RocketMQ 4.9.8 Java client
// (org.apache.rocketmq:rocketmq-client 4.9.8, the jar `make java-remoting-client` resolves for
// tests/fronts/java). The same program runs against rtimer's remoting front and against the real
// broker, so both sides are read by the same client: a DefaultMQProducer sending asynchronously
// and a DefaultMQPushConsumer.
//
// Each message carries the user property TIMER_DELIVER_MS = DUE_MS (absolute, the property
// RocketMQ 5's broker and rtimer's front both read; the 4.9.8 client has no setter for it, and
// does not reserve the name) and the key "b<index>", so a message received twice is counted once.
// Bodies are BODY_BYTES of seeded random bytes (incompressible; the client compresses only bodies
// over 4 KiB).
//
// Usage: BurstClient NAMESRV TOPIC GROUP COUNT BODY_BYTES SEED DUE_MS IN_FLIGHT TIMEOUT_S OUT
// Prints "SENT <count> <seconds> <busy answers retried> <last send ack ms>", then, when every
// message was received or TIMEOUT_S after the due time, "DONE <received> <duplicates>" and writes
// OUT: COUNT big-endian (receive ms, store ms) pairs by index, 0 for a message never received.
// The store ms is the delivered copy's store timestamp (when the broker put it on its topic).
import java.io.BufferedOutputStream;
import java.io.DataOutputStream;
import java.io.FileOutputStream;
import java.util.SplittableRandom;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.protocol.ResponseCode;

public class BurstClient {
    private static final ScheduledExecutorService RETRY = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "burst-retry");
        t.setDaemon(true);
        return t;
    });

    public static void main(String[] args) throws Exception {
        System.setProperty("rocketmq.client.logUseSlf4j", "false");
        String namesrv = args[0];
        String topic = args[1];
        String group = args[2];
        int count = Integer.parseInt(args[3]);
        int bodyBytes = Integer.parseInt(args[4]);
        long seed = Long.parseLong(args[5]);
        long dueMs = Long.parseLong(args[6]);
        int inFlight = Integer.parseInt(args[7]);
        long timeoutS = Long.parseLong(args[8]);
        String out = args[9];

        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(60_000);
        producer.setVipChannelEnabled(false);
        producer.start();
        SplittableRandom random = new SplittableRandom(seed);
        Semaphore window = new Semaphore(inFlight);
        AtomicLong ok = new AtomicLong();
        AtomicLong busy = new AtomicLong();
        AtomicLong lastAck = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        String due = Long.toString(dueMs);
        long started = System.nanoTime();
        for (int i = 0; i < count && failure.get() == null; i++) {
            byte[] body = new byte[bodyBytes];
            random.nextBytes(body);
            Message msg = new Message(topic, "burst", "b" + i, body);
            msg.putUserProperty("TIMER_DELIVER_MS", due);
            window.acquire();
            send(producer, msg, window, ok, busy, lastAck, failure);
        }
        window.acquire(inFlight);
        double seconds = (System.nanoTime() - started) / 1e9;
        producer.shutdown();
        if (failure.get() != null) {
            System.err.println("send failed: " + failure.get());
            System.exit(1);
        }
        System.out.println("SENT " + ok.get() + " " + seconds + " " + busy.get() + " " + lastAck.get());
        System.out.flush();

        AtomicLongArray received = new AtomicLongArray(count);
        AtomicLongArray stored = new AtomicLongArray(count);
        AtomicLong unique = new AtomicLong();
        AtomicLong duplicates = new AtomicLong();
        CountDownLatch all = new CountDownLatch(1);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setVipChannelEnabled(false);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(32);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.currentTimeMillis();
            for (MessageExt m : msgs) {
                String key = m.getKeys();
                int index = key != null && key.startsWith("b") ? Integer.parseInt(key.substring(1)) : -1;
                if (index < 0 || index >= count || !received.compareAndSet(index, 0, now)) {
                    duplicates.incrementAndGet();
                    continue;
                }
                stored.set(index, m.getStoreTimestamp());
                if (unique.incrementAndGet() == count) {
                    all.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long waitMs = Math.max(0, dueMs - System.currentTimeMillis()) + timeoutS * 1000;
        all.await(waitMs, TimeUnit.MILLISECONDS);
        consumer.shutdown();
        try (DataOutputStream o = new DataOutputStream(new BufferedOutputStream(new FileOutputStream(out), 1 << 20))) {
            for (int i = 0; i < count; i++) {
                o.writeLong(received.get(i));
                o.writeLong(stored.get(i));
            }
        }
        System.out.println("DONE " + unique.get() + " " + duplicates.get());
        System.out.flush();
        System.exit(0);
    }

    // "busy" (the broker's flow control under load) is retried 100 ms later, keeping the message's
    // place in the window; any other failure ends the run.
    private static void send(DefaultMQProducer producer, Message msg, Semaphore window, AtomicLong ok,
        AtomicLong busy, AtomicLong lastAck, AtomicReference<Throwable> failure) {
        try {
            producer.send(msg, new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    if (result.getSendStatus() == SendStatus.SEND_OK) {
                        ok.incrementAndGet();
                        lastAck.accumulateAndGet(System.currentTimeMillis(), Math::max);
                    } else {
                        failure.compareAndSet(null, new IllegalStateException(result.toString()));
                    }
                    window.release();
                }

                @Override
                public void onException(Throwable e) {
                    if (e instanceof MQBrokerException) {
                        int code = ((MQBrokerException) e).getResponseCode();
                        if (code == ResponseCode.SYSTEM_BUSY || code == ResponseCode.FLOW_CONTROL) {
                            busy.incrementAndGet();
                            RETRY.schedule(() -> send(producer, msg, window, ok, busy, lastAck, failure),
                                100, TimeUnit.MILLISECONDS);
                            return;
                        }
                    }
                    failure.compareAndSet(null, e);
                    window.release();
                }
            });
        } catch (Exception e) {
            failure.compareAndSet(null, e);
            window.release();
        }
    }
}
