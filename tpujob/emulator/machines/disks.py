"""The emulated hosts' side of attached disks, and the tools put on their PATH.

Attaching a disk to a TPU node makes it appear on every emulated host at
`/dev/disk/by-id/google-NAME`: a bind of its directory (read-only for READ_ONLY) moved into the
host's mount namespace with open_tree/move_mount (`prepare_hosts`), so the host scripts mount it
there as they would a block device, and a read-only attachment really rejects writes (EROFS).
"""

from __future__ import annotations

import ctypes
import json
import os
import pathlib
import subprocess
import sys

from tpujob.emulator.machines import gcsfuse

_OPEN_TREE, _MOVE_MOUNT = 428, 429  # x86_64 and aarch64 share these numbers
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 4
_AT_FDCWD, _CLONE_NEWNS = -100, 0x20000
BY_ID = "/dev/disk/by-id"
_TOOLS = "/dev/disk/.tpujob-emulator-bin"


def gcsfuse_shim(storage_endpoint: str) -> str:
    return (f"#!/bin/sh\nexport STORAGE_EMULATOR_HOST={storage_endpoint}\n"
            f"exec {sys.executable} -m {gcsfuse.MODULE} \"$@\"\n")


def prepare_hosts(host_pids: list[list[int]], disks: list[tuple[pathlib.Path, str, bool]],
                  tools: dict[str, str]) -> None:
    """On each host (the mount namespace of any of its processes): every disk at
    /dev/disk/by-id/google-NAME (read-only for READ_ONLY), and `tools` (name -> script) on
    PATH. /dev is the machine's: only an empty /dev/disk is created there if missing; each host
    mounts a tmpfs of its own over it. setns needs a single-threaded process: a helper runs it."""
    os.makedirs("/dev/disk", exist_ok=True)
    plan = {"hosts": host_pids, "disks": [[str(d), n, ro] for d, n, ro in disks],
            "tools": tools, "bin": os.path.dirname(sys.executable)}
    result = subprocess.run([sys.executable, "-m", "tpujob.emulator.machines.disks", json.dumps(plan)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"preparing the hosts failed: {result.stderr.strip()[-500:]}")


def _helper(plan: dict) -> None:
    libc = ctypes.CDLL(None, use_errno=True)

    def check(ret: int, what: str) -> int:
        if ret < 0:
            raise OSError(ctypes.get_errno(), what)
        return ret

    # Clones of the disks' directories, taken in our own namespace, where their paths resolve.
    trees = [[check(libc.syscall(_OPEN_TREE, _AT_FDCWD, d.encode(),
                                 _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC), f"open_tree {d}")
              for d, _, _ in plan["disks"]] for _ in plan["hosts"]]
    for pids, host_trees in zip(plan["hosts"], trees):
        if not any(_enter(libc, pid) for pid in pids):
            raise OSError(f"no live process among {pids}")
        with open("/proc/self/mountinfo") as info:
            lines = [line.split() for line in info]
        mounted = {fields[4] for fields in lines}
        # The host's own tmpfs (its holder mounts one where it has a /dev of its own): a
        # /dev/disk of the machine's seen here would be every host's at once.
        if not any(f[4] == "/dev/disk" and f[f.index("-") + 2] == "tpujob-host" for f in lines):
            os.makedirs("/dev/disk", exist_ok=True)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=755", "tpujob-host", "/dev/disk"],
                           check=True)
        if plan["tools"] and plan["bin"] not in mounted:
            os.makedirs(_TOOLS, exist_ok=True)
            for name, text in plan["tools"].items():
                with open(f"{_TOOLS}/{name}", "w") as f:
                    f.write(text)
                os.chmod(f"{_TOOLS}/{name}", 0o755)
            # Writable per host (upper and work dirs on this host's /dev/disk tmpfs): apt-get
            # installs gcsfuse there (apt.py).
            os.makedirs(f"{_TOOLS}-upper", exist_ok=True)
            os.makedirs(f"{_TOOLS}-work", exist_ok=True)
            subprocess.run(["mount", "-t", "overlay", "tpujob-tools", "-o",
                            f"lowerdir={_TOOLS}:{plan['bin']},upperdir={_TOOLS}-upper,workdir={_TOOLS}-work",
                            plan["bin"]], check=True)
        for (_, name, read_only), tree in zip(plan["disks"], host_trees):
            target = f"{BY_ID}/google-{name}"
            if target in mounted:
                continue  # attached already (a retried update)
            os.makedirs(target, exist_ok=True)
            check(libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, target.encode(),
                               _MOVE_MOUNT_F_EMPTY_PATH), f"move_mount {target}")
            if read_only:
                subprocess.run(["mount", "-o", "remount,bind,ro", target], check=True)


def _enter(libc, pid: int) -> bool:
    try:
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    except OSError:
        return False
    try:
        if libc.setns(ns, _CLONE_NEWNS) != 0:
            return False
    finally:
        os.close(ns)
    os.chdir("/")
    return True


if __name__ == "__main__":
    _helper(json.loads(sys.argv[1]))
