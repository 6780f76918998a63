"""The emulated cloud: one World and the APIs built from it, each given what it uses when it is
made (no part is attached to another afterwards). server.py serves it over HTTP; tests reach
its parts as `server.emulator.tpu`, `.vms`, `.world`, ...
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

from tpujob.emulator.apis.compute.api import ComputeEmulator
from tpujob.emulator.apis.compute.tpu_migs import TpuMigs
from tpujob.emulator.apis.compute.tpu_vms import TpuVms
from tpujob.emulator.apis.fail_next import FailNext
from tpujob.emulator.apis.host_faults import HostFaults
from tpujob.emulator.apis.oslogin import OsLogin
from tpujob.emulator.apis.tpu.api import TpuApi
from tpujob.emulator.world import World


@dataclass(frozen=True)
class Cloud:
    world: World  # the lock, workers, settings, stockouts, market, address plan
    oslogin: OsLogin  # OS Login v1, the hosts' logins and the project policy
    compute: ComputeEmulator  # Compute Engine's disks, snapshots, operations, quotas
    tpu: TpuApi  # the Cloud TPU v2 API
    vms: TpuVms  # Compute Engine TPU VMs
    migs: TpuMigs  # Compute Engine multi-host slices (MIGs)
    host_faults: HostFaults  # preempt, kill-host, dirty-host, freeze, maintenance
    fail_next: FailNext  # the API answers queued by `fail-next`

    @classmethod
    def build(cls, world: World, state_dir: pathlib.Path, storage_endpoint: str | None) -> Cloud:
        oslogin = OsLogin()
        compute = ComputeEmulator(state_dir / "compute", oslogin, storage_endpoint)
        tpu = TpuApi(world, compute, oslogin)
        vms = TpuVms(world, compute, oslogin)
        migs = TpuMigs(world, vms, compute, oslogin)
        return cls(world, oslogin, compute, tpu, vms, migs, HostFaults(world, tpu, vms), FailNext())

    def close(self) -> None:
        """End every worker, then every host: the nodes', the MIGs' slices, the VMs'."""
        self.world.close()
        self.tpu.close()
        self.migs.close()
        self.vms.close()
