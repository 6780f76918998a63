"""Benchmark `tpujob lint` over the installed sources of a large real package.

    .venv/bin/python scripts/bench_lint.py [PACKAGE] [--sample 10]

PACKAGE defaults to jax, which the project's `runtime` extra installs (so the benchmark runs
in any dev venv); name transformers or diffusers once installed for torch-style code. The
package is located with importlib.util.find_spec and never imported. Prints files, findings
per rule, seconds (wall and CPU), and seconds per 1,000 files.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from tpujob.errors import UsageError
from tpujob.lint import lint_paths, render_text
from tpujob.lint.files import package_dir, python_files

DEFAULT = "jax"  # installed with `pip install -e '.[runtime]'`


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default=DEFAULT)
    parser.add_argument("--sample", type=int, default=10, help="findings to print")
    args = parser.parse_args()

    try:
        root = package_dir(args.package)
    except UsageError as exc:
        print(f"{exc} ({sys.prefix}); install it first (e.g. `{sys.executable} -m pip install "
              f"{args.package}`) or name an installed package", file=sys.stderr)
        return 2
    files = python_files(root)
    size_mb = sum(f.stat().st_size for f in files) / 1e6

    start, cpu_start = time.perf_counter(), time.process_time()
    findings = lint_paths([root])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start

    print(f"package    {args.package} ({root})")
    print(f"files      {len(files)} ({size_mb:.1f} MB of source)")
    counts = sorted(Counter(f.rule for f in findings).items())
    by_rule = ", ".join(f"{rule} {n}" for rule, n in counts)
    print(f"findings   {len(findings)}" + (f": {by_rule}" if by_rule else ""))
    per_1000 = 1000 / max(len(files), 1)
    # CPU time too: on a busy machine wall time overstates what the linter costs.
    print(f"seconds    {seconds:.1f} wall, {cpu:.1f} CPU")
    print(f"s/1000     {seconds * per_1000:.2f} wall, {cpu * per_1000:.2f} CPU seconds per "
          f"1,000 files")
    if args.sample and findings:
        # One finding per rule first, so the sample shows the variety.
        by_rule: dict[str, list] = {}
        for f in findings:
            by_rule.setdefault(f.rule, []).append(f)
        sample = [fs[0] for fs in by_rule.values()][: args.sample]
        print("sample:")
        print(render_text(sample).rsplit("\n", 1)[0].replace(str(root.parent) + "/", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
