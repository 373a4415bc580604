package splitbrain.jgroups;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

import org.jgroups.Address;
import org.jgroups.Event;
import org.jgroups.Header;
import org.jgroups.Message;
import org.jgroups.conf.ClassConfigurator;
import org.jgroups.stack.Protocol;

/**
 * The node's own fault protocol, inserted just above the transport (where JGroups' DISCARD sits):
 * the rule model of node/faultlayer.py (direction, peer, types, p, count, after, seqnos,
 * start/until on the run clock; drop, delay, duplicate) applied to single JGroups messages.
 * Message types come from the reliability headers: UNICAST2's DATA, XMIT_REQ, SEND_FIRST_SEQNO,
 * STABLE; pbcast.NAKACK's MSG, XMIT_REQ, XMIT_RSP (as NAKACK_MSG, NAKACK_XMIT_REQ,
 * NAKACK_XMIT_RSP); other protocols' messages by the protocol (STABLE_GOSSIP, GMS, HEARTBEAT,
 * DISCOVERY (PING, which MERGE2 uses too), VERIFY_SUSPECT); APP for a message with no protocol header.
 */
public final class FaultProtocol extends Protocol {
    // Indexed by the header's type byte (UNICAST2: DATA = 0 ... STABLE = 3; NAKACK: MSG = 1 ... XMIT_RSP = 3).
    public static final String[] UNICAST2_TYPES = {"DATA", "XMIT_REQ", "SEND_FIRST_SEQNO", "STABLE"};
    public static final String[] NAKACK_TYPES = {"?", "NAKACK_MSG", "NAKACK_XMIT_REQ", "NAKACK_XMIT_RSP"};
    public static final String[] ALL_TYPES = {
        "DATA", "XMIT_REQ", "SEND_FIRST_SEQNO", "STABLE", "NAKACK_MSG", "NAKACK_XMIT_REQ", "NAKACK_XMIT_RSP",
        "STABLE_GOSSIP", "GMS", "HEARTBEAT", "DISCOVERY", "VERIFY_SUSPECT", "APP",
    };

    /** One rule, as POST /faults gives it. */
    public static final class Rule {
        String direction = "up";
        String peer;
        Set<String> types;
        double p = 1.0;
        Long count;
        long after;
        long[] seqnos;
        Double start;
        Double until;
        String action = "drop";
        double delayS;
        double jitterS;
        long matched;
        long acted;

        Map<String, Object> toMap() {
            List<Long> sq = null;
            if (seqnos != null) {
                sq = new ArrayList<>();
                sq.add(seqnos[0]);
                sq.add(seqnos[1]);
            }
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("direction", direction);
            m.put("peer", peer);
            m.put("types", types == null ? null : new ArrayList<>(new TreeSet<>(types)));
            m.put("p", p);
            m.put("count", count);
            m.put("after", after);
            m.put("seqnos", sq);
            m.put("start", start);
            m.put("until", until);
            m.put("action", action);
            m.put("delay_s", delayS);
            m.put("jitter_s", jitterS);
            m.put("matched", matched);
            m.put("acted", acted);
            return m;
        }

        String describe() {
            StringBuilder b = new StringBuilder(action).append(' ').append(direction);
            if (peer != null) b.append(direction.equals("up") ? " from " : " to ").append(peer);
            if (types != null) b.append(' ').append(String.join("/", new TreeSet<>(types)));
            if (seqnos != null) b.append(" seqnos ").append(seqnos[0]).append('-').append(seqnos[1]);
            if (p < 1) b.append(" p=").append(p);
            if (after > 0) b.append(" after ").append(after);
            if (count != null) b.append(" count ").append(count);
            if (action.equals("delay")) {
                b.append(' ').append(fmt(delayS * 1000)).append("ms");
                if (jitterS > 0) b.append("+-").append(fmt(jitterS * 1000)).append("ms");
            }
            return b.toString();
        }

        private static String fmt(double ms) {
            return ms == Math.rint(ms) ? Long.toString((long) ms) : Double.toString(ms);
        }
    }

    private final Map<Integer, Rule> rules = new LinkedHashMap<>();
    private int nextId = 1;
    private final Random rng;
    private final EventLog events;
    private final Clock clock;
    private final Function<Address, String> names;
    private final ScheduledExecutorService timer = Executors.newSingleThreadScheduledExecutor(r -> {
        Thread t = new Thread(r, "faults-delay");
        t.setDaemon(true);
        return t;
    });
    private final short unicast2Id;
    private final short nakackId;
    private final Map<Short, String> otherIds = new LinkedHashMap<>();
    private final Field u2Type;
    private final Field u2Seqno;
    private final Field nakType;
    private final Field nakSeqno;
    long dropped, delayed, duplicated;

    public interface Clock {
        double now();
    }

    public FaultProtocol(long seed, EventLog events, Clock clock, Function<Address, String> names) throws Exception {
        this.rng = new Random(seed);
        this.events = events;
        this.clock = clock;
        this.names = names;
        Class<?> u2 = Class.forName("org.jgroups.protocols.UNICAST2");
        Class<?> u2h = Class.forName("org.jgroups.protocols.UNICAST2$Unicast2Header");
        Class<?> nak = Class.forName("org.jgroups.protocols.pbcast.NAKACK");
        Class<?> nakh = Class.forName("org.jgroups.protocols.pbcast.NakAckHeader");
        unicast2Id = ClassConfigurator.getProtocolId(u2);
        nakackId = ClassConfigurator.getProtocolId(nak);
        // The header fields are package-private in 2.12: read them, never change them.
        u2Type = accessible(u2h, "type");
        u2Seqno = accessible(u2h, "seqno");
        nakType = accessible(nakh, "type");
        nakSeqno = accessible(nakh, "seqno");
        other("org.jgroups.protocols.pbcast.STABLE", "STABLE_GOSSIP");
        other("org.jgroups.protocols.pbcast.GMS", "GMS");
        other("org.jgroups.protocols.FD_ALL", "HEARTBEAT");
        other("org.jgroups.protocols.FD", "HEARTBEAT");
        other("org.jgroups.protocols.PING", "DISCOVERY");
        other("org.jgroups.protocols.VERIFY_SUSPECT", "VERIFY_SUSPECT");
    }

    private static Field accessible(Class<?> c, String name) throws NoSuchFieldException {
        Field f = c.getDeclaredField(name);
        f.setAccessible(true);
        return f;
    }

    private void other(String cls, String type) {
        try {
            // 0: a protocol without an id of its own (its messages carry no header of it).
            short id = ClassConfigurator.getProtocolId(Class.forName(cls));
            if (id > 0) otherIds.put(id, type);
        } catch (ClassNotFoundException ignored) {
            // not in this jar
        }
    }

    @Override
    public String getName() {
        return "SPLITBRAIN_FAULTS";
    }

    // ---- rules ----------------------------------------------------------------------------------

    public synchronized int add(Rule r) {
        int id = nextId++;
        rules.put(id, r);
        return id;
    }

    public synchronized boolean remove(int id) {
        return rules.remove(id) != null;
    }

    public synchronized List<Integer> clear() {
        List<Integer> ids = new ArrayList<>(rules.keySet());
        rules.clear();
        return ids;
    }

    public synchronized Map<String, Object> snapshot() {
        Map<String, Object> m = new LinkedHashMap<>();
        for (Map.Entry<Integer, Rule> e : rules.entrySet()) m.put(Integer.toString(e.getKey()), e.getValue().toMap());
        return m;
    }

    public synchronized int size() {
        return rules.size();
    }

    public static String describe(Rule r) {
        return r.describe();
    }

    // ---- message types --------------------------------------------------------------------------

    private byte b(Field f, Header h) {
        try {
            return f.getByte(h);
        } catch (IllegalAccessException e) {
            return 0;
        }
    }

    private long l(Field f, Header h) {
        try {
            return f.getLong(h);
        } catch (IllegalAccessException e) {
            return -1;
        }
    }

    public String typeOf(Message msg) {
        Header h = msg.getHeader(unicast2Id);
        if (h != null) {
            int t = b(u2Type, h);
            return t >= 0 && t < UNICAST2_TYPES.length ? UNICAST2_TYPES[t] : "UNICAST2_" + t;
        }
        h = msg.getHeader(nakackId);
        if (h != null) {
            int t = b(nakType, h);
            return t > 0 && t < NAKACK_TYPES.length ? NAKACK_TYPES[t] : "NAKACK_" + t;
        }
        for (Map.Entry<Short, String> e : otherIds.entrySet()) {
            if (msg.getHeader(e.getKey()) != null) return e.getValue();
        }
        return "APP";
    }

    /** The reliability seqno of a message: UNICAST2's, else pbcast.NAKACK's, else null. */
    Long seqnoOf(Message msg) {
        Header h = msg.getHeader(unicast2Id);
        if (h != null) return l(u2Seqno, h);
        h = msg.getHeader(nakackId);
        if (h != null) return l(nakSeqno, h);
        return null;
    }

    // ---- message paths --------------------------------------------------------------------------

    @Override
    public Object up(Event evt) {
        if (evt.getType() == Event.MSG && size() > 0) {
            Message msg = (Message) evt.getArg();
            String peer = names.apply(msg.getSrc());
            Rule r = match("up", msg, peer);
            if (r != null) return act(r, "up", evt, msg, peer);
        }
        return up_prot.up(evt);
    }

    /** The reliability seqno (UNICAST2's or NAKACK's) of the last message this thread sent down. */
    private static final ThreadLocal<Long> LAST_SEQNO = new ThreadLocal<>();

    public static void forgetLastSeqno() {
        LAST_SEQNO.remove();
    }

    /** What the stack numbered the message this thread just sent (channel.send runs down to here). */
    public static Long lastSeqno() {
        return LAST_SEQNO.get();
    }

    @Override
    public Object down(Event evt) {
        if (evt.getType() == Event.MSG) {
            LAST_SEQNO.set(seqnoOf((Message) evt.getArg()));
        }
        if (evt.getType() == Event.MSG && size() > 0) {
            Message msg = (Message) evt.getArg();
            Address dest = msg.getDest();
            String peer = dest == null || dest.isMulticastAddress() ? null : names.apply(dest);
            Rule r = match("down", msg, peer);
            if (r != null) return act(r, "down", evt, msg, peer);
        }
        return down_prot.down(evt);
    }

    private synchronized Rule match(String direction, Message msg, String peer) {
        double now = clock.now();
        String type = null;
        for (Rule r : rules.values()) {
            if (!r.direction.equals(direction)) continue;
            // A down rule naming a peer matches unicasts to it; a multicast goes to no one peer.
            if (r.peer != null && !r.peer.equals(peer)) continue;
            if ((r.start != null && now < r.start) || (r.until != null && now >= r.until)) continue;
            if (r.count != null && r.acted >= r.count) continue;
            if (r.types != null) {
                if (type == null) type = typeOf(msg);
                if (!r.types.contains(type)) continue;
            }
            if (r.seqnos != null) {
                Long s = seqnoOf(msg);
                if (s == null || s < r.seqnos[0] || s > r.seqnos[1]) continue;
            }
            r.matched++;
            if (r.matched <= r.after || (r.p < 1.0 && rng.nextDouble() >= r.p)) continue;
            r.acted++;
            return r;
        }
        return null;
    }

    private Object pass(String direction, Event evt) {
        return direction.equals("up") ? up_prot.up(evt) : down_prot.down(evt);
    }

    private Object act(Rule r, String direction, Event evt, Message msg, String peer) {
        switch (r.action) {
            case "drop":
                synchronized (this) {
                    dropped++;
                }
                events.log(clock.now(), "faults", "drop", "peer", peer, "type", typeOf(msg), "seqno", seqnoOf(msg),
                    "reason", "fault rule: " + r.describe());
                return null;
            case "duplicate":
                synchronized (this) {
                    duplicated++;
                }
                pass(direction, new Event(Event.MSG, msg.copy()));
                return pass(direction, evt);
            default:
                double d;
                synchronized (this) {
                    delayed++;
                    d = r.delayS + (r.jitterS > 0 ? rng.nextDouble() * r.jitterS : 0.0);
                }
                timer.schedule(() -> {
                    try {
                        pass(direction, evt);
                    } catch (RuntimeException e) {
                        System.err.println("faults: delayed message failed: " + e);
                    }
                }, (long) (d * 1_000_000), TimeUnit.MICROSECONDS);
                return null;
        }
    }
}
