"""The emulated TPU VMs of one node: real processes, real SSH, a filesystem view of their own.

Each host is a Linux mount namespace (`unshare --mount`) in which the per-host directories
`host_root(i)/{mnt,tmp,home,root}` are bind-mounted over `/mnt`, `/tmp`, `/home` and `/root`,
kept alive by one tiny holder process (`sleep infinity`). Commands arriving over the host's SSH
server (one listener thread per host, see ssh.py) run inside it with `nsenter -m`, so the
same host scripts run unchanged here and on a real TPU VM.

A host's processes are exactly the processes whose mount namespace is the host's: that follows
programs that detach with setsid/nohup, without cgroups or pid files, so preempt, kill_host and
stop leave nothing behind (processes.py finds and signals them; holder.py sets up the
namespace).
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from tpujob.emulator.addresses import MAX_IP_BLOCK, host_ip
from tpujob.emulator.machines.metadata import MetadataServer
from tpujob.emulator.machines.processes import (
    has_contract_env,
    kill_all,
    pids_by_namespace,
    shutting_down,
    signal_all,
    signal_each,
)
from tpujob.emulator.machines.reaper import start_time
from tpujob.emulator.machines.ssh import EMULATED_DEVICE, HostSshServer, new_host_key, parse_authorized_keys

log = logging.getLogger(__name__)

# The directories a host owns; the rest of the filesystem (/usr, the venv, ...) is shared, like
# the image every VM of a slice boots from.
HOST_DIRS = ("mnt", "home", "root", "tmp")


def kept_paths() -> list[str]:
    """What every host must still see at its usual path although it lies under one of the
    host's own directories: the interpreter that runs the emulated tools and programs (a venv
    and its base installation, pyenv's under /root) and the tpujob source it imports (an
    editable checkout under /tmp or /home). Nested paths are covered by their parent."""
    import tpujob

    candidates = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}
    candidates.add(str(pathlib.Path(tpujob.__file__).resolve().parent.parent))
    covered = [p for p in candidates if any(p == f"/{d}" or p.startswith(f"/{d}/") for d in HOST_DIRS)]
    return sorted(p for p in covered if not any(p != q and p.startswith(q + "/") for q in covered))


# On every host's PYTHONPATH, as a TPU VM image's own site directory would be: JAX there keys
# its compile cache by the slice, as on a TPU VM (image_site/sitecustomize.py says why).
IMAGE_SITE = str(pathlib.Path(__file__).resolve().parent / "image_site")

# Per host too, where they exist on this machine: apt's and dpkg's state (the frontend lock a
# fresh VM's unattended-upgrades holds, Google's repository and key for gcsfuse: apt.py).
HOST_PATHS = {"dpkg": "/var/lib/dpkg", "apt-sources": "/etc/apt/sources.list.d",
              "keyrings": "/usr/share/keyrings"}

# A directory where each host's program logs (tpujob's `.tpujob/jobs/JOB/attempt-N/program.log`
# under any home) are copied before a deleted node's files go: `scripts/soak.py --keep` reads them.
KEEP_LOGS_ENV = "TPUJOB_EMULATOR_KEEP_LOGS"
# A sticky TPU holder (dirty_host) is back this soon after it is ended, well before the program
# launched after the cleaning reaches its claim (its interpreter alone takes longer), so that
# program always finds the TPU held. With a second, a launch right after the cleaning could
# claim the TPU first and train on a "bad" host (a flaky e2e in a serial run, too).
STICKY_RESPAWN_SECONDS = 0.05

# Outside every host's own directories: where kept paths wait while those are mounted over.
_STAGE = "/run/tpujob-emulator-stage"

# The holder (holder.py) runs as a script: standard library only, before tpujob is importable.
_HOLDER = str(pathlib.Path(__file__).with_name("holder.py"))
_REAPER = str(pathlib.Path(__file__).with_name("reaper.py"))


class _Reaper:
    """This process's reaper (reaper.py): told of every holder spawned here, it ends the hosts
    still up once this process is gone, however it went (SIGKILL included), where nothing of
    this process runs any more to end them. One per process, started with its first host."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._owner = 0   # the pid that started it: a forked child starts its own

    def pid(self) -> int:
        with self._lock:
            return self._started().pid

    def tell(self, line: str) -> None:
        with self._lock:
            proc = self._started()
            assert proc.stdin  # a pipe
            try:
                proc.stdin.write(line.encode() + b"\n")
                proc.stdin.flush()
            except OSError:  # it was killed: the hosts are ended by close() alone then
                log.warning("the hosts' reaper (pid %d) is gone", proc.pid)

    def _started(self) -> subprocess.Popen:
        if self._proc is None or self._owner != os.getpid():
            # A session of its own: a terminal's ^C or a test runner's kill of this process
            # group is what it outlives. The pipe's write end is this process's alone (close_fds,
            # and Python's pipes are not inherited), so its end of file is this process's end.
            self._proc = subprocess.Popen([sys.executable, "-I", _REAPER], stdin=subprocess.PIPE,
                                          stdout=subprocess.DEVNULL, start_new_session=True)
            self._owner = os.getpid()
        return self._proc


REAPER = _Reaper()


@dataclass(frozen=True)
class HostEndpoint:
    index: int
    ip: str            # unique loopback address, e.g. 127.17.3.1
    ssh_port: int      # the port its SSH server listens on
    host_key: str      # OpenSSH public host key line, "ssh-ed25519 AAAA..."


class _Host:
    """One emulated VM: its namespace holder, its mount namespace id, its SSH server."""

    def __init__(self, index: int, root: pathlib.Path, ip: str, external_ip: str | None = None):
        self.index = index
        self.root = root
        self.ip = ip
        self.external_ip = external_ip
        self.holder: subprocess.Popen | None = None
        self.ns: tuple[int, int] | None = None   # (st_dev, st_ino) of the mount namespace
        self.server: HostSshServer | None = None
        self.metadata: MetadataServer | None = None
        self.alive = False
        self.dirt: list[subprocess.Popen] = []  # `dirty-host` processes holding the device

    def spawn_holder(self) -> None:
        for name in HOST_DIRS:
            (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.root / "tmp").chmod(0o1777)
        (self.root / "root").chmod(0o700)
        kept = kept_paths()
        os.makedirs(_STAGE, exist_ok=True)
        args = [_STAGE, EMULATED_DEVICE, str(len(kept)), *kept]
        for name, target in HOST_PATHS.items():  # first: their sources may lie under /tmp or /root
            if os.path.isdir(target):
                (self.root / name).mkdir(exist_ok=True)
                args += [str(self.root / name), target]
        for name in self._mount_order():
            args += [str(self.root / name), f"/{name}"]
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--",
             sys.executable, "-I", _HOLDER] + args,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)
        REAPER.tell(f"holder {self.holder.pid} {start_time(self.holder.pid)}")

    def _mount_order(self) -> list[str]:
        # A bind source is resolved when it is mounted: if this host's root lies under one of
        # the targets (e.g. $TPUJOB_HOME under /root or a test dir under /tmp), that target is
        # mounted last, so the other sources are still reachable at their usual paths.
        real = self.root.resolve()
        covering = [n for n in HOST_DIRS if real.is_relative_to(f"/{n}")]
        return [n for n in HOST_DIRS if n not in covering] + covering

    def await_holder(self) -> None:
        assert self.holder and self.holder.stdout
        line = self.holder.stdout.readline()
        if line.strip() != b"ready":
            self.holder.wait(timeout=5)
            err = self.holder.stderr.read().decode(errors="replace").strip() if self.holder.stderr \
                else ""
            raise RuntimeError(f"host {self.index}: namespace set-up failed (exit "
                               f"{self.holder.returncode}): {err}")
        self.holder.stdout.close()
        assert self.holder.stderr  # a pipe, as stdout
        self.holder.stderr.close()
        st = os.stat(f"/proc/{self.holder.pid}/ns/mnt")
        self.ns = (st.st_dev, st.st_ino)
        REAPER.tell(f"ns {self.holder.pid} {st.st_dev} {st.st_ino}")
        self.alive = True

    def end_holder(self) -> None:
        """The holder killed and reaped (last: its namespace is empty but for it now)."""
        if self.holder and self.holder.returncode is None:
            self.holder.kill()
            self.holder.wait()
            REAPER.tell(f"gone {self.holder.pid}")


class SliceMachines:
    """The hosts of one emulated TPU node: started when the node is being created."""

    def __init__(self, root: pathlib.Path, node_id: str, num_hosts: int,
                 authorized_keys: list[str], ip_block: int, ssh_port: int,
                 external_ips: list[str] | None = None, login=None,
                 image_env: dict[str, str] | None = None):
        if not 1 <= ip_block <= MAX_IP_BLOCK:
            raise ValueError(f"ip_block {ip_block} is outside 1..{MAX_IP_BLOCK}")
        if not 1 <= num_hosts <= 254:
            raise ValueError(f"num_hosts {num_hosts} is outside 1..254")
        self.root = pathlib.Path(root)
        self.node_id = node_id
        self.ssh_port = ssh_port
        keys = parse_authorized_keys(authorized_keys)
        # Each host's own set: a node's UpdateNode changes all of them, a MIG VM's
        # instances.setMetadata only its own host's (tpu_mig_rules.MemberMachines).
        self._keys = [set(keys) for _ in range(num_hosts)]
        self._login = login  # (user, key type, base64) -> True/False under OS Login, None: metadata keys
        # What the hosts' image sets for every session, as its /etc/environment would
        # (`python -m tpujob.emulator --image-env`); the metadata server's address comes on top.
        self._image_env = dict(image_env or {})
        if external_ips and len(external_ips) != num_hosts:
            raise ValueError(f"{len(external_ips)} external addresses for {num_hosts} hosts")
        # external_ips: a second address per host, where its SSH server also answers.
        self._hosts = [_Host(i, self.root / f"host-{i}", host_ip(ip_block, i),
                             external_ips[i] if external_ips else None)
                       for i in range(num_hosts)]
        self._lock = threading.Lock()
        self._stopping = threading.Event()


    def authorize(self, authorized_keys: list[str], index: int | None = None) -> None:
        """The node's `ssh-keys` metadata changed (UpdateNode; a VM's instances.setMetadata:
        host `index` only): its hosts take the new lines
        from now on, as Google's guest agent "maintains the authorized SSH keys file for each"
        user from "adding and remove SSH Keys stored in metadata" (GoogleCloudPlatform/
        guest-agent, README). The set every host's SSH server reads is changed in place, added
        to before it is cut, so no login in between finds it empty."""
        keys = parse_authorized_keys(authorized_keys)
        for held in self._keys if index is None else [self._keys[index]]:
            held.update(keys)
            held.intersection_update(keys)
    def host_root(self, index: int) -> pathlib.Path:
        """Where host `index`'s own /mnt, /home, /root and /tmp live, seen from outside."""
        return self._hosts[index].root

    def ssh_connections(self, index: int) -> dict[str, int]:
        """SSH connections host `index` accepted so far, per address it was reached on."""
        server = self._hosts[index].server
        return dict(server.connections) if server else {}

    def host_pids(self, index: int) -> list[int]:
        """The processes running on host `index` now (its namespace holder included)."""
        host = self._hosts[index]
        if not host.ns or host.holder is None or host.holder.poll() is not None:
            return []  # the holder dies last: without it the namespace, and its id, are gone
        return pids_by_namespace({host.ns}).get(host.ns, [])

    def start(self) -> list[HostEndpoint]:
        """Hosts up, SSH answering. Raises if any host cannot start; call stop() then."""
        self.root.mkdir(parents=True, exist_ok=True)
        for host in self._hosts:   # all holders first: their start-ups overlap
            host.spawn_holder()
        endpoints = []
        for host in self._hosts:
            host.await_holder()
            assert host.holder  # spawned above
            key = new_host_key()
            host.metadata = MetadataServer(host.ip).start()
            host.server = HostSshServer(
                ip=host.ip, port=self.ssh_port, host_key=key, authorized=self._keys[host.index],
                holder_pid=host.holder.pid, label=f"{self.node_id}/{host.index}",
                external_ip=host.external_ip, login=self._login,
                env={"PYTHONPATH": IMAGE_SITE, **self._image_env, "GCE_METADATA_HOST": host.metadata.address})
            host.server.start()
            endpoints.append(HostEndpoint(host.index, host.ip, self.ssh_port,
                                          f"{key.get_name()} {key.get_base64()}"))
        return endpoints

    def hold_apt_lock(self, seconds: float) -> None:
        """On every host, `unattended-upgr` holds the dpkg frontend lock for `seconds` from now
        (apt.py), as at a fresh TPU VM's first boot; returns once each holds it."""
        if seconds <= 0:
            return
        holders = [subprocess.Popen(
            ["nsenter", "-t", str(host.holder.pid), "-m", "--", sys.executable, "-m", "tpujob.emulator.machines.apt",
             "hold", str(seconds)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True) for host in self._hosts if host.holder]
        for holder in holders:
            assert holder.stdout  # a pipe
            holder.stdout.readline()  # "held" (or EOF, if the host died meanwhile)
            holder.stdout.close()
            threading.Thread(target=holder.wait, daemon=True).start()  # reaped when it lets go

    def dirty_host(self, index: int, sticky: bool = False) -> int:
        """A process on host `index` holding its emulated accelerator device, as a program of an
        earlier run left behind would (the next program then finds the TPU busy). `sticky`: one
        that comes back at once (STICKY_RESPAWN_SECONDS) after it is ended, as on a host whose
        TPU is wedged: no cleaning makes that host usable. Returns the holder's pid."""
        host = self._hosts[index]
        if not host.alive or host.server is None or host.holder is None:
            raise RuntimeError(f"host {index} is not running")
        if not os.path.exists(f"/proc/{host.holder.pid}/root{EMULATED_DEVICE}"):
            raise RuntimeError(f"host {index} has no emulated accelerator device ({EMULATED_DEVICE})")
        proc = self._hold_device(host)
        threading.Thread(target=self._keep_dirty, args=(host, proc, sticky), daemon=True,
                         name=f"dirty-{self.node_id}/{index}").start()
        return proc.pid

    @staticmethod
    def _hold_device(host: _Host) -> subprocess.Popen:
        # `sleep` inherits fd 3: its /proc/PID/fd/3 links to the device, as a libtpu user's does.
        script = 'exec 3< "$1"; exec sleep infinity'
        assert host.server  # a running host's (dirty_host checked it)
        proc = host.server.spawn(["bash", "-c", script, "tpujob-tpu-holder", EMULATED_DEVICE],
                                 dict(os.environ), "/", stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        host.dirt.append(proc)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and proc.poll() is None:  # holding it once this returns
            try:
                if EMULATED_DEVICE in {os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                                       for fd in os.listdir(f"/proc/{proc.pid}/fd")}:
                    break
            except OSError:
                pass
            time.sleep(0.02)
        return proc

    def _keep_dirty(self, host: _Host, proc: subprocess.Popen, sticky: bool) -> None:
        """Reap the holder once it is ended; a sticky one is started again at once, for as
        long as the host lives."""
        while True:
            proc.wait()
            if not sticky or self._stopping.wait(STICKY_RESPAWN_SECONDS) or not host.alive:
                return
            with self._lock:
                if not host.alive:
                    return
                proc = self._hold_device(host)

    def preempt(self, grace_seconds: float) -> None:
        """SSH stops answering; every process on every host gets SIGTERM, then SIGKILL after
        the grace period. Blocks until the hosts are dead (at most about grace_seconds).

        The notice is Compute Engine's ACPI G2 soft off, and the grace the time until G3
        mechanical off (compute v1 discovery, Scheduling.skipGuestOsShutdown: 30 s for Spot,
        120 s for Standard; the TPU page's "30-second warning",
        cloud.google.com/compute/docs/tpus/tpu-machines). A guest whose shutdown is over before
        then is off then: here, once nothing but the mounts is left (a shutdown unmounts last),
        the rest is killed at once instead of at the end of the grace."""
        for host in self._hosts:  # Compute Engine: instance/preempted reads TRUE from the notice on
            if host.metadata:
                host.metadata.preempted = True
        hosts = self._take_down(list(range(len(self._hosts))))
        namespaces, holders = _pinned(hosts)
        start = time.monotonic()
        notified = signal_all(namespaces, signal.SIGTERM, spare=holders)
        deadline = start + grace_seconds
        while time.monotonic() < deadline and shutting_down(namespaces, spare=holders):
            if self._stopping.wait(0.05):
                break
        took = time.monotonic() - start
        log.info("%s: notice to %d processes on %d hosts; %s after %.1f s", self.node_id, notified,
                 len(hosts), "grace over" if took >= grace_seconds else "shutdown over", took)
        kill_all(namespaces, spare=holders)
        self._reap(hosts)

    def kill_host(self, index: int) -> None:
        """That host dies at once: processes killed, SSH gone."""
        hosts = self._take_down([index])
        kill_all(*_pinned(hosts))
        self._reap(hosts)

    def freeze(self, index: int, thaw: bool = False) -> int:
        """The program on host `index` stops making progress without dying: SIGSTOP (SIGCONT
        with `thaw`) to each process started with the runtime contract's environment (what
        tpujob's launch.sh starts), not the host's own daemons (gcsfuse) nor SSH sessions. Its
        peers then block in their next collective, their signal handlers still running, as
        behind a host that hangs; the stopped process itself runs a handler only once
        continued. Returns how many processes were signalled."""
        host = self._hosts[index]
        if not host.alive or not host.ns:
            return 0
        sig = signal.SIGCONT if thaw else signal.SIGSTOP
        holder = host.holder.pid if host.holder else None
        return signal_each([pid for pid in pids_by_namespace({host.ns}).get(host.ns, [])
                      if pid != holder and has_contract_env(pid)], sig)

    def stop(self) -> None:
        """Node deleted: every process killed, SSH servers closed, directories removed."""
        self.stop_many([self])

    @staticmethod
    def stop_many(machines: list[SliceMachines]) -> None:
        """stop() of each of `machines`, their hosts' processes killed in one pass: a scan of
        /proc per node made the close of an emulator with a few hundred nodes outlast
        `tpujob emulator stop`'s grace."""
        for m in machines:
            m._stopping.set()
        hosts = [h for m in machines for h in m._take_down(list(range(len(m._hosts))))]
        kill_all(*_pinned(hosts))
        SliceMachines._reap(hosts)
        for m in machines:
            for host in m._hosts:   # holders of hosts that never finished starting
                host.end_holder()
            m._keep_logs()
            shutil.rmtree(m.root, ignore_errors=True)

    def _keep_logs(self) -> None:
        keep = os.environ.get(KEEP_LOGS_ENV)
        if not keep:
            return
        for host in self._hosts:
            for log_file in host.root.glob("*/**/.tpujob/jobs/*/attempt-*/program.log"):
                target = pathlib.Path(keep) / self.node_id / f"host-{host.index}" / log_file.relative_to(host.root)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(log_file, target)
                except OSError:
                    log.warning("could not keep %s", log_file, exc_info=True)

    def _take_down(self, indices: list[int]) -> list[_Host]:
        """Close the SSH servers of live hosts among `indices`; returns those hosts."""
        with self._lock:
            hosts = [self._hosts[i] for i in indices if self._hosts[i].alive]
            for host in hosts:
                host.alive = False
        for host in hosts:
            if host.server:
                host.server.close()
        return hosts

    @staticmethod
    def _reap(hosts: list[_Host]) -> None:
        """End the holders, last: their namespaces are empty but for them now."""
        for host in hosts:
            host.end_holder()
            if host.metadata:  # answers through a preemption's grace, as the VM's does
                host.metadata.close()
                host.metadata = None


def _pinned(hosts: list[_Host]) -> tuple[set, frozenset[int]]:
    """The hosts' mount namespaces, and their holders' pids, which every signal spares until
    the rest of the namespace is gone: a namespace whose last process exits is freed, and the
    kernel may give its id to the next one made (another emulator's host, any `unshare`), whose
    processes a later scan by that id would kill. A holder is our own unreaped child, so its
    pid is ours too, and _reap ends it last."""
    return ({h.ns for h in hosts if h.ns},
            frozenset(h.holder.pid for h in hosts if h.holder and h.holder.poll() is None))
