"""The Cloud Storage JSON API calls the emulated gcsfuse makes, over plain HTTP.

gcsfuse (Go) does not use Google's Python client, and neither need its emulation: with the run
dir's metadata cache off, every path lookup of every host is one or two object GETs, and
google-cloud-storage spends about 0.64 ms of CPU on each (its retry wrappers, requests, auth,
resource objects) where http.client spends 0.13 (scripts/bench_gcsfuse.py). On two cores, where
the emulated hosts' mounts were a sixth of the test suite's CPU, that difference is minutes.

Only the calls gcsfuse needs: an object's metadata, a listing, a download, a multipart upload,
a delete and a copy (the JSON API's objects.get/list/insert/delete/copy,
https://cloud.google.com/storage/docs/json_api/v1/objects). Connection failures and 429/5xx
answers are retried with backoff for up to RETRY_DEADLINE_S, as gcsfuse retries them
(`--max-retry-sleep`, 30 s by default); anything else raises StorageError.
"""

from __future__ import annotations

import errno
import http.client
import json
import threading
import time
import urllib.parse
import uuid

RETRY_DEADLINE_S = 30.0
_RETRIED = {429, 500, 502, 503, 504}


def rfc3339_seconds(value: str) -> float:
    """A resource's `updated` ("2026-11-27T08:40:48.139Z", UTC) as seconds since the epoch."""
    from datetime import datetime, timezone

    head, _, fraction = value.rstrip("Z").partition(".")
    when = datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    return when + (float("0." + fraction) if fraction else 0.0)


class StorageError(OSError):
    """An answer gcsfuse cannot turn into a file system result (not a 404), or no answer
    (status 0). `message` and `reason` are the JSON API's error body's, as Google sends it:
    {"error": {"code": 403, "message": "...", "errors": [{"reason": "forbidden", ...}]}}
    (cloud.google.com/storage/docs/json_api/v1/status-codes). Its errno is EIO, what gcsfuse
    answers a file system call whose Cloud Storage request failed; fusepy returns it to the
    caller (an OSError without an errno would abort the whole mount)."""

    def __init__(self, what: str, status: int, body: bytes):
        self.status, self.message, self.reason = status, body.decode(errors="replace")[:300], ""
        try:
            error = json.loads(body)["error"]
            self.message = str(error.get("message", self.message))
            self.reason = str((error.get("errors") or [{}])[0].get("reason", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            pass
        super().__init__(errno.EIO, f"{what}: HTTP {status}: {self.message}" if status else f"{what}: {self.message}")


class BucketApi:
    """One bucket through the JSON API at `endpoint` (STORAGE_EMULATOR_HOST): a connection a
    thread, since fusepy serves file system calls from several."""

    def __init__(self, endpoint: str, bucket: str):
        parsed = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"http://{endpoint}")
        self._host, self._port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.bucket = bucket
        self._b = urllib.parse.quote(bucket, safe="")
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self._host, self._port, timeout=60)
        return conn

    def _call(self, method: str, path: str, body: bytes | None = None,
              headers: dict[str, str] | None = None, retry: bool = True) -> tuple[int, bytes]:
        deadline, pause = time.monotonic() + (RETRY_DEADLINE_S if retry else 0.0), 0.05
        while True:
            conn = self._connection()
            try:
                conn.request(method, path, body=body, headers=headers or {})
                response = conn.getresponse()
                data = response.read()
                if response.will_close:
                    conn.close()
            except (OSError, http.client.HTTPException) as exc:  # refused, reset, timed out
                conn.close()
                status, data = 0, f"{type(exc).__name__}: {exc}".encode()
            else:
                status = response.status
            if status not in _RETRIED and status != 0:
                return status, data
            if time.monotonic() + pause > deadline:
                raise StorageError(f"{method} {path}", status, data)
            time.sleep(pause)
            pause = min(pause * 2, 2.0)

    def _object_path(self, name: str, api: str = "/storage/v1") -> str:
        return f"{api}/b/{self._b}/o/{urllib.parse.quote(name, safe='')}"

    @staticmethod
    def _check(status: int, data: bytes, what: str) -> None:
        if status >= 300:
            raise StorageError(what, status, data)

    def exists(self) -> bool:
        """Whether the bucket exists: asked once, at mount, without retrying (a mount that
        cannot reach Cloud Storage fails at once, saying so)."""
        status, data = self._call("GET", f"/storage/v1/b/{self._b}?fields=name", retry=False)
        if status == 404:
            return False
        self._check(status, data, f"bucket {self.bucket}")
        return True

    def stat(self, name: str) -> dict | None:
        """The object's resource (size, updated, ...), or None if there is no such object."""
        status, data = self._call("GET", self._object_path(name) + "?projection=noAcl")
        if status == 404:
            return None
        self._check(status, data, f"stat {name}")
        return json.loads(data)

    def list(self, prefix: str, delimiter: str | None = None,
             limit: int | None = None) -> tuple[list[str], list[str]]:
        """Object names and (with a delimiter) sub-prefixes under `prefix`: every page, or the
        first page of at most `limit` objects (whether a directory holds anything)."""
        names: list[str] = []
        prefixes: list[str] = []
        token = None
        while True:
            query = {"prefix": prefix, "projection": "noAcl"}
            if delimiter:
                query["delimiter"] = delimiter
            if limit:
                query["maxResults"] = str(limit)
            if token:
                query["pageToken"] = token
            status, data = self._call("GET", f"/storage/v1/b/{self._b}/o?{urllib.parse.urlencode(query)}")
            self._check(status, data, f"list {prefix}")
            page = json.loads(data)
            names += [item["name"] for item in page.get("items", [])]
            prefixes += page.get("prefixes", [])
            token = page.get("nextPageToken")
            if limit:  # the server may ignore maxResults (gcp-storage-emulator does)
                return names[:limit], prefixes
            if not token:
                return names, prefixes

    def download(self, name: str) -> bytes | None:
        status, data = self._call("GET", self._object_path(name, "/download/storage/v1") + "?alt=media")
        if status == 404:
            return None
        self._check(status, data, f"download {name}")
        return data

    def upload(self, name: str, data: bytes) -> None:
        # A multipart upload (metadata, then media), as google-cloud-storage makes a small one:
        # gcp-storage-emulator refuses a media upload with an empty body (500), which a
        # directory marker is.
        boundary = uuid.uuid4().hex
        body = (f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n"
                f"{json.dumps({'name': name})}\r\n--{boundary}\r\n"
                "Content-Type: application/octet-stream\r\n\r\n").encode() + data + \
            f"\r\n--{boundary}--".encode()
        status, answer = self._call("POST", f"/upload/storage/v1/b/{self._b}/o?uploadType=multipart", body=body,
                                    headers={"Content-Type": f'multipart/related; boundary="{boundary}"'})
        self._check(status, answer, f"upload {name}")

    def delete(self, name: str) -> bool:
        """False if there was no such object."""
        status, data = self._call("DELETE", self._object_path(name))
        if status == 404:
            return False
        self._check(status, data, f"delete {name}")
        return True

    def copy(self, source: str, target: str) -> None:
        path = f"{self._object_path(source)}/copyTo/b/{self._b}/o/{urllib.parse.quote(target, safe='')}"
        status, data = self._call("POST", path, body=b"", headers={"Content-Type": "application/json"})
        self._check(status, data, f"copy {source} to {target}")
