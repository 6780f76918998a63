"""`tpujob emulator ...`: run the local TPU cloud in the background and inject faults into it."""

from __future__ import annotations

import typer

from tpujob.cli.render import print_json

# What names a slice in the fault commands: as `tpujob show` prints it, or its full resource name.
SLICE_HELP = ("The slice: its name as `tpujob show` prints it (a TPU node's id, a Compute Engine VM's "
              "name) or its full resource name (projects/P/locations/Z/nodes/N, projects/P/zones/Z/instances/N).")


def register(app: typer.Typer) -> None:
    emulator = typer.Typer(help="The local TPU cloud: start, stop, status, and faults on demand.",
                           no_args_is_help=True)
    app.add_typer(emulator, name="emulator")

    @emulator.command()
    def start(
        provisioning_delay: float | None = typer.Option(
            None, help="Seconds each provisioning step takes (default 0.2)."),
        no_hosts: bool = typer.Option(False, "--no-hosts",
                                      help="Nodes get addresses only, no SSH hosts."),
        json_: bool = typer.Option(False, "--json", help="Print the endpoints as JSON."),
    ):
        """Start the emulator in the background (nothing happens if it runs already)."""
        from tpujob.emulator import process

        info = process.start(provisioning_delay=provisioning_delay, hosts=not no_hosts)
        _show(info, json_)

    @emulator.command()
    def stop():
        """Stop the background emulator; its nodes and hosts go with it."""
        from tpujob.emulator import process

        typer.echo("emulator stopped" if process.stop() else "emulator was not running")

    @emulator.command()
    def status(json_: bool = typer.Option(False, "--json", help="Print the endpoints as JSON.")):
        """Whether the emulator runs, and its endpoints (`running: false` when it does not)."""
        from tpujob.emulator import process

        _show(process.status(), json_)

    @emulator.command()
    def preempt(node: str = typer.Argument(..., help=SLICE_HELP),
                grace: float | None = typer.Option(
                    None, "--grace", min=0,
                    help="Seconds from SIGTERM to SIGKILL (default 30: Google's Spot notice).")):
        """Preempt a slice: SSH stops, its programs get SIGTERM then SIGKILL after the grace, then a
        TPU node reads PREEMPTED, or, made by a queued resource, is deleted while the queued resource
        reads SUSPENDING, then SUSPENDED (as on Google: READY until its hosts are down); a Compute
        Engine Spot VM reads TERMINATED (deleted with instanceTerminationAction DELETE)."""
        from tpujob.emulator import process

        process.client().preempt(node, grace_seconds=grace)
        typer.echo(f"node {node} preempted")

    @emulator.command()
    def image(apt_lock_seconds: float | None = typer.Option(
                  None, min=0, help="Seconds unattended-upgrades holds the dpkg lock after boot (default 3)."),
              gcsfuse: bool | None = typer.Option(
                  None, "--with-gcsfuse/--without-gcsfuse", help="Whether hosts boot with gcsfuse installed.")):
        """What the hosts of nodes created from now on boot with, as a fresh TPU VM image."""
        from tpujob.emulator import process

        answer = process.client().image(apt_lock_seconds, gcsfuse)
        typer.echo(f"hosts boot with the dpkg lock held {answer['aptLockSeconds']:g} s, gcsfuse "
                   f"{'installed' if answer['gcsfuse'] else 'not installed'}")

    @emulator.command()
    def maintenance(node: str = typer.Argument(..., help=SLICE_HELP),
                    in_: float = typer.Option(0.0, "--in", min=0,
                                              help="Seconds until the window opens (0: at once).")):
        """Announce maintenance on a node: it reads upcomingMaintenance (PENDING) until the window
        opens, then health UNHEALTHY_MAINTENANCE, and its hosts go down as in a preemption."""
        from tpujob.emulator import process

        process.client().maintenance(node, in_seconds=in_)
        typer.echo(f"maintenance announced on {node}: window opens in {in_:g} s")

    @emulator.command()
    def stockout(
        zone: str = typer.Argument(...),
        accelerator: str | None = typer.Argument(None, help="Only this accelerator type."),
        clear: bool = typer.Option(False, "--clear", help="End the stockout."),
    ):
        """Stock a zone out: queued resources wait, direct creates fail with Google's error."""
        from tpujob.emulator import process

        process.client().stockout(zone, accelerator, clear=clear)
        what = f"{zone} {accelerator}" if accelerator else zone
        typer.echo(f"stockout {'cleared' if clear else 'set'}: {what}")

    @emulator.command()
    def market(
        zones: list[str] = typer.Argument(None, metavar="ZONE=MTBI_SECONDS:STOCKOUT...",
                                          help="Each zone's mean seconds between interruptions and "
                                               "share of time out of stock, e.g. us-east5-a=3600:0.2."),
        seed: int = typer.Option(0, "--seed"),
        speed: float = typer.Option(1.0, "--speed", help="Market seconds per wall second."),
        stop: bool = typer.Option(False, "--stop", help="End the market."),
    ):
        """Run a seeded spot market: each zone preempts READY nodes and stocks out at its own
        rates, drifting by time of day (docs/emulator.md)."""
        from tpujob.emulator import process
        from tpujob.errors import UsageError

        if stop:
            process.client().market(None)
            typer.echo("market stopped")
            return
        parsed: dict[str, dict] = {}
        for item in zones or []:
            try:
                zone, rest = item.split("=", 1)
                mtbi, stockout = rest.split(":", 1)
                parsed[zone] = {"mtbiSeconds": float(mtbi), "stockout": float(stockout)}
            except ValueError:
                raise UsageError(f"{item!r} is not ZONE=MTBI_SECONDS:STOCKOUT") from None
        if not parsed:
            raise UsageError("give each zone as ZONE=MTBI_SECONDS:STOCKOUT, or --stop")
        said = process.client().market(parsed, seed=seed, speed=speed)["market"]
        for zone, z in said["zones"].items():
            typer.echo(f"{zone}: MTBI {z['mtbiSeconds']:g} s, out of stock {z['stockout']:.0%} of the time")

    @emulator.command()
    def faults(
        api_error_rate: float | None = typer.Option(
            None, help="Fraction of TPU and Compute API calls answered 429 or 503 (0 to 1)."),
        provisioning_delay: float | None = typer.Option(
            None, help="Seconds each provisioning step takes."),
        hostkeys_delay: float | None = typer.Option(
            None, help="Seconds after boot before a node publishes its SSH host keys in guest "
                       "attributes; negative: never."),
        json_: bool = typer.Option(False, "--json"),
    ):
        """Set (or, without options, show) the API error rate and the delays."""
        from tpujob.emulator import process

        current = process.client().set_faults(api_error_rate, provisioning_delay, hostkeys_delay)
        if json_:
            print_json(current)
            return
        keys = current["hostkeysDelay"]
        typer.echo(f"api error rate {current['apiErrorRate']:g}, provisioning delay "
                   f"{current['provisioningDelay']:g} s, host keys "
                   + ("never published" if keys < 0 else f"published {keys:g} s after boot"))
        for s in current["stockouts"]:
            typer.echo(f"stockout: {s['zone']} {s['acceleratorType'] or '(all accelerators)'}")

    @emulator.command("fail-next")
    def fail_next(
        method: str | None = typer.Argument(
            None, help="Discovery method id, e.g. tpu.projects.locations.nodes.create."),
        status: int | None = typer.Option(None, "--status", help="HTTP status (400 to 599)."),
        message: str | None = typer.Option(None, "--message", help="Google's error message."),
        grpc_status: str | None = typer.Option(
            None, "--grpc-status", help="e.g. PERMISSION_DENIED (default: the status's own)."),
        reason: str | None = typer.Option(
            None, "--reason", help="ErrorInfo reason (TPU) or errors[].reason (Compute)."),
        in_operation: bool = typer.Option(
            False, "--in-operation", help="The call succeeds; its operation ends with the error (a "
            "queued resource's create: the queued resource is accepted, then ends FAILED with it)."),
        times: int = typer.Option(1, "--times", min=1, help="How many calls fail."),
        domain: str | None = typer.Option(None, "--domain", help="ErrorInfo domain (default googleapis.com)."),
        metadata: list[str] | None = typer.Option(
            None, "--metadata", help="ErrorInfo metadata KEY=VALUE (repeatable), e.g. location=us-central2-b."),
        quota_violation: list[str] | None = typer.Option(
            None, "--quota-violation", help="A QuotaFailure violation SUBJECT=DESCRIPTION (repeatable)."),
        list_: bool = typer.Option(False, "--list", help="Print the method ids that can fail."),
    ):
        """The next calls of METHOD answer Google's error body (replaying a real answer), or with
        --in-operation succeed and end their long-running operation with it."""
        from tpujob.emulator.apis import fail_next as failnext

        if list_:
            for method_id, has_operation in sorted(failnext.METHODS.items()):
                typer.echo(f"{method_id}{'  (--in-operation)' if has_operation else ''}")
            typer.echo("storage.* cannot fail: Cloud Storage is a separate emulator process")
            return
        from tpujob.errors import UsageError

        if method not in failnext.METHODS:
            raise UsageError(f"unknown method {method!r}: `tpujob emulator fail-next --list` shows "
                             "the methods that can fail" if method else "METHOD is required (or --list)")
        if status is None or not message:
            raise UsageError("--status and --message are required")
        pairs = {}
        for flag, given in (("--metadata", metadata or []), ("--quota-violation", quota_violation or [])):
            if any("=" not in item for item in given):
                raise UsageError(f"{flag} takes KEY=VALUE")
            pairs[flag] = [item.split("=", 1) for item in given]
        from tpujob.emulator import process

        process.client().fail_next(
            method, status, message, grpc_status=grpc_status, reason=reason, in_operation=in_operation,
            times=times, domain=domain, metadata=dict(pairs["--metadata"]),
            quota_violations=[{"subject": k, "description": v} for k, v in pairs["--quota-violation"]])
        where = "in its operation" if in_operation else f"with HTTP {status}"
        typer.echo(f"next {times} call{'s' if times > 1 else ''} of {method} fail {where}")

    @emulator.command("create-bucket")
    def create_bucket(bucket: str = typer.Argument(..., help="Bucket name, without gs://.")):
        """Create a bucket in the emulator's Cloud Storage (`gcloud storage buckets create` on
        Google); one that exists is left as it is."""
        from tpujob.attempt.buckets import create_local_bucket
        from tpujob.clients import local_storage

        made = create_local_bucket(local_storage(), bucket)
        typer.echo(f"bucket gs://{bucket} {'created' if made else 'exists already'}")

    @emulator.command("kill-host")
    def kill_host(node: str = typer.Argument(..., help=SLICE_HELP),
                  host: int = typer.Option(0, "--host", min=0, help="The host's index.")):
        """Kill one host of a slice at once (its processes and SSH server)."""
        from tpujob.emulator import process

        process.client().kill_host(node, host)
        typer.echo(f"host {host} of {node} killed")


    @emulator.command("oslogin")
    def oslogin(
        switch: str | None = typer.Argument(None, help="on or off (none: show the state)."),
        require: bool = typer.Option(
            False, "--require", help="Also the organisation policy constraints/compute.requireOsLogin: "
                                     "a node created with enable-oslogin FALSE is refused."),
        no_role: bool = typer.Option(
            False, "--no-role", help="The account lacks roles/compute.osLogin: keys import, hosts refuse "
                                     "the login."),
        project: str | None = typer.Option(
            None, "--project", help="The emulated project (default: the configured one, tpujob-local)."),
        admin: list[str] = typer.Option(
            [], "--admin", help="An account that also holds roles/compute.osAdminLogin: its user may "
                                "sudo on the hosts (repeatable)."),
    ):
        """OS Login for the emulated projects: once on, their metadata reads enable-oslogin TRUE and
        the hosts accept only keys imported through the OS Login API, as the profile's POSIX user."""
        from tpujob import settings
        from tpujob.emulator import process
        from tpujob.errors import UsageError

        project = project or settings.load().effective_project
        if switch not in (None, "on", "off"):
            raise UsageError(f"oslogin takes on or off, not {switch!r}")
        if switch != "on" and (require or no_role or admin):
            raise UsageError("--require, --no-role and --admin go with `oslogin on`")
        state = process.client().oslogin(project, None if switch is None else switch == "on",
                                         required=require, role=not no_role, admins=admin)
        if not state["enabled"]:
            typer.echo(f"OS Login off in {project}: hosts take the keys in their ssh-keys metadata")
            return
        typer.echo(f"OS Login on in {project}: project metadata enable-oslogin TRUE, hosts take only OS Login keys"
                   + ("; constraints/compute.requireOsLogin enforced" if state["required"] else "")
                   + ("; the account lacks roles/compute.osLogin" if not state["role"] else "")
                   + (f"; roles/compute.osAdminLogin: {', '.join(state['admins'])}" if state.get("admins") else ""))
    @emulator.command("dirty-host")
    def dirty_host(node: str = typer.Argument(..., help=SLICE_HELP),
                   host: int = typer.Option(0, "--host", min=0, help="The host's index."),
                   sticky: bool = typer.Option(False, "--sticky",
                                               help="It comes back after being ended: the host is bad.")):
        """Make a host dirty: a process holds its accelerator device, as one an earlier run left
        would; the next program there fails as on a busy TPU unless the host is cleaned first."""
        from tpujob.emulator import process

        pid = process.client().dirty_host(node, host, sticky)
        typer.echo(f"host {host} of {node}: pid {pid} holds its accelerator"
                   + (" (sticky: it comes back)" if sticky else ""))
    @emulator.command()
    def freeze(node: str = typer.Argument(..., help=SLICE_HELP),
               host: int = typer.Option(0, "--host", min=0, help="The host's index."),
               thaw: bool = typer.Option(False, "--thaw", help="Continue it instead.")):
        """Freeze the job's program on one host (SIGSTOP): it neither beats nor dies, and its peers
        block in their next collective, as behind a host that hangs. --thaw continues it."""
        from tpujob.emulator import process

        count = process.client().freeze(node, host, thaw=thaw)
        typer.echo(f"host {host} of {node}: {count} processes {'continued' if thaw else 'frozen'}")


def _show(info: dict | None, as_json: bool) -> None:
    if as_json:
        print_json({"running": True, **info} if info else {"running": False})
        return
    if not info:
        typer.echo("emulator: not running")
        return
    typer.echo(f"emulator: running (pid {info['pid']}), project {info['project']}")
    for key in ("tpu_endpoint", "compute_endpoint", "storage_endpoint", "ssh_port", "log_file"):
        typer.echo(f"  {key}: {info.get(key)}")
