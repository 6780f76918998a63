"""Reconcile: observe the cloud and the hosts, decide (pure), act under the job lease."""
