"""Spec texts shared by the spec tests."""

from __future__ import annotations

import textwrap

VALID = """\
name: demo
tpu:
  accelerator: v4-8
  zone: us-central2-b
run:
  command: python train.py
"""


def dedent_spec(body: str) -> str:
    return textwrap.dedent(body).lstrip("\n")
