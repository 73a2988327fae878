"""A SandboxFusion-compatible code execution service backed by this project's sandboxes.

`SandboxFusion <https://github.com/bytedance/SandboxFusion>`_'s ``POST /run_code`` is the API
that verl's code reward functions (``verl.utils.reward_score.sandbox_fusion``), MARTI and MAE
call to run model-written programs. This service answers it with :class:`sandboxes.LocalSandbox`
(bubblewrap, warm fork servers) or :class:`sandboxes.DockerSandbox`, so those users point their
sandbox URL here and get this project's isolation and speed::

    python -m adapters.serve_sandbox --port 8080                     # local (bubblewrap) backend
    python -m adapters.serve_sandbox --backend docker --workers 8    # warm container pool

    # verl: reward_model.sandbox_fusion.url=http://127.0.0.1:8080/run_code
    # sandbox-fusion client:
    from sandbox_fusion import RunCodeRequest, run_code, set_endpoint
    set_endpoint("http://127.0.0.1:8080")
    print(run_code(RunCodeRequest(code="print(1 + 1)", language="python")).run_result.stdout)

Request (SandboxFusion's ``RunCodeRequest``; unknown fields are ignored, as there):

=================  ============================================================================
``code``           the program (required)
``language``       required; one of ``GET /v1/languages`` (``python`` always; ``cpp``, ``c``,
                   ``java``, ``nodejs``/``javascript``, ``bash``, ``go``, ``pytest`` where the
                   jobs find the toolchain: on the host for the local backend, all of them in
                   the Docker image; :mod:`adapters.integrations.languages`); another of
                   SandboxFusion's names gets ``status: "SandboxError"`` and that list; a name
                   outside them is a 422 validation error, as there
``stdin``          text fed to standard input (``null``: none)
``run_timeout``    wall-clock limit of the run in seconds (<= 0: the default, 10; capped at the
                   server's ``--max-run-timeout``); the CPU-time limit is the same
``compile_timeout``  limit of the compile step (compiled languages; capped likewise)
``memory_limit_MB``  memory limit; ``-1`` (SandboxFusion's "none") or any value <= 0 means the
                   server's ``--memory-mb``; capped at ``--max-memory-mb``, at least 32
``files``          file name -> base64 content, written into the job's private working
                   directory before the run (``null`` values are skipped; an absolute name
                   such as ``/mnt/data/in.txt`` is taken inside that directory, where jobs
                   see ``/mnt/data``; a name with ``..`` is refused)
``fetch_files``    files read back after the run (names as for ``files``), returned base64 in
                   the response's ``files`` under the name asked for
=================  ============================================================================

Response (SandboxFusion's ``RunCodeResponse``, field for field): ``status`` ``"Success"`` (exit
code 0) / ``"Failed"`` (non-zero exit, killed, a limit hit, a compile error) / ``"SandboxError"``
(the request could not be run: unsupported language, unsafe file name, or the sandbox itself
failed); ``message`` (empty on success and on a compile error, else why); ``compile_result``
(the compile step of a compiled language, else ``null``; a failed compile is ``Failed`` with
the compiler's stderr there and no ``run_result``, which verl scores as a compile error);
``run_result``: ``status`` (``"Finished"``, ``"TimeLimitExceeded"`` for the wall or CPU limit,
``"Error"`` for a sandbox failure), ``execution_time`` (seconds), ``return_code`` (the exit
code; ``-N`` when killed by signal N, as ``subprocess`` reports it; ``null`` on a time-out),
``stdout``, ``stderr``; ``executor_pod_name`` (``$MY_POD_NAME``, as SandboxFusion); ``files``
(the fetched files). A memory or output limit hit makes the status ``"Failed"`` even when the
exit code is 0, with the reason in ``message``. ``GET /v1/ping`` answers ``"pong"``.

Load: at most ``--workers`` jobs run at once (default 64, verl's default concurrency, so its
bursts start at once), and only as many as the sum of their memory limits fits in
``--memory-budget-mb`` (default three quarters of the memory the host has available when the
service starts): 64 programs that each fill verl's 1024 MB would otherwise exhaust a 24 GiB
host, whose out-of-memory killer then ends one of them, scored as a crash where a larger host
gives the time-out. A job's time limits count from its start on a worker, never from its
arrival (:class:`Admission`). Up to ``--queue`` more requests (default 256) wait for a worker,
first come first served, and a request finding the queue full is answered 504, which verl and
the ``sandbox-fusion`` client retry. A client's own timeout, though, counts from its request:
verl gives each request ``compile_timeout + run_timeout + 10`` s and scores one that runs out as
an API error (-1) where the program would have timed out (-3). So a request that has waited
``--keepalive`` seconds (default 2) gets its answer's status (200) and then a space every
``--keepalive`` seconds until it runs, then the JSON response: leading whitespace, which every
JSON parser skips, and bytes that restart a client's read timeout (``requests``/urllib3 and
httpx timeouts, which verl and the ``sandbox-fusion`` client use, are per read), so a small
host serves a large burst slowly but with the scores it would have on a large one. A client
with a deadline for the whole exchange (aiohttp's ``total``) still counts the wait. With
``--keepalive 0`` a queued request waits at most ``--queue-timeout`` seconds (default 8) and is
then answered 504 instead.

Exposure: the guard of :mod:`adapters.integrations._guard` (optional bearer token from
``$MAS_SERVICE_TOKEN``, 20 MiB bodies refused before they are read, header-read timeout,
connection limit) is the threat model's first half; the second is that a client never sets the
server's limits: every request's time, memory and output limits are clamped to the operator's
flags, and jobs get no network and a private working directory wiped afterwards.

Differences from SandboxFusion: jobs see only the Python standard library (no numpy etc. unless
the server runs with ``--site-packages``), never a network, and output is capped
(``--max-output-mb``); code longer than 16 Mi characters or stdin longer than 64 Mi is a 422;
``message`` carries the reason on ``Failed`` (SandboxFusion leaves it empty); ``/run_jupyter``
and the dataset endpoints are not served.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

import sandboxes

__all__ = [
    "DEFAULT_QUEUE",
    "LANGUAGES",
    "CommandRunResult",
    "RunCodeRequest",
    "RunCodeResponse",
    "Admission",
    "Overloaded",
    "ServiceLimits",
    "Ticket",
    "create_app",
    "host_memory_budget_mb",
    "run_code",
]

Language = Literal[
    "python", "cpp", "nodejs", "go", "go_test", "java", "php", "csharp", "bash", "typescript",
    "sql", "rust", "cuda", "lua", "R", "perl", "D_ut", "ruby", "scala", "julia", "pytest",
    "junit", "kotlin_script", "jest", "verilog", "python_gpu", "lean", "swift", "racket",
    "c", "javascript",  # this service's additions: C, and an alias of nodejs
]  # fmt: skip
MAX_CODE_CHARS = 16 << 20
DEFAULT_RUN_TIMEOUT_S = 10.0  # SandboxFusion's default, also for a run_timeout <= 0
MAX_STDIN_CHARS = 64 << 20
DEFAULT_QUEUE = 256
"""Requests that may wait for a worker by default (at least as many as there are workers)."""
LANGUAGES: tuple[str, ...] = Language.__args__  # type: ignore[attr-defined]
"""SandboxFusion's ``Language`` names (``sandbox/runners/types.py``), plus ``c`` and
``javascript``."""


class CommandRunStatus(StrEnum):
    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunStatus(StrEnum):
    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: float | None = None
    return_code: int | None = None
    stdout: str | None = None
    stderr: str | None = None


class RunCodeRequest(BaseModel):
    compile_timeout: float = Field(default=10, description="accepted and ignored (Python)")
    run_timeout: float = Field(
        default=10, allow_inf_nan=False, description="wall limit, seconds (<= 0: 10)"
    )
    memory_limit_MB: int = Field(
        default=-1, description="memory limit in MiB; -1: the server default"
    )
    code: str = Field(..., max_length=MAX_CODE_CHARS, description="the program to run")
    stdin: str | None = Field(default=None, max_length=MAX_STDIN_CHARS, description="stdin")
    language: Language = Field(..., description="only 'python' runs here")
    files: dict[str, str | None] = Field(
        default_factory=dict, description="file name -> base64 content, written before the run"
    )
    fetch_files: list[str] = Field(
        default_factory=list, description="files returned (base64) in the response's files"
    )


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: CommandRunResult | None = None
    run_result: CommandRunResult | None = None
    executor_pod_name: str | None = None
    files: dict[str, str] = Field(default_factory=dict)


class ServiceLimits(BaseModel):
    """The server's bounds on what a request may ask for."""

    max_run_timeout_s: float = Field(default=60.0, gt=0, le=3600)
    memory_mb: int = Field(default=1024, ge=32, le=65536)
    max_memory_mb: int = Field(default=4096, ge=32, le=65536)
    max_output_bytes: int = Field(default=8 << 20, ge=1024, le=1 << 30)
    max_procs: int = Field(default=64, ge=1, le=4096)

    def ceiling(self) -> sandboxes.Limits:
        """The largest limits a request can get: the sandbox's own (pool-wide) limits."""
        longest = 2 * self.max_run_timeout_s + 2  # a compile step and a run step
        return sandboxes.Limits(
            wall_s=longest,
            cpu_s=longest,
            memory_mb=self.max_memory_mb,
            max_output_bytes=self.max_output_bytes,
            max_procs=self.max_procs,
            ipc=True,
        )


def _limits(request: RunCodeRequest, bounds: ServiceLimits) -> sandboxes.Limits:
    asked = float(request.run_timeout) if request.run_timeout > 0 else DEFAULT_RUN_TIMEOUT_S
    wall = min(asked, bounds.max_run_timeout_s)
    mem = request.memory_limit_MB if request.memory_limit_MB > 0 else bounds.memory_mb
    mem = max(32, min(int(mem), bounds.max_memory_mb))
    return sandboxes.Limits(
        wall_s=max(wall, 0.01),
        cpu_s=max(wall, 0.01),
        memory_mb=mem,
        max_output_bytes=bounds.max_output_bytes,
        max_procs=bounds.max_procs,
        ipc=True,  # compilers and programs spawn processes; no run is compared with another
    )


def _refusal(message: str) -> RunCodeResponse:
    return RunCodeResponse(
        status=RunStatus.SandboxError, message=message, executor_pod_name=_pod_name()
    )


def _pod_name() -> str | None:
    return os.environ.get("MY_POD_NAME")


def _check(request: RunCodeRequest, languages: Sequence[str] = ("python",)) -> str | None:
    """Why the request cannot be run here (None: it can)."""
    if request.language not in languages:
        return (
            f"language {request.language!r} is not supported by this sandbox service: it runs "
            f"{', '.join(repr(x) for x in languages)} (GET /v1/languages)"
        )
    return None


def _uses_driver(request: RunCodeRequest) -> bool:
    has_files = any(v is not None for v in request.files.values())
    return request.language != "python" or has_files or bool(request.fetch_files)


def to_response(result: sandboxes.ExecResult, limits: sandboxes.Limits) -> RunCodeResponse:
    """A :class:`sandboxes.ExecResult` in SandboxFusion's response schema (see module doc)."""
    elapsed = float(result.duration_s) if math.isfinite(result.duration_s) else None
    if result.error is not None:
        run = CommandRunResult(
            status=CommandRunStatus.Error, execution_time=elapsed, stderr=result.error
        )
        return RunCodeResponse(
            status=RunStatus.SandboxError,
            message=f"sandbox failure: {result.error}",
            run_result=run,
            executor_pod_name=_pod_name(),
        )
    if result.timed_out:
        which = "CPU-time" if result.cpu_exceeded else "wall-clock"
        run = CommandRunResult(
            status=CommandRunStatus.TimeLimitExceeded,
            execution_time=elapsed,
            stdout=result.stdout,
            stderr=result.stderr,
        )
        return RunCodeResponse(
            status=RunStatus.Failed,
            message=f"{which} limit of {limits.wall_s:g} s exceeded",
            run_result=run,
            executor_pod_name=_pod_name(),
        )
    code = result.exit_code if result.exit_code is not None else -int(result.signal or 9)
    reasons = []
    if result.memory_exceeded:
        reasons.append(f"memory limit of {limits.memory_mb} MB exceeded")
    if result.output_truncated:
        reasons.append(f"output limit of {limits.max_output_bytes} bytes exceeded (truncated)")
    if result.exit_code is None and result.signal:
        reasons.append(f"killed by signal {result.signal}")
    run = CommandRunResult(
        status=CommandRunStatus.Finished,
        execution_time=elapsed,
        return_code=code,
        stdout=result.stdout,
        stderr=result.stderr,
    )
    ok = code == 0 and not reasons
    return RunCodeResponse(
        status=RunStatus.Success if ok else RunStatus.Failed,
        message="; ".join(reasons),
        run_result=run,
        executor_pod_name=_pod_name(),
    )


def run_code(
    sandbox: Any,
    request: RunCodeRequest,
    bounds: ServiceLimits | None = None,
    languages: Sequence[str] = ("python",),
) -> RunCodeResponse:
    """Serve one ``/run_code`` request with ``sandbox`` (blocking; thread-safe)."""
    bounds = bounds or ServiceLimits()
    refused = _check(request, languages)
    if refused is not None:
        return _refusal(refused)
    limits = _limits(request, bounds)
    if _uses_driver(request):
        return _run_driver(sandbox, request, bounds, limits)
    try:
        result = sandbox.run(request.code, stdin=request.stdin or "", limits=limits)
    except Exception as exc:  # the sandbox itself failed (closed, cannot start a worker)
        return _refusal(f"sandbox failure: {type(exc).__name__}: {exc}")
    return to_response(result, limits)


def _run_driver(
    sandbox: Any, request: RunCodeRequest, bounds: ServiceLimits, limits: sandboxes.Limits
) -> RunCodeResponse:
    """A compiled language, or files in or out: the job runs :mod:`.languages`' driver."""
    from adapters.integrations.languages import driver_source, parse_report

    asked = float(request.compile_timeout)
    asked = asked if asked > 0 and math.isfinite(asked) else DEFAULT_RUN_TIMEOUT_S
    compile_s = max(0.5, min(asked, bounds.max_run_timeout_s))
    code = driver_source(
        request.language,
        request.code,
        files=request.files,
        fetch_files=request.fetch_files,
        compile_timeout=compile_s,
        run_timeout=limits.wall_s,
        memory_mb=limits.memory_mb,
        output_cap=limits.max_output_bytes,
    )
    wall = compile_s + limits.wall_s + 2.0
    job_limits = dataclasses.replace(limits, wall_s=wall, cpu_s=wall)
    job = sandboxes.Job(code, request.stdin or "", job_limits, results=True)
    try:
        result = sandbox.run_many([job])[0]
    except Exception as exc:
        return _refusal(f"sandbox failure: {type(exc).__name__}: {exc}")
    report = parse_report(result.results) if result.error is None else None
    if report is None:  # the job was stopped (limits) before the driver reported
        return to_response(result, limits)
    if report.get("error"):
        return _refusal(str(report["error"]))
    compiled = report.get("compile")
    compile_result = CommandRunResult(**compiled) if compiled else None
    if compiled and (compiled["status"] != "Finished" or compiled["return_code"] != 0):
        return RunCodeResponse(
            status=RunStatus.Failed,
            message="",
            compile_result=compile_result,
            executor_pod_name=_pod_name(),
        )
    ran = report.get("run") or {}
    if ran.get("status") == "Error":  # the runtime could not start (not installed)
        return _refusal(f"cannot run {request.language}: {ran.get('stderr', '')}")
    if ran.get("status") == "TimeLimitExceeded":
        result = dataclasses.replace(result, timed_out=True, exit_code=None)
    else:
        result = dataclasses.replace(result, exit_code=ran.get("return_code"), signal=None)
        code_ = result.exit_code
        if code_ is not None and code_ < 0:  # killed by a signal (subprocess reports -N)
            result = dataclasses.replace(result, exit_code=None, signal=-code_)
    result = dataclasses.replace(result, duration_s=float(ran.get("execution_time") or 0.0))
    response = to_response(result, limits)
    response.compile_result = compile_result
    response.files = {k: v for k, v in (report.get("files") or {}).items() if v is not None}
    return response


class Overloaded(Exception):
    """The queue is full, or (without keep-alive) no worker became free in time: answered 504."""


class Admission:
    """Admits at most ``slots`` requests to the sandbox at once (one per worker, so an admitted
    request starts at once and its time limits count from its start), and, with ``memory_mb``,
    only as many as the sum of their memory limits fits in that budget: a burst of programs
    that each fill their limit then waits its turn instead of exhausting the host, whose
    out-of-memory killer would end an arbitrary one (scored as a crash, not as the time-out the
    program would have had on a larger host). A request asking for more than the whole budget
    runs alone. Up to ``max_queue`` more wait, first come first served (a large request at the
    head is not overtaken by smaller ones behind it). A request finding the queue full is
    refused with :class:`Overloaded` (the service answers 504, which verl and the
    ``sandbox-fusion`` client retry).

    How long a queued request may wait is the service's choice (:func:`create_app`): with
    ``keepalive_s`` (the default) as long as it takes, its answer's first bytes keeping the
    client's read timeout from running out; without, at most ``queue_timeout_s``, then 504.

    >>> import asyncio
    >>> async def demo():
    ...     gate = Admission(slots=1, max_queue=1)
    ...     first = gate.enter()                     # a free slot: admitted at once
    ...     second = gate.enter()                    # queued behind it
    ...     try:
    ...         gate.enter()
    ...     except Overloaded as exc:
    ...         refused = str(exc)
    ...     before = await second.wait(0.01)         # still waiting
    ...     first.release()                          # the slot passes to the queue's head
    ...     return first.granted, before, await second.wait(0.01), refused
    >>> asyncio.run(demo())
    (True, False, True, 'all 1 sandbox workers are busy and the queue is full (1 waiting)')
    >>> async def budget():
    ...     gate = Admission(slots=8, max_queue=8, memory_mb=2048)
    ...     a, b, c = gate.enter(1024), gate.enter(1024), gate.enter(512)
    ...     waited = c.granted                       # 8 slots, but 2048 MiB already reserved
    ...     a.release()
    ...     return waited, c.granted, gate.reserved_mb
    >>> asyncio.run(budget())
    (False, True, 1536)
    """

    def __init__(
        self,
        slots: int,
        max_queue: int,
        queue_timeout_s: float = 8.0,
        keepalive_s: float | None = 2.0,
        memory_mb: int | None = None,
    ) -> None:
        if slots < 1 or max_queue < 0 or not queue_timeout_s >= 0:
            raise ValueError("slots >= 1, max_queue >= 0 and queue_timeout_s >= 0 required")
        if keepalive_s is not None and not keepalive_s > 0:
            raise ValueError("keepalive_s must be positive (None: no keep-alive)")
        if memory_mb is not None and memory_mb < 1:
            raise ValueError(f"memory_mb must be a positive budget or None, got {memory_mb}")
        self.slots, self.max_queue, self.queue_timeout_s = slots, max_queue, queue_timeout_s
        self.keepalive_s = keepalive_s
        self.memory_mb = memory_mb
        self.reserved_mb = 0
        self._free = slots
        self._waiters: list[tuple[Any, int]] = []  # (future, MiB) of queued requests, in order

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def _need(self, memory_mb: int) -> int:
        budget = self.memory_mb
        return 0 if budget is None else max(0, min(int(memory_mb), budget))

    def _fits(self, need: int) -> bool:
        budget = self.memory_mb
        return self._free > 0 and (budget is None or self.reserved_mb + need <= budget)

    def enter(self, memory_mb: int = 0) -> Ticket:
        """A ticket for a request whose jobs may use ``memory_mb`` MiB: admitted at once when a
        slot and the memory are free and nobody waits, else queued."""
        import asyncio

        need = self._need(memory_mb)
        if not self._waiters and self._fits(need):
            self._free -= 1
            self.reserved_mb += need
            return Ticket(self, None, need)
        if len(self._waiters) >= self.max_queue:
            busy = (
                f"all {self.slots} sandbox workers are busy"
                if self._free == 0
                else f"the memory budget is taken ({self.reserved_mb} of {self.memory_mb} MiB)"
            )
            raise Overloaded(f"{busy} and the queue is full ({len(self._waiters)} waiting)")
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((waiter, need))
        return Ticket(self, waiter, need)

    def _release(self, need: int) -> None:
        self._free += 1
        self.reserved_mb -= need
        self._grant()

    def _grant(self) -> None:
        """Admit queued requests from the head while they fit."""
        while self._waiters:
            waiter, wants = self._waiters[0]
            if waiter.done():  # cancelled by a client that went away
                self._waiters.pop(0)
                continue
            if not self._fits(wants):
                return  # the head waits for more to be released; nobody overtakes it
            self._waiters.pop(0)
            self._free -= 1
            self.reserved_mb += wants
            waiter.set_result(None)


class Ticket:
    """A request's place at the :class:`Admission`: a slot and its memory (``granted``) or a
    place in its queue; ``release()`` gives either back (idempotent)."""

    def __init__(self, gate: Admission, waiter: Any, memory_mb: int = 0) -> None:
        self._gate, self._waiter, self._released = gate, waiter, False
        self.memory_mb = memory_mb

    @property
    def granted(self) -> bool:
        w = self._waiter
        return w is None or (w.done() and not w.cancelled())

    async def wait(self, timeout_s: float | None) -> bool:
        """Wait at most ``timeout_s`` for the slot; whether it is held now (still queued: False)."""
        import asyncio

        if self._released:
            raise RuntimeError("the ticket was released")
        if not self.granted:  # asyncio.wait leaves the future pending when the time runs out
            await asyncio.wait({self._waiter}, timeout=timeout_s)
        return self.granted

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        if self.granted:
            self._gate._release(self.memory_mb)
        else:
            gate = self._gate
            gate._waiters = [(w, n) for w, n in gate._waiters if w is not self._waiter]
            self._waiter.cancel()
            gate._grant()  # a large request leaving the head may let smaller ones in


def host_memory_budget_mb(fraction: float = 0.75) -> int:
    """``fraction`` of the memory this host has available now (``MemAvailable``; the physical
    memory where that cannot be read), in MiB: the default budget of the jobs a service runs at
    once (:class:`Admission`)."""
    available = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    if available is None:
        available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return max(1, int(available * fraction) >> 20)


def create_app(
    sandbox: Any,
    bounds: ServiceLimits | None = None,
    *,
    owns_sandbox: bool = True,
    admission: Admission | None = None,
    languages: Sequence[str] | None = None,
):
    """The FastAPI app serving ``/run_code``, ``/v1/ping`` and ``/v1/languages`` with ``sandbox``
    (closed when the app shuts down if ``owns_sandbox``). ``admission`` defaults to one slot per
    sandbox worker, a memory budget of :func:`host_memory_budget_mb`, a queue of
    :data:`DEFAULT_QUEUE` and keep-alive answers (module docstring);
    ``languages`` to those whose toolchain the sandbox's jobs find (:func:`.languages.in_sandbox`:
    the host's for the local backend, the image's for Docker)."""
    import asyncio
    import functools
    from concurrent.futures import ThreadPoolExecutor
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    from adapters.integrations.languages import in_sandbox

    bounds = bounds or ServiceLimits()
    langs = tuple(languages if languages is not None else in_sandbox(sandbox))
    workers = int(getattr(sandbox, "workers", 1) or 1)
    gate = admission or Admission(
        slots=workers, max_queue=max(workers, DEFAULT_QUEUE), memory_mb=host_memory_budget_mb()
    )
    # one thread per admitted request: the sandbox call blocks its thread for the job's length
    executor = ThreadPoolExecutor(max_workers=gate.slots, thread_name_prefix="run-code")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        executor.shutdown(wait=False, cancel_futures=True)
        if owns_sandbox:
            sandbox.close()

    app = FastAPI(title="mas-rl-envs sandbox service (SandboxFusion API)", lifespan=lifespan)
    app.state.admission = gate

    async def run(ticket: Ticket, job: Any) -> RunCodeResponse:
        """Run an admitted job; its slot is given back when the job ends, even if the client
        has gone (the sandbox call cannot be interrupted from here)."""
        future = asyncio.get_running_loop().run_in_executor(executor, job)
        try:
            return await asyncio.shield(future)
        finally:
            if future.done():
                ticket.release()
            else:
                future.add_done_callback(lambda _: ticket.release())

    async def kept_alive(ticket: Ticket, job: Any, every_s: float) -> Any:
        """The answer of a queued request: a space every ``every_s`` seconds while it waits
        (leading whitespace that JSON parsers skip), then the response's JSON."""
        try:
            while not await ticket.wait(every_s):
                yield b" "
        except BaseException:  # the client went away while queued: leave the queue
            ticket.release()
            raise
        yield (await run(ticket, job)).model_dump_json().encode()

    @app.post("/run_code", response_model=RunCodeResponse, tags=["sandbox"])
    async def run_code_endpoint(request: RunCodeRequest) -> Any:
        refused = _check(request, langs)
        if refused is not None:
            return _refusal(refused)
        try:
            ticket = gate.enter(_limits(request, bounds).memory_mb)
        except Overloaded as exc:
            return JSONResponse(status_code=504, content={"detail": str(exc)})
        job = functools.partial(run_code, sandbox, request, bounds, langs)
        try:
            admitted = await ticket.wait(gate.keepalive_s or gate.queue_timeout_s)
        except BaseException:
            ticket.release()
            raise
        if admitted:
            return await run(ticket, job)
        if gate.keepalive_s is None:
            ticket.release()
            detail = (
                f"no sandbox worker became free within {gate.queue_timeout_s:g} s "
                f"({gate.slots} workers, {gate.waiting} waiting): retry later"
            )
            return JSONResponse(status_code=504, content={"detail": detail})
        return StreamingResponse(
            kept_alive(ticket, job, gate.keepalive_s), media_type="application/json"
        )

    @app.get("/v1/ping")
    def ping() -> str:
        return "pong"

    @app.get("/v1/languages")
    def languages_endpoint() -> list[str]:
        return list(langs)

    return app
