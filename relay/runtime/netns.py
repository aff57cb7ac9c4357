"""A multi-host layout on one machine: each node in a network namespace of its own, with its
own address on a bridge, and real network faults as nftables rules inside the namespaces.

How this works (as root, with iproute2 and nftables): a bridge in the root namespace holds
the address ``.254`` of a /24 no route of this machine uses; each node gets a namespace with
``lo`` and one end of a veth pair addressed ``.<id>``, the other end on the bridge. Processes
in the root namespace (clients, tests, the chaos runner) reach every node through the bridge.
A partition drops, in the receiving node's namespace, every packet from the addresses it is
cut from; loss drops that fraction of the packets of mesh connections (TCP retransmits them, as
on a lossy link). ``remove`` deletes the namespaces (and with them their veth ends and rules)
and the bridge.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass

TABLE = "relay_faults"


class NetnsUnavailable(RuntimeError):
    """This machine or user cannot make namespaces; the message says why."""


def unavailable() -> str:
    """Why namespaces cannot be used here ("" if they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"{tool!r} is not installed (iproute2, nftables)"
    return ""


def _run(*args: str) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetnsUnavailable(f"{' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


@dataclass(frozen=True, slots=True)
class NetnsLayout:
    tag: str  # a few hex digits that name this layout's namespaces, links and bridge
    subnet: str  # e.g. 10.213.7.0/24
    node_ids: tuple[int, ...]

    @classmethod
    def new(cls, node_ids: list[int]) -> NetnsLayout:
        why = unavailable()
        if why:
            raise NetnsUnavailable(why)
        used = _routes()
        for _ in range(100):
            net = ipaddress.ip_network(
                f"10.{secrets.randbelow(56) + 200}.{secrets.randbelow(256)}.0/24"
            )
            if not any(net.overlaps(u) for u in used):
                return cls(secrets.token_hex(3), str(net), tuple(node_ids))
        raise NetnsUnavailable("no free 10.200-255.x.0/24 subnet for the bridge")

    def namespace(self, node_id: int) -> str:
        return f"relay-{self.tag}-{node_id}"

    def address(self, node_id: int) -> str:
        return str(ipaddress.ip_network(self.subnet)[node_id])

    @property
    def bridge(self) -> str:
        return f"rb{self.tag}"

    @property
    def gateway(self) -> str:
        """The root namespace's address on the bridge."""
        return str(ipaddress.ip_network(self.subnet)[254])

    def exec_prefix(self, node_id: int) -> list[str]:
        """What runs a command inside node ``node_id``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node_id)]

    def create(self) -> None:
        """Make the bridge, the namespaces and their links; undone (and raised) on failure."""
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for n in self.node_ids:
                ns, host_end, node_end = self.namespace(n), f"rv{self.tag}h{n}", f"rv{self.tag}n{n}"
                _run("ip", "netns", "add", ns)
                _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", node_end)
                _run("ip", "link", "set", node_end, "netns", ns)
                _run("ip", "-n", ns, "addr", "add", f"{self.address(n)}/24", "dev", node_end)
                _run("ip", "-n", ns, "link", "set", node_end, "up")
                _run("ip", "-n", ns, "link", "set", "lo", "up")
                _run("ip", "link", "set", host_end, "master", self.bridge)
                _run("ip", "link", "set", host_end, "up")
                self._nft(n, f"add table inet {TABLE}")
                self._nft(
                    n,
                    f"add chain inet {TABLE} input "
                    "{ type filter hook input priority 0 ; policy accept ; }",
                )
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Delete whatever of this layout exists (safe to call twice)."""
        for n in self.node_ids:
            subprocess.run(
                ["ip", "netns", "del", self.namespace(n)], capture_output=True, timeout=30
            )
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=30)

    # --- faults ---------------------------------------------------------------------------

    def set_faults(
        self, node_id: int, blocked_from: list[int], loss: float, mesh_ports: list[int]
    ) -> None:
        """Node ``node_id`` drops every packet from the nodes in ``blocked_from``, and a
        ``loss`` fraction of the packets its peers' mesh ports send it (its rules replaced)."""
        if not 0 <= loss <= 1:
            raise ValueError(f"loss is a fraction, not {loss!r}")
        rules = [f"flush chain inet {TABLE} input"]
        if blocked_from:
            addresses = ", ".join(self.address(b) for b in sorted(blocked_from))
            rules.append(f"add rule inet {TABLE} input ip saddr {{ {addresses} }} drop")
        per_mille = round(loss * 1000)
        if per_mille and mesh_ports:
            ports = ", ".join(str(p) for p in sorted(mesh_ports))
            rules.append(
                f"add rule inet {TABLE} input ip saddr {self.subnet} tcp sport {{ {ports} }} "
                f"numgen random mod 1000 < {per_mille} drop"
            )
        self._nft(node_id, "\n".join(rules))

    def _nft(self, node_id: int, script: str) -> None:
        done = subprocess.run(
            [*self.exec_prefix(node_id), "nft", "-f", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise NetnsUnavailable(f"nft in {self.namespace(node_id)}: {done.stderr.strip()}")


def _routes() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    found = []
    for line in _run("ip", "-4", "route", "show", "table", "all").splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "broadcast", "local") or not first[0:1].isdigit():
            continue
        try:
            found.append(ipaddress.ip_network(first, strict=False))
        except ValueError:
            continue
    return found
