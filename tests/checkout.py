"""A copy of the checkout for tests that must run the project from a tree of their own."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package_copy(dest: Path) -> Path:
    """The checkout's files that git would commit (tracked, and untracked but not ignored),
    copied to ``dest``: no virtual environments, caches or links. A file listed but gone by the
    time it is copied is left out: tests running beside this one (pytest -n) plant files in the
    checkout for the length of a module (the sandboxes' secrets) and remove them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = ROOT / name
        if src.is_file() and not src.is_symlink():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(src, dest / name)
    return dest
