"""The Cloud TPU v2 API: nodes and their life cycle, queued resources, operations, maintenance."""
