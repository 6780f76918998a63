"""The emulator's address plan: every emulated host listens on its own loopback address,
internal ones in 127.16.0.0 and up (a block per node, VM or MIG), external ones in
127.1.0.0-127.15.255.255. The APIs draw blocks from the world's AddressPlan; the machines
(machines/slice.py) bind the addresses of the block they are given."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

# 127.<16 + block // 250>: the second octet stays <= 255 up to this block.
MAX_IP_BLOCK = 250 * (255 - 16) + 249

# External addresses come from 127.1.0.0-127.15.255.255, apart from the internal ones
# (127.16+, host_ip) and from 127.0.0.0/16 (the emulator's own 127.0.0.1, Debian's 127.0.1.1):
# one block of up to 254 workers per node that asked for them.
EXTERNAL_BLOCKS = 15 * 256


@dataclass(frozen=True)
class VirtualHost:
    """A host when host machines are switched off: an address, no SSH server, no host key."""

    index: int
    ip: str
    ssh_port: int
    host_key: str = ""


def host_ip(ip_block: int, index: int) -> str:
    return f"127.{16 + ip_block // 250}.{ip_block % 250}.{index + 1}"


def external_ip(block: int, index: int) -> str:
    return f"127.{1 + block // 256}.{block % 256}.{index + 1}"


class AddressLimit(Exception):
    """Every external block is held: a limit of the emulator's address plan."""


class AddressPlan:
    """The address blocks held now, by TPU nodes and Compute Engine VMs alike (the VMs of one
    MIG hold one block together: each holds it once). Callers hold the world's lock."""

    def __init__(self) -> None:
        self._internal: Counter[int] = Counter()
        self._external: Counter[int] = Counter()

    def take_internal(self, holders: int = 1) -> int:
        """A host address block nothing holds, for `holders` holders. Drawn from a random start:
        two emulators on one machine (tests, a user's and CI's) then rarely hand out the same
        host addresses."""
        start = random.randrange(MAX_IP_BLOCK)
        block = next(1 + (start + i) % MAX_IP_BLOCK for i in range(MAX_IP_BLOCK)
                     if 1 + (start + i) % MAX_IP_BLOCK not in self._internal)
        self._internal[block] += holders
        return block

    def take_external(self) -> int:
        start = random.randrange(EXTERNAL_BLOCKS)  # as for internal blocks: two emulators rarely meet
        block = next((b for b in ((start + i) % EXTERNAL_BLOCKS for i in range(EXTERNAL_BLOCKS))
                      if b not in self._external), None)
        if block is None:
            raise AddressLimit(f"emulator limit: at most {EXTERNAL_BLOCKS} nodes with external IPs at once")
        self._external[block] += 1
        return block

    def release(self, internal: int | None, external: int | None = None) -> None:
        """One holder lets go of its blocks (a block no longer held is free again)."""
        for held, block in ((self._internal, internal), (self._external, external)):
            if block is not None and held[block] > 0:
                held[block] -= 1
                if not held[block]:
                    del held[block]
