package splitbrain.jgroups;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.jgroups.Address;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.ReceiverAdapter;
import org.jgroups.View;

/**
 * A bare JGroups sender and receiver on Node's default stack, without splitbrain (no admin API,
 * no event log, no fault protocol): the baseline of benchmarks/bench_jgroups.py.
 * `Bare receive N CLUSTER` prints the seconds from the first to the N-th message;
 * `Bare send N CLUSTER` waits for a second member and sends it N messages of 100 bytes.
 */
public final class Bare {
    public static void main(String[] args) throws Exception {
        String mode = args[0];
        long n = Long.parseLong(args[1]);
        JChannel ch = new JChannel(Node.DEFAULT_STACK);
        CountDownLatch peer = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(1);
        AtomicLong got = new AtomicLong();
        long[] first = new long[1];
        ch.setReceiver(new ReceiverAdapter() {
            @Override
            public void receive(Message m) {
                long k = got.incrementAndGet();
                if (k == 1) first[0] = System.nanoTime();
                if (k == n) done.countDown();
            }

            @Override
            public void viewAccepted(View v) {
                if (v.size() > 1) peer.countDown();
            }
        });
        ch.setName(mode);
        ch.connect(args[2]);
        if (mode.equals("receive")) {
            System.out.println("ready");
            done.await(600, TimeUnit.SECONDS);
            System.out.println((System.nanoTime() - first[0]) / 1e9);
        } else {
            peer.await(60, TimeUnit.SECONDS);
            Address dest = null;
            for (Address a : ch.getView().getMembers()) if (!a.equals(ch.getAddress())) dest = a;
            byte[] payload = new byte[100];
            for (long i = 0; i < n; i++) ch.send(new Message(dest, null, payload));
            Thread.sleep(15000); // the receiver asks for what it missed (STABLE every second)
        }
        ch.close();
        Runtime.getRuntime().halt(0);
    }
}
