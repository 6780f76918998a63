"""The emulated Google APIs: the TPU v2 API (tpu/), Compute Engine v1's TPU subset (compute/),
OS Login v1 (oslogin.py), and what they share: errors, JSON bodies, labels, fail-next faults and
the host faults tests inject. They keep their state under the world's lock (world.py) and run
hosts through the machines wing; nothing here serves HTTP (server.py routes to it)."""
