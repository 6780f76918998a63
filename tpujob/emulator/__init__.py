"""The local Google cloud tpujob runs against when no account is set: Google's Cloud TPU v2,
Compute Engine v1 (its TPU subset) and OS Login v1 REST APIs on 127.0.0.1, with real emulated
hosts (each an SSH server on its own loopback address over its own filesystem), Cloud Storage
beside them, and faults on demand.

Its wings:
- world.py: what the APIs share, given to each when it is made: the lock and worker threads,
  settings, stockouts and the seeded market (market.py), the address plan (addresses.py).
- apis/: Google's APIs: tpu/ (nodes, queued resources), compute/ (disks, TPU VMs, MIG slices),
  oslogin.py; and what they share: errors, bodies, routing, labels, fail-next, host faults.
- machines/: the emulated hosts (SliceMachines), which import nothing from apis/.
- cloud.py builds one world's APIs; server.py serves them (its /emulator/v1/ endpoints:
  control.py); __main__.py and process.py run it in the background; client.py drives it.

docs/emulator.md tells what it serves, how faithfully, and the source of each behaviour.
"""
