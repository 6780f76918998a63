"""What every part of the Emulator may use of the whole: its state and the helpers the parts
call on each other. The Emulator (resources.py) is built from mixins (queued resources, faults,
maintenance, a node's life); each inherits this one declaration instead of repeating its own.
Only the type checker reads it: at run time the class is empty."""

from __future__ import annotations

import pathlib
import threading
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from tpujob.emulator.apis.compute.api import ComputeEmulator
    from tpujob.emulator.apis.compute.instances import Instance
    from tpujob.emulator.apis.compute.tpu_vms import TpuVms
    from tpujob.emulator.apis.fail_next import FailNext
    from tpujob.emulator.apis.oslogin import OsLogin
    from tpujob.emulator.apis.tpu.nodes import Machines, MachinesFactory, Node
    from tpujob.emulator.apis.tpu.operations import Operations
    from tpujob.emulator.apis.tpu.queued_resources import QueuedResource
    from tpujob.emulator.market import Market


class EmulatorParts:
    if TYPE_CHECKING:  # set by Emulator.__init__ (resources.py)
        root: pathlib.Path
        provisioning_delay: float
        apt_lock_seconds: float
        ssh_port: int
        preempt_grace: float
        operations: Operations
        compute: ComputeEmulator | None
        tpu_vms: TpuVms | None
        oslogin: OsLogin
        injected: FailNext
        _factory: MachinesFactory | None
        _nodes: dict[str, Node]
        _qrs: dict[str, QueuedResource]
        _stockouts: set[tuple[str, str | None]]
        market: Market | None
        _lock: threading.RLock
        _changed: threading.Condition
        _closing: bool

        # defined by one part, called by another
        def find_node(self, ref: str) -> Node | Instance: ...
        def _sleep(self, seconds: float, resource: Node | QueuedResource | Instance | None) -> bool: ...
        def _spawn(self, target: Callable[..., Any], *args: Any) -> None: ...
        def _start_node_delete(self, node: Node) -> None: ...
        def _bring_up(self, node: Node) -> tuple[int, str] | None: ...
        def _finish_when_gone(self, resource: Node | QueuedResource, op: dict[str, Any]) -> None: ...
        def _new_node(self, parent: str, node_id: str, body: dict[str, Any], queued_resource: str | None,
                      multislice: bool = False) -> Node: ...
        def _stocked_out(self, zone: str, accelerator_type: str | None) -> bool: ...
        def _free_ip_block(self) -> int: ...
        def _external_block(self) -> int: ...
        def _expose_disks(self, node: Node, machines: Machines, disks: list[dict]) -> None: ...
