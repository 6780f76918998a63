"""Use cases: what each CLI command and dashboard page does, one module per subject (jobs.py:
validate, plan, create, show, cancel, resume, delete; remote.py: logs, exec, ssh; keep_alive.py:
requeue, watch, following a job; quotas.py, disks.py, gc.py, doctor.py, ...; docs/architecture.md
maps them). A command parses its input, calls the use cases it needs here (`create` validates,
plans, creates, then follows the job) and renders what they return; nothing here prints or exits."""
