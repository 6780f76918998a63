"""The emulated gcsfuse's file operations over an in-memory bucket: what tensorstore (Orbax's
checkpoint writer) does with its lock files must work, or multi-host checkpoints fail."""

from __future__ import annotations

import errno
import os

import pytest

from tpujob.emulator.machines.gcsfuse import BucketFs


class _Bucket:
    """What the emulated gcsfuse asks of Cloud Storage (gcs_json.BucketApi), in memory."""

    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def stat(self, name: str) -> dict | None:
        return {"name": name, "size": str(len(self.objects[name]))} if name in self.objects else None

    def list(self, prefix: str, delimiter: str | None = None, limit: int | None = None) -> tuple[list[str], list[str]]:
        assert delimiter is None, "not needed here"
        return sorted(n for n in self.objects if n.startswith(prefix))[:limit], []

    def download(self, name: str) -> bytes | None:
        return self.objects.get(name)

    def upload(self, name: str, data: bytes) -> None:
        self.objects[name] = bytes(data)

    def delete(self, name: str) -> bool:
        return self.objects.pop(name, None) is not None

    def copy(self, source: str, target: str) -> None:
        self.objects[target] = self.objects[source]


@pytest.fixture
def fs() -> BucketFs:
    return BucketFs(_Bucket(), "", ttl=0, implicit_dirs=True)


def test_a_file_renamed_while_open_for_writing_keeps_its_data(fs):
    # tensorstore: create X.__lock, write, rename it to X, then close.
    fh = fs.create("/ckpt/x.__lock", 0o644)
    fs.write("/ckpt/x.__lock", b"payload", 0, fh)
    fs.rename("/ckpt/x.__lock", "/ckpt/x")
    fs.release("/ckpt/x", fh)
    assert fs.bucket.objects == {"ckpt/x": b"payload"}
    with pytest.raises(OSError) as info:
        fs.getattr("/ckpt/x.__lock")
    assert info.value.errno == errno.ENOENT


def test_writes_after_the_rename_go_to_the_new_name(fs):
    fh = fs.create("/a.__lock", 0o644)
    fs.write("/a.__lock", b"one", 0, fh)
    fs.rename("/a.__lock", "/a")
    fs.write("/a", b"two", 3, fh)
    fs.release("/a", fh)
    assert fs.bucket.objects == {"a": b"onetwo"}


def test_a_file_created_and_not_yet_uploaded_can_be_opened_again(fs):
    # tensorstore opens its lock file a second time to check that it is still the same file.
    fh = fs.create("/d/y.__lock", 0o644)
    fs.write("/d/y.__lock", b"abc", 0, fh)
    again = fs.open("/d/y.__lock", os.O_WRONLY)
    assert again != fh and fs.read("/d/y.__lock", 10, 0, again) == b"abc"
    fs.release("/d/y.__lock", again)
    fs.release("/d/y.__lock", fh)
    assert fs.bucket.objects == {"d/y.__lock": b"abc"}
    with pytest.raises(OSError) as info:
        fs.open("/d/never", os.O_RDONLY)
    assert info.value.errno == errno.ENOENT
