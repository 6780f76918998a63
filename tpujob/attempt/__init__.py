"""What an attempt needs on its slice, implemented: the floor below the use cases (service/).

The sweep's hands on a slice: its hosts over SSH (hosts; the keys it trusts: host_keys; what the
host scripts are told: host_attempts), its disks (slice_disks), mounts, buckets, secrets, the
runtime bundle, run dirs, the setup cache, and who logs in (logins). Nothing here imports
tpujob.service; cloud clients come from tpujob.clients."""
