"""Commands on every host of a slice, in parallel, over SSH (paramiko)."""
