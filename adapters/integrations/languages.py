"""Languages of the sandbox service besides plain Python: compile and run steps, as SandboxFusion.

A request in another language (or a Python request with ``files`` / ``fetch_files``) runs as one
sandbox job whose program is a small Python *driver* (:func:`driver_source`): it writes the
request's ``files`` (base64) and the code into the job's private working directory (a name is
a path in that directory; an absolute one, such as SandboxFusion's ``/mnt/data/in.txt``, is
taken inside it too, never on the host, and its directory is made for the program; a name with
``..`` is refused), runs the
compiler (``compile_timeout``, output captured), then the program (``run_timeout``; it inherits
the job's stdin, stdout and stderr, so the sandbox's output caps apply), and reports the two
steps and the fetched files (named as the request names them, read the same way) as one JSON
line on the job's results channel (file descriptor 3, which the program does not inherit). In
the sandboxes, ``/mnt/data`` leads to the job directory's ``mnt/data``
(:func:`sandboxes.local.mnt_dir`), so a program that writes ``/mnt/data/out.txt`` and a request
that fetches that name meet; other absolute paths of a request exist only in the job's
directory, where the program finds them by their relative name. The job's wall limit covers both
steps; memory, process and output limits are the request's, as for Python.

=============  ======================  ==============================================  ========
language       source file             compile / run                                   needs
=============  ======================  ==============================================  ========
``python``     ``main.py``             ``python main.py`` (the job's interpreter)      -
``pytest``     ``test_main.py``        ``python -m pytest -q test_main.py``            pytest in
                                                                                       the jobs'
                                                                                       runtime
``cpp``        ``main.cpp``            ``g++ -O2 -std=gnu++17`` / ``./main``           g++
``c``          ``main.c``              ``gcc -O2 -std=gnu11 ... -lm`` / ``./main``     gcc
``java``       ``Main.java``           ``javac`` / ``java -cp . Main`` (heap: half     javac
                                       the memory limit)
``nodejs``     ``main.js``             ``node main.js`` (alias ``javascript``)         node
``go``         ``main.go``             ``go build`` / ``./main``                       go
``bash``       ``main.sh``             ``bash main.sh``                                bash
=============  ======================  ==============================================  ========

Both backends run the same driver; which languages a server offers depends on the toolchains
its jobs find (:func:`in_sandbox` asks a job at start-up), and ``GET /v1/languages`` lists them;
any other language is refused with ``SandboxError`` and that list:

* local (bubblewrap) backend: the host's ``/usr``, so those installed on the host
  (``apt-get install g++ nodejs default-jdk-headless golang-go``); ``pytest`` with
  ``--site-packages`` when the base interpreter has pytest.
* Docker backend: the image's. ``scripts/build_sandbox_image.sh`` installs Debian bookworm's
  ``gcc``, ``g++`` (GCC 12), ``nodejs`` (18), ``default-jdk-headless`` (OpenJDK 17),
  ``golang-go`` (1.19) and ``python3-pytest`` (``pytest`` with ``--site-packages``), so it runs
  all eight; an image built before they were added runs Python only (rebuild with
  ``MAS_SANDBOX_FORCE=1``). Measured on a loaded 2-core machine, these add about 75 s to the
  cold build (42-72 s before, 108-165 s after, debootstrap included) and 1.1 GB to the image
  (161 MB -> 1.27 GB: Go 0.46 GB and 30 s, Java 0.30 GB and 20 s of it).

A Java class is run under the name of the code's ``public class`` (``Main`` when there is none).
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALIASES",
    "TOOLCHAINS",
    "Toolchain",
    "available",
    "driver_source",
    "in_sandbox",
    "languages",
    "parse_report",
]


@dataclass(frozen=True)
class Toolchain:
    """How one language is compiled and run (``{src}``, ``{python}``, ``{heap}``, ``{cls}``
    are filled in by the driver)."""

    source: str
    compile: tuple[str, ...] | None
    run: tuple[str, ...]
    needs: str | None  # the executable that must exist where jobs run


JAVA_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:CompressedClassSpaceSize=64m",
    "-XX:ReservedCodeCacheSize=64m",
    "-XX:MaxMetaspaceSize=128m",
    "-XX:TieredStopAtLevel=1",
    "-Xshare:off",
)
TOOLCHAINS: dict[str, Toolchain] = {
    "python": Toolchain("main.py", None, ("{python}", "main.py"), None),
    "pytest": Toolchain(
        "test_main.py",
        None,
        ("{python}", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_main.py"),
        None,
    ),
    "cpp": Toolchain(
        "main.cpp", ("g++", "-O2", "-std=gnu++17", "-o", "main", "main.cpp"), ("./main",), "g++"
    ),
    "c": Toolchain(
        "main.c", ("gcc", "-O2", "-std=gnu11", "-o", "main", "main.c", "-lm"), ("./main",), "gcc"
    ),
    "java": Toolchain(
        "{cls}.java",
        (
            "javac", *(f"-J{f}" for f in JAVA_FLAGS), "-J-Xmx{heap}m",
            "-encoding", "UTF-8", "{cls}.java",
        ),
        ("java", *JAVA_FLAGS, "-Xmx{heap}m", "-cp", ".", "{cls}"),
        "javac",
    ),
    "nodejs": Toolchain("main.js", None, ("node", "main.js"), "node"),
    "go": Toolchain("main.go", ("go", "build", "-o", "main", "main.go"), ("./main",), "go"),
    "bash": Toolchain("main.sh", None, ("bash", "main.sh"), "bash"),
}  # fmt: skip
ALIASES = {"javascript": "nodejs"}


def languages(have: Collection[str], pytest: bool) -> list[str]:
    """The languages that run where the executables ``have`` exist (``pytest``: the jobs can
    import pytest), aliases last.

    >>> languages({"g++", "bash"}, pytest=False)
    ['python', 'cpp', 'bash']
    >>> languages({"node"}, pytest=True)
    ['python', 'pytest', 'nodejs', 'javascript']
    """
    out = []
    for name, chain in TOOLCHAINS.items():
        if name == "pytest":
            if pytest:
                out.append(name)
        elif chain.needs is None or chain.needs in have:
            out.append(name)
    return out + [a for a, target in ALIASES.items() if target in out]


def available(site_packages: bool = False) -> list[str]:
    """The languages whose toolchain this host has (the local backend's jobs see the host's
    ``/usr``); ``pytest`` only when jobs may import the interpreter's packages
    (``site_packages``) and pytest is one of them (the jobs' interpreter is the base one, not a
    virtual environment's). :func:`in_sandbox` asks a sandbox's own jobs instead."""
    import sys
    import sysconfig
    from pathlib import Path

    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    job_packages = Path(sysconfig.get_paths(vars=base)["purelib"])
    have = {c.needs for c in TOOLCHAINS.values() if c.needs and shutil.which(c.needs)}
    return languages(have, site_packages and (job_packages / "pytest").is_dir())


_PROBE = """
import importlib.util, json, shutil
have = [n for n in %(needs)r if shutil.which(n)]
print(json.dumps({"have": have, "pytest": importlib.util.find_spec("pytest") is not None}))
"""


def in_sandbox(sandbox: Any) -> list[str]:
    """The languages ``sandbox``'s jobs can run, asked of a job of its own: the executables it
    finds on its ``PATH`` (the host's ``/usr`` for the local backend, the image's for Docker)
    and whether it can import pytest (``site_packages``). Python alone when the probe fails."""
    import sandboxes

    needs = sorted({c.needs for c in TOOLCHAINS.values() if c.needs})
    result = sandbox.run(_PROBE % {"needs": needs}, limits=sandboxes.Limits(wall_s=30, ipc=True))
    try:
        found = json.loads(result.stdout) if result.ok else {}
    except ValueError:
        found = {}
    return languages(set(found.get("have") or ()), bool(found.get("pytest")))


def java_class(code: str) -> str:
    """The class a Java program is run as.

    >>> java_class("import java.util.*;\\npublic class Solution {\\n}")
    'Solution'
    >>> java_class("class A {}")
    'Main'
    """
    m = re.search(r"\bpublic\s+(?:final\s+)?class\s+([A-Za-z_$][\w$]*)", code)
    return m.group(1) if m else "Main"


_DRIVER = r"""
import base64, json, os, signal, subprocess, sys, time
S = json.loads(base64.b64decode(%(spec)r))
CAP = S["cap"]
def fill(args):
    return [a.format(python=sys.executable, heap=S["heap"], cls=S["cls"]) for a in args]
def report(obj):
    data = json.dumps(obj).encode()
    while data:
        data = data[os.write(3, data):]
def text(b):
    return b[-CAP:].decode("utf-8", "replace")
def local(name):
    path = name.lstrip("/")
    if ".." in path.split("/") or path in ("", "."):
        return None
    return path
out = {"compile": None, "run": None, "files": {}, "error": None}
for name in list(S["files"]) + S["fetch"]:
    path = local(name)
    if path is None:
        if name in S["files"]:
            out["error"] = "unsafe file name %%r" %% name
            report(out)
            sys.exit(0)
        continue
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, exist_ok=True)
for name, data in S["files"].items():
    with open(local(name), "wb") as f:
        f.write(base64.b64decode(data))
with open(S["source"].format(cls=S["cls"]), "w", encoding="utf-8") as f:
    f.write(S["code"])
def step(args, timeout, capture):
    t0 = time.monotonic()
    kw = (
        dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if capture
        else {}
    )
    try:
        p = subprocess.Popen(fill(args), start_new_session=True, **kw)
    except OSError as e:
        return {
            "status": "Error", "return_code": None, "stdout": "",
            "stderr": "%%s: %%s" %% (args[0], e), "execution_time": 0.0,
        }
    try:
        so, se = p.communicate(timeout=timeout)
        status, code = "Finished", p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        so, se = p.communicate()
        status, code = "TimeLimitExceeded", None
    r = {"status": status, "return_code": code, "execution_time": time.monotonic() - t0}
    if capture:
        r["stdout"], r["stderr"] = text(so or b""), text(se or b"")
    return r
if S["compile"]:
    out["compile"] = step(S["compile"], S["compile_timeout"], True)
    if out["compile"]["status"] != "Finished" or out["compile"]["return_code"] != 0:
        report(out)
        sys.exit(0)
out["run"] = step(S["run"], S["run_timeout"], False)
budget = CAP
for name in S["fetch"]:
    try:
        if local(name) is None:
            raise OSError("unsafe file name")
        with open(local(name), "rb") as f:
            data = f.read(budget + 1)
        if len(data) > budget:
            raise OSError("larger than the output limit")
        budget -= len(data)
        out["files"][name] = base64.b64encode(data).decode()
    except OSError as e:
        out["files"][name] = None
report(out)
"""


def driver_source(
    language: str,
    code: str,
    *,
    files: dict[str, str | None],
    fetch_files: list[str],
    compile_timeout: float,
    run_timeout: float,
    memory_mb: int,
    output_cap: int,
) -> str:
    """The Python program that compiles and runs ``code`` in a sandbox job (module docstring)."""
    chain = TOOLCHAINS[ALIASES.get(language, language)]
    spec = {
        "code": code,
        "source": chain.source,
        "compile": list(chain.compile) if chain.compile else None,
        "run": list(chain.run),
        "files": {k: v for k, v in files.items() if v is not None},
        "fetch": list(fetch_files),
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "heap": max(16, memory_mb // 2),
        "cls": java_class(code) if language == "java" else "Main",
        "cap": output_cap,
    }
    blob = base64.b64encode(json.dumps(spec).encode()).decode()
    return _DRIVER % {"spec": blob}


def parse_report(results: str) -> dict[str, Any] | None:
    """The driver's report (None when the job ended before it could write one)."""
    try:
        report = json.loads(results)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None
