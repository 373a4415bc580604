package splitbrain.jgroups;

import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The event log of node/events.py as JSON lines: events are buffered in memory and written by a
 * daemon thread every 100 ms, so a node killed with -9 loses at most the last 100 ms, and no
 * delivery thread ever waits for the disk.
 */
public final class EventLog {
    public static final long FLUSH_INTERVAL_MS = 100;
    private final FileOutputStream out;
    private final String node;
    private StringBuilder pending = new StringBuilder(1 << 16);
    private final Thread flusher;
    private volatile boolean closed;
    private final boolean enabled;

    public EventLog(String path, String node, boolean enabled) throws IOException {
        this.node = node;
        this.enabled = enabled;
        this.out = enabled ? new FileOutputStream(path, true) : null;
        flusher = new Thread(this::run, "eventlog-flush");
        flusher.setDaemon(true);
        if (enabled) flusher.start();
    }

    public boolean enabled() {
        return enabled;
    }

    /** One event: v, t, node, proto, kind, then the fields given (nulls left out). */
    public void log(double t, String proto, String kind, Object... fields) {
        if (!enabled) return;
        StringBuilder b = new StringBuilder(160);
        b.append("{\"v\":1,\"t\":").append(t).append(",\"node\":");
        Json.quote(b, node);
        b.append(",\"proto\":");
        Json.quote(b, proto);
        b.append(",\"kind\":");
        Json.quote(b, kind);
        Map<String, Object> m = Json.obj(fields);
        for (Map.Entry<String, Object> e : m.entrySet()) {
            b.append(',');
            Json.quote(b, e.getKey());
            b.append(':');
            Json.write(b, e.getValue());
        }
        b.append("}\n");
        synchronized (this) {
            pending.append(b);
        }
    }

    private void run() {
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
