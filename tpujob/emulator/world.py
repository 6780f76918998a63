"""What every emulated API shares: one lock (and the condition its workers wait on), the worker
threads, the settings hosts are made with, the cloud's conditions (stockouts, a seeded market,
the random API error rate, the provisioning and host-key delays) and the address plan.

The TPU API, Compute Engine's VMs and MIGs and the host faults are each built from one World
(server.py builds it first). Every change of their state happens under `lock`; time-based
transitions run on worker threads (`spawn`) that wait on `changed`, so deletes, stockout
changes and shutdown wake them (`sleep`).
"""

from __future__ import annotations

import pathlib
import random
import threading
import time
from typing import Any, Callable, Protocol

from tpujob.emulator.addresses import AddressPlan
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.market import Market

# From SIGTERM to power off of a preempted Spot VM: "30-second warning" (Compute Engine's TPU
# machine page, cloud.google.com/compute/docs/tpus/tpu-machines, and Scheduling in compute.v1's
# discovery document: 30 s for Spot, 120 s for Standard). The emulator's default preemption grace.
SPOT_NOTICE_SECONDS = 30.0


class Machines(Protocol):
    """What the APIs need of tpujob.emulator.machines.slice.SliceMachines (see its contract)."""

    def start(self) -> list: ...
    def preempt(self, grace_seconds: float) -> None: ...
    def kill_host(self, index: int) -> None: ...
    def dirty_host(self, index: int, sticky: bool = False) -> int: ...
    def freeze(self, index: int, thaw: bool = False) -> int: ...
    def stop(self) -> None: ...
    def host_root(self, index: int) -> pathlib.Path: ...
    def ssh_connections(self, index: int) -> dict[str, int]: ...


MachinesFactory = Callable[..., Machines]


def stop_machines(machines: list[Machines]) -> None:
    """Stop each of `machines`, together where their kind can (`stop_many`, as
    SliceMachines.stop_many: one pass for every host, where one per node made closing a few
    hundred nodes outlast `tpujob emulator stop`'s grace)."""
    kinds: dict[type, list[Machines]] = {}
    for m in machines:
        kinds.setdefault(type(m), []).append(m)
    for kind, group in kinds.items():
        together = getattr(kind, "stop_many", None)
        if together is not None:
            together(group)
        else:
            for m in group:
                m.stop()


class Resource(Protocol):
    """A node, queued resource or VM, as `World.sleep` reads it."""

    deleting: bool


class World:
    """The emulated cloud's shared state; the APIs built from it keep their own resources."""

    def __init__(self, root: pathlib.Path, provisioning_delay: float = 0.2, ssh_port: int = 22,
                 machines_factory: MachinesFactory | None = None,
                 preempt_grace: float = SPOT_NOTICE_SECONDS):
        self.root = pathlib.Path(root)
        self.provisioning_delay = provisioning_delay
        self.api_error_rate = 0.0
        # Seconds after boot before a node's guest attributes carry its host keys; < 0: never.
        self.hostkeys_delay = 0.0
        self.apt_lock_seconds = 3.0  # a fresh host's dpkg lock held after boot (machines/apt.py; `image`)
        self.ssh_port = ssh_port
        self.preempt_grace = preempt_grace
        self.machines_factory = machines_factory
        self.addresses = AddressPlan()
        self.stockouts: set[tuple[str, str | None]] = set()
        self.market: Market | None = None  # a seeded market of capacity and interruptions (market.py)
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.closing = False
        self._threads: list[threading.Thread] = []

    # ---- workers ----------------------------------------------------------------------------

    def spawn(self, target: Callable, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self.lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def sleep(self, seconds: float, resource: Resource | None) -> bool:
        """Wait, waking early on delete or shutdown; False when the resource should stop."""
        deadline = time.monotonic() + seconds
        with self.lock:
            while True:
                if self.closing or (resource is not None and resource.deleting):
                    return False
                left = deadline - time.monotonic()
                if left <= 0:
                    return True
                self.changed.wait(left)

    def close(self) -> None:
        """Wake every worker to end, and wait for them (the emulator is going away)."""
        with self.lock:
            self.closing = True
            self.changed.notify_all()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    # ---- the cloud's conditions -------------------------------------------------------------

    def inject_api_error(self) -> ApiError | None:
        """`faults --api-error-rate`: the error a call draws (429 or 503), or None."""
        if self.api_error_rate and random.random() < self.api_error_rate:
            if random.random() < 0.5:
                return ApiError(429, "Quota exceeded for quota metric 'Requests' (emulated)")
            return ApiError(503, "The service is currently unavailable (emulated)")
        return None

    def set_faults(self, api_error_rate: float | None, provisioning_delay: float | None,
                   hostkeys_delay: float | None = None) -> None:
        with self.lock:
            if hostkeys_delay is not None:
                self.hostkeys_delay = hostkeys_delay
            if api_error_rate is not None:
                if not 0 <= api_error_rate <= 1:
                    raise ApiError(400, "apiErrorRate must be between 0 and 1")
                self.api_error_rate = api_error_rate
            if provisioning_delay is not None:
                if provisioning_delay < 0:
                    raise ApiError(400, "provisioningDelay must not be negative")
                self.provisioning_delay = provisioning_delay

    def stockout(self, zone: str, accelerator_type: str | None, clear: bool) -> None:
        with self.lock:
            if clear:
                self.stockouts.discard((zone, accelerator_type))
            else:
                self.stockouts.add((zone, accelerator_type))
            self.changed.notify_all()

    def stocked_out(self, zone: str, accelerator_type: str | None) -> bool:
        market = self.market
        return (zone, None) in self.stockouts or (zone, accelerator_type) in self.stockouts \
            or (market is not None and market.stocked_out(zone, market.now()))

    def faults(self) -> dict:
        with self.lock:
            return {"market": None if self.market is None else self.market.describe(),
                    "apiErrorRate": self.api_error_rate,
                    "provisioningDelay": self.provisioning_delay,
                    "hostkeysDelay": self.hostkeys_delay,
                    "stockouts": [{"zone": z, "acceleratorType": a}
                                  for z, a in sorted(self.stockouts, key=str)]}

    def hostkeys_published(self, booted_at: float | None) -> bool:
        """Whether hosts booted at `booted_at` (monotonic) have had their host keys written to
        guest attributes by now (the hostkeys delay; never before boot, never when < 0)."""
        if self.hostkeys_delay < 0 or booted_at is None:
            return False
        return time.monotonic() - booted_at >= self.hostkeys_delay
