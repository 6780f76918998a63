"""The setup cache (`setup: {run: ..., cache: [PATHS], key_files: [FILES]}`): where an attempt's
setup is kept once it ran, under which key, and `tpujob cache list|clear`.

Where: in the job's run dir bucket, as `gs://BUCKET/tpujob-cache/KEY.tar.zst` (or `.tar.gz` on a
host without zstd). Every host already mounts that bucket at RUN_DIR_MOUNT (gcsfuse, before
setup: attempt.mounts), so host 0 writes the archive there after a successful setup and every
later host reads it from there: nothing else is installed or downloaded on the hosts, and the
local cloud keeps it in the emulator's Cloud Storage by the same path (no $TPUJOB_HOME variant:
a real TPU VM cannot reach the machine tpujob runs on). A spec with a cache and no
`run_dir: gs://...` is refused at create.

The key hashes what decides what a setup produces: its command, the cached paths, the key
files' contents (read here from the sync directory, at each setup: an edited requirements.txt
is a new key), the runtime version and the accelerator generation of the attempt.

The archive is unpacked at / on the hosts: it is code. Whoever can write the bucket could
replace it, so host 0 reports the sha256 of what it stored (setup.sh's note: "stored 3.4 sha256
HEX key KEY"), the store keeps it by bucket and key (`record_digests`), and a later setup is
given it: its hosts unpack only an archive with that digest, and run the setup instead of one
that differs or has none recorded (host 0 then stores its own in its place).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpujob.names import RUN_DIR_MOUNT, split_gs
from tpujob.spec import ResolvedSpec

if TYPE_CHECKING:
    from tpujob.attempt import StoreContext
    from tpujob.store.models import Attempt, Event
    from tpujob.store.repository import Store

PREFIX = "tpujob-cache"  # the objects' prefix in a run dir's bucket
SUFFIXES = (".tar.zst", ".tar.gz")


def key(spec: ResolvedSpec, accelerator: str) -> str | None:
    """The cache key of this spec's setup on `accelerator` (None: the setup caches nothing)."""
    cache = spec.spec.setup_cache
    if cache is None:
        return None
    from tpujob.catalogue import accelerator as lookup
    from tpujob.reconcile.policy import runtime_version

    files = {}
    for name in sorted(cache.key_files):
        path = Path(spec.sync_path or ".") / name
        files[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    material = {"run": cache.run, "cache": list(cache.cache), "key_files": files,
                "runtime_version": runtime_version(spec, accelerator),
                "generation": lookup(accelerator).generation.alias}
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def describe(notes: list[str]) -> str | None:
    """The hosts' notes (setup.sh's setup.cache: "hit 1.2", "miss absent stored 3.4", ...) in
    words, for the attempt's event; None where no host kept one (no cache)."""
    if not any(notes):
        return None
    hits = [i for i, n in enumerate(notes) if n.startswith("hit")]
    misses = [(i, n.split()) for i, n in enumerate(notes) if n.startswith("miss")]
    parts = []
    if hits:
        took = notes[hits[0]].split()[1:2]
        parts.append(f"hit on {len(hits)} of {len(notes)} hosts"
                     + (f" (unpacked in {took[0]} s on host {hits[0]})" if took else ""))
    if misses:
        index, words = misses[0]
        why = {"absent": "no archive under this key yet", "unpack-failed": "unpacking the archive failed",
               "mismatch": "the archive was refused: its sha256 is not the one recorded when it was stored",
               "unverified": "the archive was refused: no sha256 of it is recorded"}.get(
            words[1] if len(words) > 1 else "", "unknown")
        parts.append(f"miss on {len(misses)} of {len(notes)} hosts (host {index}: {why}): the setup ran")
    for index, words in misses:
        if "stored" in words:
            took = words[words.index("stored") + 1:][:1]
            parts.append(f"stored by host {index}" + (f" (packed in {took[0]} s)" if took else ""))
        if "store-failed" in words:
            parts.append(f"host {index} could not store it (see its setup.err)")
    return "; ".join(parts)


_STORED = re.compile(r"\bsha256 ([0-9a-f]{64}) key ([0-9a-f]{32})\b")


def record_digests(store: Store, spec: ResolvedSpec, notes: Sequence[str]) -> None:
    """Keep the sha256 of each archive a host says it stored (setup.sh's note), by the run
    dir's bucket and the key the host stored it under."""
    bucket = bucket_of(spec)
    for note in notes:
        found = _STORED.search(note)
        if found and bucket and store.setup_cache_digest(bucket, found[2]) != found[1]:
            store.record_setup_cache_digest(bucket, found[2], found[1])


def digest_of(store: Store, spec: ResolvedSpec, cache_key: str) -> str:
    """The sha256 a setup's hosts check the archive of `cache_key` against ("": none recorded,
    so none is trusted)."""
    bucket = bucket_of(spec)
    return (store.setup_cache_digest(bucket, cache_key) or "") if bucket else ""


def per_attempt(attempts: Sequence[Attempt], events: Sequence[Event]) -> dict[int, str]:
    """{attempt number: "hit" | "miss"} from each attempt's `setup done ...; setup cache: ...`
    event (an attempt without a cache, or whose setup never finished, is left out)."""
    out: dict[int, str] = {}
    for attempt in attempts:
        for event in events:
            if event.kind != "setup" or "; setup cache: " not in event.message or event.at < attempt.started_at:
                continue
            if attempt.ended_at is not None and event.at > attempt.ended_at:
                break
            words = event.message.split("; setup cache: ", 1)[1]
            out[attempt.number] = "hit" if words.startswith("hit") and " miss on " not in words else "miss"
            break
    return out


def bucket_of(spec: ResolvedSpec) -> str | None:
    found = split_gs(spec.spec.run_dir) if spec.spec.run_dir else None
    return found[0] if found else None


def host_archive(cache_key: str) -> str:
    """The archive's path on the hosts, without its extension (setup.sh picks .tar.zst/.tar.gz)."""
    return f"{RUN_DIR_MOUNT}/{PREFIX}/{cache_key}"


# -- tpujob cache list | clear ------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    bucket: str
    key: str
    name: str  # the object's name
    size_bytes: int
    updated: float | None

    @property
    def url(self) -> str:
        return f"gs://{self.bucket}/{self.name}"


def buckets(ctx: StoreContext) -> list[str]:
    """The run dir buckets of the jobs in the store whose setup caches something."""
    from tpujob.spec.stored import spec_of

    found: set[str] = set()
    for job in ctx.store.list_jobs(include_ended=True):
        try:
            spec = spec_of(job)
        except Exception:  # noqa: BLE001 - a spec an older tpujob wrote: no cache of this one's
            continue
        bucket = bucket_of(spec)
        if spec.spec.setup_cache is not None and bucket:
            found.add(bucket)
    return sorted(found)


def entries(ctx: StoreContext, bucket: str | None = None) -> list[Entry]:
    """The archives in the jobs' buckets (or in `bucket`), newest first."""
    from tpujob.clients import make_storage
    from tpujob.cloud.gcs import Gcs

    gcs = Gcs(make_storage(ctx.settings))
    out = []
    for name in [bucket] if bucket else buckets(ctx):
        for obj, size, updated in gcs.list_objects(name, PREFIX + "/"):
            base = obj[len(PREFIX) + 1:]
            suffix = next((s for s in SUFFIXES if base.endswith(s)), None)
            if suffix is None or "/" in base:  # a temporary upload, or something not ours
                continue
            out.append(Entry(name, base[:-len(suffix)], obj, size, updated))
    return sorted(out, key=lambda e: (-(e.updated or 0), e.bucket, e.key))


def clear(ctx: StoreContext, key_prefix: str = "", bucket: str | None = None) -> list[Entry]:
    """Delete the archives (those whose key starts with `key_prefix`): the next setup of each
    key runs again and stores it anew. Returns what was deleted."""
    from tpujob.clients import make_storage
    from tpujob.cloud.gcs import Gcs

    gcs = Gcs(make_storage(ctx.settings))
    gone = [e for e in entries(ctx, bucket) if e.key.startswith(key_prefix)]
    for entry in gone:
        gcs.delete_object(entry.bucket, entry.name)
        ctx.store.forget_setup_cache_digest(entry.bucket, entry.key)
    return gone
