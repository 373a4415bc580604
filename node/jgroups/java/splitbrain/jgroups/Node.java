package splitbrain.jgroups;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.jgroups.Address;
import org.jgroups.Global;
import org.jgroups.JChannel;
import org.jgroups.MergeView;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;
import org.jgroups.ViewId;
import org.jgroups.protocols.TP;
import org.jgroups.protocols.pbcast.GMS;
import org.jgroups.stack.Protocol;
import org.jgroups.stack.ProtocolStack;
import org.jgroups.util.UUID;

/**
 * A JGroups 2.12 member under splitbrain: one JChannel built from a stack, the workload, the event
 * log and the admin API of docs/node-contract.md. It never re-implements a protocol and logs only
 * what the channel did: a send once channel.send() returned, a delivery when receive() got it, a
 * view when viewAccepted() got it.
 *
 * Started as `java -Djava.net.preferIPv4Stack=true -cp jgroups.jar:classes splitbrain.jgroups.Node
 * --config node.json`.
 */
public final class Node {
    /** The documented default stack (docs/jgroups.md); the harness adds bind address, port and group. */
    public static final String DEFAULT_STACK =
        "UDP(ip_ttl=0;enable_diagnostics=false):"
            + "PING(timeout=1000;num_initial_members=3):"
            + "MERGE2(min_interval=2000;max_interval=4000):"
            + "FD_ALL(interval=500;timeout=3000):"
            + "VERIFY_SUSPECT(timeout=500):"
            + "pbcast.NAKACK(use_mcast_xmit=false;retransmit_timeout=300,600,1200;discard_delivered_msgs=true):"
            + "UNICAST2(stable_interval=1000):"
            + "pbcast.STABLE(desired_avg_gossip=1000):"
            + "pbcast.GMS(join_timeout=1000;print_local_addr=false;merge_timeout=2000;view_bundling=true)";
    static final int MAX_PAYLOAD = 60_000;
    static final long STREAM_BATCH = 1024;
    static final long CLOSE_TIMEOUT_MS = 3000;

    final Map<String, Object> config;
    final String name;
    final long incarnation;
    final String token;
    final Map<String, String> peers; // name -> host:port as the harness gave them
    final double epoch;
    private final double clockOffset;
    private final long startedNanos = System.nanoTime();
    final EventLog events;
    final Delivered delivered = new Delivered();
    final Map<Integer, Stream> streams = Collections.synchronizedMap(new java.util.LinkedHashMap<>());
    final Map<String, Address> addresses = new ConcurrentHashMap<>(); // member name -> its current address
    final ScheduledExecutorService workers = Executors.newScheduledThreadPool(2, r -> {
        Thread t = new Thread(r, "workload");
        t.setDaemon(true);
        return t;
    });
    JChannel channel;
    FaultProtocol faults;
    volatile View view;
    volatile boolean running;
    volatile boolean leaveOnStop = true;
    volatile long sentTotal;
    volatile long viewsInstalled;
    String stackSource;
    String cluster;

    Node(Map<String, Object> config) throws Exception {
        this.config = config;
        this.name = str(config, "name");
        this.incarnation = ((Number) config.getOrDefault("incarnation", 1L)).longValue();
        this.token = (String) config.get("admin_token");
        @SuppressWarnings("unchecked")
        Map<String, Object> p = (Map<String, Object>) config.getOrDefault("peers", Collections.emptyMap());
        this.peers = new java.util.TreeMap<>();
        for (Map.Entry<String, Object> e : p.entrySet()) peers.put(e.getKey(), (String) e.getValue());
        double wall = System.currentTimeMillis() / 1000.0;
        Object ep = config.get("epoch");
        this.epoch = ep == null ? wall : ((Number) ep).doubleValue();
        this.clockOffset = wall - epoch - System.nanoTime() / 1e9;
        boolean log = !Boolean.FALSE.equals(config.get("event_log"));
        String path = (String) config.get("events");
        this.events = new EventLog(path == null ? "/dev/null" : path, name, log && path != null);
    }

    static String str(Map<String, Object> m, String key) {
        Object v = m.get(key);
        if (!(v instanceof String)) throw new IllegalArgumentException(key + ": required (a string)");
        return (String) v;
    }

    /** The run clock: seconds since the run's epoch (monotonic after one wall-clock reading). */
    double now() {
        return System.nanoTime() / 1e9 + clockOffset;
    }

    double uptime() {
        return (System.nanoTime() - startedNanos) / 1e9;
    }

    /** A member's node name: its JGroups logical name (the harness names channels after nodes). */
    String nameOf(Address a) {
        if (a == null) return null;
        String n = UUID.get(a);
        return n != null ? n : a.toString();
    }

    List<String> names(List<Address> members) {
        List<String> out = new ArrayList<>();
        for (Address a : members) out.add(nameOf(a));
        return out;
    }

    // ---- the channel ----------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    void start() throws Exception {
        Map<String, Object> jg = (Map<String, Object>) config.getOrDefault("jgroups", Collections.emptyMap());
        String bind = str(config, "bind");
        String host = bind.substring(0, bind.lastIndexOf(':'));
        int port = Integer.parseInt(bind.substring(bind.lastIndexOf(':') + 1));
        // The harness owns addresses: JGroups reads these system properties over the stack's values.
        System.setProperty(Global.BIND_ADDR, host);
        Object group = config.get("mcast_group");
        if (group instanceof String) {
            String g = (String) group;
            System.setProperty(Global.UDP_MCAST_ADDR, g.substring(0, g.lastIndexOf(':')));
            System.setProperty(Global.UDP_MCAST_PORT, g.substring(g.lastIndexOf(':') + 1));
        }
        Object stack = jg.get("stack");
        stackSource = stack instanceof String && !((String) stack).isEmpty() ? (String) stack : DEFAULT_STACK;
        File file = new File(stackSource);
        channel = stackSource.trim().startsWith("<") || !file.isFile() ? new JChannel(stackSource) : new JChannel(file);
        ProtocolStack ps = channel.getProtocolStack();
        TP tp = ps.getTransport();
        tp.setBindPort(port);
        tp.setPortRange(0);
        long seed = config.get("seed") instanceof Number ? ((Number) config.get("seed")).longValue() : 0L;
        faults = new FaultProtocol(seed, events, this::now, this::nameOf);
        ps.insertProtocolInStack(faults, tp, ProtocolStack.ABOVE);
        channel.setName(name);
        channel.setReceiver(new ReceiverAdapter() {
            @Override
            public void receive(Message m) {
                onDeliver(m);
            }

            @Override
            public void viewAccepted(View v) {
                onView(v);
            }
        });
        cluster = jg.get("cluster") instanceof String ? (String) jg.get("cluster") : "splitbrain";
        events.log(now(), "node", "node_start", "incarnation", incarnation);
        channel.connect(cluster);
        Address self = channel.getAddress();
        addresses.put(name, self);
        running = true;
        System.out.println("node " + name + " (incarnation " + incarnation + ") up: JGroups " + self + " on "
            + bind + ", cluster " + cluster);
    }

    void onView(View v) {
        boolean first = view == null;
        view = v;
        viewsInstalled++;
        for (Address a : v.getMembers()) addresses.put(nameOf(a), a);
        ViewId id = v.getVid();
        String reason = v instanceof MergeView ? "merge" : null;
        List<String> digest = null;
        Address self = channel.getAddress();
        if (first && v.size() > 1 && !id.getCoordAddress().equals(self)) {
            // This life's first view came with the coordinator's JOIN_RSP: NAKACK starts each
            // sender's table at the digest's highest delivered seqno (what no_loss's join excuse reads).
            reason = "join";
            digest = joinDigest(self);
        }
        events.log(now(), "jgroups", "view", "members", names(v.getMembers()), "view_id", id.getId(),
            "coord", nameOf(id.getCoordAddress()), "reason", reason, "digest", digest);
    }

    private List<String> joinDigest(Address self) {
        try {
            Object d = channel.getProtocolStack().down(new org.jgroups.Event(org.jgroups.Event.GET_DIGEST));
            if (!(d instanceof org.jgroups.util.Digest)) return null;
            List<String> out = new ArrayList<>();
            for (Address sender : ((org.jgroups.util.Digest) d).getSenders().keySet()) {
                if (sender.equals(self)) continue;
                out.add(nameOf(sender) + ":" + ((org.jgroups.util.Digest) d).highestDeliveredSeqnoAt(sender));
            }
            Collections.sort(out);
            return out;
        } catch (RuntimeException e) {
            return null;
        }
    }

    void onDeliver(Message m) {
        double t = now();
        byte[] buf = m.getRawBuffer();
        int off = m.getOffset(), len = m.getLength();
        String sender = nameOf(m.getSrc());
        String app = null;
        if (buf != null && len >= 3 && buf[off] == 'S' && buf[off + 1] == 'B') {
            int n = buf[off + 2] & 0xff;
            if (3 + n <= len) app = new String(buf, off + 3, n, StandardCharsets.US_ASCII);
        }
        events.app(t, "jgroups", "deliver", sender, null, faults.seqnoOf(m), len, app);
        if (app != null) {
            int b = app.lastIndexOf(':');
            int a = b > 0 ? app.lastIndexOf(':', b - 1) : -1;
            if (a > 0) {
                try {
                    delivered.add(app.substring(0, a), Integer.parseInt(app.substring(a + 1, b)),
                        Long.parseLong(app.substring(b + 1)));
                } catch (NumberFormatException ignored) {
                    // not a workload id: logged, not counted
                }
            }
        }
    }

    // ---- workload -------------------------------------------------------------------------------

    void startStream(Stream s) {
        streams.put(s.id, s);
        workers.execute(() -> step(s));
    }

    private void step(Stream s) {
        if (s.done || !running) return;
        double now = now();
        long k = s.due(now, STREAM_BATCH);
        for (long i = 0; i < k && running; i++) {
            long n = s.firstN + s.sent;
            if (!sendOne(s, n)) {
                if (s.done) return;
                s.blocked = true;
                workers.schedule(() -> step(s), 5, TimeUnit.MILLISECONDS);
                return;
            }
            s.blocked = false;
            s.sent++;
        }
        if (s.finished(now())) {
            s.done = true;
            return;
        }
        long delayUs = 1000;
        if (s.rate > 0) {
            double due = s.started + s.sent / s.rate;
            delayUs = Math.max(1000, (long) ((due - now()) * 1e6));
        } else {
            delayUs = 0;
        }
        workers.schedule(() -> step(s), delayUs, TimeUnit.MICROSECONDS);
    }

    /** Hand app n to the channel for each destination; false when a destination has no address yet. */
    private boolean sendOne(Stream s, long n) {
        byte[] payload = s.payload(n);
        String app = s.appId(n);
        for (String dest : s.to) {
            Address addr = null;
            if (!dest.equals("*")) {
                addr = addresses.get(dest);
                if (addr == null) return false;
            }
            View v = view;
            double t = now();
            Long seqno;
            try {
                FaultProtocol.forgetLastSeqno();
                channel.send(new Message(addr, null, payload));
                seqno = FaultProtocol.lastSeqno();
            } catch (Exception e) {
                s.done = true;
                s.stopped = "error: " + e.getClass().getSimpleName() + ": " + e.getMessage();
                return false;
            }
            sentTotal++;
            if (addr == null) {
                events.app(t, "jgroups", "send", null, v == null ? null : names(v.getMembers()), seqno, payload.length,
                    app);
            } else {
                events.app(t, "jgroups", "send", dest, null, seqno, payload.length, app);
            }
        }
        return true;
    }

    // ---- view injection -------------------------------------------------------------------------

    /** Install a view locally through GMS.installView (what 2.12 allows); returns its id. */
    long installView(List<String> members, Long viewId) {
        List<Address> addrs = new ArrayList<>();
        for (String m : members) {
            Address a = addresses.get(m);
            if (a == null) throw new AdminError(400, "unknown member " + m + " (no address seen in a view)", "members");
            addrs.add(a);
        }
        View cur = view;
        long id = viewId != null ? viewId : (cur == null ? 1 : cur.getVid().getId() + 1);
        GMS gms = (GMS) channel.getProtocolStack().findProtocol(GMS.class);
        if (gms == null) throw new AdminError(400, "the stack has no pbcast.GMS", "members");
        gms.installView(new View(new ViewId(addrs.get(0), id), addrs));
        return id;
    }

    List<String> stackNames() {
        List<String> out = new ArrayList<>();
        for (Protocol p : channel.getProtocolStack().getProtocols()) out.add(p.getName());
        Collections.reverse(out); // bottom first
        return out;
    }

    // ---- stop -----------------------------------------------------------------------------------

    synchronized void stop(String reason) {
        if (!running) return;
        running = false;
        for (Stream s : new ArrayList<>(streams.values())) {
            if (!s.done) {
                s.done = true;
                s.stopped = "node stopped";
            }
        }
        workers.shutdownNow();
        if (leaveOnStop) {
            // LEAVE, as an application's shutdown does; bounded: a leave to a coordinator that is
            // going away too waits for GMS's timeouts.
            Thread closer = new Thread(() -> {
                try {
                    channel.close();
                } catch (RuntimeException ignored) {
                    // the process is going away
                }
            }, "close");
            closer.setDaemon(true);
            closer.start();
            try {
                closer.join(CLOSE_TIMEOUT_MS);
            } catch (InterruptedException ignored) {
                // stop anyway
            }
        }
        events.log(now(), "node", "node_stop", "reason", reason, "incarnation", incarnation);
        events.close();
    }

    // ---- main -----------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        String path = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--config") && i + 1 < args.length) path = args[++i];
            else if (args[i].equals("--help")) {
                System.out.println("usage: Node --config node.json  (docs/node-contract.md)");
                return;
            }
        }
        if (path == null) {
            System.err.println("Node: --config is required");
            System.exit(2);
        }
        Map<String, Object> cfg;
        try {
            cfg = (Map<String, Object>) Json.parse(new String(Files.readAllBytes(Paths.get(path)), StandardCharsets.UTF_8));
        } catch (Exception e) {
            System.err.println("Node: config: " + e.getMessage());
            System.exit(2);
            return;
        }
        Node node = new Node(cfg);
        Admin admin = new Admin(node);
        sun.misc.Signal.handle(new sun.misc.Signal("TERM"), sig -> {
            try {
                node.stop("stop");
                admin.stop();
            } finally {
                Runtime.getRuntime().halt(0);
            }
        });
        try {
            node.start();
            admin.start(str(cfg, "admin"));
        } catch (java.net.BindException e) {
            System.err.println("Node: cannot bind: Address already in use: " + e.getMessage());
            node.events.close();
            Runtime.getRuntime().halt(1);
        } catch (Exception e) {
            System.err.println("Node: start failed: " + e);
            e.printStackTrace();
            node.events.close();
            Runtime.getRuntime().halt(1);
        }
    }
}
