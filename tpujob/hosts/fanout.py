"""Run a command on every host of a slice at once, over paramiko, with verified host keys.

One connection per host, opened on first use and reused by later calls (setup, launch and
status on the same slice pay the handshake once). Connection errors are retried with backoff;
a command that started is never re-run (it may not be idempotent). Host keys are checked
against the keys the cloud published (guest attributes): never AutoAddPolicy. Only a group made
with `accept_new` trusts a host without a known key, on first use: the key it presents then is
handed to `accept_new` (to be recorded) and held for the group's later connections.
"""

from __future__ import annotations

import base64
import pathlib
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from tpujob.errors import CloudError, LocalIOError, SshAuthRefused
from tpujob.hosts.host_output import MAX_CHARS, cause
from tpujob.hosts.scripts import HostCommand

OUTPUT_TAIL = 1 << 20   # bytes of each host's output kept in memory (the log file has it all)
STDERR_TAIL = 64 << 10  # bytes of its stderr alone: where a failure's cause is (hosts.host_output)


def connection_errors() -> tuple[type[BaseException], ...]:
    """What paramiko raises when a connection to a host drops: OSError, SSHException, and
    EOFError. A connect re-raises what its transport thread saw (Transport.start_client), and a
    host that closes the socket in the key exchange (preempted at that moment) is an EOFError,
    which click would turn into "error: aborted"."""
    import paramiko

    return (OSError, EOFError, paramiko.SSHException)


def error_text(err: BaseException) -> str:
    """What an SSH error says, or its type where it says nothing (an EOFError)."""
    return str(err) or type(err).__name__


@dataclass(frozen=True)
class Host:
    index: int
    address: str
    port: int = 22
    host_keys: tuple[str, ...] = ()   # OpenSSH public lines, "ssh-ed25519 AAAA..."


@dataclass
class HostResult:
    index: int
    exit_code: int | None = None   # None: it never finished (connection, timeout, cancelled)
    output: str = ""               # stdout and stderr as they came, the last OUTPUT_TAIL bytes
    stderr: str = ""               # stderr alone, the last STDERR_TAIL bytes
    error: str = ""
    seconds: float = 0.0
    timed_out: bool = False        # the per-host timeout ended it (the host was reachable)
    auth_refused: bool = False     # the host answered SSH but refused the key (not unreachable)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error

    def describe(self) -> str:
        return self.error or f"exit code {self.exit_code}"


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    failed: int
    pending: tuple[int, ...]   # the hosts still running: the slow ones, near the end


class _Cancelled(Exception):
    pass


@dataclass
class _Run:
    """What one fan-out shares between its workers."""
    total: int
    progress: Callable[[Progress], None] | None
    fail_fast: bool
    cancel: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: set = field(default_factory=set)
    failed: int = 0

    def finished(self, result: HostResult) -> None:
        with self.lock:
            self.pending.discard(result.index)
            if not result.ok:
                self.failed += 1
                if self.fail_fast:
                    self.cancel.set()
            snapshot = Progress(self.total - len(self.pending), self.total, self.failed,
                                tuple(sorted(self.pending)))
        if self.progress:
            self.progress(snapshot)


class HostGroup:
    """The hosts of one slice, reached as `user` with tpujob's key `pkey`."""

    def __init__(self, hosts: list[Host], user: str, pkey, *, connect_timeout: float = 10.0,
                 retries: int = 3, keepalive: int = 15, max_workers: int = 64,
                 accept_new: Callable[[Host, str], None] | None = None, run_as: str | None = None):
        self.hosts = sorted(hosts, key=lambda h: h.index)
        self.user = user
        # Another user's attempt (a lab under OS Login: each account its own user): commands run
        # as that user through `sudo -n` (roles/compute.osAdminLogin), never asking a password.
        self.run_as = run_as
        self.pkey = pkey
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.keepalive = keepalive
        self.max_workers = max_workers
        self._clients: dict[int, Any] = {}  # host index -> its paramiko.SSHClient
        self._lock = threading.Lock()
        self.accept_new = accept_new
        self._pinned: dict[int, str] = {}   # host index -> the key it showed on first use

    def __enter__(self) -> HostGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()

    # ---- fan-out ------------------------------------------------------------------------------

    def run(self, command: str | HostCommand | Callable[[Host], str | HostCommand], *,
            stdin: bytes | Callable[[Host], bytes] | None = None,
            log_paths: Callable[[Host], pathlib.Path] | None = None,
            timeout: float | None = None, fail_fast: bool = False,
            progress: Callable[[Progress], None] | None = None) -> list[HostResult]:
        """`command` on every host (per host when a callable); results in host order.

        stdout and stderr go, interleaved as they arrive, to `log_paths(host)` (appended) and
        to each result's `output`. `timeout` bounds each host's command; with `fail_fast`, the
        first failure cancels the hosts still running or waiting."""
        def one(host: Host, cancel: threading.Event) -> HostResult:
            cmd = command(host) if callable(command) else command
            data = stdin(host) if callable(stdin) else stdin
            log = log_paths(host) if log_paths else None
            return self.execute(host, cmd, stdin=data, log=log, timeout=timeout, cancel=cancel)

        return self.map(one, fail_fast=fail_fast, progress=progress)

    def map(self, fn: Callable[[Host, threading.Event], HostResult], *, fail_fast: bool = False,
            progress: Callable[[Progress], None] | None = None) -> list[HostResult]:
        """fn(host, cancel) on every host on a bounded pool; its exceptions become results."""
        state = _Run(len(self.hosts), progress, fail_fast,
                     pending={h.index for h in self.hosts})

        def guarded(host: Host) -> HostResult:
            start = time.monotonic()
            try:
                if state.cancel.is_set():
                    raise _Cancelled()
                result = fn(host, state.cancel)
            except LocalIOError:
                # This machine's fault, not the host's: raised once every host's step has ended
                # (the pool waits for them), none of them cut short by it; a host whose log could
                # not be opened was never asked anything.
                raise
            except _Cancelled:
                result = HostResult(host.index, error="cancelled: another host failed")
            except SshAuthRefused as err:
                result = HostResult(host.index, error=str(err), auth_refused=True)
            except CloudError as err:
                result = HostResult(host.index, error=str(err))
            except connection_errors() as err:
                result = HostResult(host.index, error=f"connection lost: {error_text(err)}")
            result.seconds = time.monotonic() - start
            state.finished(result)
            return result

        if not self.hosts:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(self.hosts)),
                                thread_name_prefix="tpujob-host") as pool:
            return list(pool.map(guarded, self.hosts))

    # ---- one host -----------------------------------------------------------------------------

    def client(self, host: Host):
        """The open connection to `host`, (re)connecting with retries. Raises CloudError."""
        with self._lock:
            client = self._clients.get(host.index)
        if client is not None and client.get_transport() and client.get_transport().is_active():
            return client
        client = self._connect(host)
        with self._lock:
            old = self._clients.get(host.index)
            self._clients[host.index] = client
        if old is not None:
            old.close()
        return client

    def _connect(self, host: Host):
        import paramiko

        where = f"host {host.index} ({host.address}:{host.port})"
        if not host.host_keys and self.accept_new is None:
            raise CloudError(f"{where}: no host key known for it; refusing to connect "
                             "unverified")
        delay = 0.5
        for attempt in range(self.retries + 1):
            with self._lock:
                known = host.host_keys or ((self._pinned[host.index],) if host.index in self._pinned else ())
            client = paramiko.SSHClient()
            client.set_missing_host_key_policy(
                paramiko.RejectPolicy() if known else _PinFirstKey(self, host))
            name = host.address if host.port == 22 else f"[{host.address}]:{host.port}"
            for line in known:
                kind, b64 = line.split()[:2]
                client.get_host_keys().add(
                    name, kind, paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))
            try:
                client.connect(host.address, host.port, username=self.user, pkey=self.pkey,
                               timeout=self.connect_timeout, banner_timeout=self.connect_timeout,
                               auth_timeout=self.connect_timeout, look_for_keys=False,
                               allow_agent=False)
                client.get_transport().set_keepalive(self.keepalive)
                return client
            except paramiko.BadHostKeyException as err:
                client.close()
                raise CloudError(
                    f"{where}: host key mismatch: it presented {err.key.get_name()} "
                    f"{err.key.get_base64()}, tpujob expected {', '.join(known)} (published by the "
                    "cloud, or pinned when first seen); refusing to connect"
                ) from err
            except paramiko.AuthenticationException as err:
                if not _refused(client, err):
                    # The host went away in the middle of the handshake, or stopped answering:
                    # a host that is down (retried as one), never a refusal that ends the job.
                    client.close()
                    if attempt == self.retries:
                        raise CloudError(f"{where}: cannot connect after {attempt + 1} tries: {err}") from err
                    time.sleep(delay)
                    delay *= 2
                    continue
                # The host answered and said no: retrying the same key cannot help, and it is
                # not a host that is down (attempt.hosts says why, OS Login or metadata).
                client.close()
                raise SshAuthRefused(f"{where}: SSH authentication as {self.user!r} refused: "
                                     f"{error_text(err)}") from err
            except connection_errors() as err:
                client.close()
                if attempt == self.retries:
                    raise CloudError(f"{where}: cannot connect after {attempt + 1} tries: "
                                     f"{error_text(err)}") from err
                time.sleep(delay)
                delay *= 2
            except BaseException:   # a key pinned differently, or not recorded: no connection
                client.close()
                raise
        raise AssertionError("unreachable")

    def command(self, command: str) -> str:
        """`command` as sent: as is, or run as `run_as` through sudo (its stdin passes on;
        -H: that user's HOME, where the attempt's files are)."""
        if not self.run_as:
            return command
        return f"sudo -n -H -u {shlex.quote(self.run_as)} -- bash -c {shlex.quote(command)}"

    def execute(self, host: Host, command: str | HostCommand, *, stdin: bytes | None = None,
                log: pathlib.Path | None = None, timeout: float | None = None,
                cancel: threading.Event | None = None) -> HostResult:
        """`command` on one host: its exit code and output. Raises CloudError if the host
        cannot be reached; a connection lost mid-command is a result with `error` set. A
        HostCommand's script goes on stdin ahead of `stdin`."""
        if isinstance(command, HostCommand):
            stdin = command.preamble + (stdin or b"")
            command = command.command
        # The log first: a local fault (LocalIOError) is raised before the host is asked anything.
        sink = _HostLog(log) if log else None
        try:
            result = self._execute(host, command, stdin, sink, timeout, cancel or threading.Event())
        finally:
            if sink:
                sink.close()
        if sink and sink.fault:  # the command ran to its end; the log could not keep it
            raise sink.fault
        return result

    def _execute(self, host: Host, command: str, stdin: bytes | None, sink: _HostLog | None,
                 timeout: float | None, cancel: threading.Event) -> HostResult:
        client = self.client(host)
        try:
            channel = client.get_transport().open_session(timeout=self.connect_timeout)
        except connection_errors():   # the cached connection just died: once more
            with self._lock:
                self._clients.pop(host.index, None)
            channel = self.client(host).get_transport().open_session(
                timeout=self.connect_timeout)
        tail, err_tail = bytearray(), bytearray()
        deadline = time.monotonic() + timeout if timeout else None

        def keep(chunk: bytes, stderr: bool = False) -> None:
            nonlocal tail, err_tail
            if sink:
                sink.write(chunk)
            tail += chunk
            del tail[:-OUTPUT_TAIL]
            if stderr:
                err_tail += chunk
                del err_tail[:-STDERR_TAIL]

        def result(**kwargs) -> HostResult:
            return HostResult(host.index, output=tail.decode(errors="replace"),
                              stderr=err_tail.decode(errors="replace"), **kwargs)

        try:
            channel.settimeout(0.1)
            channel.exec_command(self.command(command))
            if stdin:
                channel.sendall(stdin)
            channel.shutdown_write()
            while True:
                if cancel.is_set():
                    raise _Cancelled()
                if deadline and time.monotonic() > deadline:
                    return result(error=f"timed out after {timeout:g}s", timed_out=True)
                # Both streams as they come: an unread one would fill the window and stall the other.
                while channel.recv_stderr_ready():
                    keep(channel.recv_stderr(32768), stderr=True)
                try:
                    chunk = channel.recv(32768)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                keep(chunk)
            while True:   # the channel's end closes both streams: what stderr still holds
                try:
                    chunk = channel.recv_stderr(32768)
                except TimeoutError:
                    break
                if not chunk:
                    break
                keep(chunk, stderr=True)
            code = channel.recv_exit_status()
            return result(exit_code=code if code >= 0 else None,
                          error="" if code >= 0 else "the connection ended without an exit "
                                                     "status (host down?)")
        except connection_errors() as err:
            return result(error=f"connection lost: {error_text(err)}")
        finally:
            channel.close()


class _HostLog:
    """A host's local log ($TPUJOB_HOME/logs/JOB/attempt-N/host-K.log), appended to. Its faults
    are this machine's, kept apart from the SSH errors around it (an OSError both): one at
    opening raises LocalIOError at once; one while writing stops the log, and the command
    runs to its end before `fault` is raised (a half-read command's answer would be lost)."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        self.fault: LocalIOError | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.file: Any = open(path, "ab")
        except OSError as exc:
            raise LocalIOError.of("open the host log", path, exc) from exc

    def write(self, chunk: bytes) -> None:
        if self.fault:
            return
        try:
            self.file.write(chunk)
            self.file.flush()
        except OSError as exc:
            self.fault = LocalIOError.of("write the host log", self.path, exc)

    def close(self) -> None:
        try:
            self.file.close()
        except OSError as exc:  # the buffer's last bytes, flushed on close
            self.fault = self.fault or LocalIOError.of("write the host log", self.path, exc)


def _refused(client: Any, err: Exception) -> bool:
    """Whether an AuthenticationException is the host saying no. paramiko raises the same class
    when the connection ends during authentication ("Authentication failed: transport shut down
    or saw EOF": a host killed or preempted at that moment, seen in scripts/soak.py, seed 3141)
    and when the host stops answering ("Authentication timeout."); after a real refusal
    (SSH_MSG_USERAUTH_FAILURE) the connection is still up."""
    transport = client.get_transport()
    return transport is not None and transport.is_active() and "timeout" not in str(err).lower()


class _PinFirstKey:
    """paramiko's policy for a host with no known key, in a group that accepts new ones: the
    key is recorded (accept_new) before the connection goes on; a failure to record refuses."""

    def __init__(self, group: HostGroup, host: Host):
        self.group, self.host = group, host

    def missing_host_key(self, client, hostname, key) -> None:
        line = f"{key.get_name()} {key.get_base64()}"
        # Check, record and pin as one step: two connections to the same key-less host at once
        # must not both trust what they were shown (the second would go on with its own key).
        with self.group._lock:
            first = self.group._pinned.get(self.host.index)
            if first is None:
                try:
                    accept = self.group.accept_new
                    if accept is None:  # _connect gives a group this policy only with accept_new
                        raise RuntimeError("the group accepts no new host keys")
                    accept(self.host, line)
                except Exception as err:   # unrecorded, the key would not be held next time: no trust
                    raise CloudError(f"host {self.host.index} ({hostname}): its host key could not "
                                     f"be recorded ({err}); refusing to connect") from err
                self.group._pinned[self.host.index] = line
                return
        if first != line:   # another connection pinned a different key
            raise CloudError(f"host {self.host.index} ({hostname}): host key mismatch: it presented "
                             f"{line}, pinned when first seen: {first}; refusing to connect")


def ensure_ok(results: list[HostResult], action: str) -> None:
    """CloudError naming each host where `action` failed, with the last lines its script said
    (the host scripts say why on stderr: "holds no pid", "survived SIGKILL"), credential-looking
    pairs redacted. At most 8 hosts are named; the line stays about as long for 8 as for one."""
    bad = [r for r in results if not r.ok]
    if not bad:
        return
    shown = bad[:8]
    room = max(80, MAX_CHARS // len(shown))
    detail = "; ".join(f"host {r.index}: {cause(r, chars=room)}" for r in shown) + (
        f" (and {len(bad) - 8} more)" if len(bad) > 8 else "")
    raise CloudError(f"{action} failed on {len(bad)} of {len(results)} hosts: {detail}")
