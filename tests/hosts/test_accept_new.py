"""Trust on first use (`ssh_host_keys: accept-new`) in the fan-out: a host without a known key
is accepted once, its key handed over to be recorded, and held to it afterwards."""

from __future__ import annotations

import dataclasses

from tpujob.errors import TpujobError
from tpujob.hosts.fanout import HostGroup


def test_a_host_without_a_key_is_pinned_on_first_use(slice_hosts):
    _, verified = slice_hosts(2)
    bare = [dataclasses.replace(h, host_keys=()) for h in verified.hosts]
    pinned = []
    with HostGroup(bare, "tpujob", verified.pkey,
                   accept_new=lambda host, line: pinned.append((host.index, line))) as group:
        assert all(r.ok for r in group.run("true"))
        assert sorted(pinned) == [(h.index, h.host_keys[0]) for h in verified.hosts]
        group.close()   # reconnecting in the same group checks the pinned key: no second pin
        assert all(r.ok for r in group.run("true")) and len(pinned) == 2


def test_a_known_key_is_still_verified_with_accept_new(slice_hosts):
    _, verified = slice_hosts(2)
    wrong = [dataclasses.replace(verified.hosts[0], host_keys=verified.hosts[1].host_keys)]
    pinned = []
    (result,) = HostGroup(wrong, "tpujob", verified.pkey, accept_new=lambda h, line: pinned.append(line)).run("true")
    assert "host key mismatch" in result.error and "refusing to connect" in result.error
    assert pinned == []


def test_a_key_that_cannot_be_recorded_is_not_trusted(slice_hosts):
    _, verified = slice_hosts(1)
    bare = [dataclasses.replace(verified.hosts[0], host_keys=())]

    def broken(host, line):
        raise TpujobError("the store is gone")

    (result,) = HostGroup(bare, "tpujob", verified.pkey, accept_new=broken).run("true")
    assert result.exit_code is None and "could not be recorded (the store is gone); refusing" in result.error


def test_two_first_connections_at_once_trust_one_key_only():
    """Two connections to a key-less host meet the policy together, shown different keys (one
    of them a man in the middle): one key is recorded and pinned, the other is refused."""
    import threading

    import paramiko

    from tpujob.hosts.fanout import Host, _PinFirstKey

    host = Host(0, "127.0.0.1", 22, ())
    recording = threading.Event()
    recorded = []

    def slow_record(h, line):
        recorded.append(line)
        recording.set()
        threading.Event().wait(0.2)   # the second connection arrives while this one records

    group = HostGroup([host], "tpujob", None, accept_new=slow_record)
    keys = [paramiko.RSAKey.generate(1024), paramiko.RSAKey.generate(1024)]
    outcomes: list[str] = []

    def connect(key):
        try:
            _PinFirstKey(group, host).missing_host_key(None, "127.0.0.1", key)
            outcomes.append("trusted")
        except TpujobError as err:
            outcomes.append(str(err))

    first = threading.Thread(target=connect, args=(keys[0],))
    first.start()
    recording.wait(5)
    connect(keys[1])
    first.join(5)
    assert len(recorded) == 1
    assert sorted(outcomes)[1] == "trusted" and "host key mismatch" in sorted(outcomes)[0]
