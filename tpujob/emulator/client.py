"""A small client for the emulator's own endpoints (`/emulator/v1/...`): status and faults.

Standard library only, so the CLI's fault commands stay fast.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tpujob.errors import CloudError, ConflictError, NotFoundError, UsageError


class EmulatorClient:
    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def status(self) -> dict:
        return self._request("GET", "status")

    def preempt(self, node: str, grace_seconds: float | None = None) -> dict:
        """`grace_seconds`: from SIGTERM to SIGKILL on the hosts (None: the emulator's default).
        Returns once the hosts are down (after the grace at most) with the node as it then reads:
        PREEMPTED, or DELETING for a queued resource's node (the queued resource SUSPENDING)."""
        body: dict = {"node": node}
        if grace_seconds is not None:
            body["graceSeconds"] = grace_seconds
        # The call lasts as long as the hosts take to die: up to the grace (the default: Spot's 30 s).
        return self._request("POST", "preempt", body, timeout=self.timeout + (grace_seconds or 30.0) + 30)

    def image(self, apt_lock_seconds: float | None = None, gcsfuse: bool | None = None) -> dict:
        """What hosts booted from now on have (emulator/machines/apt.py); None leaves a setting as it is."""
        return self._request("POST", "image", {"aptLockSeconds": apt_lock_seconds, "gcsfuse": gcsfuse})

    def maintenance(self, node: str, in_seconds: float = 0.0) -> dict:
        """Announce maintenance on a node, its window opening `in_seconds` from now (0: at once,
        unscheduled); the node as it then reads (emulator/apis/tpu/maintenance.py)."""
        return self._request("POST", "maintenance", {"node": node, "inSeconds": in_seconds})

    def stockout(self, zone: str, accelerator_type: str | None = None, clear: bool = False) -> dict:
        return self._request("POST", "stockout",
                             {"zone": zone, "acceleratorType": accelerator_type, "clear": clear})

    def market(self, zones: dict[str, dict] | None, *, seed: int = 0, speed: float = 1.0,
               window: float = 1800.0, drift: float = 0.4, tick: float = 1.0) -> dict:
        """Run a seeded market (emulator/market.py): zones {ZONE: {mtbiSeconds, stockout}};
        None stops it."""
        if zones is None:
            return self._request("DELETE", "market", None)
        return self._request("POST", "market", {"zones": zones, "seed": seed, "speed": speed,
                                                "window": window, "drift": drift, "tick": tick})

    def reserve(self, project: str, zone: str, name: str, machine_type: str, count: int = 1) -> dict:
        """A specific reservation of `count` VMs of `machine_type` (0: remove it), for the
        Compute Engine path's `provisioning: reservation` (emulator/apis/compute/tpu_vms.py)."""
        return self._request("POST", "reservations", {"project": project, "zone": zone, "name": name,
                                                      "machineType": machine_type, "count": count})

    def set_faults(self, api_error_rate: float | None = None,
                   provisioning_delay: float | None = None,
                   hostkeys_delay: float | None = None) -> dict:
        """hostkeys_delay: seconds after boot before nodes publish their host keys (< 0: never)."""
        return self._request("POST", "faults", {"apiErrorRate": api_error_rate,
                                                "provisioningDelay": provisioning_delay,
                                                "hostkeysDelay": hostkeys_delay})

    def fail_next(self, method: str, status: int, message: str, grpc_status: str | None = None,
                  reason: str | None = None, in_operation: bool = False, times: int = 1,
                  domain: str | None = None, metadata: dict | None = None,
                  quota_violations: list | None = None) -> dict:
        """The next `times` calls of `method` (a discovery id, e.g.
        tpu.projects.locations.nodes.create) answer Google's error body for `status`, or with
        `in_operation` succeed and end their long-running operation with it. Returns the
        faults still pending. `domain`/`metadata` fill the ErrorInfo of `reason`,
        `quota_violations` ([{subject, description}]) a QuotaFailure detail."""
        return self._request("POST", "fail-next", {
            "method": method, "status": status, "message": message, "grpc_status": grpc_status,
            "reason": reason, "in_operation": in_operation, "times": times, "domain": domain,
            "metadata": metadata, "quota_violations": quota_violations})

    def clear_fail_next(self) -> None:
        """Forget every fail-next fault still pending."""
        self._request("DELETE", "fail-next")

    def kill_host(self, node: str, index: int) -> None:
        self._request("POST", "kill-host", {"node": node, "index": index})

    def quotas(self, project: str, region: str | None, quotas: list[dict] | None) -> dict:
        """Replace `region`'s Compute Engine quota list (None: the project's global one) with
        `quotas` ([{metric, limit, usage}]); None: back to the emulator's defaults."""
        return self._request("POST", "quotas", {"project": project, "region": region, "quotas": quotas})

    def oslogin(self, project: str, enabled: bool | None = None, required: bool = False,
                role: bool = True, admins: list[str] | None = None) -> dict:
        """OS Login for `project`: on (hosts take only keys imported through OS Login), with
        `required` (constraints/compute.requireOsLogin refuses enable-oslogin FALSE), or without
        `role` (the account lacks roles/compute.osLogin: hosts refuse it), `admins` holding
        roles/compute.osAdminLogin (sudo on the hosts); None: just read it."""
        if enabled is None:
            return self._request("GET", f"oslogin?{urllib.parse.urlencode({'project': project})}")
        return self._request("POST", "oslogin", {"project": project, "enabled": enabled,
                                                 "required": required, "role": role,
                                                 "admins": list(admins or ())})
    def dirty_host(self, node: str, index: int, sticky: bool = False) -> int:
        """Start a process holding that host's accelerator device; its pid."""
        return self._request("POST", "dirty-host", {"node": node, "index": index, "sticky": sticky})["pid"]
    def freeze(self, node: str, index: int, thaw: bool = False) -> int:
        """SIGSTOP (SIGCONT with `thaw`) the program on host `index`; how many processes."""
        return self._request("POST", "freeze", {"node": node, "index": index, "thaw": thaw})["processes"]

    def hosts(self, node: str) -> list[dict]:
        """Each host of the node: index, ip, externalIp (or null), sshPort, hostKey, root (its
        filesystem, or null), sshConnections (connections accepted per address)."""
        query = urllib.parse.urlencode({"node": node})
        return self._request("GET", f"hosts?{query}")["hosts"]

    def _request(self, method: str, path: str, body: dict | None = None,
                 timeout: float | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"{self.url}/emulator/v1/{path}", data=data,
                                         method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            try:
                message = json.loads(err.read())["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {err.code}"
            kind = {400: UsageError, 404: NotFoundError, 409: ConflictError}.get(err.code,
                                                                                 CloudError)
            raise kind(f"emulator: {message}") from err
        except (urllib.error.URLError, OSError) as err:
            raise CloudError(f"emulator at {self.url} is not reachable: {err}") from err
