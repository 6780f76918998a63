"""The emulator's Cloud Storage (gcp-storage-emulator) keeps its objects across a restart, in a
metadata file written compact: the library rewrites that file after every change, and with
`indent` json takes its pure-Python encoder (tpujob/emulator/server.py, _compact_storage_meta)."""

from __future__ import annotations

import json


def _client(srv):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="tpujob-local", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": srv.info["storage_endpoint"]})


def test_objects_outlive_a_restart_and_the_metadata_file_is_compact(tmp_path):
    from tpujob.emulator.server import EmulatorServer

    state = tmp_path / "emulator"
    with EmulatorServer(state, provisioning_delay=0.0) as srv:
        bucket = _client(srv).create_bucket("runs")
        bucket.blob("000001/heartbeat").upload_from_string(b'{"step": 3}')
        bucket.blob("000001/heartbeat").upload_from_string(b'{"step": 4}')  # replaced, as each second
    meta = (state / "storage" / ".cloudstorage" / ".meta").read_text()
    assert "\n" not in meta and "000001/heartbeat" in json.loads(meta)["objects"]["runs"]
    with EmulatorServer(state, provisioning_delay=0.0) as srv:  # a new port, the same directory
        assert _client(srv).bucket("runs").blob("000001/heartbeat").download_as_bytes() == b'{"step": 4}'
