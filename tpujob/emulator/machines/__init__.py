"""The emulated hosts: a slice's machines (slice.py), each host an SSH/SFTP server on its own
loopback address (ssh.py, sftp.py) over its own filesystem root, with its processes
(processes.py), attached disks (disks.py), metadata server (metadata.py), apt and gcsfuse
(apt.py, gcsfuse.py over gcs_json.py), held alive by one holder process (holder.py) and reaped
by another (reaper.py). Imports nothing from the APIs: they drive it through SliceMachines."""
