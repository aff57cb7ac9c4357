"""A socket monitor nobody reads must not stop the process's other sockets."""

import time
from typing import Any

import zmq

from relay.wire.monitor import watch

EVENTS = zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECTED
HIGH_WATER_MARK = 1000  # what a monitor pipe holds before libzmq's I/O thread waits on it
_STOPPED: list[object] = []  # a stopped context's sockets: closing them would wait forever


def test_a_monitor_nobody_reads_does_not_stop_the_other_sockets() -> None:
    """A client whose owner does not poll, connected to a node that is down, queues an event
    per reconnect attempt; with a bounded monitor pipe, libzmq's I/O thread blocks once it is
    full and every socket of the context stops."""
    ctx: zmq.Context[Any] = zmq.Context()
    down = ctx.socket(zmq.ROUTER)
    port = down.bind_to_random_port("tcp://127.0.0.1")
    down.close(linger=0)  # nothing listens there now
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RECONNECT_IVL, 1)  # an attempt a millisecond: the pipe fills fast
    monitor = watch(dealer, EVENTS)
    router = ctx.socket(zmq.ROUTER)
    live = router.bind_to_random_port("tcp://127.0.0.1")
    sender = ctx.socket(zmq.DEALER)
    sender.connect(f"tcp://127.0.0.1:{live}")
    stopped = True
    try:
        dealer.connect(f"tcp://127.0.0.1:{port}")
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # the other sockets keep moving meanwhile
            sender.send(b"ping")
            assert router.poll(2000), "libzmq's I/O thread stopped: the monitor pipe is full"
            router.recv_multipart()
        stopped = False
        queued = 0
        while monitor.poll(0):
            monitor.recv_multipart()
            queued += 1
        assert queued > HIGH_WATER_MARK, f"only {queued} events: the pipe never reached it"
    finally:
        if stopped:  # its I/O thread holds the monitor's lock: let the test fail, not hang
            _STOPPED.append((ctx, monitor, dealer, router, sender))
        else:
            dealer.disable_monitor()
            for sock in (monitor, dealer, router, sender):
                sock.close(linger=0)
            ctx.term()
