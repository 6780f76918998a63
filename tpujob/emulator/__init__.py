"""The local TPU cloud: Google's TPU v2 REST API on 127.0.0.1, real hosts, faults on demand.

`server` serves it, `resources` keeps its state, `process` runs it in the background,
`client` drives its fault endpoints, `machines` emulates the TPU VMs (hosts).
"""
