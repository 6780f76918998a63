"""The namespace holder of one emulated host (slice.py): run by `unshare --mount
--propagation private`, it mounts the host's own directories over the machine's, gives the host
a /dev of its own with the emulated accelerator in it, says `ready`, then becomes
`sleep infinity`, whose life is the host's.

Arguments: STAGE DEVICE NKEEP KEPT... (SOURCE TARGET)... Kept paths (the interpreter, the tpujob
source) are bound onto the stage first, the host's own directories mounted over their targets,
then the kept paths moved back in place.

Why Python and mount(2), not a shell script of `mount` commands: the host's /dev is about a
hundred bind mounts, and a `mount` process for each (which also reads the namespace's whole
mount table) cost 0.2 s of CPU per host, 10 s for a 50-node recovery on two cores. Standard
library only, imported before anything is mounted over the interpreter's own directory.
"""

import ctypes
import os
import sys

MS_BIND, MS_MOVE, MS_REC = 4096, 8192, 16384
MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str, target: str, fstype: str | None = None, flags: int = 0, data: str | None = None) -> None:
    _check(_libc.mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                       data.encode() if data else None), f"mount {source} on {target}")


def umount(target: str, flags: int = 0) -> None:
    _check(_libc.umount2(target.encode(), flags), f"umount {target}")


def own_dev(stage: str) -> None:
    """A /dev of this host's own: a tmpfs with each entry of the machine's /dev bound into it.
    Made in the machine's /dev, the device's directory would show on every host and beside the
    machine's own processes (where any `find /proc/*/fd -lname '/dev/vfio/*'` would meet every
    emulated host's TPU users)."""
    mount("tpujob-stage", stage, "tmpfs")
    os.mkdir(f"{stage}/dev")
    mount("/dev", f"{stage}/dev", flags=MS_BIND | MS_REC)
    mount("tpujob-dev", "/dev", "tmpfs", data="mode=755")
    for name in sorted(os.listdir(f"{stage}/dev")):
        entry, target = f"{stage}/dev/{name}", f"/dev/{name}"
        # /dev/disk is each host's own (its disks, apt's tools: disks.py), never the
        # machine's bound in, where every host of every emulator would share what one was given.
        if name == "disk":
            continue
        if os.path.islink(entry):
            os.symlink(os.readlink(entry), target)
        elif os.path.isdir(entry):
            os.mkdir(target)
            mount(entry, target, flags=MS_BIND | MS_REC)
        else:
            open(target, "w").close()
            mount(entry, target, flags=MS_BIND)
    umount(f"{stage}/dev", MNT_DETACH)
    umount(stage)
    os.mkdir("/dev/disk")
    mount("tpujob-host", "/dev/disk", "tmpfs", data="mode=755")


def main(argv: list[str]) -> None:
    stage, device, nkeep = argv[0], argv[1], int(argv[2])
    kept, pairs = argv[3:3 + nkeep], argv[3 + nkeep:]
    mount("tpujob-stage", stage, "tmpfs")
    for i, path in enumerate(kept):
        os.mkdir(f"{stage}/{i}")
        mount(path, f"{stage}/{i}", flags=MS_BIND)
    for source, target in zip(pairs[::2], pairs[1::2]):
        mount(source, target, flags=MS_BIND)
    for i, path in enumerate(kept):
        os.makedirs(path, exist_ok=True)
        mount(f"{stage}/{i}", path, flags=MS_MOVE)
    umount(stage)
    directory = os.path.dirname(device)
    if not os.path.isdir(directory):
        own_dev(stage)
        os.mkdir(directory)
    # The emulated accelerator: a regular file of the host's own (on a tmpfs private to this
    # namespace), which its programs open and hold as they would /dev/vfio/N on a v5e+ VM.
    mount("tpujob-tpu", directory, "tmpfs", data="size=64k")
    open(device, "w").close()
    print("ready", flush=True)
    os.execvp("sleep", ["sleep", "infinity"])


if __name__ == "__main__":
    main(sys.argv[1:])
