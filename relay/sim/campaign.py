"""Many simulator seeds in a row, with a summary (``relay sim``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from relay.sim.checker import InvariantViolation
from relay.sim.cluster import replay_flags, run_seed


@dataclass(slots=True)
class CampaignSummary:
    runs: int = 0
    acked: int = 0
    messages: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)

    def line(self) -> str:
        rate = self.runs / self.seconds if self.seconds else 0.0
        return (
            f"{self.runs} runs, {len(self.failures)} failed, {self.acked} acked publishes, "
            f"{self.messages} mesh messages, {self.seconds:.1f} s ({rate:.1f} seeds/s)"
        )


def run_campaign(
    seeds: Iterable[int],
    sizes: tuple[int, ...],
    echo: Callable[[str], None] = print,
    progress: Callable[[CampaignSummary], None] | None = None,
    delivery: bool | None = None,
    work: bool | None = None,
    compacted: bool | None = None,
    third_lose_power: bool = True,
    partitions: bool = False,
) -> CampaignSummary:
    """Run every seed on every size (``delivery``, ``work``, ``compacted``,
    ``third_lose_power`` and ``partitions`` as ``run_seed``); ``progress`` sees the summary
    after each seed."""
    summary = CampaignSummary()
    started = time.monotonic()
    for seed in seeds:
        for nodes in sizes:
            summary.runs += 1
            try:
                result = run_seed(
                    seed,
                    nodes,
                    delivery=delivery,
                    work=work,
                    compacted=compacted,
                    third_lose_power=third_lose_power,
                    partitions=partitions,
                )
            except InvariantViolation as exc:
                summary.failures.append(str(exc))
                echo(f"FAIL {exc}")
                continue
            except Exception as exc:  # the code under test broke: a failure of the seed too
                replay = f"relay sim --seed {seed} --nodes {nodes}"
                replay += replay_flags(delivery, work, compacted, third_lose_power, partitions)
                why = f"seed {seed} ({nodes} nodes) raised {exc!r}\n  replay: {replay}"
                summary.failures.append(why)
                echo(f"FAIL {why}")
                continue
            summary.acked += result.acked
            summary.messages += result.messages
        summary.seconds = time.monotonic() - started
        if progress is not None:
            progress(summary)
    return summary
