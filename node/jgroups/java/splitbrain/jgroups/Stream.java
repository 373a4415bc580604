package splitbrain.jgroups;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

/** One workload stream: app payloads "sender:stream:n" (n from first_n) at a rate, until a count or a duration. */
final class Stream {
    final int id;
    final List<String> to; // peer names, or ["*"] for one multicast per message
    final Long count;
    final Double duration;
    final double rate;
    final int size;
    final double started;
    final long firstN;
    final String prefix;
    volatile long sent;
    volatile boolean done;
    volatile boolean blocked;
    volatile String stopped;

    Stream(String sender, int id, List<String> to, Long count, Double duration, double rate, int size, double started,
           long firstN) {
        this.id = id;
        this.to = to;
        this.count = count;
        this.duration = duration;
        this.rate = rate;
        this.size = size;
        this.started = started;
        this.firstN = firstN;
        this.prefix = sender + ":" + id + ":";
    }

    Long planned() {
        if (count != null) return count;
        if (rate > 0 && duration != null) return Math.max(1L, (long) Math.ceil(rate * duration - 1e-9));
        return null;
    }

    /** How many n's are due at `now` (at most `batch`). */
    long due(double now, long batch) {
        if (done) return 0;
        long limit = batch;
        Long planned = planned();
        if (planned != null) limit = Math.min(limit, planned - sent);
        else if (now >= started + duration) return 0;
        if (rate > 0) {
            long target = (long) Math.floor((now - started) * rate + 1e-9) + 1;
            limit = Math.min(limit, target - sent);
        }
        return Math.max(0, limit);
    }

    boolean finished(double now) {
        Long planned = planned();
        if (planned != null) return sent >= planned;
        return now >= started + duration;
    }

    /** The payload of app n: "SB", the id's length, the id, zero padding up to `size` (node/message.py). */
    byte[] payload(long n) {
        byte[] id = (prefix + n).getBytes(StandardCharsets.US_ASCII);
        byte[] out = new byte[Math.max(size, 3 + id.length)];
        out[0] = 'S';
        out[1] = 'B';
        out[2] = (byte) id.length;
        System.arraycopy(id, 0, out, 3, id.length);
        return out;
    }

    String appId(long n) {
        return prefix + n;
    }

    Map<String, Object> toMap() {
        return Json.obj("stream", id, "to", to, "sent", sent, "planned", planned(), "done", done, "rate", rate,
            "size", size, "count", count, "duration", duration, "started", started, "blocked", blocked,
            "stopped", stopped);
    }
}
