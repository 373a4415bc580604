package splitbrain.jgroups;

/** A request the admin API refuses: status, message and the field at fault (or null). */
final class AdminError extends RuntimeException {
    final int status;
    final String field;

    AdminError(int status, String message, String field) {
        super(message);
        this.status = status;
        this.field = field;
    }
}
