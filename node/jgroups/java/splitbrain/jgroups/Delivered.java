package splitbrain.jgroups;

import java.util.BitSet;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

/** What this node delivered per (sender, stream): count, first, last, order violations, duplicates. */
final class Delivered {
    private static final class Stats {
        long count, first = -1, last = -1, highest, orderViolations, duplicates;
        final BitSet seen = new BitSet();
    }

    private final Map<String, Map<Integer, Stats>> bySender = new TreeMap<>();
    private long total;

    synchronized void add(String sender, int stream, long n) {
        Stats s = bySender.computeIfAbsent(sender, k -> new TreeMap<>()).computeIfAbsent(stream, k -> new Stats());
        total++;
        s.count++;
        s.last = n;
        if (s.first < 0) s.first = n;
        boolean fits = n >= 0 && n < Integer.MAX_VALUE;
        if (n > s.highest) {
            s.highest = n;
        } else if (fits && s.seen.get((int) n)) {
            s.duplicates++;
        } else {
            s.orderViolations++;
        }
        if (fits) s.seen.set((int) n);
    }

    synchronized long total() {
        return total;
    }

    synchronized Map<String, Object> toMap() {
        Map<String, Object> senders = new LinkedHashMap<>();
        for (Map.Entry<String, Map<Integer, Stats>> e : bySender.entrySet()) {
            Map<String, Object> streams = new LinkedHashMap<>();
            for (Map.Entry<Integer, Stats> se : e.getValue().entrySet()) {
                Stats s = se.getValue();
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("count", s.count);
                m.put("first", s.first < 0 ? null : s.first);
                m.put("last", s.last < 0 ? null : s.last);
                m.put("order_violations", s.orderViolations);
                m.put("duplicates", s.duplicates);
                streams.put(Integer.toString(se.getKey()), m);
            }
            senders.put(e.getKey(), streams);
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("delivered", senders);
        out.put("total", total);
        return out;
    }
}
