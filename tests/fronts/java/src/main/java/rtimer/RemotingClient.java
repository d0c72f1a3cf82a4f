package rtimer;

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * Drives the unmodified RocketMQ 4.x Java client for rtimer's remoting tests, one JSON object per
 * line on stdin and stdout.
 *
 * <p>{@code send NAMESRV GROUP}: each stdin line {"topic","tag","keys","body","level","props":{}}
 * (or {"batch":[...]} of such lines for one topic) is sent synchronously; prints
 * {"event":"sent","msgId","offsetMsgId","queueId","broker","status","sentMs"} or
 * {"event":"error","error"}.
 *
 * <p>{@code consume NAMESRV GROUP TOPIC EXPRESSION}: a push consumer; prints
 * {"event":"received",...} per message. A message whose body starts with "fail" is answered
 * RECONSUME_LATER while its reconsumeTimes is 0. A "stop" line (or the end of stdin) shuts the
 * consumer down cleanly (offsets persisted) and prints {"event":"stopped"}.
 */
public final class RemotingClient {
    private RemotingClient() {
    }

    private static synchronized void emit(Map<String, Object> event) {
        System.out.println(JSON.toJSONString(event));
        System.out.flush();
    }

    private static Message toMessage(JSONObject line) {
        Message msg = new Message(line.getString("topic"), line.getString("tag"),
            line.getString("keys"), line.getString("body").getBytes(StandardCharsets.UTF_8));
        if (line.containsKey("level")) {
            msg.setDelayTimeLevel(line.getIntValue("level"));
        }
        JSONObject props = line.getJSONObject("props");
        if (props != null) {
            for (String name : props.keySet()) {
                msg.putUserProperty(name, props.getString(name));
            }
        }
        return msg;
    }

    private static void send(String namesrv, String group) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(15000);
        producer.setVipChannelEnabled(false);
        producer.start();
        emit(Map.of("event", "ready"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String text;
        // "stop" ends it as it ends a consumer (it was read as JSON: the parse error ended main
        // while the producer's threads kept the JVM up, until the test killed it 30 s later)
        while ((text = in.readLine()) != null && !text.trim().equals("stop")) {
            if (text.isBlank()) {
                continue;
            }
            JSONObject line = JSON.parseObject(text);
            Map<String, Object> out = new HashMap<>();
            try {
                SendResult result;
                if (line.containsKey("batch")) {
                    List<Message> batch = new java.util.ArrayList<>();
                    for (Object item : line.getJSONArray("batch")) {
                        batch.add(toMessage((JSONObject) item));
                    }
                    result = producer.send(batch);
                } else {
                    result = producer.send(toMessage(line));
                }
                out.put("event", "sent");
                out.put("msgId", result.getMsgId());
                out.put("offsetMsgId", result.getOffsetMsgId());
                out.put("queueId", result.getMessageQueue().getQueueId());
                out.put("broker", result.getMessageQueue().getBrokerName());
                out.put("status", result.getSendStatus().toString());
                out.put("sentMs", System.currentTimeMillis());
            } catch (Exception e) {
                out.put("event", "error");
                out.put("error", e.toString());
            }
            emit(out);
        }
        producer.shutdown();
        emit(Map.of("event", "stopped"));
    }

    private static void consume(String namesrv, String group, String topic, String expression)
        throws Exception {
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        // "received" is printed inside the listener, before the client records the message as
        // consumed: a stop right after it must let that consume finish, or the shutdown commits
        // the offset from before it and the message comes again (a clean shutdown, as a careful
        // application makes it; the default 0 does not wait for consumes in progress)
        consumer.setAwaitTerminationMillisWhenShutdown(10_000);
        consumer.subscribe(topic, expression);
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            long now = System.currentTimeMillis();
            boolean fail = false;
            for (MessageExt msg : msgs) {
                String body = new String(msg.getBody(), StandardCharsets.UTF_8);
                Map<String, Object> out = new HashMap<>();
                out.put("event", "received");
                out.put("receivedMs", now);
                out.put("msgId", msg.getMsgId());
                out.put("topic", msg.getTopic());
                out.put("tags", msg.getTags());
                out.put("keys", msg.getKeys());
                out.put("body", body);
                out.put("reconsumeTimes", msg.getReconsumeTimes());
                out.put("queueId", msg.getQueueId());
                out.put("queueOffset", msg.getQueueOffset());
                out.put("bornMs", msg.getBornTimestamp());
                out.put("storeMs", msg.getStoreTimestamp());
                out.put("storeHost", String.valueOf(msg.getStoreHost()));
                out.put("brokerName", msg.getBrokerName());
                out.put("props", msg.getProperties());
                emit(out);
                if (body.startsWith("fail") && msg.getReconsumeTimes() == 0) {
                    fail = true;
                }
            }
            return fail ? ConsumeConcurrentlyStatus.RECONSUME_LATER
                : ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        emit(Map.of("event", "ready"));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String text;
        while ((text = in.readLine()) != null && !text.trim().equals("stop")) {
            // wait for the test to say stop
        }
        consumer.shutdown();
        emit(Map.of("event", "stopped"));
    }

    /**
     * {@code bench NAMESRV TOPIC GROUP COUNT BODY_BYTES [stepped]}: COUNT synchronous sends, one call at a
     * time, then a push consumer of GROUP consumes them; prints one JSON line with both rates.
     * With a sixth argument {@code stepped}, it prints {"event":"phase","phase":P} at each phase
     * boundary (send, sent, consume, consumed) and waits for a line on stdin before going on, so
     * that the caller can read the broker's CPU time there (bench.fronts); the timed spans exclude
     * those waits.
     */
    private static void bench(String namesrv, String topic, String group, int count, int bodyBytes,
                              boolean stepped) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        byte[] body = new byte[bodyBytes];
        java.util.Arrays.fill(body, (byte) 'x');
        DefaultMQProducer producer = new DefaultMQProducer(group + "-producer");
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(15000);
        producer.setVipChannelEnabled(false);
        producer.start();
        // warm-up: routes, connections, and this JVM's compiler (system property rtimer.warm, 100
        // sends by default; a few thousand leave the client's compiler threads mostly idle)
        int warm = Integer.getInteger("rtimer.warm", Math.min(100, count));
        for (int i = 0; i < warm; i++) {
            producer.send(new Message(topic + "-warmup", "w", body));
        }
        step(stepped, in, "send");
        long sendStart = System.nanoTime();
        for (int i = 0; i < count; i++) {
            producer.send(new Message(topic, "bench", "k" + i, body));
        }
        double sendSeconds = (System.nanoTime() - sendStart) / 1e9;
        step(stepped, in, "sent");
        producer.shutdown();
        java.util.concurrent.CountDownLatch left = new java.util.concurrent.CountDownLatch(count);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setConsumeMessageBatchMaxSize(1);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt ignored : msgs) {
                left.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        step(stepped, in, "consume");
        long consumeStart = System.nanoTime();
        consumer.start();
        boolean all = left.await(600, java.util.concurrent.TimeUnit.SECONDS);
        double consumeSeconds = (System.nanoTime() - consumeStart) / 1e9;
        step(stepped, in, "consumed");
        consumer.shutdown();
        Map<String, Object> out = new HashMap<>();
        out.put("event", "bench");
        out.put("messages", count);
        out.put("bodyBytes", bodyBytes);
        out.put("warm", warm);
        out.put("sendSeconds", sendSeconds);
        out.put("sendPerSecond", count / sendSeconds);
        out.put("consumed", count - left.getCount());
        out.put("consumeSeconds", consumeSeconds);
        out.put("consumePerSecond", (count - left.getCount()) / consumeSeconds);
        out.put("complete", all);
        emit(out);
    }

    private static void step(boolean stepped, BufferedReader in, String phase) throws Exception {
        if (!stepped) {
            return;
        }
        emit(Map.of("event", "phase", "phase", phase));
        if (in.readLine() == null) {
            throw new IllegalStateException("stdin ended at phase " + phase);
        }
    }

    public static void main(String[] args) throws Exception {
        System.setProperty("rocketmq.client.logUseSlf4j", "false");
        switch (args[0]) {
            case "send":
                send(args[1], args[2]);
                break;
            case "consume":
                consume(args[1], args[2], args[3], args[4]);
                break;
            case "bench":
                bench(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]),
                    args.length > 6 && "stepped".equals(args[6]));
                break;
            default:
                throw new IllegalArgumentException("mode must be send, consume or bench: " + args[0]);
        }
        System.exit(0);
    }
}
