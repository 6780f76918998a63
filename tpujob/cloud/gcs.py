"""Cloud Storage through google-cloud-storage: the jobs' run dirs and the buckets' locations.

The same client talks to Google and to the emulator's Cloud Storage (gcp-storage-emulator).
Import lazily: google-cloud-storage costs about 0.5 s to import.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from google.api_core import exceptions as gexc
from google.auth import exceptions as auth_exc
from google.cloud.storage.retry import DEFAULT_RETRY

from tpujob.cloud.api_calls import classify, credentials_unusable, describe
from tpujob.errors import CloudError
from tpujob.runtime import contract  # pure: the file names the orchestrator reads

# A run dir is read on every sweep and by `show`: a few seconds of retries, not the client's
# default two minutes, so one unreachable bucket does not stall either.
_READ_TIMEOUT = 10
_READ_RETRY = DEFAULT_RETRY.with_timeout(20) if hasattr(DEFAULT_RETRY, "with_timeout") \
    else DEFAULT_RETRY.with_deadline(20)

HEARTBEAT, STATUS = contract.HEARTBEAT_FILE, contract.STATUS_FILE


@dataclass(frozen=True)
class RunFiles:
    """What one run dir holds, as the orchestrator needs it: the objects' times (the storage
    service's clock), and status.json read by the contract's one reader."""
    status: contract.Status | None = None  # when written after `since`
    status_updated: float | None = None
    heartbeat_updated: float | None = None
    status_error: str = ""  # status.json exists but is not a status: why


class Gcs:
    """Run dirs and bucket metadata; `api_calls` counts every request sent."""

    def __init__(self, client: Any):
        self.client = client
        self.api_calls = 0
        self._offset: float | None = None  # the service's clock minus this node's

    def now(self) -> float:
        """The storage service's time, on which an object's `updated` is written: this node's
        clock plus the service's offset, measured once per Gcs from the Date header of one HEAD
        of its endpoint (any answer of an origin server with a clock carries one: RFC 9110
        section 6.6.1). A heartbeat's age is judged on it, whatever this node's clock says;
        this node's own clock when the service gives no date."""
        from tpujob.clocks import date_header_offset, node_time

        if self._offset is None:
            before = node_time()
            self.api_calls += 1
            try:
                answer = self.client._http.request("HEAD", f"{self.client.api_endpoint}/storage/v1/b",
                                                   timeout=_READ_TIMEOUT)
                date = answer.headers.get("Date")
            except Exception:  # noqa: BLE001 - no date: this node's clock, as before
                date = None
            self._offset = date_header_offset(date, before, node_time()) or 0.0
        return node_time() + self._offset

    def read_run_dirs(self, wanted: dict[tuple[str, str], float]) -> dict[tuple[str, str], RunFiles]:
        """{(bucket, run dir prefix): since} -> what each run dir holds.

        One list per (bucket, parent prefix) for all the run dirs under it (jobs of one spec
        family share gs://B/runs/), matching only the heartbeat and status.json of each job dir
        (`matchGlob`: checkpoints are not listed). status.json is downloaded only when written
        after `since` (the attempt's start): one earlier attempt's verdict is not this one's."""
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for bucket, prefix in wanted:
            parent = prefix.rsplit("/", 1)[0] + "/" if "/" in prefix else ""
            groups[(bucket, parent)].append(prefix)
        out: dict[tuple[str, str], RunFiles] = {}
        for (bucket, parent), prefixes in sorted(groups.items()):
            blobs = self._call(f"listing gs://{bucket}/{parent}", self._run_files, bucket, parent)
            by_name = {b.name: b for b in blobs}
            for prefix in prefixes:
                out[(bucket, prefix)] = self._files(by_name, prefix, wanted[(bucket, prefix)])
        return out

    def _run_files(self, bucket: str, parent: str) -> list[Any]:
        """The heartbeat and status.json objects of every job dir under `parent`."""
        return list(self.client.list_blobs(bucket, prefix=parent, match_glob=f"{parent}*/{{{HEARTBEAT},{STATUS}}}",
                                           retry=_READ_RETRY, timeout=_READ_TIMEOUT))

    def _files(self, by_name: dict[str, Any], prefix: str, since: float) -> RunFiles:
        heartbeat, status = by_name.get(f"{prefix}/{HEARTBEAT}"), by_name.get(f"{prefix}/{STATUS}")
        files = RunFiles(heartbeat_updated=_time(heartbeat))
        if status is None or (_time(status) or 0.0) < since:
            return files
        # A fresh handle at the listed generation: its URL is built from the client's endpoint,
        # not from the listing's mediaLink (which an emulator restarted on another port outlives).
        fresh = self.client.bucket(status.bucket.name).blob(status.name, generation=status.generation)
        raw = self._call(f"reading gs://{status.bucket.name}/{status.name}",
                         lambda: fresh.download_as_bytes(retry=_READ_RETRY, timeout=_READ_TIMEOUT))
        try:
            content = contract.parse_status(raw)
        except ValueError as exc:
            return RunFiles(heartbeat_updated=files.heartbeat_updated, status_updated=_time(status),
                            status_error=str(exc))
        return RunFiles(status=content, status_updated=_time(status),
                        heartbeat_updated=files.heartbeat_updated)

    def read_tail(self, bucket: str, name: str, max_bytes: int) -> tuple[bytes, bool] | None:
        """(the object's last `max_bytes` bytes, whether that left its start out); None when
        the object is absent."""
        blob = self._call(f"getting gs://{bucket}/{name}", lambda: self.client.bucket(bucket).get_blob(
            name, retry=_READ_RETRY, timeout=_READ_TIMEOUT))
        if blob is None:
            return None
        start = max(0, (blob.size or 0) - max_bytes)
        data = self._call(f"reading gs://{bucket}/{name}", lambda: blob.download_as_bytes(
            start=start, retry=_READ_RETRY, timeout=_READ_TIMEOUT))
        return data, start > 0

    def list_objects(self, bucket: str, prefix: str) -> list[tuple[str, int, float | None]]:
        """[(name, bytes, updated)] of the objects under `prefix` (one list call per page)."""
        blobs = self._call(f"listing gs://{bucket}/{prefix}", lambda: list(self.client.list_blobs(
            bucket, prefix=prefix, retry=_READ_RETRY, timeout=_READ_TIMEOUT)))
        return [(b.name, b.size or 0, _time(b)) for b in blobs]

    def delete_object(self, bucket: str, name: str) -> None:
        self._call(f"deleting gs://{bucket}/{name}", lambda: self.client.bucket(bucket).delete_blob(
            name, timeout=_READ_TIMEOUT))

    def bucket_location(self, bucket: str) -> tuple[str, list[str]]:
        """(location, data locations of a custom dual-region) of the bucket, upper case."""
        found = self._call(f"getting bucket {bucket}", self.client.get_bucket, bucket)
        return (found.location or "").upper(), [d.upper() for d in (found.data_locations or [])]

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        self.api_calls += 1
        try:
            return fn(*args)
        except gexc.GoogleAPICallError as err:
            raise classify(what, err, "storage.googleapis.com") from err
        except (auth_exc.RefreshError, auth_exc.DefaultCredentialsError) as err:  # no token to send
            raise credentials_unusable(what, err) from err
        except gexc.RetryError as err:  # retried to the deadline: say what the last try met
            if isinstance(err.cause, (auth_exc.RefreshError, auth_exc.DefaultCredentialsError)):
                raise credentials_unusable(what, err.cause) from err
            raise CloudError(f"{what}: {describe(err.cause or err)}") from err
        except (OSError, ValueError) as err:  # connection refused, a reply that is not JSON
            raise CloudError(f"{what}: {describe(err)}") from err


def _time(blob: Any) -> float | None:
    return blob.updated.timestamp() if blob is not None and blob.updated is not None else None
