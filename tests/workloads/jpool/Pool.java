// A JDK HttpServer (the JDK's own, com.sun.net.httpserver) on a fixed pool of worker threads,
// for the tests: `java Pool.java PORT THREADS [locked]`. Each request hashes 64 KiB with
// SHA-256 `work` times (?work=N, default 8). With `locked`, every request hashes inside one
// synchronized method (a monitor: the pool takes turns on it). Prints "ready", and on a line
// "stats" on stdin one JSON line of the JVM's own accounting since the last: the workers' time
// BLOCKED on a monitor and how many times they blocked on one, WAITING (ThreadMXBean's contention
// monitoring), requests served.
import com.sun.net.httpserver.HttpServer;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadInfo;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;

public class Pool {
    static final byte[] BLOCK = new byte[64 << 10];
    static final AtomicLong served = new AtomicLong();
    static final Object book = new Object();

    // one digest per thread: MessageDigest.getInstance looks its provider up under a lock of the
    // JDK's, which a pool on busy CPUs contends for
    static final ThreadLocal<MessageDigest> DIGEST = ThreadLocal.withInitial(() -> {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    });

    static byte[] hash(int n) throws Exception {
        MessageDigest md = DIGEST.get();
        byte[] sum = new byte[32];
        for (int i = 0; i < n; i++) {
            md.update(BLOCK);
            md.update(sum);
            sum = md.digest();
        }
        return sum;
    }

    static byte[] reprice(int n) throws Exception {
        synchronized (book) {
            return hash(n);
        }
    }

    public static void main(String[] args) throws Exception {
        int port = Integer.parseInt(args[0]);
        int threads = Integer.parseInt(args[1]);
        boolean locked = args.length > 2 && args[2].equals("locked");
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        mx.setThreadContentionMonitoringEnabled(true);
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 256);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        server.setExecutor(pool);
        server.createContext("/", ex -> {
            try {
                String q = ex.getRequestURI().getQuery();
                int n = q != null && q.startsWith("work=") ? Integer.parseInt(q.substring(5)) : 8;
                byte[] sum = locked ? reprice(n) : hash(n);
                byte[] body = String.format("%02x%02x\n", sum[0], sum[1]).getBytes(StandardCharsets.US_ASCII);
                ex.sendResponseHeaders(200, body.length);
                ex.getResponseBody().write(body);
                served.incrementAndGet();
            } catch (Exception e) {
                ex.sendResponseHeaders(500, -1);
            } finally {
                ex.close();
            }
        });
        server.start();
        System.out.println("ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        long blocked0 = 0, waited0 = 0, served0 = 0, entries0 = 0, t0 = System.nanoTime();
        for (String line; (line = in.readLine()) != null; ) {
            if (!line.trim().equals("stats")) continue;
            long blocked = 0, waited = 0, entries = 0;
            for (ThreadInfo t : mx.getThreadInfo(mx.getAllThreadIds())) {
                if (t == null || !t.getThreadName().startsWith("pool-")) continue;
                blocked += t.getBlockedTime();
                entries += t.getBlockedCount();
                waited += t.getWaitedTime();
            }
            long now = System.nanoTime(), n = served.get();
            System.out.printf("{\"seconds\": %.3f, \"blocked_s\": %.3f, \"blocked\": %d, \"waited_s\": %.3f, \"served\": %d}%n",
                    (now - t0) / 1e9, (blocked - blocked0) / 1e3, entries - entries0, (waited - waited0) / 1e3, n - served0);
            System.out.flush();
            blocked0 = blocked; waited0 = waited; served0 = n; entries0 = entries; t0 = now;
        }
        server.stop(0);
        pool.shutdownNow();
    }
}
