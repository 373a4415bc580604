package splitbrain.jgroups;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The event log of node/events.py as JSON lines: events are buffered in memory and written by a
 * daemon thread every 100 ms, so a node killed with -9 loses at most the last 100 ms, and no
 * delivery thread ever waits for the disk.
 *
 * Sends and deliveries of application messages go through {@link #app}: consecutive ones of one
 * stream to or from one peer, with consecutive seqnos, within {@link #RUN_WINDOW_S} of the first,
 * become one run line of schema version 2 (docs/event-log.md), as the Python node writes a batch.
 * Any other event, and every flush, closes the open run first, so lines stay in the order the
 * events happened and a flushed log holds every run that had begun.
 */
public final class EventLog {
    public static final long FLUSH_INTERVAL_MS = 100;
    /** A run spans at most this long: every message of a run line carries its first message's time. */
    public static final double RUN_WINDOW_S = 0.002;
    private final FileOutputStream out;
    private final String nodeQuoted;
    private StringBuilder pending = new StringBuilder(1 << 16);
    private final Thread flusher;
    private volatile boolean closed;
    private final boolean enabled;
    private final Run run = new Run();

    /** The open run: its first message's fields, and how far it reaches. Guarded by this. */
    private static final class Run {
        int count; // 0: no run open
        double t;
        String proto;
        String kind;
        String peer;
        List<String> members;
        String stream; // "S:K:" of the app ids
        long firstN;
        long lastN;
        long firstSeqno;
        long lastSeqno;
        long bytes;
        String app;
        String lastApp;
    }

    public EventLog(String path, String node, boolean enabled) throws IOException {
        StringBuilder q = new StringBuilder();
        Json.quote(q, node);
        this.nodeQuoted = q.toString();
        this.enabled = enabled;
        this.out = enabled ? new FileOutputStream(path, true) : null;
        flusher = new Thread(this::loop, "eventlog-flush");
        flusher.setDaemon(true);
        if (enabled) flusher.start();
    }

    public boolean enabled() {
        return enabled;
    }

    private void head(StringBuilder b, int version, double t, String proto, String kind) {
        b.append("{\"v\":").append(version).append(",\"t\":").append(t).append(",\"node\":").append(nodeQuoted);
        b.append(",\"proto\":");
        Json.quote(b, proto);
        b.append(",\"kind\":");
        Json.quote(b, kind);
    }

    private static void field(StringBuilder b, String key, Object value) {
        if (value == null) return;
        b.append(",\"").append(key).append("\":");
        Json.write(b, value);
    }

    /** One event: v, t, node, proto, kind, then the fields given as key, value pairs (nulls left out). */
    public void log(double t, String proto, String kind, Object... fields) {
        if (!enabled) return;
        StringBuilder b = new StringBuilder(160);
        head(b, 1, t, proto, kind);
        for (int k = 0; k + 1 < fields.length; k += 2) field(b, (String) fields[k], fields[k + 1]);
        b.append("}\n");
        synchronized (this) {
            closeRun();
            pending.append(b);
        }
    }

    /**
     * A send or a delivery of one application message: `peer` (or `members`, a multicast send),
     * the reliability seqno (null when the stack gave none), its payload size and app id "S:K:n".
     */
    public void app(double t, String proto, String kind, String peer, List<String> members, Long seqno, int bytes,
                    String app) {
        if (!enabled) return;
        int cut = app == null ? -1 : app.lastIndexOf(':');
        long n = -1;
        if (cut > 0) {
            try {
                n = Long.parseLong(app.substring(cut + 1));
            } catch (NumberFormatException e) {
                n = -1;
            }
        }
        if (seqno == null || n < 0) {
            log(t, proto, kind, "peer", peer, "members", members, "seqno", seqno, "bytes", bytes, "app", app);
            return;
        }
        synchronized (this) {
            Run r = run;
            if (r.count > 0 && r.kind.equals(kind) && r.proto.equals(proto) && java.util.Objects.equals(r.peer, peer)
                && java.util.Objects.equals(r.members, members) && n == r.lastN + 1 && seqno == r.lastSeqno + 1
                && t - r.t <= RUN_WINDOW_S && app.regionMatches(0, r.stream, 0, cut + 1)
                && r.stream.length() == cut + 1) {
                r.count++;
                r.lastN = n;
                r.lastSeqno = seqno;
                r.bytes += bytes;
                r.lastApp = app;
                return;
            }
            closeRun();
            r.count = 1;
            r.t = t;
            r.proto = proto;
            r.kind = kind;
            r.peer = peer;
            r.members = members;
            r.stream = app.substring(0, cut + 1);
            r.firstN = r.lastN = n;
            r.firstSeqno = r.lastSeqno = seqno;
            r.bytes = bytes;
            r.app = r.lastApp = app;
        }
    }

    /** Write the open run as a line (version 1 for a single message, a run line for more). */
    private void closeRun() {
        Run r = run;
        if (r.count == 0) return;
        StringBuilder b = pending;
        head(b, r.count > 1 ? 2 : 1, r.t, r.proto, r.kind);
        field(b, "peer", r.peer);
        field(b, "members", r.members);
        b.append(",\"seqno\":").append(r.firstSeqno);
        if (r.count > 1) b.append(",\"last_seqno\":").append(r.lastSeqno).append(",\"count\":").append(r.count);
        b.append(",\"bytes\":").append(r.bytes).append(",\"app\":");
        Json.quote(b, r.app);
        if (r.count > 1) {
            b.append(",\"last_app\":");
            Json.quote(b, r.lastApp);
        }
        b.append("}\n");
        r.count = 0;
        r.peer = null;
        r.members = null;
    }

    private void loop() {
        while (!closed) {
            try {
                Thread.sleep(FLUSH_INTERVAL_MS);
            } catch (InterruptedException e) {
                return;
            }
            flush();
        }
    }

    public void flush() {
        if (!enabled) return;
        StringBuilder take;
        synchronized (this) {
            closeRun();
            if (pending.length() == 0) return;
            take = pending;
            pending = new StringBuilder(Math.max(1 << 16, take.length()));
        }
        try {
            synchronized (out) {
                out.write(take.toString().getBytes(StandardCharsets.UTF_8));
            }
        } catch (IOException e) {
            System.err.println("eventlog: write failed: " + e);
        }
    }

    public void close() {
        closed = true;
        flush();
        if (out != null) {
            try {
                out.close();
            } catch (IOException ignored) {
                // the process is going away
            }
        }
    }
}
