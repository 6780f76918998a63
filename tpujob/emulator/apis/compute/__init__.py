"""Compute Engine v1, the subset tpujob uses: disks and snapshots, TPU VMs (instances), the
multi-host slices of a managed instance group, quotas, zone/region/global operations."""
