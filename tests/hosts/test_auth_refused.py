"""A host that answers SSH and refuses the key is not an unreachable host: its result says so
(`auth_refused`), at once (no retries), and a host that cannot be reached still is what it was."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tpujob.hosts.fanout import Host, HostGroup


def _listen(on_connection) -> tuple[socket.socket, int]:
    """A loopback listener whose every connection goes to `on_connection` in a thread: a host
    that misbehaves in the SSH handshake. Close the listener to stop it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            on_connection(conn)

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_a_refused_key_is_its_own_result_without_retries(slice_hosts):
    from tpujob.emulator.machines.ssh import new_host_key

    machines, group = slice_hosts(1)
    stranger = HostGroup(group.hosts, "tpujob", new_host_key(), retries=3)  # a key not in ssh-keys
    (result,) = stranger.run("true")
    assert result.auth_refused and result.exit_code is None
    assert "SSH authentication as 'tpujob' refused" in result.error
    assert sum(machines.ssh_connections(0).values()) == 1  # not tried again: a refusal is final
    stranger.close()


def test_an_unreachable_host_is_not_a_refusal(tpujob_key):
    host = Host(0, "127.250.0.1", 2222,
                ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIg0GkXnEQEEnuwqk1S8Zdw/ZYy2+bhTIzrxfphS1cp2",))
    (result,) = HostGroup([host], "tpujob", tpujob_key[0], retries=0).run("true")
    assert not result.auth_refused and "cannot connect" in result.error


@pytest.mark.parametrize("host_does", ["dies", "freezes"])
def test_a_host_that_goes_away_during_authentication_is_unreachable_not_a_refusal(tpujob_key, host_does):
    # paramiko raises AuthenticationException for these too ("transport shut down or saw EOF",
    # "Authentication timeout."); a soak (seed 3141) saw a job end as ssh_refused when its host
    # was killed in the middle of the handshake.
    import paramiko

    from tpujob.emulator.machines.ssh import new_host_key

    key = new_host_key()
    transports = []

    class GoesAway(paramiko.ServerInterface):
        def get_allowed_auths(self, username):
            return "publickey"

        def check_auth_publickey(self, username, offered):
            if host_does == "dies":
                transports[-1].close()
            else:
                time.sleep(3)
            return paramiko.AUTH_FAILED

    def handshake(conn):
        transport = paramiko.Transport(conn)
        transport.add_server_key(key)
        transports.append(transport)
        transport.start_server(event=threading.Event(), server=GoesAway())

    listener, port = _listen(handshake)
    try:
        host = Host(0, "127.0.0.1", port, (f"{key.get_name()} {key.get_base64()}",))
        group = HostGroup([host], "tpujob", tpujob_key[0], retries=1, connect_timeout=1)
        (result,) = group.run("true")
        assert not result.auth_refused, result.error
        assert "cannot connect after 2 tries" in result.error
        assert len(transports) == 2  # retried, as a host that is down is
    finally:
        listener.close()
        for transport in transports:
            transport.close()


def test_a_host_that_goes_away_during_the_key_exchange_is_unreachable(tpujob_key):
    # paramiko's connect re-raises what its transport thread saw, and a peer that closes the
    # socket in the key exchange is an EOFError, neither OSError nor SSHException. It escaped the
    # fan-out: `tpujob show` of a job whose VM was being preempted exited 1, "error: aborted"
    # (click turns an EOFError into Abort), in the suite's compute-4-hosts test.
    accepted = []

    def banner_then_gone(conn):
        accepted.append(conn)
        conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")  # the banner, then gone before KEXINIT
        conn.recv(4096)
        conn.close()

    listener, port = _listen(banner_then_gone)
    try:
        host = Host(0, "127.0.0.1", port,
                    ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIg0GkXnEQEEnuwqk1S8Zdw/ZYy2+bhTIzrxfphS1cp2",))
        group = HostGroup([host], "tpujob", tpujob_key[0], retries=1, connect_timeout=1)
        (result,) = group.run("true")
        assert not result.auth_refused, result.error
        assert "cannot connect after 2 tries" in result.error and "EOFError" in result.error, result.error
        assert len(accepted) == 2  # retried, as a host that is down is
    finally:
        listener.close()
