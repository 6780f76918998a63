"""apt on an emulated TPU VM: the dpkg frontend lock held at first boot, and the package tools
the host scripts use to install gcsfuse, with nothing fetched from the internet.

- A fresh VM's `unattended-upgrades` "frequently holds the apt lock" (stanford-crfm/levanter
  infra/helpers/setup-tpu-vm.sh). `hold` runs on the host (in its mount namespace, so it dies
  with the host) under the name `unattended-upgr` (the kernel's 15-character comm, as apt names
  it) and holds an fcntl write lock on /var/lib/dpkg/lock-frontend (each host has its own
  /var/lib/dpkg: slice.py) for a few seconds after boot.
- `apt-get install` takes that lock as apt does (fcntl, F_SETLK); held, it fails as apt does,
  exit 100 and, on stderr (servo/ci-runners#57, magma/magma#13015 quote it):
    E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 2448 (unattended-upgr)
    E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?
  unless `-o DPkg::Lock::Timeout=SECONDS` is given (apt >= 1.9.11; apple/axlearn uses 60): then it
  waits up to that long. `apt-get update` takes the lists lock, not this one (the CircleCI quote
  in CircleCI-Public/server-terraform#279 shows an update going through and the install after
  it refused): it succeeds offline.
- `install gcsfuse` needs Google's repository in /etc/apt/sources.list.d (else apt's "E: Unable
  to locate package gcsfuse", exit 100) and puts the emulator's gcsfuse on PATH (disks.py).
- `curl` answers Google's apt key URL itself (the key's text is ours) and hands every other call
  to the real curl; `lsb_release -c -s` answers the TPU VM image's codename (Ubuntu 22.04, the
  tpu-ubuntu2204-base runtime: jammy).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import shutil
import struct
import sys
import time

LOCK = "/var/lib/dpkg/lock-frontend"
HOLDER_NAME = b"unattended-upgr"
APT_KEY_URL = "https://packages.cloud.google.com/apt/doc/apt-key.gpg"
CODENAME = "jammy"
GCSFUSE_PACKAGE = ".tpujob-gcsfuse"  # the gcsfuse shim apt installs, beside the tools
_PR_SET_NAME = 15


def hold(seconds: float) -> None:
    """Hold the dpkg frontend lock for `seconds`, named as unattended-upgrades is."""
    ctypes.CDLL(None).prctl(_PR_SET_NAME, HOLDER_NAME, 0, 0, 0)
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("held", flush=True)
        time.sleep(seconds)


def _holder(fd: int) -> int:
    """The pid holding a write lock on `fd` (F_GETLK), 0 if none."""
    query = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0)
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    kind, _, _, _, pid = struct.unpack("hhqqi", answer)
    return pid if kind != fcntl.F_UNLCK else 0


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return "?"


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    options, rest, i = {}, [], 0
    while i < len(args):
        if args[i] == "-o" and i + 1 < len(args):
            key, _, value = args[i + 1].partition("=")
            options[key.lower()] = value
            i += 2
            continue
        if args[i].startswith("-o") and "=" in args[i]:
            key, _, value = args[i][2:].partition("=")
            options[key.lower()] = value
        elif not args[i].startswith("-"):
            rest.append(args[i])
        i += 1
    return options, rest


def _lock_frontend(timeout: float):
    """The lock, open; waits up to `timeout` s as apt does; None (apt's words said) if held."""
    os.makedirs(os.path.dirname(LOCK), exist_ok=True)
    lock = open(LOCK, "a")
    deadline, said = time.monotonic() + timeout, False
    while True:
        try:
            fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            pid = _holder(lock.fileno())
            held = f"Could not get lock {LOCK}. It is held by process {pid} ({_name(pid)})"
            if time.monotonic() >= deadline:
                print(f"E: {held}\nE: Unable to acquire the dpkg frontend lock ({LOCK}), is another "
                      "process using it?", file=sys.stderr)
                lock.close()
                return None
            if not said:
                print(f"Waiting for cache lock: {held}...", flush=True)
                said = True
            time.sleep(0.2)


def apt_get(args: list[str]) -> int:
    options, words = _options(args)
    verb, packages = (words[0], words[1:]) if words else ("", [])
    if verb == "update":
        print("Reading package lists... Done")
        return 0
    if verb != "install":
        print(f"E: the emulated apt-get does not do {verb or 'that'!r}", file=sys.stderr)
        return 100
    lock = _lock_frontend(float(options.get("dpkg::lock::timeout", "0") or 0))
    if lock is None:
        return 100
    with lock:
        for package in packages:
            if package != "gcsfuse" or not _google_repository():
                print(f"E: Unable to locate package {package}", file=sys.stderr)
                return 100
        bin_dir = os.path.dirname(os.path.abspath(sys.argv[0]))
        for package in packages:
            shutil.copy(os.path.join(bin_dir, GCSFUSE_PACKAGE), os.path.join(bin_dir, package))
            os.chmod(os.path.join(bin_dir, package), 0o755)
            print(f"Setting up {package} ...")
    return 0


def _google_repository() -> bool:
    where = "/etc/apt/sources.list.d"
    try:
        names = os.listdir(where)
    except OSError:
        return False
    for name in names:
        with open(os.path.join(where, name)) as listed:
            if "packages.cloud.google.com/apt gcsfuse-" in listed.read():
                return True
    return False


def curl(args: list[str]) -> int:
    if APT_KEY_URL in args:
        sys.stdout.write("-----BEGIN PGP PUBLIC KEY BLOCK-----\n(the emulator's stand-in for Google's apt key)\n"
                         "-----END PGP PUBLIC KEY BLOCK-----\n")
        return 0
    here = os.path.dirname(os.path.abspath(sys.argv[0]))
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if os.path.abspath(p) != here)
    real = shutil.which("curl", path=path)
    if real is None:
        print("curl: command not found", file=sys.stderr)
        return 127
    os.execv(real, [real, *args])
    return 127


def lsb_release(args: list[str]) -> int:
    print(CODENAME if "-c" in args or "--codename" in args else "Ubuntu 22.04 LTS")
    return 0


def shim(tool: str) -> str:
    """The script put on a host's PATH as `tool`; $0 is where it lies (apt installs beside it)."""
    return f'#!/bin/sh\nexec {sys.executable} -m tpujob.emulator.machines.apt {tool} "$0" "$@"\n'


def main(argv: list[str]) -> int:
    tool, where, args = argv[0], argv[1], argv[2:]
    sys.argv[0] = where
    if tool == "hold":
        hold(float(where))
        return 0
    return {"apt-get": apt_get, "curl": curl, "lsb_release": lsb_release}[tool](args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
