package fixengine;

import com.sun.net.httpserver.HttpServer;
import java.io.ByteArrayInputStream;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.time.LocalDateTime;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import quickfix.Acceptor;
import quickfix.Application;
import quickfix.DefaultMessageFactory;
import quickfix.FieldNotFound;
import quickfix.Initiator;
import quickfix.MemoryStoreFactory;
import quickfix.LogFactory;
import quickfix.SLF4JLogFactory;
import quickfix.ScreenLogFactory;
import quickfix.Message;
import quickfix.Session;
import quickfix.SessionID;
import quickfix.SessionSettings;
import quickfix.SocketAcceptor;
import quickfix.SocketInitiator;
import quickfix.ThreadedSocketAcceptor;
import quickfix.field.AvgPx;
import quickfix.field.ClOrdID;
import quickfix.field.CumQty;
import quickfix.field.ExecID;
import quickfix.field.ExecType;
import quickfix.field.LeavesQty;
import quickfix.field.MsgType;
import quickfix.field.OrdStatus;
import quickfix.field.OrdType;
import quickfix.field.OrderID;
import quickfix.field.OrderQty;
import quickfix.field.Side;
import quickfix.field.Symbol;
import quickfix.field.TransactTime;
import quickfix.fix44.ExecutionReport;
import quickfix.fix44.NewOrderSingle;

/**
 * A reproduction of head-of-line blocking in a FIX engine (QuickFIX/J).
 *
 * <p>{@code acceptor}: five FIX.4.4 sessions (CLIENT1..CLIENT5) on one port. With {@code
 * --mode spin} or {@code block} it is a {@link SocketAcceptor}: QuickFIX/J's single-threaded
 * event handling, where one thread, "QFJ Message Processor", runs the application for every
 * session. Each NewOrderSingle is answered with an ExecutionReport; for CLIENT1, the slow
 * session, the application first does {@code --slow-ms} of work: real CPU work (SHA-256
 * digests) with {@code spin}, a blocking wait with {@code block} (a slow downstream). The
 * other sessions' orders queue behind it. With {@code --mode threaded} it is a {@link
 * ThreadedSocketAcceptor} (a thread per session), the fix. With {@code --mode locked} the
 * threads of a ThreadedSocketAcceptor match every order against one {@code synchronized} order
 * book for {@code --slow-ms} of CPU each: a lock convoy.
 *
 * <p>{@code initiator}: the five clients, each sending {@code --rate} orders per second and
 * timing the answers; {@code fix_order_age_seconds{session}} on {@code --metrics-port} is the
 * age of a session's oldest unanswered order, else the latency of its last answered one.
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new ConcurrentHashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            opt.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        }
        int sessions = Integer.parseInt(opt.getOrDefault("sessions", "5"));
        int port = Integer.parseInt(opt.get("port"));
        switch (args[0]) {
            case "acceptor" -> acceptor(port, sessions, opt.getOrDefault("mode", "spin"), Long.parseLong(opt.getOrDefault("slow-ms", "20")));
            case "initiator" -> initiator(port, sessions, Double.parseDouble(opt.getOrDefault("rate", "50")), Integer.parseInt(opt.get("metrics-port")));
            default -> throw new IllegalArgumentException("acceptor|initiator");
        }
    }

    static String settings(String role, int port, int sessions) {
        StringBuilder s = new StringBuilder("[default]\n")
                .append("ConnectionType=").append(role).append('\n')
                .append("BeginString=FIX.4.4\nStartTime=00:00:00\nEndTime=00:00:00\nHeartBtInt=30\n")
                .append("ResetOnLogon=Y\nUseDataDictionary=N\nReconnectInterval=1\n");
        if (role.equals("acceptor")) {
            s.append("SenderCompID=SERVER\nSocketAcceptAddress=127.0.0.1\nSocketAcceptPort=").append(port).append('\n');
        } else {
            s.append("TargetCompID=SERVER\nSocketConnectHost=127.0.0.1\nSocketConnectPort=").append(port).append('\n');
        }
        for (int i = 1; i <= sessions; i++) {
            s.append("[session]\n").append(role.equals("acceptor") ? "TargetCompID" : "SenderCompID").append("=CLIENT").append(i).append('\n');
        }
        return s.toString();
    }

    /** Silent, or every message and event on stdout with FIXENGINE_LOG=1 (to debug the workload). */
    static LogFactory logs(SessionSettings ss) {
        return "1".equals(System.getenv("FIXENGINE_LOG")) ? new ScreenLogFactory(true, true, true) : new SLF4JLogFactory(ss);
    }

    /** An application that only has to implement what it uses. */
    abstract static class App implements Application {
        public void onCreate(SessionID id) {}
        public void onLogon(SessionID id) {}
        public void onLogout(SessionID id) {}
        public void toAdmin(Message m, SessionID id) {}
        public void fromAdmin(Message m, SessionID id) {}
        public void toApp(Message m, SessionID id) {}
    }

    static void acceptor(int port, int sessions, String mode, long slowMs) throws Exception {
        ThreadMXBean cpu = ManagementFactory.getThreadMXBean();
        AtomicLong execs = new AtomicLong();
        Application app = new App() {
            @Override
            public void fromApp(Message m, SessionID id) throws FieldNotFound {
                if (!m.getHeader().getString(MsgType.FIELD).equals(MsgType.ORDER_SINGLE)) {
                    return;
                }
                boolean slow = id.getTargetCompID().equals("CLIENT1");
                if (mode.equals("locked")) {
                    BOOK.match(cpu, slowMs * 1_000_000L); // every session's thread, one book
                } else if (slow && mode.equals("block")) {
                    sleep(slowMs); // a synchronous call to a slow downstream
                } else {
                    work(cpu, slow ? slowMs * 1_000_000L : 100_000L); // pricing, risk checks: CPU
                }
                NewOrderSingle order = (NewOrderSingle) m;
                ExecutionReport r = new ExecutionReport(new OrderID("O" + execs.incrementAndGet()), new ExecID("E" + execs.get()),
                        new ExecType(ExecType.FILL), new OrdStatus(OrdStatus.FILLED), order.getSide(), new LeavesQty(0),
                        new CumQty(order.getOrderQty().getValue()), new AvgPx(100.0));
                r.set(order.getClOrdID());
                r.set(order.getSymbol());
                Session.lookupSession(id).send(r);
            }
        };
        SessionSettings ss = new SessionSettings(new ByteArrayInputStream(settings("acceptor", port, sessions).getBytes(StandardCharsets.UTF_8)));
        Acceptor a = mode.equals("threaded") || mode.equals("locked")
                ? new ThreadedSocketAcceptor(app, new MemoryStoreFactory(), ss, logs(ss), new DefaultMessageFactory())
                : new SocketAcceptor(app, new MemoryStoreFactory(), ss, logs(ss), new DefaultMessageFactory());
        a.start();
        Runtime.getRuntime().addShutdownHook(new Thread(a::stop));
        System.out.println("ready");
        System.out.flush();
        Thread.currentThread().join();
    }

    /** The one order book every session matches against. */
    static final OrderBook BOOK = new OrderBook();

    /** An order book behind its monitor: matching an order holds it for `ns` of CPU time. */
    static final class OrderBook {
        synchronized void match(ThreadMXBean cpu, long ns) {
            work(cpu, ns);
        }
    }

    /** Burn `ns` of this thread's CPU time on SHA-256 digests. */
    static void work(ThreadMXBean cpu, long ns) {
        try {
            MessageDigest d = MessageDigest.getInstance("SHA-256");
            byte[] buf = new byte[4096];
            long end = cpu.getCurrentThreadCpuTime() + ns;
            while (cpu.getCurrentThreadCpuTime() < end) {
                for (int i = 0; i < 16; i++) { // ~0.1 ms of hashing between looks at the clock
                    d.update(buf);
                    byte[] h = d.digest();
                    buf[h[0] & 0xff] ^= h[1];
                }
            }
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** A session's orders: when each was sent, which was answered last. */
    static final class Book {
        static final int RING = 1 << 16;
        final long[] sent = new long[RING];
        final AtomicLong next = new AtomicLong();
        final AtomicLong answered = new AtomicLong(-1);
        volatile long lastLatency;

        double ageSeconds() {
            long oldest = answered.get() + 1;
            if (oldest < next.get()) {
                return (System.nanoTime() - sent[(int) (oldest % RING)]) / 1e9;
            }
            return lastLatency / 1e9;
        }
    }

    static void initiator(int port, int sessions, double rate, int metricsPort) throws Exception {
        Map<String, Book> books = new ConcurrentHashMap<>();
        CountDownLatch logons = new CountDownLatch(sessions);
        Application app = new App() {
            @Override
            public void onLogon(SessionID id) {
                logons.countDown();
            }

            @Override
            public void fromApp(Message m, SessionID id) throws FieldNotFound {
                if (!m.getHeader().getString(MsgType.FIELD).equals(MsgType.EXECUTION_REPORT)) {
                    return;
                }
                Book b = books.get(id.getSenderCompID());
                long seq = Long.parseLong(m.getString(ClOrdID.FIELD).substring(id.getSenderCompID().length() + 1));
                b.lastLatency = System.nanoTime() - b.sent[(int) (seq % Book.RING)];
                b.answered.accumulateAndGet(seq, Math::max);
            }
        };
        SessionSettings ss = new SessionSettings(new ByteArrayInputStream(settings("initiator", port, sessions).getBytes(StandardCharsets.UTF_8)));
        Initiator init = new SocketInitiator(app, new MemoryStoreFactory(), ss, logs(ss), new DefaultMessageFactory());
        init.start();
        Runtime.getRuntime().addShutdownHook(new Thread(init::stop));

        HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", metricsPort), 0);
        http.createContext("/metrics", ex -> {
            StringBuilder out = new StringBuilder("# HELP fix_order_age_seconds Age of the oldest unanswered order, else the last latency\n# TYPE fix_order_age_seconds gauge\n");
            double max = 0;
            for (Map.Entry<String, Book> e : books.entrySet()) {
                double age = e.getValue().ageSeconds();
                max = Math.max(max, age);
                out.append("fix_order_age_seconds{session=\"").append(e.getKey()).append("\"} ").append(age).append('\n');
            }
            out.append("fix_order_age_max_seconds ").append(max).append('\n');
            byte[] body = out.toString().getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "text/plain; version=0.0.4");
            ex.sendResponseHeaders(200, body.length);
            try (OutputStream os = ex.getResponseBody()) {
                os.write(body);
            }
        });
        http.start();

        if (!logons.await(60, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not every session logged on");
        }
        List<ScheduledExecutorService> senders = new ArrayList<>();
        long period = (long) (1e9 / rate);
        for (int i = 1; i <= sessions; i++) {
            String client = "CLIENT" + i;
            Book b = new Book();
            books.put(client, b);
            SessionID id = new SessionID("FIX.4.4", client, "SERVER");
            ScheduledExecutorService s = Executors.newSingleThreadScheduledExecutor(r -> new Thread(r, "sender-" + client));
            s.scheduleAtFixedRate(() -> {
                long seq = b.next.get();
                NewOrderSingle o = new NewOrderSingle(new ClOrdID(client + "-" + seq), new Side(Side.BUY), new TransactTime(LocalDateTime.now()),
                        new OrdType(OrdType.MARKET));
                o.set(new Symbol("EURUSD"));
                o.set(new OrderQty(100));
                b.sent[(int) (seq % Book.RING)] = System.nanoTime();
                b.next.incrementAndGet();
                Session.lookupSession(id).send(o);
            }, period, period, TimeUnit.NANOSECONDS);
            senders.add(s);
        }
        System.out.println("logged on");
        System.out.flush();
        Thread.currentThread().join();
    }
}
