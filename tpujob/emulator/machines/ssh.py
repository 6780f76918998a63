"""The SSH server of one emulated TPU host (paramiko server mode).

One listener thread per host; each connection is a paramiko Transport (its own thread). Exec
requests are answered at once and the command runs on another thread, inside the host's mount
namespace (`nsenter -t HOLDER -m`), with its stdio pumped to the channel; the exit status is
sent before the channel closes. `sftp` is paramiko's SFTPServer over the host's filesystem
view; `shell` with a pty gives `tpujob ssh` an interactive bash.
"""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import socket
import subprocess
import sys
import threading

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tpujob.emulator.machines.sftp import RootedSftp

log = logging.getLogger(__name__)

_CHUNK = 32768
# Each host's emulated accelerator device (slice.py makes it) and the variable that tells
# the programs on a host that has one: the bundled runtime then checks it the way libtpu checks
# the TPU at start (tpujob/runtime/tpu_device.py). A real TPU VM has no such variable.
EMULATED_DEVICE = "/dev/vfio/0"
EMULATED_DEVICE_ENV = "TPUJOB_EMULATED_TPU"
IMAGE_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "image_bin")
_USER = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")


def new_host_key() -> paramiko.PKey:
    """A fresh Ed25519 host key (paramiko 5 cannot generate Ed25519 itself)."""
    pem = ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption()).decode()
    return paramiko.Ed25519Key(file_obj=io.StringIO(pem))


def parse_authorized_keys(lines: list[str]) -> set[tuple[str | None, str, str]]:
    """(user or None, key type, base64) per line; lines may carry GCE's "USER:" prefix."""
    keys = set()
    for line in lines:
        line = line.strip()
        user = None
        head = line.split(None, 1)[0] if line else ""
        if ":" in head:   # "USER:ssh-ed25519 AAAA..." (key types never contain ':')
            user, line = line.split(":", 1)
        parts = line.split()
        if len(parts) >= 2:
            keys.add((user, parts[0], parts[1]))
    return keys


class HostSshServer:
    """Listens on (ip, port); every connection runs commands on the host's namespace."""

    def __init__(self, ip: str, port: int, host_key: paramiko.PKey, authorized: set,
                 holder_pid: int, label: str, external_ip: str | None = None, login=None,
                 env: dict[str, str] | None = None):
        self.ip, self.port, self.label = ip, port, label
        self.env = dict(env or {})  # the VM's own environment for every session (metadata server)
        # A worker with an external address answers on it too (Google NATs it 1:1 to the
        # internal one); here it is a second loopback address of the same server.
        self.addresses = [ip] + ([external_ip] if external_ip else [])
        self.host_key = host_key
        self.authorized = authorized
        # OS Login: (user, key type, base64) -> whether OS Login lets it in; None when OS Login is
        # off for the node, and the `ssh-keys` metadata (authorized) decides as before.
        self.login = login
        self.holder_pid = holder_pid
        self._socks: list[socket.socket] = []
        # Connections accepted per local address, for tests (which address a client used).
        self.connections: dict[str, int] = {a: 0 for a in self.addresses}
        self._transports: set[paramiko.Transport] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        for address in self.addresses:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((address, self.port))
            except OSError as err:
                sock.close()
                self.close()
                raise OSError(err.errno, f"{err.strerror}: {address}:{self.port}") from err
            sock.listen(64)
            self._socks.append(sock)
        for sock in self._socks:
            threading.Thread(target=self._accept_loop, args=(sock,), name=f"ssh-{self.label}",
                             daemon=True).start()

    def close(self) -> None:
        """SSH stops answering: the listeners and every open connection are closed."""
        with self._lock:
            self._closed = True
            transports = list(self._transports)
        for sock in self._socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes the blocked accept() on Linux
            except OSError:
                pass
            sock.close()
        for t in transports:
            t.close()

    def _accept_loop(self, sock: socket.socket) -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                address = sock.getsockname()[0]
                self.connections[address] = self.connections.get(address, 0) + 1
            try:
                transport = paramiko.Transport(conn)
                # Channel requests go through _after_reply: a command starts once its request
                # has been answered, never racing its own success reply (see _deferred_start).
                transport._channel_handler_table = _REQUEST_THEN_START
                transport.add_server_key(self.host_key)
                transport.set_subsystem_handler("sftp", paramiko.SFTPServer, RootedSftp,
                                                root=f"/proc/{self.holder_pid}/root")
                with self._lock:
                    self._transports = {t for t in self._transports if t.is_active()}
                    self._transports.add(transport)
                # With an event, start_server returns at once: one slow client can't stall
                # the listener.
                transport.start_server(event=threading.Event(), server=_Session(self))
            except Exception:   # a broken handshake only loses that connection
                log.debug("%s: connection failed", self.label, exc_info=True)
                conn.close()

    def spawn(self, argv: list[str], env: dict, home: str, **popen) -> subprocess.Popen:
        """Start `argv` inside the host's mount namespace, in `home`."""
        full = ["nsenter", "-t", str(self.holder_pid), "-m", f"--wdns={home}", "--"] + argv
        return subprocess.Popen(full, env=env, start_new_session=True, **popen)


def _deferred_start(channel: paramiko.Channel, target, *args) -> None:
    """Run `target` on its own thread once paramiko has answered the channel request.

    paramiko sends the exec/shell success reply only after check_channel_*_request returns; a
    command started at once (`true`) can finish and close its channel before that reply is out,
    and the client then sees "Channel closed." for a command that did run."""
    channel._tpujob_start = threading.Thread(target=target, args=args, daemon=True)


def _after_reply(channel: paramiko.Channel, message) -> None:
    paramiko.Channel._handle_request(channel, message)  # the check, then the reply
    start = getattr(channel, "_tpujob_start", None)
    if start is not None:
        channel._tpujob_start = None
        start.start()


_REQUEST_THEN_START = {**paramiko.Transport._channel_handler_table,
                       paramiko.common.MSG_CHANNEL_REQUEST: _after_reply}


class _Session(paramiko.ServerInterface):
    """Authentication and channel requests of one connection."""

    def __init__(self, server: HostSshServer):
        self.server = server
        self.user = "root"
        self.sudo = False  # whether the user may sudo (image_bin/admin/sudo, else image_bin/user/sudo)
        self.env: dict[str, str] = {}
        self.pty_size: tuple[int, int] | None = None

    @property
    def home(self) -> str:
        return "/root" if self.user == "root" else f"/home/{self.user}"

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        name, b64 = key.get_name(), key.get_base64()
        if not _USER.fullmatch(username):
            return paramiko.AUTH_FAILED
        verdict = self.server.login(username, name, b64) if self.server.login else None
        if verdict is None:  # OS Login off: the `ssh-keys` metadata decides
            verdict = any(kind == name and data == b64 and user in (None, username)
                          for user, kind, data in self.server.authorized)
        if not verdict:
            return paramiko.AUTH_FAILED
        self.user = username
        may_sudo = getattr(self.server.login, "may_sudo", None)
        self.sudo = may_sudo(username) if may_sudo is not None else True  # metadata keys: google-sudoers
        # The home exists from the first login on, as on a VM whose guest agent creates the
        # users named in `ssh-keys` (or OS Login's NSS module, its profile's user).
        os.makedirs(f"/proc/{self.server.holder_pid}/root{self.home}", exist_ok=True)
        return paramiko.AUTH_SUCCESSFUL

    def check_channel_request(self, kind: str, chanid: int) -> int:
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_env_request(self, channel, name: bytes, value: bytes) -> bool:
        self.env[_text(name)] = _text(value)
        return True

    def check_channel_pty_request(self, channel, term, width, height, pw, ph, modes) -> bool:
        self.pty_size = (height, width)
        self.env["TERM"] = _text(term)
        return True

    def check_channel_exec_request(self, channel, command: bytes) -> bool:
        _deferred_start(channel, self._run, channel, ["bash", "-c", _text(command)])
        return True

    def check_channel_shell_request(self, channel) -> bool:
        _deferred_start(channel, self._shell, channel)
        return True

    def _environment(self) -> tuple[dict, str]:
        home = self.home
        # The interpreter running the emulator comes first on PATH, as python3 with the
        # project's packages does on a prepared TPU VM image.
        # Before it, the image's own sudo: one that acts for a user who may, one that refuses
        # for the others (image_bin/admin, image_bin/user: who may is OS Login's word).
        sudo = os.path.join(IMAGE_BIN, "admin" if self.sudo else "user")
        path = os.pathsep.join([sudo, os.path.dirname(sys.executable), os.environ.get(
            "PATH", "/usr/local/bin:/usr/bin:/bin")])
        env = {"HOME": home, "USER": self.user, "LOGNAME": self.user, "PATH": path,
               "SHELL": "/bin/bash", "LANG": "C.UTF-8", **self.server.env}
        if os.path.exists(f"/proc/{self.server.holder_pid}/root{EMULATED_DEVICE}"):
            env[EMULATED_DEVICE_ENV] = EMULATED_DEVICE
        env.update(self.env)
        return env, home

    def _run(self, channel: paramiko.Channel, argv: list[str]) -> None:
        proc = None
        try:
            env, home = self._environment()
            proc = self.server.spawn(argv, env, home, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            pumps = [threading.Thread(target=_pump_out, args=(proc.stdout, channel.sendall)),
                     threading.Thread(target=_pump_out,
                                      args=(proc.stderr, channel.sendall_stderr))]
            for t in pumps:
                t.start()
            threading.Thread(target=_pump_in, args=(channel, proc.stdin), daemon=True).start()
            rc = proc.wait()
            for t in pumps:
                t.join()
            _finish(channel, 128 - rc if rc < 0 else rc)
        except Exception:
            log.debug("%s: exec failed", self.server.label, exc_info=True)
            _finish(channel, 255)
            if proc and proc.poll() is None:
                proc.kill()

    def _shell(self, channel: paramiko.Channel) -> None:
        env, home = self._environment()
        env.setdefault("TERM", "xterm")
        leader, follower = pty.openpty()
        if self.pty_size:
            import fcntl
            import struct
            import termios
            fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", *self.pty_size, 0, 0))
        try:
            proc = self.server.spawn(["bash", "-i"], env, home, stdin=follower, stdout=follower,
                                     stderr=follower)
        finally:
            os.close(follower)
        out = os.fdopen(leader, "rb", buffering=0)
        threading.Thread(target=_pump_in, args=(channel, os.fdopen(os.dup(leader), "wb", 0)),
                         daemon=True).start()
        _pump_out(out, channel.sendall)   # ends with EIO once the shell exits
        rc = proc.wait()
        _finish(channel, 128 - rc if rc < 0 else rc)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _pump_out(stream, send) -> None:
    try:
        while chunk := stream.read1(_CHUNK) if hasattr(stream, "read1") else stream.read(_CHUNK):
            send(chunk)
    except OSError:   # client gone, or the pty closed
        pass
    finally:
        stream.close()


def _pump_in(channel: paramiko.Channel, stdin) -> None:
    try:
        while data := channel.recv(_CHUNK):
            stdin.write(data)
            stdin.flush()
    except (OSError, ValueError):   # the command exited without reading everything
        pass
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _finish(channel: paramiko.Channel, status: int) -> None:
    try:
        channel.send_exit_status(status)
        channel.shutdown_write()
        channel.close()
    except Exception:   # the connection is already gone (host killed, client left)
        pass
