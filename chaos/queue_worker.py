"""One worker process of a chaos run's queue workload (``--workload queue``): a member of the
work group that claims jobs, works them, and acks, naks or rejects them, recording every step.

How this works: ``python -m chaos.queue_worker CONFIG MEMBER OUT SEED`` claims up to ten jobs
at a time (waiting up to half a second for one), works them for a while drawn from ``SEED``
(now and then past their lease), and settles them in one request per outcome: most acked, some
naked (ready again after a short delay), a few rejected (dead at once). Each claim and each
job's settlement is a JSON line in ``OUT``, written before the next step (line-buffered, so a
SIGKILL keeps every line), with the ``time.monotonic()`` times it was sent and answered: the
clock every process on the machine shares, so the checker can order the steps of different
workers. A settlement is recorded ``sent`` before it goes (a SIGKILL may come before its
answer) and again with its result, ``unknown`` when none came. SIGTERM stops it between steps.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from typing import Any

from relay import Worker, errors
from relay.client.worker import Job

JOB_STREAM, GROUP = "orders.jobs", "chaos"  # three replicas on 5 nodes, every node on 3
LEASE_MS = 2000
CLAIM_MAX = 10
WAIT_MS = 500


def main(config: str, member: str, out: str, seed: int) -> None:
    rng = random.Random(seed)
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    with (
        open(out, "a", buffering=1) as history,
        Worker(
            JOB_STREAM, GROUP, config=config, member=member, lease_ms=LEASE_MS, timeout_s=5.0
        ) as worker,
    ):

        def record(row: dict[str, Any]) -> None:
            history.write(json.dumps({"member": member, **row}, separators=(",", ":")) + "\n")

        while not stopping[0]:
            sent = time.monotonic()
            try:
                jobs = worker.claim(rng.randint(1, CLAIM_MAX), WAIT_MS)
            except errors.RelayError as exc:
                record({"event": "claim", "t0": sent, "t1": time.monotonic(), "error": str(exc)})
                continue
            got = [[j.seq, j.delivery] for j in jobs]
            record({"event": "claim", "t0": sent, "t1": time.monotonic(), "jobs": got})
            if not jobs:
                continue
            late = rng.random() < 0.03  # now and then the work outlasts the lease
            time.sleep(rng.uniform(2.2, 3.0) if late else rng.uniform(0, 0.05))
            outcomes: dict[tuple[str, int], list[Job]] = {}
            for job in jobs:
                action = rng.choices(["ack", "nak", "reject"], [88, 10, 2])[0]
                delay = rng.choice([0, 200, 500]) if action == "nak" else 0
                outcomes.setdefault((action, delay), []).append(job)
            for (action, delay), some in outcomes.items():
                if stopping[0]:
                    break
                sent = time.monotonic()
                for job in some:  # before it goes: a SIGKILL may come before the answer does
                    row = {"event": "settle", "seq": job.seq, "delivery": job.delivery}
                    record({**row, "action": action, "t0": sent, "t1": sent, "result": "sent"})
                error = ""
                try:
                    results = worker.settle(some, action, delay)
                except errors.RelayError as exc:
                    results, error = ["unknown"] * len(some), str(exc)[:200]
                answered = time.monotonic()
                for job, result in zip(some, results, strict=True):
                    row = {"event": "settle", "seq": job.seq, "delivery": job.delivery}
                    row.update(action=action, t0=sent, t1=answered, result=result)
                    record({**row, "error": error} if error else row)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]))
