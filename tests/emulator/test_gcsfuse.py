"""The emulated hosts' gcsfuse (tpujob.emulator.machines.gcsfuse): its command line, and a real FUSE
mount over the emulator's Cloud Storage, consistent with what the API returns."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tpujob.emulator.machines import gcsfuse
from tpujob.emulator.server import EmulatorServer


@pytest.fixture(scope="module")
def gcs_server(tmp_path_factory):
    with EmulatorServer(tmp_path_factory.mktemp("emulator"), provisioning_delay=0.0) as srv:
        yield srv


@pytest.fixture
def client(gcs_server, monkeypatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server.info["storage_endpoint"])
    return storage.Client(project="tpujob-local", credentials=AnonymousCredentials())


def test_the_command_line_mount_bucket_sh_renders_is_accepted():
    args = gcsfuse.parse_args(["--implicit-dirs", "--metadata-cache-ttl-secs", "0", "-o", "ro",
                               "--only-dir", "ds", "--cache-dir", "/tmp/c",
                               "--file-cache-max-size-mb", "1024", "--rename-dir-limit", "100000",
                               "bucket", "/mnt/b"])
    assert (args.bucket, args.mount_point, args.options, args.only_dir) == ("bucket", "/mnt/b", ["ro"], "ds")
    assert (args.metadata_cache_ttl_secs, args.cache_dir, args.file_cache_max_size_mb) == (0, "/tmp/c", 1024)
    with pytest.raises(SystemExit):
        gcsfuse.parse_args(["--file-cache-max-size-mb", "lots", "bucket", "/mnt/b"])


def test_bucket_fs_reads_and_writes_objects(client, gcs_server):
    from tpujob.emulator.machines.gcs_json import BucketApi

    bucket = client.create_bucket("fs-unit")
    fs = gcsfuse.BucketFs(BucketApi(gcs_server.info["storage_endpoint"], "fs-unit"), "data", ttl=0,
                          implicit_dirs=True)
    fh = fs.create("/a/b.txt", 0o644)
    fs.write("/a/b.txt", b"hello", 0, fh)
    fs.release("/a/b.txt", fh)
    assert bucket.blob("data/a/b.txt").download_as_bytes() == b"hello"
    assert "a" in fs.readdir("/", None) and fs.readdir("/a", None) == [".", "..", "b.txt"]
    assert fs.getattr("/a/b.txt")["st_size"] == 5
    fs.rename("/a/b.txt", "/a/c.txt")
    assert [b.name for b in client.list_blobs("fs-unit")] == ["data/a/c.txt"]
    bucket.blob("data/a/d.txt").upload_from_string(b"from the API")
    fh = fs.open("/a/d.txt", os.O_RDONLY)
    assert fs.read("/a/d.txt", 100, 0, fh) == b"from the API"


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="FUSE needs root")
def test_a_real_mount_is_the_bucket(gcs_server, client, tmp_path):
    client.create_bucket("fs-mount")
    mount, cache = tmp_path / "mnt", tmp_path / "cache"
    mount.mkdir()
    logs = tmp_path / "tmp"  # not this machine's /tmp: the daemon's log is left there
    logs.mkdir()
    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_server.info["storage_endpoint"], "TMPDIR": str(logs)}
    run = lambda *a: subprocess.run([sys.executable, "-m", "tpujob.emulator.machines.gcsfuse", *a],  # noqa: E731
                                    env=env, capture_output=True, text=True, timeout=60)
    refused = run("--cache-dir", str(cache), "fs-mount", str(mount))
    assert refused.returncode != 0 and "no such directory" in refused.stderr
    cache.mkdir()
    done = run("--implicit-dirs", "--metadata-cache-ttl-secs", "0", "--cache-dir", str(cache),
               "--file-cache-max-size-mb", "64", "fs-mount", str(mount))
    assert done.returncode == 0, done.stderr
    assert [p.name.startswith("gcsfuse-fs-mount-") for p in logs.iterdir()] == [True]
    try:
        assert os.path.ismount(mount)
        (mount / "ckpt").mkdir()
        (mount / "ckpt" / "step-1").write_text("weights")
        assert client.bucket("fs-mount").blob("ckpt/step-1").download_as_text() == "weights"
        client.bucket("fs-mount").blob("ckpt/step-2").upload_from_string("more")
        assert sorted(os.listdir(mount / "ckpt")) == ["step-1", "step-2"]
        assert (mount / "ckpt" / "step-2").read_text() == "more"
    finally:
        subprocess.run(["fusermount", "-u", str(mount)], check=False)
        if os.path.ismount(mount):
            subprocess.run(["umount", "-l", str(mount)], check=False)
    assert not os.path.ismount(mount)


# ---- a mount that fails says why ------------------------------------------------------------

NO_BUCKET = ("daemonize.Run: readFromProcess: sub-process: Error while mounting gcsfuse: mountWithArgs: "
             "mountWithStorageHandle: fs.NewServer: create file system: SetUpBucket: Error in iterating "
             "through objects: storage: bucket doesn't exist")
needs_libfuse = pytest.mark.skipif(gcsfuse.libfuse_path() is None, reason="libfuse2 is not installed")


def test_without_libfuse_the_mount_names_the_package_to_install(monkeypatch, tmp_path):
    import ctypes.util

    found = ctypes.util.find_library
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None if name == "fuse" else found(name))
    monkeypatch.delenv("FUSE_LIBRARY_PATH", raising=False)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")   # never reached
    with pytest.raises(SystemExit) as exited:
        gcsfuse.main(["some-bucket", str(tmp_path)])
    said = str(exited.value.code)
    assert "libfuse2 is not installed" in said and "apt-get install -y fuse libfuse2" in said
    assert not os.path.ismount(tmp_path)


# Cloud Storage's answer to a caller without storage.objects.list, in the JSON API's error shape
# (cloud.google.com/storage/docs/json_api/v1/status-codes: code, message, errors[].reason).
DENIED = "tpu@p.iam.gserviceaccount.com does not have storage.objects.list access"
FORBIDDEN = {"error": {"code": 403, "message": DENIED,
                       "errors": [{"message": DENIED, "domain": "global", "reason": "forbidden"}]}}


@pytest.fixture
def refusing_storage(stand_in):
    """A storage endpoint on 127.0.0.1 that answers every request 403, as above."""
    import json

    return stand_in(lambda request: (403, json.dumps(FORBIDDEN).encode(), {"Content-Type": "application/json"})).url


def test_a_forbidden_bucket_reads_as_googles_refusal(refusing_storage):
    from tpujob.emulator.machines.gcs_json import BucketApi

    with pytest.raises(SystemExit) as exited:
        gcsfuse.open_bucket(BucketApi(refusing_storage, "locked"))
    assert str(exited.value.code).endswith(
        "SetUpBucket: Error in iterating through objects: googleapi: Error 403: "
        "tpu@p.iam.gserviceaccount.com does not have storage.objects.list access, forbidden")


def test_an_unreachable_storage_endpoint_fails_the_mount_at_once_saying_so():
    from tpujob.emulator.machines.gcs_json import BucketApi

    with pytest.raises(SystemExit) as exited:
        gcsfuse.open_bucket(BucketApi("http://127.0.0.1:9", "some-bucket"))   # nothing listens on port 9
    assert "SetUpBucket: Error in iterating through objects: ConnectionRefusedError" in str(exited.value.code)


@needs_libfuse
def test_a_missing_bucket_is_reported_as_gcsfuse_reports_it(gcs_server, tmp_path):
    before = set(os.listdir("/tmp"))
    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_server.info["storage_endpoint"]}
    done = subprocess.run([sys.executable, "-m", "tpujob.emulator.machines.gcsfuse", "no-such-bucket", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == NO_BUCKET
    assert not [n for n in set(os.listdir("/tmp")) - before if n.startswith("gcsfuse-no-such-bucket")]


@needs_libfuse
def test_mount_bucket_sh_repeats_what_gcsfuse_said_and_names_the_cause(gcs_server, tmp_path):
    from tpujob.emulator.apis.compute.api import gcsfuse_shim
    from tpujob.hosts.scripts import render

    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "gcsfuse").write_text(gcsfuse_shim(gcs_server.info["storage_endpoint"]))
    (tools / "gcsfuse").chmod(0o755)
    mount = tmp_path / "mnt"
    script = render("mount_bucket.sh", bucket="gone-bucket", mount_point=mount, read_only=0, metadata_ttl=0,
                    only_dir="", cache_dir="", file_cache_mb="")
    done = subprocess.run(["bash", "-c", script], env={**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-3:] == [
        NO_BUCKET, "tpujob: bucket gs://gone-bucket does not exist (or this project cannot see it)",
        f"tpujob: gcsfuse could not mount gs://gone-bucket at {mount} (exit 1)"]
    assert not os.path.ismount(mount)


def test_a_libfuse_that_does_not_load_is_named_with_its_package(gcs_server, tmp_path):
    missing = tmp_path / "libfuse.so.2"   # fusepy's own variable, naming a library that is not there
    env = {**os.environ, "STORAGE_EMULATOR_HOST": gcs_server.info["storage_endpoint"],
           "FUSE_LIBRARY_PATH": str(missing)}
    done = subprocess.run([sys.executable, "-m", "tpujob.emulator.machines.gcsfuse", "any-bucket", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("daemonize.Run: readFromProcess: sub-process: gcsfuse: cannot load libfuse "
                           f"through fusepy ({missing}: cannot open shared object file")
    assert last.endswith("install it: apt-get install -y fuse libfuse2")


def test_the_json_api_client_round_trips_any_bytes_and_lists_every_object(client, gcs_server):
    import time

    from tpujob.emulator.machines.gcs_json import BucketApi, rfc3339_seconds

    client.create_bucket("fs-bytes")
    api = BucketApi(gcs_server.info["storage_endpoint"], "fs-bytes")
    data = bytes(range(256)) * 4 + b"\r\n--\r\n\n\r" + b"\0" * 10   # a checkpoint shard is any bytes
    api.upload("d/x.bin", data)
    api.upload("d/empty", b"")
    assert api.download("d/x.bin") == data and api.download("d/empty") == b""
    assert client.bucket("fs-bytes").blob("d/x.bin").download_as_bytes() == data
    assert api.stat("d/x.bin")["size"] == str(len(data)) and api.stat("d/none") is None
    assert abs(rfc3339_seconds(api.stat("d/x.bin")["updated"]) - time.time()) < 60
    assert api.list("d/") == (["d/empty", "d/x.bin"], [])
    assert api.list("", delimiter="/") == ([], ["d/"])
    assert api.list("d/", limit=1) == (["d/empty"], [])
    api.copy("d/x.bin", "e/y.bin")
    assert api.delete("d/x.bin") and not api.delete("d/x.bin")
    assert api.download("e/y.bin") == data and api.download("d/x.bin") is None


def test_a_failed_storage_request_is_eio_to_the_caller_not_the_end_of_the_mount(refusing_storage):
    import errno

    from tpujob.emulator.machines.gcs_json import BucketApi

    fs = gcsfuse.BucketFs(BucketApi(refusing_storage, "locked"), "", ttl=0, implicit_dirs=True)
    with pytest.raises(OSError) as refused:
        fs.getattr("/anything")
    assert refused.value.errno == errno.EIO and "HTTP 403" in str(refused.value)
