"""The host keys an attempt's SSH trusts: published by the cloud, or pinned on first use.

Host keys come from the cloud (guest attributes) and are verified; with `ssh_host_keys:
accept-new`, a host that published none is trusted on first use and held to that key for the
rest of the attempt. Either way the keys are recorded on the attempt (its `host_keys` column),
so that later sweeps make no API call for them and a pinned key stays the one trusted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from typing import TYPE_CHECKING, Callable

from tpujob.errors import SetupFailed
from tpujob.names import own_nodes
from tpujob.spec.stored import api_of

if TYPE_CHECKING:
    from tpujob.cloud.base import Cloud, Slice
    from tpujob.hosts.fanout import Host
    from tpujob.store.models import Attempt, Job
    from tpujob.store.repository import Store

KEY_POLL_MAX = 10.0      # seconds between guest-attribute reads while waiting for host keys


def collect(store: Store, cloud: Cloud, job: Job, attempt: Attempt, slice_: Slice) -> dict[int, list[str]]:
    """The slice's host keys: those recorded on the attempt (published by the cloud, or
    pinned on first use), completed from the cloud's guest attributes, and recorded once
    every host has one (later sweeps then make no API call for them). A recorded key wins
    over a published one: it is the key tpujob has trusted this attempt with."""
    recorded = recorded_keys(store, job.id, attempt.number)
    if slice_.hosts and all(recorded.get(h.index) for h in slice_.hosts):
        return recorded
    published = cloud.for_api(api_of(job)).host_keys(job.project, attempt.zone, attempt.slice_name,
                                                     slices=attempt.slices, nodes=own_nodes(attempt))
    keys = {i: v for i, v in published.items() if v} | recorded
    if slice_.hosts and all(keys.get(h.index) for h in slice_.hosts):
        store.record_host_keys(job.id, attempt.number, json.dumps(keys))
    return keys


def await_published(store: Store, cloud: Cloud, job: Job, attempt: Attempt, slice_: Slice, timeout: float, *,
                    accept_new: bool, renew: Callable[[Job], None]) -> dict[int, list[str]]:
    """Every host's published key, waiting for them within the setup timeout (counted from
    the start of setup): a guest agent publishes its host's keys some time after boot.
    SetupFailed names the first host still without one then. With accept-new, no wait:
    a host without a published key is trusted on first use instead. `renew` keeps the
    job's lease between reads (the wait may outlast it)."""
    deadline = (job.state_since or store.clock()) + timeout  # state_since is on the store's clock
    delay, waiting = 0.2, False
    while True:
        keys = collect(store, cloud, job, attempt, slice_)
        missing = [h.index for h in slice_.hosts if not keys.get(h.index)]
        if not missing or accept_new:
            return keys
        left = deadline - store.clock()
        if left <= 0:
            raise SetupFailed(
                f"host {missing[0]} published no SSH host key in guest attributes within "
                f"{timeout:.0f}s (is its guest agent running? `tpujob config set ssh_host_keys "
                "accept-new` trusts a host's first key instead)")
        if not waiting:
            waiting = True
            store.add_event(job.id, "setup", f"waiting for the SSH host keys of "
                            f"{_hosts_text(missing)} in guest attributes")
        renew(job)
        time.sleep(min(delay, left))
        delay = min(delay * 2, KEY_POLL_MAX)


def first_use_pinner(store: Store, job: Job, attempt: Attempt,
                     keys: dict[int, list[str]]) -> Callable[[Host, str], None]:
    """HostGroup's accept_new: record a host's first key on the attempt (before the
    connection goes on), with an event saying so."""
    lock = threading.Lock()

    def pin(host: Host, line: str) -> None:
        with lock:
            merged = keys | recorded_keys(store, job.id, attempt.number)
            merged[host.index] = [line]
            store.record_host_keys(job.id, attempt.number, json.dumps(merged))
        store.add_event(
            job.id, "hosts", f"host {host.index} published no SSH host key; accepted "
            f"{fingerprint(line)} on first use (ssh_host_keys accept-new), pinned for "
            f"attempt {attempt.number}")
    return pin


def recorded_keys(store: Store, job_id: int, number: int) -> dict[int, list[str]]:
    """The host keys recorded on attempt `number`, read afresh (a group may have pinned some)."""
    row = next((a for a in store.attempts(job_id) if a.number == number), None)
    if row is None or not row.host_keys:
        return {}
    return {int(k): v for k, v in json.loads(row.host_keys).items()}


def fingerprint(line: str) -> str:
    """OpenSSH's form: "ssh-ed25519 SHA256:..." (what `ssh-keygen -lf` shows)."""
    kind, b64 = line.split()[:2]
    digest = base64.b64encode(hashlib.sha256(base64.b64decode(b64)).digest()).decode().rstrip("=")
    return f"{kind} SHA256:{digest}"


def _hosts_text(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8]) + (f" and {len(indices) - 8} more" if len(indices) > 8 else "")
    return f"host{'s' if len(indices) > 1 else ''} {shown}"
