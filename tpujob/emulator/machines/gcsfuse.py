"""The emulated hosts' `gcsfuse`: a real FUSE mount (fusepy) over the Cloud Storage JSON API
(gcs_json.BucketApi; STORAGE_EMULATOR_HOST says where it is).

A bind mount of the storage emulator's directory would not do: objects written there behind
the API's back are invisible to it. Every host mounts the bucket through the API, so a file
written by one host is an object the others and the orchestrator read back.

Accepts the gcsfuse v2 command line that the host scripts use: `gcsfuse [FLAGS] BUCKET DIR`,
with `-o ro`, `--implicit-dirs`, `--metadata-cache-ttl-secs N`, `--only-dir D`, `--foreground`;
the file cache flags (`--cache-dir DIR`, which must exist: mount_bucket.sh makes it, and
`--file-cache-max-size-mb N`, -1 or more) are checked but nothing is cached; cache sizing
flags (`--stat-cache-max-size-mb`, `--type-cache-max-size-mb`, `--kernel-list-cache-ttl-secs`,
`--uid`, `--gid`, `--file-mode`, `--dir-mode`) are accepted and ignored. Like gcsfuse it
returns once the mount is up and serves it from a background process. A mount that fails says
why on stderr, as gcsfuse does: the daemon's parent prints its sub-process's error last
(`daemonize.Run: readFromProcess: sub-process: ...`). What this emulation adds of its own is
the library it needs on the host: libfuse2, through fusepy.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

from tpujob.emulator.machines.gcs_json import rfc3339_seconds

# How the emulated gcsfuse runs (`python -m MODULE`): the hosts' shim execs it, and a
# preempted host's shutdown knows its mount daemons by it (host_processes.is_mount_daemon).
MODULE = "tpujob.emulator.machines.gcsfuse"
_IGNORED = ("--stat-cache-max-size-mb", "--type-cache-max-size-mb", "--kernel-list-cache-ttl-secs",
            "--uid", "--gid", "--file-mode", "--dir-mode", "--temp-dir", "--log-file")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gcsfuse")
    parser.add_argument("-o", action="append", default=[], dest="options")
    parser.add_argument("--implicit-dirs", action="store_true")
    parser.add_argument("--metadata-cache-ttl-secs", type=int, default=60)
    parser.add_argument("--only-dir", default="")
    parser.add_argument("--rename-dir-limit", type=int, default=0)
    parser.add_argument("--foreground", action="store_true")
    parser.add_argument("--cache-dir", default="")
    parser.add_argument("--file-cache-max-size-mb", type=int, default=-1)
    for flag in _IGNORED:
        parser.add_argument(flag)
    parser.add_argument("bucket")
    parser.add_argument("mount_point")
    return parser.parse_args(argv)


DIR_MARKER = ".tpujob-gcsfuse-dir"  # see BucketFs.mkdir

LIBFUSE_MISSING = ("gcsfuse: cannot mount: libfuse2 is not installed on this host (fusepy: Unable to "
                   "find libfuse); install it: apt-get install -y fuse libfuse2")
# gcsfuse's chain of errors when it cannot set the bucket up, as it prints it for a bucket that
# does not exist (GoogleCloudPlatform/gcsfuse PR #1754, "daemonized run - failed mount"):
# "... SetUpBucket: Error in iterating through objects: storage: bucket doesn't exist".
SET_UP_BUCKET = ("Error while mounting gcsfuse: mountWithArgs: mountWithStorageHandle: fs.NewServer: "
                 "create file system: SetUpBucket: Error in iterating through objects: ")
DAEMON_FAILED = "daemonize.Run: readFromProcess: sub-process: "  # gcsfuse issues #161, #767, #1754


def libfuse_path() -> str | None:
    """Where fusepy will load libfuse from, looked up as fusepy does (fuse.py: the
    FUSE_LIBRARY_PATH variable, else ctypes' find_library("fuse")); None: not installed."""
    import ctypes.util

    return os.environ.get("FUSE_LIBRARY_PATH") or ctypes.util.find_library("fuse")


class BucketFs:
    """fusepy Operations over one bucket (optionally one directory of it)."""

    def __init__(self, bucket, prefix: str, ttl: int, implicit_dirs: bool):
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.ttl = ttl
        self.implicit_dirs = implicit_dirs
        self._cache: dict[str, tuple[float, dict | None]] = {}
        self._open: dict[int, dict] = {}  # fh -> {"path", "data", "dirty"}
        self._fh = 0
        self._lock = threading.Lock()
        self._started = time.time()
        self.rename_dir_limit = 0

    # ---- names ------------------------------------------------------------------------------

    def _key(self, path: str) -> str:
        return self.prefix + path.lstrip("/")

    def _cached(self, path: str) -> dict | None | bool:
        if self.ttl == 0:
            return False
        hit = self._cache.get(path)
        if hit and (self.ttl < 0 or hit[0] > time.monotonic()):
            return hit[1]
        return False

    def _forget(self, path: str) -> None:
        self._cache.pop(path, None)
        self._cache.pop(os.path.dirname(path) or "/", None)

    # ---- metadata ---------------------------------------------------------------------------

    def getattr(self, path, fh=None):
        from fuse import FuseOSError

        with self._lock:
            for handle in self._open.values():
                if handle["path"] == path and handle["dirty"]:
                    return self._file_attr(len(handle["data"]), time.time())
        attr = self._cached(path)
        if attr is False:
            attr = self._lookup(path)
            if self.ttl:
                self._cache[path] = (time.monotonic() + self.ttl, attr)
        if attr is None:
            raise FuseOSError(errno.ENOENT)
        return attr

    def _lookup(self, path: str) -> dict | None:
        if path == "/":
            return self._dir_attr()
        key = self._key(path)
        found = self.bucket.stat(key)
        if found is not None:
            updated = found.get("updated")
            return self._file_attr(int(found.get("size") or 0),
                                   rfc3339_seconds(updated) if updated else self._started)
        if self.bucket.stat(key + "/" + DIR_MARKER) is not None:
            return self._dir_attr()
        if self.implicit_dirs and self.bucket.list(key + "/", limit=1)[0]:
            return self._dir_attr()
        return None

    def _dir_attr(self) -> dict:
        return {"st_mode": stat.S_IFDIR | 0o777, "st_nlink": 2, "st_size": 0,
                "st_mtime": self._started, "st_ctime": self._started, "st_atime": self._started,
                "st_uid": os.getuid(), "st_gid": os.getgid()}

    def _file_attr(self, size: int, mtime: float) -> dict:
        return {"st_mode": stat.S_IFREG | 0o666, "st_nlink": 1, "st_size": size,
                "st_mtime": mtime, "st_ctime": mtime, "st_atime": mtime,
                "st_uid": os.getuid(), "st_gid": os.getgid()}

    def readdir(self, path, fh):
        prefix = self._key(path).rstrip("/")
        prefix = prefix + "/" if prefix else ""
        names = {".", ".."}
        objects, prefixes = self.bucket.list(prefix, delimiter="/")
        for name in objects:
            name = name[len(prefix):]
            if name and name != DIR_MARKER:
                names.add(name)
        for sub in prefixes:
            names.add(sub[len(prefix):].rstrip("/"))
        return sorted(names)

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 30, "f_bfree": 1 << 30,
                "f_bavail": 1 << 30, "f_files": 1 << 20, "f_ffree": 1 << 20, "f_namemax": 1024}

    # ---- files ------------------------------------------------------------------------------

    def _new_handle(self, path: str, data: bytes, dirty: bool) -> int:
        with self._lock:
            self._fh += 1
            self._open[self._fh] = {"path": path, "data": bytearray(data), "dirty": dirty}
            return self._fh

    def create(self, path, mode, fi=None):
        self._forget(path)
        return self._new_handle(path, b"", True)

    def open(self, path, flags):
        from fuse import FuseOSError

        if flags & os.O_TRUNC:
            return self._new_handle(path, b"", True)
        data = self.bucket.download(self._key(path))
        if data is None:
            # Created and not yet uploaded (tensorstore opens its lock file a second time to
            # check it is still the same file): this mount already knows it.
            with self._lock:
                pending = next((h["data"] for h in self._open.values() if h["path"] == path), None)
            if pending is None:
                raise FuseOSError(errno.ENOENT)
            return self._new_handle(path, bytes(pending), False)
        return self._new_handle(path, data, False)

    def read(self, path, size, offset, fh):
        return bytes(self._open[fh]["data"][offset:offset + size])

    def write(self, path, data, offset, fh):
        handle = self._open[fh]
        buf = handle["data"]
        if offset > len(buf):
            buf.extend(b"\0" * (offset - len(buf)))
        buf[offset:offset + len(data)] = data
        handle["dirty"] = True
        return len(data)

    def truncate(self, path, length, fh=None):
        handles = [self._open[fh]] if fh in self._open else \
            [h for h in self._open.values() if h["path"] == path]
        if handles:
            for handle in handles:
                del handle["data"][length:]
                handle["data"].extend(b"\0" * (length - len(handle["data"])))
                handle["dirty"] = True
            return 0
        data = self.bucket.download(self._key(path)) or b""
        self._upload(path, (data[:length] + b"\0" * max(0, length - len(data))))
        return 0

    def flush(self, path, fh):
        handle = self._open.get(fh)
        if handle and handle["dirty"]:
            self._upload(path, bytes(handle["data"]))
            handle["dirty"] = False
        return 0

    fsync = lambda self, path, datasync, fh: self.flush(path, fh)  # noqa: E731

    def release(self, path, fh):
        self.flush(path, fh)
        with self._lock:
            self._open.pop(fh, None)
        return 0

    def _upload(self, path: str, data: bytes) -> None:
        self.bucket.upload(self._key(path), data)
        self._forget(path)

    def unlink(self, path):
        self.bucket.delete(self._key(path))
        self._forget(path)

    def mkdir(self, path, mode):
        # gcsfuse writes a `dir/` object, so every mount sees the new directory at once;
        # gcp-storage-emulator cannot hold `dir/` next to `dir/file` (it stores objects as
        # files), so the emulator writes a hidden marker object inside it instead.
        self.bucket.upload(self._key(path) + "/" + DIR_MARKER, b"")
        self._forget(path)

    def rmdir(self, path):
        from fuse import FuseOSError

        key = self._key(path) + "/"
        if any(name != key + DIR_MARKER for name in self.bucket.list(key, limit=2)[0]):
            raise FuseOSError(errno.ENOTEMPTY)
        self.unlink(path + "/" + DIR_MARKER)
        self._forget(path)

    def rename(self, old, new):
        from fuse import FuseOSError

        # A file renamed while still open for writing (tensorstore writes `X.__lock`, renames
        # it to X, then closes): like gcsfuse, sync it first so there is an object to move, and
        # let later writes through the handle go to the new name.
        with self._lock:
            handles = [h for h in self._open.values() if h["path"] == old]
        for handle in handles:
            if handle["dirty"]:
                self._upload(old, bytes(handle["data"]))
                handle["dirty"] = False
        if self.bucket.stat(self._key(old)) is not None:
            self.bucket.copy(self._key(old), self._key(new))
            self.bucket.delete(self._key(old))
        else:
            # A directory: like gcsfuse, a non-atomic copy-then-delete of every object under it,
            # allowed up to --rename-dir-limit objects (0, the default, refuses).
            prefix = self._key(old) + "/"
            names = self.bucket.list(prefix)[0]
            if not names:
                raise FuseOSError(errno.ENOENT)
            if len(names) > self.rename_dir_limit:
                raise FuseOSError(errno.EXDEV)
            target = self._key(new) + "/"
            for name in names:
                self.bucket.copy(name, target + name[len(prefix):])
            for name in names:
                self.bucket.delete(name)
        for handle in handles:
            handle["path"] = new
        self._forget(old)
        self._forget(new)

    def chmod(self, path, mode):
        return 0

    def chown(self, path, uid, gid):
        return 0

    def utimens(self, path, times=None):
        return 0


def open_bucket(bucket):
    """The bucket (a gcs_json.BucketApi), or exit with gcsfuse's own account of why it cannot be
    mounted."""
    from tpujob.emulator.machines.gcs_json import StorageError

    try:
        found = bucket.exists()
    except StorageError as exc:
        if not exc.status:  # the storage endpoint unreachable
            sys.exit(f"{SET_UP_BUCKET}{exc.message}")
        # 403 among them; Go's googleapi.Error reads like this
        sys.exit(f"{SET_UP_BUCKET}googleapi: Error {exc.status}: {exc.message}, {exc.reason or 'error'}")
    if not found:
        sys.exit(f"{SET_UP_BUCKET}storage: bucket doesn't exist")
    return bucket


def serve(args: argparse.Namespace) -> None:
    try:
        from fuse import FUSE, Operations
    except OSError as exc:  # FUSE_LIBRARY_PATH names a library that does not load
        sys.exit(f"gcsfuse: cannot load libfuse through fusepy ({exc}); install it: "
                 "apt-get install -y fuse libfuse2")
    from tpujob.emulator.machines.gcs_json import BucketApi

    endpoint = os.environ.get("STORAGE_EMULATOR_HOST")
    if not endpoint:  # the emulated gcsfuse reaches the emulator's storage only
        sys.exit(f"{SET_UP_BUCKET}STORAGE_EMULATOR_HOST is not set")
    bucket = open_bucket(BucketApi(endpoint, args.bucket))
    ops = type("GcsOperations", (BucketFs, Operations), {})(
        bucket, args.only_dir, args.metadata_cache_ttl_secs, args.implicit_dirs)
    ops.rename_dir_limit = args.rename_dir_limit
    # A preemption sends SIGTERM to every process of the host: the mount must outlive it, so
    # that the program's SIGTERM checkpoint reaches the bucket (SIGKILL once the host's other
    # processes are gone or the grace is over, or an unmount, ends it).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    options = {o for opt in args.options for o in opt.split(",") if o}
    try:
        FUSE(ops, args.mount_point, foreground=True, ro="ro" in options, allow_other=True,
             auto_cache=True, attr_timeout=max(0, args.metadata_cache_ttl_secs),
             entry_timeout=max(0, args.metadata_cache_ttl_secs), fsname=f"gcsfuse:{args.bucket}")
    except RuntimeError as exc:  # fuse_main failed; libfuse said why on stderr just before
        sys.exit(f"Error while mounting gcsfuse: mount: libfuse could not mount {args.mount_point} "
                 f"(fuse_main returned {exc})")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if libfuse_path() is None:
        sys.exit(LIBFUSE_MISSING)
    if args.cache_dir and not os.path.isdir(args.cache_dir):
        sys.exit(f"gcsfuse: --cache-dir {args.cache_dir}: no such directory")
    if args.file_cache_max_size_mb < -1:
        sys.exit("gcsfuse: --file-cache-max-size-mb must be -1 (no limit) or more")
    if args.foreground:
        serve(args)
        return
    # Like gcsfuse: return once mounted, keep serving from a process of its own.
    # Its output goes to a log, not to our stdout: an SSH session waits for every holder of it.
    # One log per mount: a failed mount's lines are its own, to be repeated below. In the
    # host's temporary directory (its own /tmp on an emulated host; TMPDIR where it is set).
    fd, log_path = tempfile.mkstemp(prefix=f"gcsfuse-{args.bucket}-", suffix=".log")
    with os.fdopen(fd, "ab") as log:
        child = subprocess.Popen([sys.executable, "-m", MODULE, "--foreground",
                                  *argv], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.ismount(args.mount_point):
            return
        if child.poll() is not None:
            sys.exit(daemon_failure(log_path, child.returncode))
        time.sleep(0.05)
    child.kill()
    sys.exit(f"gcsfuse: {args.mount_point} was not mounted within 30 s")


def daemon_failure(log_path: str, code: int) -> str:
    """What gcsfuse's parent prints when its daemon could not mount: a few lines the daemon
    wrote, then its error as `daemonize.Run: readFromProcess: sub-process: ERROR`."""
    with open(log_path, errors="replace") as log:
        lines = [line.strip() for line in log.read().splitlines() if line.strip()]
    os.unlink(log_path)   # the mount is not there: no log to keep for it
    last = lines[-1] if lines else f"exit status {code}"
    return "\n".join(lines[:-1][-2:] + [DAEMON_FAILED + last])


if __name__ == "__main__":
    main()
