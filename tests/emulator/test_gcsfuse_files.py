"""The emulated gcsfuse's file operations over an in-memory bucket: what tensorstore (Orbax's
checkpoint writer) does with its lock files must work, or multi-host checkpoints fail."""

from __future__ import annotations

import errno
import os

import pytest

from tpujob.emulator.gcsfuse import BucketFs


class _Blob:
    def __init__(self, bucket: _Bucket, name: str):
        self.bucket, self.name = bucket, name
        self.updated = None

    @property
    def size(self) -> int:
        return len(self.bucket.objects[self.name])

    def upload_from_string(self, data: bytes) -> None:
        self.bucket.objects[self.name] = bytes(data)

    def download_as_bytes(self) -> bytes:
        return self.bucket.objects[self.name]

    def delete(self) -> None:
        del self.bucket.objects[self.name]


class _Bucket:
    def __init__(self):
        self.objects: dict[str, bytes] = {}

    def blob(self, name: str) -> _Blob:
        return _Blob(self, name)

    def get_blob(self, name: str) -> _Blob | None:
        return _Blob(self, name) if name in self.objects else None

    def list_blobs(self, prefix: str = "", delimiter: str | None = None, max_results: int | None = None):
        names = sorted(n for n in self.objects if n.startswith(prefix))
        return [_Blob(self, n) for n in names][:max_results]

    def copy_blob(self, blob: _Blob, bucket: _Bucket, new_name: str) -> None:
        bucket.objects[new_name] = self.objects[blob.name]

    def delete_blob(self, name: str) -> None:
        del self.objects[name]


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
