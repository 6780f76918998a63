"""A host that answers SSH and refuses the key is not an unreachable host: its result says so
(`auth_refused`), at once (no retries), and a host that cannot be reached still is what it was."""

from __future__ import annotations

import time

from tpujob.hosts.fanout import Host, HostGroup


def test_a_refused_key_is_its_own_result_without_retries(slice_hosts):
    from tpujob.emulator.host_ssh import new_host_key

    _, group = slice_hosts(1)
    stranger = HostGroup(group.hosts, "tpujob", new_host_key(), retries=3)  # a key not in ssh-keys
    started = time.monotonic()
    (result,) = stranger.run("true")
    assert result.auth_refused and result.exit_code is None
    assert "SSH authentication as 'tpujob' refused" in result.error
    assert time.monotonic() - started < 5  # no backoff between tries: a refusal is final
    stranger.close()


def test_an_unreachable_host_is_not_a_refusal(tpujob_key):
    host = Host(0, "127.250.0.1", 2222,
                ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIg0GkXnEQEEnuwqk1S8Zdw/ZYy2+bhTIzrxfphS1cp2",))
    (result,) = HostGroup([host], "tpujob", tpujob_key[0], retries=0).run("true")
    assert not result.auth_refused and "cannot connect" in result.error
