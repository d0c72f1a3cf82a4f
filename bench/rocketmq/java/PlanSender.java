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
// TIMER_DELAY_MS, so a broker on a sped-up clock gets the delay in its own time).
//
// Usage: PlanSender <namesrvAddr> <planFile> [inFlight]. Prints "PROGRESS <acknowledged>" every 10,000 sends
// and "SENT <count> <seconds>" at the end.
import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class PlanSender {
    public static void main(String[] args) throws Exception {
        String namesrv = args[0];
        int inFlight = args.length > 2 ? Integer.parseInt(args[2]) : 1024;
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
        long started = System.nanoTime();
        for (long i = 0; i < count && failure.get() == null; i++) {
            String topic = topics[in.readByte()];
            byte[] body = bodies[in.readShort()];
            long delayMs = in.readLong();
            Message msg = new Message(topic, body);
            msg.setDelayTimeMs(delayMs);
            window.acquire();
            if (i % 10_000 == 0) {
                System.out.println("PROGRESS " + ok.get());
                System.out.flush();
            }
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
                    failure.compareAndSet(null, e);
                    window.release();
                }
            });
        }
        window.acquire(inFlight);
        double seconds = (System.nanoTime() - started) / 1e9;
        producer.shutdown();
        if (failure.get() != null) {
            System.err.println("send failed: " + failure.get());
            System.exit(1);
        }
        System.out.println("SENT " + ok.get() + " " + seconds);
    }
}
