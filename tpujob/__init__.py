"""tpujob: run training jobs on preemptible Cloud TPU slices and keep them running."""

__version__ = "0.1.0"
