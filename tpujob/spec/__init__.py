"""The job spec: YAML -> a typed, validated model (models.py), with each field's YAML line kept
for errors (lines.py), resolved against the TPU catalogue and the settings (resolution.py;
mount paths in mount_paths.py, the API and Compute Engine settings in compute_engine.py), and
read back from the store once recorded (stored.py: `spec_of`, imported from there, not re-exported).

Every refusal is one SpecError naming the field (and its YAML line), raised before anything is
written or spent. What other modules use is re-exported here: `from tpujob.spec import ResolvedSpec`.
"""

from __future__ import annotations

from tpujob.spec.lines import (
    parse,
    shown_text,
)
from tpujob.spec.models import (
    BUCKET_NAME,
    EMAIL_ADDRESS,
    ENV_NAME,
    JOB_NAME,
    NETWORK_REF,
    NETWORK_TAG,
    NOTIFY_ON,
    PROVISIONING,
    RESOURCE_NAME,
    SUBNETWORK_REF,
    WEBHOOK_SECRET,
    ZONE_NAME,
    BucketSpec,
    DiskSpec,
    Fallback,
    JobSpec,
    NetworkSpec,
    NotifyOn,
    NotifySpec,
    RequeuePolicy,
    ResolvedSpec,
    RunSpec,
    SetupSpec,
    TpuSpec,
    mask_webhook,
)
from tpujob.spec.mount_paths import (
    NO_MOUNTS_INSIDE,
    SYSTEM_DIRS,
)
from tpujob.spec.resolution import (
    load,
    resolve,
    webhook_secrets,
)

__all__ = [
    'JOB_NAME', 'RESOURCE_NAME', 'BUCKET_NAME', 'ENV_NAME', 'ZONE_NAME', 'PROVISIONING',
    'NETWORK_REF', 'SUBNETWORK_REF', 'NETWORK_TAG', 'Fallback', 'NetworkSpec', 'TpuSpec',
    'DiskSpec', 'BucketSpec', 'RunSpec', 'RequeuePolicy', 'NOTIFY_ON', 'NotifyOn',
    'WEBHOOK_SECRET', 'EMAIL_ADDRESS', 'NotifySpec', 'JobSpec', 'SetupSpec', 'ResolvedSpec', 'mask_webhook',
    'shown_text', 'parse', 'SYSTEM_DIRS', 'NO_MOUNTS_INSIDE', 'webhook_secrets', 'resolve', 'load'
]
