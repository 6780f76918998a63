"""Measure `tpujob lint`: precision and recall on labelled real code, and speed.

    .venv/bin/python scripts/bench_lint.py --corpus /work/.mirror [--manifest M] [--show]
    .venv/bin/python scripts/bench_lint.py --speed DIR [--limit 1000]  # a repository's tree
    .venv/bin/python scripts/bench_lint.py --speed jax      # an installed package

--corpus: tests/lint/real/corpus.yaml names public repositories, the commit read and, per
file, the lines that carry a true pitfall and lines that only look like one. The snapshots
are git repositories found under DIR as `owner+name/repo`, `owner+name` or `name` (bare or
with a .git). Each named file is taken from the named commit with `git show` into a
temporary directory, the files of one repository are linted as one set (as `tpujob lint`
lints a sync directory), and each finding is compared with the labels: a finding of rule R
inside a pitfall labelled R finds it; any other finding is a false positive. Prints
precision and recall overall, per rule, and for the held-out repositories on their own.
Exits 2 naming the snapshots that are missing (CI has no network to fetch them).

--speed: lints every file under a directory (or an installed package's sources, located
with importlib.util.find_spec, never imported) and prints files, findings and seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tpujob.errors import UsageError
from tpujob.lint import RULES, Finding, lint_paths
from tpujob.lint.files import package_dir, python_files

MANIFEST = Path(__file__).resolve().parent.parent / "tests" / "lint" / "real" / "corpus.yaml"


@dataclass
class Tally:
    found: int = 0  # pitfall labels a finding hit
    missed: int = 0  # pitfall labels no finding hit
    false: int = 0  # findings outside every pitfall label of their rule

    def add(self, other: Tally) -> None:
        self.found += other.found
        self.missed += other.missed
        self.false += other.false

    def line(self, name: str) -> str:
        flagged = self.found + self.false
        labelled = self.found + self.missed
        precision = f"{self.found / flagged:.2f}" if flagged else "  - "
        recall = f"{self.recall:.2f}" if labelled else "  - "
        return (f"{name:<26} precision {precision} ({self.found}/{flagged})   "
                f"recall {recall} ({self.found}/{labelled})   false positives {self.false}")

    @property
    def precision(self) -> float:
        return self.found / (self.found + self.false) if self.found + self.false else 1.0

    @property
    def recall(self) -> float:
        return self.found / (self.found + self.missed) if self.found + self.missed else 1.0


@dataclass
class Result:
    total: Tally = field(default_factory=Tally)
    rules: dict[str, Tally] = field(default_factory=dict)
    misses: list[str] = field(default_factory=list)
    falses: list[str] = field(default_factory=list)

    def rule(self, rule: str) -> Tally:
        return self.rules.setdefault(rule, Tally())


def find_snapshot(root: Path, name: str) -> Path | None:
    """The git directory of `owner/name` under root, in the layouts `fetch` and clones use."""
    owner, _, repo = name.partition("/")
    for candidate in (root / f"{owner}+{repo}" / "repo", root / f"{owner}+{repo}",
                      root / repo, root / f"{repo}.git"):
        if candidate.is_dir() and subprocess.run(
                ["git", "--git-dir", str(candidate / ".git") if (candidate / ".git").is_dir()
                 else str(candidate), "rev-parse", "--git-dir"],
                capture_output=True).returncode == 0:
            return candidate / ".git" if (candidate / ".git").is_dir() else candidate
    return None


def extract(git_dir: Path, commit: str, paths: list[str], dest: Path) -> None:
    for path in paths:
        blob = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"],
                              capture_output=True)
        if blob.returncode:
            raise SystemExit(f"{git_dir}: no {path} at {commit}: "
                             f"{blob.stderr.decode(errors='replace').strip()}")
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob.stdout)


def score(repo: dict, findings: list[Finding], base: Path, result: Result) -> None:
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(Path(f.path).relative_to(base).as_posix(), []).append(f)
    for entry in repo["files"]:
        got = by_file.get(entry["path"], [])
        matched: set[int] = set()
        for label in entry.get("pitfalls", []):
            first, last = label["line"], label.get("to", label["line"])
            hits = [i for i, f in enumerate(got) if f.rule == label["rule"]
                    and f.cell == label.get("cell") and first <= f.line <= last]
            matched.update(hits)
            tally = result.rule(label["rule"])
            where = f"{repo['name']} {entry['path']}" + (
                f" cell {label['cell']}" if "cell" in label else "") + f":{first}"
            if hits:
                tally.found += 1
            else:
                tally.missed += 1
                result.misses.append(f"missed {label['rule']} {where}: {label['why']}")
        for i, f in enumerate(got):
            if i not in matched:
                result.rule(f.rule).false += 1
                cell = f" cell {f.cell}" if f.cell is not None else ""
                result.falses.append(f"false {f.rule} {repo['name']} {entry['path']}{cell}:"
                                     f"{f.line} {f.message[:100]}")


def corpus(root: Path, manifest: Path, show: bool, show_held_out: bool = False) -> int:
    data = yaml.safe_load(manifest.read_text())
    repos = data["repositories"]
    snapshots = {r["name"]: find_snapshot(root, r["name"]) for r in repos}
    missing = [name for name, where in snapshots.items() if where is None]
    if missing:
        print(f"bench_lint: {len(missing)} of {len(repos)} snapshots missing under {root}: "
              f"{', '.join(missing)}; clone them (e.g. `git clone --bare "
              f"https://github.com/OWNER/NAME DIR/NAME.git`) to read the commits "
              f"{manifest.name} names",
              file=sys.stderr)
        return 2
    dev, held = Result(), Result()
    for repo in repos:
        git_dir = snapshots[repo["name"]]
        assert git_dir is not None
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            paths = [e["path"] for e in repo["files"]]
            extract(git_dir, repo["commit"], paths, base)
            # The repository's files are one set, as a sync directory would be; each file is
            # scored with the part (tuning or held out) it belongs to.
            findings = lint_paths([base / p for p in paths])
            for part, held_out in ((dev, False), (held, True)):
                files = [e for e in repo["files"]
                         if e.get("held_out", repo.get("held_out", False)) == held_out]
                if files:
                    score({**repo, "files": files}, findings, base, part)
    everything = Result()
    for part in (dev, held):
        everything.total.add(_sum(part))
        for rule, tally in part.rules.items():
            everything.rule(rule).add(tally)
    print(f"corpus     {manifest} ({len(repos)} repositories, "
          f"{sum(len(r['files']) for r in repos)} files)")
    print(everything.total.line("overall"))
    # Every rule, also those the corpus holds no pitfall of and that found nothing there.
    for rule in sorted(RULES):
        print(everything.rule(rule).line(f"  {rule}"))
    print(_sum(dev).line("tuning set"))
    held_names = ", ".join(sorted({r["name"] for r in repos for e in r["files"]
                                   if e.get("held_out", r.get("held_out"))}))
    print(_sum(held).line("held out") + f"   ({held_names})")
    for rule in sorted(held.rules):
        print(held.rules[rule].line(f"  {rule}"))
    for part, wanted in ((dev, show), (held, show_held_out)):
        if wanted:
            for line in part.misses + part.falses:
                print(line)
    return 0


def _sum(result: Result) -> Tally:
    total = Tally()
    for tally in result.rules.values():
        total.add(tally)
    return total


def speed(target: str, limit: int | None = None) -> int:
    path = Path(target)
    try:
        root = path if path.exists() else package_dir(target)
    except UsageError as exc:
        print(f"bench_lint: {exc} ({sys.prefix}); name a directory or an installed package",
              file=sys.stderr)
        return 2
    files = python_files(root)[:limit]
    size_mb = sum(f.stat().st_size for f in files) / 1e6
    start, cpu_start = time.perf_counter(), time.process_time()
    findings = lint_paths(files)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    print(f"tree       {root}")
    print(f"files      {len(files)} ({size_mb:.1f} MB of source)")
    counts = ", ".join(f"{rule} {n}" for rule, n in sorted(Counter(f.rule for f in findings)
                                                            .items()))
    print(f"findings   {len(findings)}" + (f": {counts}" if counts else ""))
    # CPU time too: on a busy machine wall time overstates what the linter costs.
    print(f"seconds    {seconds:.1f} wall, {cpu:.1f} CPU")
    per_1000 = 1000 / max(len(files), 1)
    print(f"s/1000     {seconds * per_1000:.2f} wall, {cpu * per_1000:.2f} CPU seconds per "
          f"1,000 files")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--corpus", metavar="DIR", type=Path,
                      help="directory holding the snapshots the manifest names")
    mode.add_argument("--speed", metavar="DIR_OR_PACKAGE",
                      help="lint a directory or an installed package and time it")
    parser.add_argument("--manifest", type=Path, default=MANIFEST)
    parser.add_argument("--limit", type=int, metavar="N",
                        help="--speed: lint only the first N files (sorted), e.g. 1000")
    parser.add_argument("--show", action="store_true",
                        help="list every missed pitfall and false positive of the tuning set")
    parser.add_argument("--show-held-out", action="store_true",
                        help="the same for the held-out repositories (look only to report: "
                             "tuning rules on them voids their figures)")
    args = parser.parse_args()
    if args.corpus is not None:
        if not args.corpus.is_dir():
            print(f"bench_lint: {args.corpus}: no such directory", file=sys.stderr)
            return 2
        return corpus(args.corpus, args.manifest, args.show, args.show_held_out)
    return speed(args.speed, args.limit)


if __name__ == "__main__":
    sys.exit(main())
