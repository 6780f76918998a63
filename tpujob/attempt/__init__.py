"""What an attempt needs on its slice, implemented: the floor below the use cases (service/).

The sweep's hands on a slice: its hosts over SSH (hosts; the keys it trusts: host_keys; what the
host scripts are told: host_attempts), its disks (slice_disks), mounts, buckets, secrets, the
runtime bundle, run dirs, the setup cache, and who logs in (logins). Nothing here imports
tpujob.service; cloud clients come from tpujob.clients."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tpujob.settings import Settings
    from tpujob.store.repository import Store


class StoreContext(Protocol):
    """What this floor uses of a command's context (service.context.Context): its settings and
    its store, named here so that nothing below service/ imports it, not even for types."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> Store: ...
