"""Upload a local directory to every host: one tar.gz over SFTP per host, skipped if unchanged.

The content hash (paths, modes, bytes, link targets) is kept on each host next to the files
(`.tpujob-sync-hash`); a host whose hash matches is not sent anything. The root `.gitignore`
is honoured for its simple forms (globs, `dir/`, `/anchored`); negations and nested
.gitignore files are not. `.git` itself is never sent.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import pathlib
import tarfile
import tempfile
import threading
from typing import Callable

from tpujob.errors import UsageError
from tpujob.hosts.fanout import Host, HostGroup, HostResult, Progress
from tpujob.hosts.scripts import as_command, render

HASH_FILE = ".tpujob-sync-hash"


def _ignore_rules(root: pathlib.Path) -> list[tuple[str, bool, bool]]:
    """(pattern, anchored, directories only) per simple .gitignore line."""
    path = root / ".gitignore"
    rules = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append((line.lstrip("/"), anchored, dir_only))
    return rules


def _ignored(rel: str, is_dir: bool, rules) -> bool:
    name = rel.rsplit("/", 1)[-1]
    for pattern, anchored, dir_only in rules:
        if dir_only and not is_dir:
            continue
        if fnmatch.fnmatchcase(rel if anchored else name, pattern):
            return True
    return False


def collect(root: pathlib.Path) -> list[str]:
    """The relative paths that would be sent, sorted; ignored directories are not entered."""
    root = pathlib.Path(root)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory")
    rules = _ignore_rules(root)
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        base = pathlib.Path(dirpath).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        keep = []
        for d in sorted(dirnames):
            rel = prefix + d
            if d == ".git" or _ignored(rel, True, rules):
                continue
            if os.path.islink(os.path.join(dirpath, d)):   # sent as a link, not followed
                found.append(rel)
            else:
                keep.append(d)
        dirnames[:] = keep
        found += [prefix + f for f in filenames if not _ignored(prefix + f, False, rules)]
    return sorted(found)


def pack(root: pathlib.Path, archive) -> str:
    """Write the tar.gz of `root` into the open binary file `archive`; return its hash."""
    root = pathlib.Path(root)
    digest = hashlib.sha256()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for rel in collect(root):
            path = root / rel
            st = path.lstat()
            digest.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode() + b"\0")
            else:
                digest.update(hashlib.sha256(path.read_bytes()).digest())
            tar.add(path, arcname=rel, recursive=False)
    return digest.hexdigest()


def sync(group: HostGroup, local_dir: pathlib.Path, remote_dir: str, *,
         progress: Callable[[Progress], None] | None = None,
         timeout: float = 600) -> list[HostResult]:
    """Make `remote_dir` on every host hold exactly `local_dir`'s files.

    Each result's output is "unchanged" or "updated". `remote_dir` may be relative to the
    home directory."""
    with tempfile.TemporaryFile() as archive:
        digest = pack(local_dir, archive)
        lock = threading.Lock()   # the workers share one file handle to read from

        def one(host: Host, cancel: threading.Event) -> HostResult:
            sftp = group.client(host).open_sftp()
            try:
                if _remote_hash(sftp, remote_dir) == digest:
                    return HostResult(host.index, exit_code=0, output="unchanged")
                upload = f"{remote_dir.rstrip('/')}.tpujob-upload.tar.gz"
                parent = os.path.dirname(upload.rstrip("/"))
                if parent:
                    _makedirs(sftp, parent)
                with sftp.open(upload, "wb") as remote:
                    remote.set_pipelined(True)
                    offset = 0
                    while True:
                        with lock:
                            archive.seek(offset)
                            chunk = archive.read(1 << 20)
                        if not chunk:
                            break
                        remote.write(chunk)
                        offset += len(chunk)
            finally:
                sftp.close()
            script = render("unpack.sh", dest=remote_dir, archive=upload, digest=digest)
            return group.execute(host, as_command(script, "tpujob-unpack"), timeout=timeout,
                                 cancel=cancel)

        return group.map(one, progress=progress)


def _remote_hash(sftp, remote_dir: str) -> str:
    try:
        with sftp.open(f"{remote_dir.rstrip('/')}/{HASH_FILE}", "r") as f:
            return f.read().decode().strip()
    except OSError:
        return ""


def _makedirs(sftp, path: str) -> None:
    parts = path.strip("/").split("/")
    current = "/" if path.startswith("/") else ""
    for part in parts:
        current = f"{current}{part}/"
        try:
            sftp.stat(current)
        except OSError:
            sftp.mkdir(current)
