"""Reaching a job's hosts by hand: the program's log, a command on every host, a shell, and
each host's view of the program (for `show`).

Every connection goes through SshHostOps.group: host keys come from the cloud's guest
attributes and are verified. Values that reach a remote shell are quoted with shlex.
"""

from __future__ import annotations

import os
import select
import shlex
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Callable

from tpujob.clients import make_cloud
from tpujob.errors import CloudError, ConflictError, NotFoundError, UsageError
from tpujob.names import format_job_id, local_log_dir
from tpujob.service.context import Context

if TYPE_CHECKING:
    from tpujob.hosts.scripts import HostCommand

_NO_LOG = 66  # templates/logs.sh: no program log for that attempt on the host

Write = Callable[[bytes], None]


@dataclass(frozen=True)
class HostProgram:
    """One host's view of the job's program, as `show` reports it."""
    index: int
    ip: str
    program: str              # running | exited | absent | lost | unreachable
    exit_code: int | None = None
    error: str = ""
    step: int | None = None   # from the heartbeat in the run dir, as the host sees it


@dataclass(frozen=True)
class HostOutcome:
    index: int
    exit_code: int | None     # None: the host could not be reached or the connection was lost
    error: str = ""


# ---- resolving a job to hosts -----------------------------------------------------------------

def _attempt(ctx: Context, job, number: int | None):
    jid = format_job_id(job.id)
    if not job.attempt:
        raise NotFoundError(f"job {jid} has not started yet: it has no hosts")
    number = job.attempt if number is None else number
    for attempt in ctx.store.attempts(job.id):
        if attempt.number == number:
            return attempt
    raise NotFoundError(f"job {jid} has no attempt {number} (it has 1 to {job.attempt})")


def _slice(cloud, job, attempt):
    from tpujob.reconcile.attempt_slices import attempt_slice

    try:
        return attempt_slice(cloud, job, attempt)
    except NotFoundError:
        return None


def _group(ctx: Context, cloud, job, attempt, slice_, host: int | None):
    """The HostGroup of the slice, or of its host `host` only."""
    from tpujob.attempt.hosts import SshHostOps
    from tpujob.hosts.fanout import HostGroup

    group = SshHostOps(ctx, cloud).group(job, attempt, slice_)
    if host is None:
        return group
    chosen = [h for h in group.hosts if h.index == host]
    if not chosen:
        raise UsageError(f"--host {host}: the slice has hosts 0 to {len(group.hosts) - 1}")
    return HostGroup(chosen, group.user, group.pkey, accept_new=group.accept_new, run_as=group.run_as)


def _ready(ctx: Context, ref: str, host: int | None, attempt: int | None = None):
    """(job, attempt, group) for a job whose slice is READY; ConflictError otherwise."""
    from tpujob.cloud.base import SlicePhase

    job = ctx.store.find(ref)
    row = _attempt(ctx, job, attempt)
    cloud = make_cloud(ctx.settings)
    slice_ = _slice(cloud, job, row)
    if slice_ is None or slice_.phase != SlicePhase.READY:
        phase = "GONE" if slice_ is None else slice_.phase.value
        raise ConflictError(f"job {format_job_id(job.id)} ({job.state}): its slice "
                            f"{row.slice_name} is {phase}, no host to reach")
    return job, row, _group(ctx, cloud, job, row, slice_, host)


# ---- one SSH channel --------------------------------------------------------------------------

def _stream(group, host, command: str | HostCommand, *, out: Write, err: Write,
            stdin: BinaryIO | None = None, keep_open: bool = False,
            stop: threading.Event | None = None) -> HostOutcome:
    """Run `command` on `host`, copying its stdout and stderr as they come. `stdin` is sent
    (then EOF); with keep_open the remote stdin stays open until the channel closes. A
    HostCommand's script is sent first (hosts.scripts)."""
    from tpujob.hosts.fanout import connection_errors, error_text
    from tpujob.hosts.scripts import HostCommand

    preamble = b""
    if isinstance(command, HostCommand):
        preamble = command.preamble
        command = command.command

    try:
        channel = group.client(host).get_transport().open_session(timeout=group.connect_timeout)
    except CloudError as exc:
        return HostOutcome(host.index, None, str(exc))
    except connection_errors() as exc:
        return HostOutcome(host.index, None, f"connection lost: {error_text(exc)}")
    try:
        channel.settimeout(0.2)
        channel.exec_command(group.command(command))
        if preamble:
            channel.sendall(preamble)
        if stdin is not None:
            threading.Thread(target=_feed, args=(channel, stdin), daemon=True).start()
        elif not keep_open:
            channel.shutdown_write()
        while True:
            if stop and stop.is_set():
                return HostOutcome(host.index, None, "interrupted")
            while channel.recv_stderr_ready():
                err(channel.recv_stderr(32768))
            try:
                chunk = channel.recv(32768)
            except TimeoutError:
                continue
            if not chunk:   # EOF: the command is done with both streams
                break
            out(chunk)
        while channel.recv_stderr_ready():
            err(channel.recv_stderr(32768))
        code = channel.recv_exit_status()
        if code < 0:
            return HostOutcome(host.index, None, "the connection ended without an exit status")
        return HostOutcome(host.index, code)
    except connection_errors() as exc:
        return HostOutcome(host.index, None, f"connection lost: {error_text(exc)}")
    finally:
        channel.close()


def _feed(channel, stdin: BinaryIO) -> None:
    try:
        while data := (stdin.read1(32768) if hasattr(stdin, "read1") else stdin.read(32768)):
            channel.sendall(data)
        channel.shutdown_write()
    except OSError:   # the channel closed first
        pass


# ---- logs -------------------------------------------------------------------------------------

def local_log(ctx: Context, job_id: int, attempt: int, host: int) -> Path:
    return ctx.settings.home / local_log_dir(job_id, attempt) / f"host-{host}.log"


def logs(ctx: Context, ref: str, *, host: int = 0, attempt: int | None = None,
         follow: bool = False, out: Write, notice: Callable[[str], None]) -> None:
    """The program's log on `host` (read over SSH; followed until the program ends with
    `follow`). When the slice or host cannot be reached, tpujob's local log of that host
    (setup and launch output) is shown instead, and `notice` says so."""
    from tpujob.cloud.base import SlicePhase
    from tpujob.hosts.program import HostAttempt
    from tpujob.hosts.scripts import as_command, render

    if host < 0:
        raise UsageError("--host must be 0 or more")
    job = ctx.store.find(ref)
    row = _attempt(ctx, job, attempt)
    cloud = make_cloud(ctx.settings)
    slice_ = _slice(cloud, job, row)
    if slice_ is None or slice_.phase != SlicePhase.READY:
        why = f"slice {row.slice_name} is {'GONE' if slice_ is None else slice_.phase.value}"
        return _local_logs(ctx, job, row.number, host, why, follow, out, notice)
    group = _group(ctx, cloud, job, row, slice_, host)
    host_dir = HostAttempt(format_job_id(job.id), row.number, "", "", "").host_dir
    command = as_command(render("logs.sh", job_dir=host_dir, attempt=row.number, follow=1 if follow else 0),
                         "tpujob-logs")
    remote_err = bytearray()
    with group:
        result = _stream(group, group.hosts[0], command, out=out, err=remote_err.extend,
                         keep_open=follow)
    said = remote_err.decode(errors="replace").strip()
    if result.exit_code is None:
        return _local_logs(ctx, job, row.number, host, f"host {host}: {result.error}", follow,
                           out, notice)
    if result.exit_code == _NO_LOG:
        raise NotFoundError(f"host {host}: {said} (attempt {row.number} has not launched there)")
    if result.exit_code != 0:
        raise CloudError(f"host {host}: reading the log failed (exit code {result.exit_code}): {said}")


def _local_logs(ctx, job, attempt: int, host: int, why: str, follow: bool, out: Write,
                notice: Callable[[str], None]) -> None:
    path = local_log(ctx, job.id, attempt, host)
    if not path.exists():
        raise NotFoundError(f"{why}, and there is no local log of host {host} for attempt "
                            f"{attempt} ({path})")
    notice(f"{why}: showing tpujob's local log of host {host} ({path}): the setup and launch "
           "output, not the program's own log" + (" (nothing left to follow)" if follow else ""))
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 16):
            out(chunk)


# ---- exec -------------------------------------------------------------------------------------

class _Prefixer:
    """Whole lines, each prefixed `[host K] `, to one sink shared by every host's thread."""

    def __init__(self, index: int, sink: Write, lock: threading.Lock):
        self.prefix = f"[host {index}] ".encode()
        self.sink, self.lock = sink, lock
        self.pending = b""

    def __call__(self, data: bytes) -> None:
        *lines, self.pending = (self.pending + data).split(b"\n")
        if lines:
            with self.lock:
                self.sink(b"".join(self.prefix + line + b"\n" for line in lines))

    def flush(self) -> None:
        if self.pending:
            with self.lock:
                self.sink(self.prefix + self.pending + b"\n")
            self.pending = b""


def exec_command(ctx: Context, ref: str, argv: list[str], *, host: int | None = None,
                 out: Write, err: Write) -> list[HostOutcome]:
    """argv on every host of the job's slice (or on `host`) at once, as one literal command
    (shlex.join: the remote shell splits it back into exactly these words). Each output line
    is prefixed `[host K] `; stdout lines go to `out`, stderr lines to `err`."""
    if not argv:
        raise UsageError("no command given: tpujob exec JOB -- COMMAND [ARG...]")
    _, _, group = _ready(ctx, ref, host)
    command = shlex.join(argv)
    stop = threading.Event()
    out_lock, err_lock = threading.Lock(), threading.Lock()

    def one(h) -> HostOutcome:
        o, e = _Prefixer(h.index, out, out_lock), _Prefixer(h.index, err, err_lock)
        try:
            return _stream(group, h, command, out=o, err=e, stop=stop)
        finally:
            o.flush()
            e.flush()

    with group:
        pool = ThreadPoolExecutor(max_workers=min(64, len(group.hosts)),
                                  thread_name_prefix="tpujob-exec")
        futures = [pool.submit(one, h) for h in group.hosts]
        try:
            return [f.result() for f in futures]
        except BaseException:   # Ctrl-C: stop reading, close the channels
            stop.set()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)


def exit_status(outcomes: list[HostOutcome]) -> int:
    """ssh's convention over many hosts: 255 if a host could not be reached or its connection
    was lost, else the highest exit code (0 when every host succeeded)."""
    codes = [o.exit_code for o in outcomes if o.exit_code is not None]
    if len(codes) < len(outcomes):
        return 255
    return min(255, max(codes, default=0))


# ---- ssh --------------------------------------------------------------------------------------

def shell(ctx: Context, ref: str, *, host: int = 0, stdin: BinaryIO, stdout: BinaryIO,
          stderr: BinaryIO) -> int:
    """A shell on `host`: interactive (pty, raw terminal, window size) when stdin is a
    terminal, else a plain shell that reads its commands from stdin. Returns its exit status
    (255 when the connection was lost)."""
    _, _, group = _ready(ctx, ref, host)
    with group:
        target = group.hosts[0]
        if not stdin.isatty():
            result = _stream(group, target, 'exec "${SHELL:-/bin/bash}" -s', stdin=stdin,
                             out=_writer(stdout), err=_writer(stderr))
            if result.exit_code is None:
                raise CloudError(f"host {target.index}: {result.error}")
            return result.exit_code
        return _interactive(group.client(target), stdin.fileno(), stdout.fileno())


def _writer(stream: BinaryIO) -> Write:
    def write(data: bytes) -> None:
        stream.write(data)
        stream.flush()
    return write


def _interactive(client, in_fd: int, out_fd: int) -> int:
    import signal
    import termios
    import tty

    try:
        cols, rows = os.get_terminal_size(out_fd)
    except OSError:
        cols, rows = 80, 24
    channel = client.get_transport().open_session()
    channel.get_pty(term=os.environ.get("TERM", "xterm"), width=cols, height=rows)
    channel.invoke_shell()

    def resize(*_) -> None:
        try:
            channel.resize_pty(*os.get_terminal_size(out_fd))
        except OSError:
            pass

    saved = termios.tcgetattr(in_fd)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGWINCH, resize)
    try:
        tty.setraw(in_fd)
        stdin_open = True
        while True:
            watched = [channel, in_fd] if stdin_open else [channel]
            ready, _, _ = select.select(watched, [], [], 1.0)
            if channel in ready:
                data = channel.recv(32768)
                if not data:
                    break
                os.write(out_fd, data)
            if in_fd in ready:
                data = os.read(in_fd, 4096)
                if data:
                    channel.sendall(data)
                else:
                    stdin_open = False
                    channel.shutdown_write()
        code = channel.recv_exit_status()
        return 255 if code < 0 else code
    finally:
        termios.tcsetattr(in_fd, termios.TCSADRAIN, saved)
        if previous is not None:
            signal.signal(signal.SIGWINCH, previous)
        channel.close()


# ---- per-host status (for `show`) -------------------------------------------------------------

def host_status(ctx: Context, job) -> list[HostProgram]:
    """Each host's view of the current attempt's program, when the job's slice is READY; an
    empty list when it has no slice or the slice is not READY. Unreachable hosts say so. Asked
    as the sweep asks (SshHostOps.program_answers), quickly."""
    from tpujob.attempt.hosts import SshHostOps, external_ips
    from tpujob.cloud.base import SlicePhase

    if not job.attempt:
        return []
    row = _attempt(ctx, job, None)
    cloud = make_cloud(ctx.settings, start_emulator=False)  # a look starts nothing
    slice_ = _slice(cloud, job, row)
    if slice_ is None or slice_.phase != SlicePhase.READY:
        return []
    ips = {h.index: h.address(external_ips(job)) for h in slice_.hosts}
    statuses = SshHostOps(ctx, cloud).program_answers(job, row, slice_, quick=True)
    return [HostProgram(s.index, ips.get(s.index, ""), s.state, s.exit_code, s.error, s.step)
            for s in statuses]
