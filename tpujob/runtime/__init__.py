"""The bundled XLA training runtime: `python -m tpujob.runtime CONFIG.yaml` on every host.

This package is shipped to the hosts on its own, so it imports nothing from the rest of tpujob.
Importing the package does not import jax: the orchestrator imports its small pure modules
(`contract`, `config`, `peaks`) on a login node that has no jax installed.
"""
