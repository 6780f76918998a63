"""Emulated hosts (real SSH servers in their own mount namespaces) and a HostGroup on them."""

from __future__ import annotations

import errno
import random

import pytest

from tpujob.emulator.machines.slice import SliceMachines
from tpujob.hosts.fanout import Host, HostGroup
from tpujob.hosts.keys import load_key, public_key_line

PORT = 2222


@pytest.fixture
def tpujob_key(tpujob_home):
    return load_key(tpujob_home), public_key_line(tpujob_home)


@pytest.fixture
def slice_hosts(tmp_path, tpujob_key):
    """slice_hosts(n) -> (SliceMachines, HostGroup), both torn down after the test."""
    opened = []

    def make(num_hosts: int, **group_options) -> tuple[SliceMachines, HostGroup]:
        for tries_left in reversed(range(5)):
            # A random block: distinct addresses for parallel workers, drawn again when another
            # test's hosts hold this one's address and port (seen once in a full run).
            block = random.randint(1000, 59000)
            machines = SliceMachines(tmp_path / f"node-{block}", f"node-{block}", num_hosts,
                                     [tpujob_key[1]], block, PORT)
            opened.append(machines)
            try:
                endpoints = machines.start()
                break
            except OSError as exc:
                if exc.errno != errno.EADDRINUSE or not tries_left:
                    raise
        hosts = [Host(e.index, e.ip, e.ssh_port, (e.host_key,)) for e in endpoints]
        group = HostGroup(hosts, "tpujob", tpujob_key[0], **group_options)
        opened.append(group)
        return machines, group

    yield make
    for thing in reversed(opened):
        thing.close() if isinstance(thing, HostGroup) else thing.stop()
