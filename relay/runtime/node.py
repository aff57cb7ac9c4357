"""The node process around ``NodeCore``: sockets in, events to the core, effects out.

How this works: one thread, one loop. It polls the mesh SUB sockets, the client ROUTER socket
and the sync thread's pipe once, drains them without blocking (a bounded number of frames per
turn), hands the whole batch to the core with the time (wall clock for stamps, monotonic clock
for timers), and has the ``Shell`` carry out the effects through the node's ports: mesh
broadcasts on the PUB socket, answers on the ROUTER socket, writes to the real files.
Consumer fetches are events too: the core answers them or parks them (long poll).
"""

from __future__ import annotations

import contextlib
import logging
import resource
import signal
import time
from dataclasses import replace
from types import FrameType
from typing import Any

import zmq

from relay.auth.keys import KeyFileError
from relay.auth.sockets import ADMIN_DOMAIN, CLIENT_DOMAIN, MESH_DOMAIN, serve
from relay.auth.zap import ZapHandler
from relay.config import ClusterConfig
from relay.core.events import (
    MeshReceived,
    ShutdownRequested,
    Tick,
)
from relay.core.node import NodeCore
from relay.core.timer import Now
from relay.gc_tuning import tune_gc
from relay.http.link import ENDPOINT as HTTP_LINK
from relay.http.server import HttpServer
from relay.runtime import declared, trust
from relay.runtime.client_port import ClientPort
from relay.runtime.faults import FaultHooks, admin_error, admin_reply
from relay.runtime.gauges import Gauges
from relay.runtime.group_lag import compaction_bounds
from relay.runtime.malloc import trim_heap, tune_allocator
from relay.runtime.mesh_sockets import MeshSockets
from relay.runtime.metrics import NodeMetrics
from relay.runtime.ports import MeshOut, NodeReporter
from relay.runtime.queue_gauges import QueueGauges
from relay.runtime.throttle import Throttle
from relay.runtime.turn_trace import TurnTrace
from relay.shell import Shell
from relay.storage.node_disk import NodeDisk, restore_window
from relay.storage.store import NodeStore
from relay.storage.stream_log import StorageError
from relay.storage.syncer import ThreadRunner

log = logging.getLogger("relay.node")

ADMIN_REQUEST_BYTES_MAX = 64 << 10  # an admin request is a small map
TICK_MS = 10
GAUGE_MS = 500


class StartupError(Exception):
    """The node cannot start; the message says what to fix."""


class NodeRuntime:
    def __init__(
        self,
        config: ClusterConfig,
        node_id: int,
        clock_offset_ms: int = 0,
        metrics: bool = True,
        admin_port: int | None = None,
        admin_host: str = "127.0.0.1",  # fault injection answers on loopback unless told
        trace: TurnTrace | None = None,
        recover: bool = False,
    ) -> None:
        """``recover``: this node's disk was replaced or lost, so it may have voted for
        what it no longer holds (``relay/core/amnesia.py``)."""
        self.trace = trace
        self.config = config
        self.spec = config.node(node_id)
        self.hooks = FaultHooks(clock_offset_ms=clock_offset_ms)
        raise_open_files_limit()  # before the store sizes its share of descriptors
        try:
            schemas = declared.check(config, config.data_dir(node_id))
        except (declared.DeclaredError, OSError) as exc:
            raise StartupError(f"node {node_id}: {exc}") from None
        store = NodeStore(
            config.data_dir(node_id),
            config.name,
            node_id,
            config.storage,
            settings_of=lambda stream: replace(config.streams.storage_of(stream), schemas=schemas),
        )
        self.sync_runner = ThreadRunner()
        self.disk = NodeDisk(store, restore_window(config.params), self.sync_runner)
        try:
            restored, (epoch, floor, reserved) = self.disk.open(self.now().wall_ms)
        except (StorageError, OSError) as exc:
            self.disk.close()
            raise StartupError(f"node {node_id}: {exc}") from None
        core_config = config.core_config(node_id)
        if floor == 0 and not recover:  # no reservation: the disk holds no node state
            log.info(
                "node %d starts on an empty data directory: a new node (if it ran before, "
                "its disk was replaced: stop it and start it again with --recover)",
                node_id,
            )
        self.core = NodeCore(core_config, epoch, floor, reserved, forgot=recover)
        self.metrics = NodeMetrics(node_id, config.name)
        self.gauges = Gauges(self.metrics, config.metrics_streams_max)
        self.gauges.restored(restored)
        self.queue_gauges = QueueGauges(self.metrics, self.gauges.series)
        self.disk.changed.update(r.stream for r in restored)  # their sizes, at the first update
        self.refusal_log = Throttle()
        self.stopping = False
        try:
            pair = trust.node_pair(config, node_id)
        except KeyFileError as exc:
            self.disk.close()
            raise StartupError(f"node {node_id}: {exc}") from None
        if pair is not None and admin_port is not None and not config.auth.admin_keys:
            self.disk.close()
            raise StartupError(
                f"node {node_id}: --admin-port needs cluster.admin_keys in {config.path}: "
                "list the operator's public key (`relay keys gen --name admin`)"
            )
        self.ctx = zmq.Context()
        # bound before any server socket, so that no handshake is ever accepted unasked
        self.zap = ZapHandler(self.ctx, trust.admitted(config)) if pair is not None else None
        self.mesh = MeshSockets(self.ctx, config, self.spec, pair)
        self.clients = ClientPort(self.ctx, config, self.spec.client_port, self.metrics)
        self.shell = Shell(
            node_id,
            self.core,
            self.disk,
            MeshOut(self.mesh, self.hooks, self.metrics, self.core),
            self.clients,
            NodeReporter(self.gauges, self.metrics, self.core),
            sends_first=config.storage.votes_wait,
            queue_bounds=config.queues,
        )
        self.shell.pending = list(restored)  # the first turn's events
        self.admin = self.ctx.socket(zmq.REP) if admin_port is not None else None
        self.http: HttpServer | None = None  # with an http_port: the HTTP API and console
        if pair is not None:
            serve(self.clients.sock, pair, CLIENT_DOMAIN)
            if self.admin is not None:
                serve(self.admin, pair, ADMIN_DOMAIN)
        try:
            self._bind(self.mesh.pub, self.spec.mesh_port, "mesh_port")
            self._bind(self.clients.sock, self.spec.client_port, "client_port")
            if self.admin is not None and admin_port is not None:
                self.admin.setsockopt(zmq.LINGER, 0)
                self.admin.setsockopt(zmq.MAXMSGSIZE, ADMIN_REQUEST_BYTES_MAX)
                self._bind(self.admin, admin_port, "--admin-port", admin_host)
            if metrics:
                self._bind(
                    None, self.spec.metrics_port, "metrics_port", self.spec.metrics_host or ""
                )
            if self.spec.http_port is not None:
                self.clients.sock.bind(HTTP_LINK)
                self.http = HttpServer(self.ctx, config, node_id, pair, self.metrics.registry)
                self._bind(None, self.spec.http_port, "http_port")
        except BaseException:
            self.close()
            raise
        self.mesh.connect(config)
        self.poller = zmq.Poller()
        self.mesh.register(self.poller)
        self.poller.register(self.clients.sock, zmq.POLLIN)
        self.poller.register(self.clients.connections.monitor, zmq.POLLIN)
        self.poller.register(self.sync_runner.wake_fd, zmq.POLLIN)
        if self.admin is not None:
            self.poller.register(self.admin, zmq.POLLIN)
        if self.zap is not None:
            self.poller.register(self.zap.sock, zmq.POLLIN)

    def _bind(self, sock: zmq.Socket[Any] | None, port: int, key: str, host: str = "") -> None:
        """Bind ``sock`` (None: the metrics or the HTTP server, by ``key``) or say which key
        and address failed."""
        host = host or self.spec.listen_host
        try:
            if sock is None and self.http is not None and key == "http_port":
                self.http.start(host, port)
            elif sock is None:
                self.metrics.serve(host, port, self.config.metrics_token_sha256)
            else:
                sock.bind(f"tcp://{host}:{port}")
        except (zmq.ZMQError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StartupError(
                f"node {self.spec.id}: cannot bind {key} {host}:{port}: {why}. "
                "Is another node or program using it? Stop it (relay cluster down) or change "
                f"'{key}' in {self.config.path}"
            ) from None

    def now(self) -> Now:
        """Wall time (shifted by the clock fault hook) for stamps; monotonic time for timers."""
        return Now(
            wall_ms=int(time.time() * 1000) + self.hooks.clock_offset_ms,
            elapsed_ms=int(time.monotonic() * 1000),
        )

    # --- the loop -----------------------------------------------------------------------

    def run(self) -> None:
        self._install_signals()
        tune_gc()
        if not tune_allocator():
            log.info("not glibc: the allocator keeps its own policy for large blocks")
        log.info(
            "node %d serving clients on %s, mesh on %s",
            self.spec.id,
            self.spec.client_address,
            self.spec.mesh_address,
        )
        next_tick = 0
        next_gauge = 0
        try:
            while not self.stopping:
                busy = self.shell.pending or self.shell.log_reads
                wait = 0 if busy else max(0, next_tick - int(time.monotonic() * 1000))
                resend_ms = self.clients.outbox.next_due_ms()
                if resend_ms is not None:
                    wait = min(wait, max(0, int(resend_ms - time.monotonic() * 1000) + 1))
                ready = dict(self.poller.poll(wait))
                started_ns = time.monotonic_ns()
                started_cpu = time.thread_time_ns() if self.trace is not None else 0
                now = self.now()
                elapsed = now.elapsed_ms
                events = self.shell.take_pending()
                if self.sync_runner.wake_fd in ready:
                    events.extend(self.shell.completed(now))
                if ready:
                    self.metrics.loop_turns.inc()
                if self.zap is not None and self.zap.sock in ready:
                    self._authenticate(elapsed)
                if self.mesh.pub in ready:
                    self._subscriptions(elapsed)
                self.mesh.drain(ready, elapsed, self.hooks, self.metrics, events)
                events.extend(MeshReceived(m) for m in self.hooks.release(elapsed))
                if self.admin is not None and self.admin in ready:
                    self._admin()
                if resend_ms is not None:  # answers that found no room: first, in order
                    self.clients.outbox.resend(time.monotonic() * 1000)
                if self.clients.connections.monitor in ready:
                    self._connections(elapsed)
                if self.clients.sock in ready:
                    self.clients.drain(events, self.core, self.disk, self.shell.queues, now)
                if elapsed >= next_tick:
                    next_tick = elapsed + TICK_MS
                    events.append(Tick(frozenset(self.mesh.behind)))
                    self.mesh.behind.clear()
                handle_ns = time.monotonic_ns()
                handle_cpu = time.thread_time_ns() if self.trace is not None else 0
                effects = self.shell.handle(now, events)
                carry_ns = time.monotonic_ns()
                carry_cpu = time.thread_time_ns() if self.trace is not None else 0
                self.shell.carry_out(effects, now)
                after_ns = time.monotonic_ns()
                after_cpu = time.thread_time_ns() if self.trace is not None else 0
                self.shell.after_turn(now)
                if self.trace is not None:
                    stamps = (started_ns, handle_ns, carry_ns, after_ns, time.monotonic_ns())
                    cpu = (started_cpu, handle_cpu, carry_cpu, after_cpu, time.thread_time_ns())
                    self.trace.turn(stamps, cpu, events, effects)
                if elapsed >= next_gauge:
                    next_gauge = elapsed + GAUGE_MS
                    trim_heap()
                    open_ = len(self.clients.limits.open) + len(self.shell.log_reads)
                    waiting = self.clients.outbox.total_bytes
                    changed = self.disk.take_changed()
                    self.gauges.update(self.core, self.disk, open_, waiting, changed)
                    self.queue_gauges.update(self.shell.queues, now.wall_ms)
                    self.shell.pending += self.disk.retain(now.wall_ms)
                    bounds = compaction_bounds(self.core, self.gauges.group_streams)
                    self.shell.pending += self.disk.compact(now.wall_ms, bounds)
            self._leave()
        finally:
            if self.trace is not None:
                self.trace.write()
            self.close()

    def _install_signals(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            self.stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)

    def _leave(self) -> None:
        """Tell the peers this node is going, so they cut it at once."""
        self.shell.turn(self.now(), [ShutdownRequested()])
        time.sleep(0.05)  # let the leaving heartbeat reach the wire before the sockets close
        log.info("node %d stopped", self.spec.id)

    def close(self) -> None:
        if self.http is not None:
            self.http.close()
        self.disk.close()
        self.mesh.close()
        self.clients.close()
        if self.admin is not None:
            self.admin.close()
        if self.zap is not None:
            self.zap.close()
        self.ctx.term()

    def _subscriptions(self, elapsed_ms: int) -> None:
        """Take the peers' subscriptions; a peer that sent the XPUB anything else is banned
        and the XPUB made anew (``MeshSockets``)."""
        offender = self.mesh.subscriptions(elapsed_ms, self.metrics)
        if offender is None:
            return
        if self.zap is not None:
            self.zap.ban(MESH_DOMAIN, offender)
        self.mesh.rebuild(self.poller)

    def _authenticate(self, elapsed_ms: int) -> None:
        """Answer the CURVE handshakes waiting on the ZAP handler; log who was refused (at
        most once a second: a flood of refused connections must not flood the log)."""
        assert self.zap is not None
        refused = self.zap.answer()
        for domain, _ in refused:
            self.metrics.auth_refused.labels(domain).inc()
        if refused and self.refusal_log.allow("auth", elapsed_ms):
            domain, address = refused[0]
            log.warning("auth_refused: %s connection from %s: key not admitted", domain, address)

    def _connections(self, elapsed_ms: int) -> None:
        """Count the client port's new and closed connections; log who was shut for a bound
        (at most once a second)."""
        refused = self.clients.connections.drain()
        if refused:
            self.metrics.errors.labels("too_many_connections").inc(len(refused))
        if refused and self.refusal_log.allow("connections", elapsed_ms):
            log.warning(
                "too_many_connections: shut %d connection(s), the last from %s "
                "(client_connections_per_address_max %d, client_connections_max %d)",
                len(refused),
                refused[-1],
                self.config.clients.client_connections_per_address_max,
                self.config.clients.client_connections_max,
            )

    def _admin(self) -> None:
        """One operator command on the admin socket: one frame, [command, argument]. A REP
        socket must read every frame of a request before it answers, so a request of several
        frames is read to its end and refused."""
        assert self.admin is not None
        request = self.admin.recv()
        frames = 1
        while self.admin.getsockopt(zmq.RCVMORE):
            self.admin.recv()  # dropped as it comes: only the count is kept
            frames += 1
        if frames == 1:
            self.admin.send(admin_reply(request, self.hooks, self.core))
        else:
            self.admin.send(admin_error(f"an admin request is one frame, not {frames}"))


def raise_open_files_limit() -> None:
    """Take the hard limit on open files as the soft one (as Go's runtime does): sockets,
    segment reads and append descriptors share it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
