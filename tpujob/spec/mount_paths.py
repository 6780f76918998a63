"""Where a spec may mount a disk or a bucket on the hosts: an absolute directory of its own,
clear of the system's directories and of the run dir's bucket (tpujob.names.RUN_DIR_MOUNT)."""

from __future__ import annotations

import posixpath

from tpujob.names import RUN_DIR_MOUNT  # where the run dir's bucket is mounted: no spec mount may take it
from tpujob.spec.lines import dotted, field_error

# Mounting at one of these, or above one (`/`), would hide what the host needs to boot, log in
# or run the program (the interpreter, home, /tmp's libtpu lockfile).
SYSTEM_DIRS = frozenset({
    "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
    "/mnt", "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr",
    "/var",
})
# Not even below these: kernel and boot filesystems, and the system's own programs.
NO_MOUNTS_INSIDE = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32",
                    "/proc", "/run", "/sbin", "/sys", "/usr")


def _inside(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip("/") + "/")


def check_mount(path: str, where: tuple, seen: dict[str, tuple], lines) -> None:
    if not path.startswith("/"):
        raise field_error(f"mount path must be absolute, not {path!r}", where, lines)
    # normpath keeps a leading '//' (POSIX leaves it implementation-defined); Linux reads it as '/'.
    norm = "/" + posixpath.normpath(path).lstrip("/")
    if norm == "/" or ".." in path.split("/"):
        raise field_error(f"mount path {path!r} is not a usable directory", where, lines)
    covered = sorted(d for d in SYSTEM_DIRS if d == norm or _inside(d, norm))
    if covered:
        raise field_error(f"mount path {norm!r} would hide the system directory {covered[0]}; "
                          "mount under /mnt/NAME (or a directory of your own)", where, lines)
    system = next((d for d in NO_MOUNTS_INSIDE if _inside(norm, d)), None)
    if system:
        raise field_error(f"mount path {norm!r} is inside the system directory {system}; "
                          "mount under /mnt/NAME", where, lines)
    if norm == RUN_DIR_MOUNT or _inside(norm, RUN_DIR_MOUNT) or _inside(RUN_DIR_MOUNT, norm):
        raise field_error(f"mount path {norm!r} collides with {RUN_DIR_MOUNT}, where tpujob mounts "
                          "the run dir's bucket", where, lines)
    if norm in seen:
        raise field_error(f"mount path {norm!r} is already used by {dotted(seen[norm])}", where, lines)
    # Nested mounts depend on their order and break on a read-only parent (no mount point can
    # be made on it); one would also hide the other's files on an unmount/remount.
    for other, other_where in seen.items():
        if _inside(norm, other):
            raise field_error(f"mount path {norm!r} is nested inside {dotted(other_where)} ({other!r}); "
                              "give every disk and bucket a directory of its own", where, lines)
        if _inside(other, norm):
            raise field_error(f"mount path {norm!r} would contain {dotted(other_where)} ({other!r}); "
                              "give every disk and bucket a directory of its own", where, lines)
    seen[norm] = where


def check_only_dir(only_dir: str | None, where: tuple, lines) -> None:
    """gcsfuse --only-dir is a prefix inside the bucket: relative, and never climbing out."""
    if only_dir is None:
        return
    if only_dir.startswith("/") or ".." in only_dir.split("/") or not only_dir.strip("/"):
        raise field_error(f"only_dir must be a directory inside the bucket like 'data/train', not "
                          f"{only_dir!r} (no leading '/', no '..')", where, lines)
