// Sends a plan of timer messages to the real broker with the Java remoting client
// (org.apache.rocketmq:rocketmq-client, the jar bench/rocketmq/pom.xml resolves). Used by
// bench/rocketmq/compare.py where the Python 5.x client is the bottleneck (it sends about 550
// messages/s against the proxy on this machine): the WA cells, whose figures do not depend on
// the client. The plan is written by compare.py from bench/workloads.py, so the topics, bodies
// and delays are the same seeded ones the Python client would send.
//
// Plan format (big-endian): int topicCount, then per topic: short length + UTF-8 bytes;
// int bodyCount, then per body: int length + bytes; long messageCount, then per message:
// byte topicIndex, short bodyIndex, long delayMs (relative: the broker adds its own clock,
// TIMER_DELAY_MS, so a broker on a sped-up clock gets the delay in its own time; a negative value
// -n is delay level n instead).
//
// Usage: PlanSender <namesrvAddr> <planFile> [inFlight]. Prints "PROGRESS <acknowledged>" every 10,000 sends
// and "SENT <count> <seconds> <busy answers retried>" at the end.
import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.remoting.protocol.ResponseCode;

public class PlanSender {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        int inFlight = args.length > 2 ? Integer.parseInt(args[2]) : 256;
        DataInputStream in = new DataInputStream(new BufferedInputStream(new FileInputStream(args[1]), 1 << 20));
        String[] topics = new String[in.readInt()];
        for (int i = 0; i < topics.length; i++) {
            byte[] b = new byte[in.readShort()];
            in.readFully(b);
            topics[i] = new String(b, StandardCharsets.UTF_8);
        }
        byte[][] bodies = new byte[in.readInt()][];
        for (int i = 0; i < bodies.length; i++) {
            bodies[i] = new byte[in.readInt()];
            in.readFully(bodies[i]);
        }
        long count = in.readLong();

        DefaultMQProducer producer = new DefaultMQProducer("bench_plan_sender");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(60_000);
        producer.setCompressMsgBodyOverHowmuch(Integer.MAX_VALUE);  // send the bodies as they are
        producer.start();
        Semaphore window = new Semaphore(inFlight);
        AtomicLong ok = new AtomicLong();
        AtomicReference<Throwable> failure = new AtomicReference<>();
        AtomicLong busy = new AtomicLong();
        long started = System.nanoTime();
        for (long i = 0; i < count && failure.get() == null; i++) {
            String topic = topics[in.readByte()];
            byte[] body = bodies[in.readShort()];
            long delayMs = in.readLong();
            Message msg = new Message(topic, body);
            if (delayMs < 0) {
                msg.setDelayTimeLevel((int) -delayMs);  // the 18 delay levels (ScheduleMessageService)
            } else {
                msg.setDelayTimeMs(delayMs);
            }
            window.acquire();
            if (i % 10_000 == 0) {
                System.out.println("PROGRESS " + ok.get());
                System.out.flush();
            }
            sendWithRetry(producer, msg, window, ok, busy, failure);
        }
        window.acquire(inFlight);
        double seconds = (System.nanoTime() - started) / 1e9;
        producer.shutdown();
        if (failure.get() != null) {
            System.err.println("send failed: " + failure.get());
            System.exit(1);
        }
        System.out.println("SENT " + ok.get() + " " + seconds + " " + busy.get());
    }

    private static final ScheduledExecutorService RETRY = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "plan-sender-retry");
        t.setDaemon(true);
        return t;
    });

    // The broker answers "busy" (flow control: its send queue waited too long) under load, as any
    // client may see; the message is sent again 100 ms later, holding its place in the window.
    private static void sendWithRetry(DefaultMQProducer producer, Message msg, Semaphore window,
        AtomicLong ok, AtomicLong busy, AtomicReference<Throwable> failure) {
        try {
            producer.send(msg, new SendCallback() {
                @Override
                public void onSuccess(SendResult result) {
                    if (result.getSendStatus() == SendStatus.SEND_OK) {
                        ok.incrementAndGet();
                    } else {
                        failure.compareAndSet(null, new IllegalStateException(result.toString()));
                    }
                    window.release();
                }

                @Override
                public void onException(Throwable e) {
                    if (isBusy(e)) {
                        busy.incrementAndGet();
                        RETRY.schedule(() -> sendWithRetry(producer, msg, window, ok, busy, failure),
                            100, TimeUnit.MILLISECONDS);
                        return;
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

    private static boolean isBusy(Throwable e) {
        if (e instanceof MQBrokerException) {
            int code = ((MQBrokerException) e).getResponseCode();
            return code == ResponseCode.SYSTEM_BUSY || code == ResponseCode.FLOW_CONTROL;
        }
        return false;
    }
}
