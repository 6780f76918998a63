"""The cloud layer: slices, disks and buckets through Google's client libraries (or the local
emulator).

`tpujob.cloud.base` holds the light types (SlicePhase, Slice, SliceRequest, the Cloud protocol);
a slice is made through one of two APIs (`tpujob.cloud.apis` picks): the Cloud TPU API
(`tpujob.cloud.tpu_api`, its answers read by `tpujob.cloud.tpu_resources`; a multislice job's
queued resource, `tpujob.cloud.multislice`) or Compute Engine (`tpujob.cloud.compute_tpu`, a VM
read by `tpujob.cloud.compute_instances`). Disks, snapshots and Compute quotas:
`tpujob.cloud.disks`; Cloud Storage: `tpujob.cloud.gcs`; OS Login: `tpujob.cloud.oslogin`; calling
Google and its error rules: `tpujob.cloud.api_calls`, `tpujob.cloud.error_rules`. Each
implementation imports a google-cloud library: import it lazily.
"""
