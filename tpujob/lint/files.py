"""Which files to lint: paths given, directories walked (honouring a simple .gitignore), and
the source directories of installed packages named by --deps (found without importing them).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
from pathlib import Path

from tpujob.errors import UsageError

# Never descended into: version control, caches, and virtual environments (they hold
# site-packages, which is what --deps is for).
SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}


class GitIgnore:
    """The top-level .gitignore of a directory, in its common subset: globs, `dir/`, leading
    `/` anchors, `**`, and `!` negation (last match wins). Nested .gitignore files are not read.
    """

    def __init__(self, lines: list[str]):
        self.patterns: list[tuple[str, bool, bool, bool]] = []  # glob, negate, dir_only, anchored
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            line = line[1:] if negate else line
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            self.patterns.append((line.lstrip("/"), negate, dir_only, anchored))

    @classmethod
    def of(cls, root: Path) -> GitIgnore:
        path = root / ".gitignore"
        try:
            return cls(path.read_text(encoding="utf-8", errors="replace").splitlines())
        except OSError:
            return cls([])

    def ignored(self, relative: str, is_dir: bool) -> bool:
        name = relative.rsplit("/", 1)[-1]
        result = False
        for glob, negate, dir_only, anchored in self.patterns:
            if dir_only and not is_dir:
                continue
            if anchored:
                hit = fnmatch.fnmatchcase(relative, glob) or (
                    glob.startswith("**/") and fnmatch.fnmatchcase(relative, glob[3:]))
            else:
                hit = fnmatch.fnmatchcase(name, glob)
            if hit:
                result = not negate
        return result


def python_files(path: Path) -> list[Path]:
    """A file as given, or the .py and .ipynb files under a directory, sorted, minus ignored
    ones."""
    if path.is_file():
        return [path]
    ignore = GitIgnore.of(path)
    found: list[Path] = []
    for current, dirs, files in os.walk(path):
        here = Path(current)
        rel = here.relative_to(path).as_posix()
        prefix = "" if rel == "." else rel + "/"
        dirs[:] = sorted(
            d for d in dirs
            if not d.startswith(".") and d not in SKIP_DIRS
            and not (here / d / "pyvenv.cfg").exists()
            and not ignore.ignored(prefix + d, is_dir=True))
        found.extend(here / f for f in sorted(files)
                     if f.endswith((".py", ".ipynb")) and not ignore.ignored(prefix + f, is_dir=False))
    return found


def package_dir(name: str) -> Path:
    """The source directory (or single file) of an installed package, without importing it.

    A dotted name is looked up below its top-level package's directory, because
    find_spec("a.b") would import `a`.
    """
    top, _, rest = name.partition(".")
    if not top.isidentifier():
        raise UsageError(f"--deps {name!r} is not an importable package name "
                         f"(use the import name, e.g. {top.replace('-', '_')!r})")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise UsageError(f"--deps {name}: cannot locate the package ({exc})") from exc
    if spec is None:
        raise UsageError(f"--deps {name}: package not installed in this Python environment")
    if spec.submodule_search_locations:
        base = Path(next(iter(spec.submodule_search_locations)))
    elif spec.origin and spec.origin.endswith(".py"):
        base = Path(spec.origin)
    else:
        raise UsageError(f"--deps {name}: no Python sources to scan ({spec.origin})")
    if rest:
        base = base.joinpath(*rest.split("."))
        if not base.is_dir():
            base = base.with_suffix(".py")
        if not base.exists():
            raise UsageError(f"--deps {name}: no such module in {top}")
    return base
