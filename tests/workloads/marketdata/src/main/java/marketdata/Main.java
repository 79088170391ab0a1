package marketdata;

import com.lmax.disruptor.BusySpinWaitStrategy;
import com.lmax.disruptor.EventHandler;
import com.lmax.disruptor.RingBuffer;
import com.lmax.disruptor.WaitStrategy;
import com.lmax.disruptor.YieldingWaitStrategy;
import com.lmax.disruptor.dsl.Disruptor;
import com.lmax.disruptor.dsl.ProducerType;

import java.security.MessageDigest;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Market-data consumers with a yielding wait strategy (the Disruptor's YieldingWaitStrategy:
 * 100 spins, then Thread.yield(), which HotSpot makes a sched_yield(2)), fed a light tick
 * stream: they are idle, and give the CPU away whenever they have nothing to do. With
 * --strategy busyspin (BusySpinWaitStrategy) they spin without ever giving it away.
 *
 *   java -jar marketdata.jar [--consumers N] [--ticks-per-s R] [--strategy yielding|busyspin] [--pricer]
 *
 * Threads: "md-consumer-0".. (one per consumer), "feed" (publishes the ticks), and with
 * --pricer "pricer", which never blocks: SHA-256 rounds without end. Run on one CPU
 * (taskset), the pricer's time off the CPU is all waiting for it, behind the consumers.
 * Prints "ready", then every second "rounds N" (the pricer's rounds so far) and
 * "ticks N" (ticks every consumer handled so far, summed).
 */
public final class Main {
    static final class Tick {
        long seq;
        double price;
    }

    public static void main(String[] args) throws Exception {
        int consumers = 3;
        int rate = 200;
        boolean pricer = false;
        String strategy = "yielding";
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--consumers" -> consumers = Integer.parseInt(args[++i]);
                case "--ticks-per-s" -> rate = Integer.parseInt(args[++i]);
                case "--pricer" -> pricer = true;
                case "--strategy" -> strategy = args[++i];
                default -> {
                    System.err.println("usage: marketdata [--consumers N] [--ticks-per-s R] [--strategy yielding|busyspin] [--pricer]");
                    System.exit(2);
                }
            }
        }
        AtomicInteger next = new AtomicInteger();
        ThreadFactory named = r -> {
            Thread t = new Thread(r, "md-consumer-" + next.getAndIncrement());
            t.setDaemon(true);
            return t;
        };
        WaitStrategy wait = switch (strategy) {
            case "yielding" -> new YieldingWaitStrategy();
            case "busyspin" -> new BusySpinWaitStrategy();
            default -> throw new IllegalArgumentException("--strategy: yielding or busyspin, not " + strategy);
        };
        Disruptor<Tick> disruptor = new Disruptor<>(Tick::new, 1024, named, ProducerType.SINGLE, wait);
        AtomicLong handled = new AtomicLong();
        @SuppressWarnings("unchecked")
        EventHandler<Tick>[] handlers = new EventHandler[consumers];
        for (int i = 0; i < consumers; i++) {
            handlers[i] = (tick, seq, endOfBatch) -> {
                tick.price = tick.price * 1.0001;
                handled.incrementAndGet();
            };
        }
        disruptor.handleEventsWith(handlers);
        RingBuffer<Tick> ring = disruptor.start();

        long periodNs = 1_000_000_000L / Math.max(1, rate);
        Thread feed = new Thread(() -> {
            long seq = 0;
            while (true) {
                long s = ring.next();
                Tick t = ring.get(s);
                t.seq = seq++;
                t.price = 100.0 + (seq % 100) / 100.0;
                ring.publish(s);
                java.util.concurrent.locks.LockSupport.parkNanos(periodNs);
            }
        }, "feed");
        feed.setDaemon(true);
        feed.start();

        AtomicLong rounds = new AtomicLong();
        if (pricer) {
            Thread p = new Thread(() -> {
                try {
                    MessageDigest sha = MessageDigest.getInstance("SHA-256");
                    byte[] buf = new byte[4096];
                    while (true) {
                        buf = java.util.Arrays.copyOf(sha.digest(buf), 4096);
                        rounds.incrementAndGet();
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            }, "pricer");
            p.setDaemon(true);
            p.start();
        }
        System.out.println("ready");
        System.out.flush();
        while (true) {
            Thread.sleep(1000);
            System.out.println("rounds " + rounds.get());
            System.out.println("ticks " + handled.get());
            System.out.flush();
        }
    }
}
