package splitbrain.jgroups;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Executors;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import org.jgroups.View;

/** The admin HTTP API of docs/node-contract.md (node/contract/openapi.yaml), on the JDK's HttpServer. */
final class Admin {
    static final String TOKEN_HEADER = "X-Splitbrain-Token";
    static final Set<String> SEND_FIELDS = set("to", "count", "duration", "rate", "size", "stream", "first_n");
    static final Set<String> FAULT_FIELDS = set("direction", "peer", "types", "p", "count", "after", "seqnos", "start",
        "until", "action", "delay_s", "jitter_s");
    static final Set<String> KNOWN_TYPES = set(FaultProtocol.ALL_TYPES);

    private final Node node;
    private HttpServer server;

    Admin(Node node) {
        this.node = node;
    }

    private static Set<String> set(String... s) {
        return new HashSet<>(Arrays.asList(s));
    }

    void start(String addr) throws IOException {
        String host = addr.substring(0, addr.lastIndexOf(':'));
        int port = Integer.parseInt(addr.substring(addr.lastIndexOf(':') + 1));
        server = HttpServer.create(new InetSocketAddress(host, port), 128);
        server.setExecutor(Executors.newFixedThreadPool(4, r -> {
            Thread t = new Thread(r, "admin");
            t.setDaemon(true);
            return t;
        }));
        server.createContext("/", this::handle);
        server.start();
    }

    void stop() {
        if (server != null) server.stop(0);
    }

    // ---- plumbing -------------------------------------------------------------------------------

    private void handle(HttpExchange ex) throws IOException {
        int status;
        String body;
        String type = "application/json; charset=utf-8";
        try {
            String method = ex.getRequestMethod();
            String path = ex.getRequestURI().getPath();
            if (!method.equals("GET") && !method.equals("HEAD") && node.token != null) {
                String given = ex.getRequestHeaders().getFirst(TOKEN_HEADER);
                byte[] a = (given == null ? "" : given).getBytes(StandardCharsets.UTF_8);
                if (!MessageDigest.isEqual(a, node.token.getBytes(StandardCharsets.UTF_8))) {
                    throw new AdminError(401, "missing or wrong " + TOKEN_HEADER + " header", null);
                }
            }
            Object reply = route(method, path, ex);
            if (reply instanceof Reply) {
                Reply r = (Reply) reply;
                status = r.status;
                body = r.text != null ? r.text : (r.body == null ? null : Json.write(r.body));
                if (r.type != null) type = r.type;
            } else {
                status = 200;
                body = Json.write(reply);
            }
        } catch (AdminError e) {
            status = e.status;
            body = Json.write(Json.obj("error", e.getMessage(), "field", e.field == null ? "" : e.field));
            if (e.field == null) body = body.replace(",\"field\":\"\"", ",\"field\":null");
        } catch (RuntimeException e) {
            status = 500;
            body = Json.write(Json.obj("error", "internal error: " + e));
            body = body.substring(0, body.length() - 1) + ",\"field\":null}";
        }
        if (body == null) {
            ex.sendResponseHeaders(status, -1);
        } else {
            byte[] out = body.getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", type);
            ex.sendResponseHeaders(status, out.length);
            try (OutputStream os = ex.getResponseBody()) {
                os.write(out);
            }
        }
        ex.close();
    }

    private static final class Reply {
        final int status;
        final Object body;
        final String text;
        final String type;

        Reply(int status, Object body, String text, String type) {
            this.status = status;
            this.body = body;
            this.text = text;
            this.type = type;
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> body(HttpExchange ex, Set<String> allowed) throws IOException {
        byte[] raw;
        try (InputStream in = ex.getRequestBody()) {
            raw = in.readAllBytes();
        }
        String text = new String(raw, StandardCharsets.UTF_8).trim();
        if (text.isEmpty()) return new LinkedHashMap<>();
        Object v;
        try {
            v = Json.parse(text);
        } catch (IllegalArgumentException e) {
            throw new AdminError(400, "request body is not valid JSON: " + e.getMessage(), null);
        }
        if (!(v instanceof Map)) throw new AdminError(400, "request body must be a JSON object", null);
        Map<String, Object> m = (Map<String, Object>) v;
        if (allowed != null) {
            for (String k : m.keySet()) {
                if (!allowed.contains(k)) {
                    throw new AdminError(400, k + ": unknown field (known: " + String.join(", ", new java.util.TreeSet<>(allowed)) + ")", k);
                }
            }
        }
        return m;
    }

    private void running() {
        if (!node.running) throw new AdminError(503, "the node is stopping", null);
    }

    private Object route(String method, String path, HttpExchange ex) throws IOException {
        boolean get = method.equals("GET");
        boolean post = method.equals("POST");
        boolean delete = method.equals("DELETE");
        switch (path) {
            case "/health":
                if (get) return Json.obj("status", node.running ? "ok" : "stopping", "node", node.name,
                    "incarnation", node.incarnation, "uptime_s", node.uptime());
                break;
            case "/state":
                if (get) return state();
                break;
            case "/streams":
                if (get) return Json.obj("streams", streams());
                break;
            case "/delivered":
                if (get) return node.delivered.toMap();
                break;
            case "/metrics":
                if (get) return new Reply(200, null, metrics(), "text/plain; version=0.0.4; charset=utf-8");
                break;
            case "/config":
                if (get) return config();
                if (post) {
                    running();
                    Map<String, Object> b = body(ex, null);
                    if (b.isEmpty()) throw new AdminError(400, "no settings given", null);
                    String key = b.keySet().iterator().next();
                    throw new AdminError(400, key + ": a JGroups node's settings are its stack (scenario key jgroups.stack); "
                        + "nothing can be changed at run time", key);
                }
                break;
            case "/send":
                if (post) return send(body(ex, SEND_FIELDS));
                break;
            case "/view":
                if (post) return view(body(ex, set("members", "view_id")));
                break;
            case "/leave_on_stop":
                if (post) {
                    running();
                    Object en = body(ex, set("enabled")).get("enabled");
                    if (!(en instanceof Boolean)) throw new AdminError(400, "expected true or false, got " + en, "enabled");
                    node.leaveOnStop = (Boolean) en;
                    return Json.obj("leave_on_stop", en);
                }
                break;
            case "/faults":
                if (get) return Json.obj("rules", node.faults.snapshot());
                if (post) {
                    running();
                    FaultProtocol.Rule r = parseRule(body(ex, null));
                    int id = node.faults.add(r);
                    node.events.log(node.now(), "faults", "fault_on", "fault", "rule " + id, "detail", r.describe());
                    return new Reply(201, Json.obj("id", id), null, null);
                }
                if (delete) {
                    running();
                    double t = node.now();
                    for (int id : node.faults.clear()) node.events.log(t, "faults", "fault_off", "fault", "rule " + id);
                    return new Reply(204, null, null, null);
                }
                break;
            default:
                if (path.startsWith("/faults/") && delete) {
                    running();
                    String raw = path.substring("/faults/".length());
                    int id;
                    try {
                        id = Integer.parseInt(raw);
                    } catch (NumberFormatException e) {
                        throw new AdminError(404, "no fault rule '" + raw + "'", "id");
                    }
                    if (!node.faults.remove(id)) throw new AdminError(404, "no fault rule '" + raw + "'", "id");
                    node.events.log(node.now(), "faults", "fault_off", "fault", "rule " + id);
                    return new Reply(204, null, null, null);
                }
                if (path.startsWith("/sync/") && post) {
                    running();
                    throw new AdminError(400, "JGroups 2.12.2 has no SYNC (UNICAST3's resync): nothing to start", "peer");
                }
                if (path.startsWith("/sync/") || path.startsWith("/faults/")) {
                    throw new AdminError(405, method + " not allowed on " + path, null);
                }
                throw new AdminError(404, "no endpoint " + path, null);
        }
        throw new AdminError(405, method + " not allowed on " + path, null);
    }

    // ---- read endpoints -------------------------------------------------------------------------

    private List<Object> streams() {
        List<Object> out = new ArrayList<>();
        synchronized (node.streams) {
            for (Stream s : node.streams.values()) out.add(s.toMap());
        }
        return out;
    }

    private Map<String, Object> membership() {
        View v = node.view;
        if (v == null) return null;
        return Json.obj("members", node.names(v.getMembers()), "view_id", v.getVid().getId(), "coord",
            node.nameOf(v.getVid().getCoordAddress()));
    }

    private Object state() {
        Map<String, Object> m = membership();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("node", node.name);
        out.put("incarnation", node.incarnation);
        out.put("protocol", "jgroups");
        out.put("transport", "udp");
        out.put("now", node.now());
        out.put("view", m == null ? null : Json.obj("members", m.get("members"), "view_id", m.get("view_id")));
        out.put("membership", m);
        // JGroups 2.12 exposes no per-peer windows through a public API: none are reported, and
        // windows_synced is not applicable to its runs.
        out.put("windows", new ArrayList<>());
        out.put("busy", new ArrayList<>());
        out.put("streams", streams());
        out.put("jgroups", Json.obj("address", String.valueOf(node.channel.getAddress()), "cluster", node.cluster,
            "stack", node.stackNames(), "views_installed", node.viewsInstalled, "faults",
            Json.obj("dropped", node.faults.dropped, "delayed", node.faults.delayed, "duplicated",
                node.faults.duplicated)));
        return out;
    }

    private Object config() {
        Map<String, Object> c = new LinkedHashMap<>(node.config);
        if (c.get("admin_token") != null) c.put("admin_token", "***");
        return Json.obj("node", c, "protocol", Json.obj("stack", node.stackSource), "membership", null,
            "bind", node.config.get("bind"), "admin", node.config.get("admin"), "epoch", node.epoch);
    }

    private String metrics() {
        StringBuilder b = new StringBuilder();
        metric(b, "splitbrain_app_sent_total", "counter", "application messages handed to the channel", node.sentTotal);
        metric(b, "splitbrain_app_delivered_total", "counter", "application messages delivered", node.delivered.total());
        metric(b, "splitbrain_views_installed_total", "counter", "views installed", node.viewsInstalled);
        metric(b, "splitbrain_fault_dropped_total", "counter", "messages dropped by fault rules", node.faults.dropped);
        metric(b, "splitbrain_fault_delayed_total", "counter", "messages delayed by fault rules", node.faults.delayed);
        metric(b, "splitbrain_fault_duplicated_total", "counter", "messages duplicated by fault rules", node.faults.duplicated);
        View v = node.view;
        metric(b, "splitbrain_view_members", "gauge", "members of the current view", v == null ? 0 : v.size());
        return b.toString();
    }

    private static void metric(StringBuilder b, String name, String type, String help, long value) {
        b.append("# HELP ").append(name).append(' ').append(help).append('\n');
        b.append("# TYPE ").append(name).append(' ').append(type).append('\n');
        b.append(name).append(' ').append(value).append('\n');
    }

    // ---- mutating endpoints ---------------------------------------------------------------------

    private static boolean isInt(Object v) {
        return v instanceof Long || v instanceof Integer;
    }

    private static boolean isNum(Object v) {
        return v instanceof Number && Double.isFinite(((Number) v).doubleValue());
    }

    @SuppressWarnings("unchecked")
    private Object send(Map<String, Object> b) {
        running();
        if (!b.containsKey("to")) throw new AdminError(400, "required", "to");
        Object to = b.get("to");
        List<String> targets = new ArrayList<>();
        if ("*".equals(to)) {
            targets.add("*");
        } else if ("all".equals(to)) {
            if (node.peers.isEmpty()) throw new AdminError(400, "this node has no peers", "to");
            targets.addAll(node.peers.keySet());
        } else {
            List<Object> list = to instanceof String ? List.of(to) : (to instanceof List ? (List<Object>) to : null);
            if (list == null || list.isEmpty()) throw new AdminError(400, "expected a peer name, a list of peer names or \"all\"", "to");
            for (Object t : list) {
                if (!(t instanceof String)) throw new AdminError(400, "expected a peer name, a list of peer names or \"all\"", "to");
                if (!node.peers.containsKey(t)) {
                    throw new AdminError(400, "unknown peer '" + t + "' (peers: " + String.join(", ", node.peers.keySet()) + ")", "to");
                }
                if (targets.contains(t)) throw new AdminError(400, "a peer is named twice", "to");
                targets.add((String) t);
            }
        }
        Object count = b.get("count"), duration = b.get("duration");
        if ((count == null) == (duration == null)) throw new AdminError(400, "give exactly one of count and duration", "count");
        if (count != null && (!isInt(count) || ((Number) count).longValue() < 1)) {
            throw new AdminError(400, "count: expected an integer >= 1, got " + Json.write(count), "count");
        }
        if (duration != null && (!isNum(duration) || ((Number) duration).doubleValue() <= 0)) {
            throw new AdminError(400, "duration: expected a number of seconds > 0, got " + Json.write(duration), "duration");
        }
        Object rate = b.getOrDefault("rate", 100L);
        if (!isNum(rate) || ((Number) rate).doubleValue() < 0) {
            throw new AdminError(400, "rate: expected a number of messages per second >= 0, got " + Json.write(rate), "rate");
        }
        Object size = b.getOrDefault("size", 100L);
        if (!isInt(size) || ((Number) size).longValue() < 0 || ((Number) size).longValue() > Node.MAX_PAYLOAD) {
            throw new AdminError(400, "size: expected an integer between 0 and " + Node.MAX_PAYLOAD + ", got " + Json.write(size), "size");
        }
        Object firstN = b.getOrDefault("first_n", 1L);
        if (!isInt(firstN) || ((Number) firstN).longValue() < 1) {
            throw new AdminError(400, "first_n: expected an integer >= 1, got " + Json.write(firstN), "first_n");
        }
        Object sid = b.get("stream");
        int id;
        synchronized (node.streams) {
            if (sid == null) {
                id = 0;
                while (node.streams.containsKey(id)) id++;
            } else {
                if (!isInt(sid) || ((Number) sid).longValue() < 0 || ((Number) sid).longValue() >= Integer.MAX_VALUE) {
                    throw new AdminError(400, "stream: expected an integer between 0 and 2**31 - 1, got " + Json.write(sid), "stream");
                }
                id = ((Number) sid).intValue();
                if (node.streams.containsKey(id)) throw new AdminError(409, "stream " + id + " exists already", "stream");
            }
            Stream s = new Stream(node.name, id, targets, count == null ? null : ((Number) count).longValue(),
                duration == null ? null : ((Number) duration).doubleValue(), ((Number) rate).doubleValue(),
                ((Number) size).intValue(), node.now(), ((Number) firstN).longValue());
            node.startStream(s);
        }
        return new Reply(202, Json.obj("stream", id, "to", targets), null, null);
    }

    @SuppressWarnings("unchecked")
    private Object view(Map<String, Object> b) {
        running();
        Object members = b.get("members");
        if (!(members instanceof List) || ((List<Object>) members).isEmpty()) {
            throw new AdminError(400, "expected a list of node names", "members");
        }
        List<String> names = new ArrayList<>();
        for (Object m : (List<Object>) members) {
            if (!(m instanceof String) || ((String) m).isEmpty()) throw new AdminError(400, "expected a list of node names", "members");
            if (names.contains(m)) throw new AdminError(400, "a member is named twice", "members");
            names.add((String) m);
        }
        Object vid = b.get("view_id");
        if (vid != null && (!isInt(vid) || ((Number) vid).longValue() < 0)) {
            throw new AdminError(400, "expected an integer >= 0, got " + Json.write(vid), "view_id");
        }
        return Json.obj("view_id", node.installView(names, vid == null ? null : ((Number) vid).longValue()));
    }

    @SuppressWarnings("unchecked")
    private FaultProtocol.Rule parseRule(Map<String, Object> b) {
        FaultProtocol.Rule r = new FaultProtocol.Rule();
        for (Map.Entry<String, Object> e : b.entrySet()) {
            String k = e.getKey();
            Object v = e.getValue();
            switch (k) {
                case "direction":
                    if (!"up".equals(v) && !"down".equals(v)) throw new AdminError(400, "direction: must be up or down, got " + Json.write(v), k);
                    r.direction = (String) v;
                    break;
                case "action":
                    if (!"drop".equals(v) && !"delay".equals(v) && !"duplicate".equals(v)) {
                        throw new AdminError(400, "action: must be one of drop, delay, duplicate, got " + Json.write(v), k);
                    }
                    r.action = (String) v;
                    break;
                case "peer":
                    if (v != null && (!(v instanceof String) || !node.peers.containsKey(v))) {
                        throw new AdminError(400, "peer: unknown peer " + Json.write(v), k);
                    }
                    r.peer = (String) v;
                    break;
                case "types":
                    if (v == null) break;
                    List<Object> ts = v instanceof String ? List.of(v) : (v instanceof List ? (List<Object>) v : null);
                    if (ts == null || ts.isEmpty()) throw new AdminError(400, "types: expected a list of message types", k);
                    r.types = new HashSet<>();
                    List<String> bad = new ArrayList<>();
                    for (Object t : ts) {
                        if (!(t instanceof String)) throw new AdminError(400, "types: expected a list of message types", k);
                        if (!KNOWN_TYPES.contains(t)) bad.add((String) t);
                        r.types.add((String) t);
                    }
                    if (!bad.isEmpty()) {
                        throw new AdminError(400, "types: unknown message type(s) " + String.join(", ", bad) + " (known: "
                            + String.join(", ", new java.util.TreeSet<>(KNOWN_TYPES)) + ")", k);
                    }
                    break;
                case "count":
                    if (v == null) break;
                    if (!isInt(v) || ((Number) v).longValue() < 1) throw new AdminError(400, "count: expected an integer >= 1, got " + Json.write(v), k);
                    r.count = ((Number) v).longValue();
                    break;
                case "after":
                    if (!isInt(v) || ((Number) v).longValue() < 0) throw new AdminError(400, "after: expected an integer >= 0, got " + Json.write(v), k);
                    r.after = ((Number) v).longValue();
                    break;
                case "seqnos":
                    if (v == null) break;
                    List<Object> sq = v instanceof List ? (List<Object>) v : null;
                    if (sq == null || sq.size() != 2 || !isInt(sq.get(0)) || !isInt(sq.get(1))
                        || ((Number) sq.get(0)).longValue() > ((Number) sq.get(1)).longValue()) {
                        throw new AdminError(400, "seqnos: expected [lo, hi], got " + Json.write(v), k);
                    }
                    r.seqnos = new long[] {((Number) sq.get(0)).longValue(), ((Number) sq.get(1)).longValue()};
                    break;
                case "p":
                case "delay_s":
                case "jitter_s":
                case "start":
                case "until":
                    if (v == null && (k.equals("start") || k.equals("until"))) break;
                    if (!isNum(v)) throw new AdminError(400, k + ": expected a number, got " + Json.write(v), k);
                    double d = ((Number) v).doubleValue();
                    if (k.equals("p")) {
                        if (d < 0 || d > 1) throw new AdminError(400, "p: must be between 0 and 1, got " + d, k);
                        r.p = d;
                    } else if (k.equals("delay_s")) {
                        if (d < 0) throw new AdminError(400, "delay_s: must be >= 0, got " + d, k);
                        r.delayS = d;
                    } else if (k.equals("jitter_s")) {
                        if (d < 0) throw new AdminError(400, "jitter_s: must be >= 0, got " + d, k);
                        r.jitterS = d;
                    } else if (k.equals("start")) {
                        r.start = d;
                    } else {
                        r.until = d;
                    }
                    break;
                default:
                    throw new AdminError(400, k + ": unknown field (known: " + String.join(", ", new java.util.TreeSet<>(FAULT_FIELDS)) + ")", k);
            }
        }
        if (r.action.equals("delay") && r.delayS == 0 && r.jitterS == 0) {
            throw new AdminError(400, "delay_s: must be > 0 for a delay rule, got 0.0", "delay_s");
        }
        return r;
    }
}
