"""The cloud layer: slices on Cloud TPU (or the local emulator) through Google's client libraries.

`tpujob.cloud.base` holds the light types (SlicePhase, Slice, SliceRequest, the Cloud protocol);
`tpujob.cloud.gcp` the implementation (its answers read by `tpujob.cloud.tpu_resources`), which
imports google-cloud-tpu: import it lazily.
"""
