"""The emulator's own endpoints, under `/emulator/v1/`: its status, the faults it injects
(`faults`, `fail-next`, `stockout`, `preempt`, `kill-host`, `maintenance`, `dirty-host`,
`freeze`), reservations, Compute Engine's quota lists, the image fresh hosts boot from, the
hosts of a node, OS Login's switches. `tpujob emulator ...` drives them (docs/emulator.md); server.py routes them here.
"""

from __future__ import annotations

from typing import Any

from werkzeug.routing import Rule
from werkzeug.wrappers import Request

from tpujob.emulator.apis.bodies import read_json
from tpujob.emulator.apis.errors import ApiError
from tpujob.emulator.apis.fail_next import FaultError, parse
from tpujob.emulator.cloud import Cloud

CONTROL_RULES = [
    Rule("/emulator/v1/status", methods=["GET"], endpoint="status"),
    Rule("/emulator/v1/faults", methods=["GET", "POST"], endpoint="faults"),
    Rule("/emulator/v1/fail-next", methods=["GET", "POST", "DELETE"], endpoint="fail_next"),
    Rule("/emulator/v1/stockout", methods=["POST"], endpoint="stockout"),
    Rule("/emulator/v1/market", methods=["GET", "POST", "DELETE"], endpoint="market"),
    Rule("/emulator/v1/preempt", methods=["POST"], endpoint="preempt"),
    Rule("/emulator/v1/kill-host", methods=["POST"], endpoint="kill_host"),
    Rule("/emulator/v1/reservations", methods=["POST"], endpoint="reservations"),
    Rule("/emulator/v1/maintenance", methods=["POST"], endpoint="maintenance"),
    Rule("/emulator/v1/image", methods=["GET", "POST"], endpoint="image"),
    Rule("/emulator/v1/dirty-host", methods=["POST"], endpoint="dirty_host"),
    Rule("/emulator/v1/freeze", methods=["POST"], endpoint="freeze"),
    Rule("/emulator/v1/hosts", methods=["GET"], endpoint="hosts"),
    Rule("/emulator/v1/oslogin", methods=["GET", "POST"], endpoint="oslogin"),
    Rule("/emulator/v1/quotas", methods=["POST"], endpoint="quotas"),
]


class Control:
    """The /emulator/v1/ endpoints over the emulated cloud: each `_ENDPOINT` method answers one."""

    def __init__(self, cloud: Cloud, info: dict[str, Any]):
        self.cloud = cloud
        self.info = info  # what /emulator/v1/status answers: endpoints, project, ssh port

    def handle(self, request: Request, endpoint: str) -> dict:
        return getattr(self, "_" + endpoint)(request)

    def _status(self, request: Request) -> dict:
        return {**self.info, "faults": self.cloud.world.faults()}

    def _faults(self, request: Request) -> dict:
        if request.method == "POST":
            body = read_json(request)
            self.cloud.world.set_faults(_number(body, "apiErrorRate"),
                                     _number(body, "provisioningDelay"),
                                     _number(body, "hostkeysDelay"))
        return self.cloud.world.faults()

    def _fail_next(self, request: Request) -> dict:
        if request.method == "POST":
            try:
                self.cloud.fail_next.add(parse(read_json(request)))
            except FaultError as err:
                raise ApiError(400, str(err)) from None
        elif request.method == "DELETE":
            self.cloud.fail_next.clear()
        return {"pending": self.cloud.fail_next.pending()}

    def _stockout(self, request: Request) -> dict:
        body = read_json(request)
        if not body.get("zone"):
            raise ApiError(400, "zone is required")
        # A TPU API accelerator type or a Compute machine type (tpu_vm_rules.MACHINE_TYPES):
        # their names never meet, so one set of stockouts holds both.
        self.cloud.world.stockout(body["zone"], body.get("acceleratorType") or
                               body.get("machineType") or None, bool(body.get("clear")))
        return self.cloud.world.faults()

    def _market(self, request: Request) -> dict:
        """A seeded market (market.py): POST {seed, zones: {ZONE: {mtbiSeconds, stockout}},
        speed, window, drift, tick}; DELETE stops it; each answers the market now."""
        from tpujob.emulator.market import Market, ZoneMarket

        if request.method == "DELETE":
            self.cloud.tpu.set_market(None)
        elif request.method == "POST":
            body = read_json(request)
            zones = body.get("zones")
            if not isinstance(zones, dict) or not zones:
                raise ApiError(400, "zones must map each zone to {mtbiSeconds, stockout}")
            try:
                market = Market(int(body.get("seed", 0)),
                                {z: ZoneMarket(float(v["mtbiSeconds"]), float(v.get("stockout", 0)))
                                 for z, v in zones.items()},
                                speed=float(body.get("speed", 1.0)), window=float(body.get("window", 1800.0)),
                                drift=float(body.get("drift", 0.4)))
                tick = float(body.get("tick", 1.0))
            except (KeyError, TypeError, ValueError) as err:
                raise ApiError(400, f"bad market: {err}") from None
            if tick <= 0:
                raise ApiError(400, "tick must be > 0")
            self.cloud.tpu.set_market(market, tick)
        return {"market": self.cloud.world.faults()["market"]}

    def _preempt(self, request: Request) -> dict:
        body = read_json(request)
        grace = body.get("graceSeconds")
        if grace is not None and (not isinstance(grace, (int, float)) or grace < 0):
            raise ApiError(400, "graceSeconds must be a number >= 0")
        return self.cloud.host_faults.preempt(_required(body, "node"), grace)

    def _reservations(self, request: Request) -> dict:
        """A specific reservation of `count` VMs of `machineType` in `zone` (count 0 removes
        it), for instances that name it in reservationAffinity (tpu_vms.py)."""
        body = read_json(request)
        count = body.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ApiError(400, "count must be an integer >= 0")
        return self.cloud.vms.reserve(_required(body, "project"), _required(body, "zone"),
                                             _required(body, "name"), body.get("machineType", ""),
                                             count)

    def _kill_host(self, request: Request) -> dict:
        body = read_json(request)
        index = body.get("index")
        if not isinstance(index, int):
            raise ApiError(400, "index must be an integer")
        self.cloud.host_faults.kill_host(_required(body, "node"), index)
        return {}

    def _image(self, request: Request) -> dict:
        """What hosts booted from now on have: the seconds unattended-upgrades holds the dpkg
        lock after boot, and whether gcsfuse is installed (emulator/machines/apt.py)."""
        if request.method == "POST":
            body = read_json(request)
            seconds = _number(body, "aptLockSeconds")
            if seconds is not None:
                if seconds < 0:
                    raise ApiError(400, "aptLockSeconds must not be negative")
                self.cloud.world.apt_lock_seconds = seconds
            if body.get("gcsfuse") is not None:
                self.cloud.compute.image_gcsfuse = bool(body["gcsfuse"])
        return {"aptLockSeconds": self.cloud.world.apt_lock_seconds,
                "gcsfuse": self.cloud.compute.image_gcsfuse}

    def _maintenance(self, request: Request) -> dict:
        body = read_json(request)
        after = _number(body, "inSeconds") or 0.0
        return self.cloud.host_faults.announce_maintenance(_required(body, "node"), after)

    def _dirty_host(self, request: Request) -> dict:
        body = read_json(request)
        index = body.get("index")
        if not isinstance(index, int):
            raise ApiError(400, "index must be an integer")
        return self.cloud.host_faults.dirty_host(_required(body, "node"), index, bool(body.get("sticky")))

    def _freeze(self, request: Request) -> dict:
        body = read_json(request)
        index = body.get("index")
        if not isinstance(index, int):
            raise ApiError(400, "index must be an integer")
        return {"processes": self.cloud.host_faults.freeze(_required(body, "node"), index, bool(body.get("thaw")))}

    def _hosts(self, request: Request) -> dict:
        return {"hosts": self.cloud.host_faults.hosts(_required(request.args, "node"))}

    def _oslogin(self, request: Request) -> dict:
        if request.method == "POST":
            body = read_json(request)
            return self.cloud.oslogin.set(_required(body, "project"), bool(body.get("enabled")),
                                             bool(body.get("required")), body.get("role", True) is not False,
                                             [str(a) for a in body.get("admins") or ()])
        return self.cloud.oslogin.state(_required(request.args, "project"))

    def _quotas(self, request: Request) -> dict:
        """Replace a region's quota list (or the project's, without `region`); `quotas` null:
        back to the defaults (quotas.py)."""
        body = read_json(request)
        quotas = body.get("quotas")
        if quotas is not None and not (isinstance(quotas, list) and all(
                isinstance(q, dict) and q.get("metric") for q in quotas)):
            raise ApiError(400, "quotas must be a list of {metric, limit, usage}")
        return {"quotas": self.cloud.compute.quotas.set(_required(body, "project"), str(body.get("region") or ""),
                                                     quotas)}


def _number(body: dict, key: str) -> float | None:
    value = body.get(key)
    if value is not None and not isinstance(value, (int, float)):
        raise ApiError(400, f"{key} must be a number")
    return value


def _required(body: Any, key: str) -> str:
    value = body.get(key)
    if not value:
        raise ApiError(400, f"{key} is required")
    return str(value)
