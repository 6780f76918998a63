"""The emulated image's Python (tpujob/emulator/machines/image_site): JAX's compile cache keyed by the
slice, so that every host of a slice reads what another wrote, as on a TPU VM, and one compile
per program where the hosts share a cache directory."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from tpujob.emulator.machines.slice import IMAGE_SITE

# One program on a two-process CPU "slice", as the runtime's hosts run it, its compile made slow
# (2 s) so that both processes reach it while it compiles: says whether this process compiled
# it or read it from JAX's persistent cache.
PROGRAM = textwrap.dedent("""\
    import sys, time
    import numpy as np
    import jax
    from jax._src import compiler
    compiled = []

    def slow_compile(backend, module, *args, _compile=compiler.backend_compile_and_load, **kw):
        if "the_program" in str(module.operation.attributes["sym_name"]):
            compiled.append(True)
            time.sleep(2)
        return _compile(backend, module, *args, **kw)

    compiler.backend_compile_and_load = slow_compile
    jax.distributed.initialize(coordinator_address=sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("d",))
    x = jax.make_array_from_callback((8, 8), NamedSharding(mesh, P("d")), lambda i: np.ones((8, 8))[i])

    @jax.jit
    def the_program(x):
        return (jnp.sin(x) @ x.T).sum()

    print(float(the_program(x)), "compiled" if compiled else "read")
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slice_runs(tmp_path, pythonpath: str | None) -> list[str]:
    """Each process's answer, process 0 first. The cache directory comes from the environment,
    as the image's (`--image-env JAX_COMPILATION_CACHE_DIR=...`) does."""
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JAX_COMPILATION_CACHE_DIR")}
    env.update({"JAX_PLATFORMS": "cpu", "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "cache"),
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
                **({"PYTHONPATH": pythonpath} if pythonpath else {})})
    coordinator = f"127.0.0.1:{_free_port()}"
    procs = [subprocess.Popen([sys.executable, str(script), coordinator, str(i)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    out = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in out]
    return [o[0].strip().splitlines()[-1] for o in out]  # jax may print lines of its own first


@pytest.mark.slow
def test_a_slice_compiles_its_program_once_and_every_host_reads_it_after(tmp_path):
    first = _slice_runs(tmp_path, IMAGE_SITE)
    # One compiles (whichever takes the program's lock first), the other waits and reads it,
    # whatever its process index: JAX alone writes from process 0 only.
    assert sorted(line.split()[1] for line in first) == ["compiled", "read"]
    again = _slice_runs(tmp_path, IMAGE_SITE)
    assert [line.split()[1] for line in again] == ["read", "read"]  # host 1 too: one key for the slice
    assert {line.split()[0] for line in first + again} == {first[0].split()[0]}  # the same answer


@pytest.mark.slow
def test_without_it_both_hosts_compile_and_host_1_always_misses(tmp_path):
    """What the image site corrects (jax/_src/cache_key.py: the CPU topology is per process; JAX
    writes from process 0 only). Fails, and should be looked at, once JAX keys CPU programs by
    the slice itself."""
    assert [line.split()[1] for line in _slice_runs(tmp_path, None)] == ["compiled", "compiled"]
    assert [line.split()[1] for line in _slice_runs(tmp_path, None)] == ["read", "compiled"]


def test_it_imports_nothing_until_a_program_does_and_runs_the_sitecustomize_it_shadows(tmp_path):
    shadowed = tmp_path / "image"
    shadowed.mkdir()
    (shadowed / "sitecustomize.py").write_text("import sys\nsys.shadowed_ran = True\n")
    probe = "import sys; print(getattr(sys, 'shadowed_ran', False), 'jax' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": f"{IMAGE_SITE}{os.pathsep}{shadowed}"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout.split()) == (0, ["True", "False"]), out.stderr
