"""The SandboxFusion-compatible service (``python -m adapters.serve_sandbox``) against the real
``sandbox-fusion`` client package, and hostile programs through it versus the library."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from sandbox_fusion import RunCodeRequest, run_code
from sandbox_fusion.models import CommandRunStatus, RunCodeResponse, RunStatus

import sandboxes
from adapters.integrations.sandbox_fusion import to_response
from tests.sandboxes.test_attacks import ATTACKS

ROOT = Path(__file__).resolve().parents[2]
SECRET = f"mas-secret-{uuid.uuid4().hex}"
RESPONSE_KEYS = {
    "status",
    "message",
    "compile_result",
    "run_result",
    "executor_pod_name",
    "files",
}
RUN_RESULT_KEYS = {"status", "execution_time", "return_code", "stdout", "stderr"}


@pytest.fixture(scope="module")
def local_service(server_factory):
    server = server_factory(
        {"local": ("adapters.serve_sandbox", "--workers", "2", "--queue", "64")}
    )["local"]
    server.backend = "local"
    return server


@pytest.fixture(scope="module")
def docker_service(server_factory):
    try:
        sandboxes.DockerSandbox(workers=1).close()
    except sandboxes.SandboxError as exc:
        if os.environ.get("MAS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"MAS_REQUIRE_DOCKER=1 but the Docker sandbox is unavailable: {exc}")
        pytest.skip(f"Docker sandbox unavailable: {exc}")
    spec = ("adapters.serve_sandbox", "--backend", "docker", "--workers", "2", "--queue", "64")
    server = server_factory({"docker": spec})["docker"]
    server.backend = "docker"
    return server


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def service(request):
    return request.getfixturevalue(f"{request.param}_service")


def call(service, max_attempts: int = 1, **fields):
    """``/run_code`` through the sandbox-fusion client; with ``memory_limit_MB`` (which that
    client's request model does not carry) posted as JSON, the way verl does, and parsed with
    the client's response model."""
    if "memory_limit_MB" not in fields:
        return run_code(RunCodeRequest(language="python", **fields), service.url, max_attempts)
    r = requests.post(service.url + "/run_code", json={"language": "python", **fields}, timeout=60)
    assert r.status_code == 200, r.text
    return RunCodeResponse(**r.json())


def test_runs_python_with_the_real_client(service):
    r = call(service, code="print(int(input()) * 2)", stdin="21\n")
    assert r.status == RunStatus.Success and r.message == "" and r.compile_result is None
    assert r.run_result.status == CommandRunStatus.Finished
    assert r.run_result.return_code == 0 and r.run_result.stdout == "42\n"
    assert 0 < r.run_result.execution_time < 5 and r.files == {}

    r = call(service, code="import sys\nprint('x', file=sys.stderr)\nsys.exit(3)")
    assert r.status == RunStatus.Failed and r.run_result.return_code == 3
    assert r.run_result.stderr == "x\n"
    r = call(service, code="1/0")
    assert r.status == RunStatus.Failed and "ZeroDivisionError" in r.run_result.stderr
    r = call(service, code="import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert r.status == RunStatus.Failed and r.run_result.return_code == -9

    t0 = time.monotonic()
    r = call(service, code="import time\ntime.sleep(30)", run_timeout=1)
    assert time.monotonic() - t0 < 5
    assert r.status == RunStatus.Failed
    assert r.run_result.status == CommandRunStatus.TimeLimitExceeded
    assert r.run_result.return_code is None and "limit of 1 s" in r.message


def test_memory_limit_mb_is_applied(service):
    hog = "x = bytearray(300 << 20)\nprint(len(x) >> 20)"
    small = call(service, code=hog, memory_limit_MB=128)
    assert small.status == RunStatus.Failed and "memory" in small.message + small.run_result.stderr
    big = call(service, code=hog, memory_limit_MB=1024)
    assert big.status == RunStatus.Success and big.run_result.stdout == "300\n"


def test_unavailable_languages_are_refused_clearly(service):
    langs = requests.get(service.url + "/v1/languages").json()
    assert "python" in langs and "typescript" not in langs
    req = RunCodeRequest(code="let x: number = 1", language="typescript")
    with pytest.raises(Exception, match="language 'typescript' is not supported"):
        run_code(req, service.url, max_attempts=1)
    raw = requests.post(service.url + "/run_code", json={"code": "x", "language": "cobol"})
    assert raw.status_code == 422 and raw.json()["detail"][0]["loc"] == ["body", "language"]
    body = {"code": "print(1)", "language": "python", "files": {"../x": "aGk="}}
    resp = requests.post(service.url + "/run_code", json=body).json()
    assert resp["status"] == "SandboxError" and "unsafe file name" in resp["message"]
    body = {"code": "print(1)", "language": "python", "run_timeout": "soon"}
    assert requests.post(service.url + "/run_code", json=body).status_code == 422
    for default in (0, -1):  # SandboxFusion accepts these: the default limit (10 s) applies
        body = {"code": "print(1)", "language": "python", "run_timeout": default}
        resp = requests.post(service.url + "/run_code", json=body).json()
        assert resp["status"] == "Success" and resp["run_result"]["stdout"] == "1\n"


def require_language(service, language: str) -> None:
    """Skip where the local host has no toolchain for ``language``; on Docker, the image built by
    ``scripts/build_sandbox_image.sh`` carries every toolchain, so a missing one fails."""
    if language in requests.get(service.url + "/v1/languages").json():
        return
    if service.backend == "docker":
        pytest.fail(
            f"the sandbox image has no {language} toolchain: rebuild it "
            "(MAS_SANDBOX_FORCE=1 bash scripts/build_sandbox_image.sh)"
        )
    pytest.skip(f"no {language} toolchain on this host")


def test_files_in_and_out(service):
    """SandboxFusion's ``files`` (base64, written before the run) and ``fetch_files`` (returned
    base64), as its runner tests use them."""
    body = {
        "code": "print(open('data/in.txt').read().upper())\nopen('out.txt', 'w').write('done')",
        "language": "python",
        "files": {"data/in.txt": base64.b64encode(b"hello").decode(), "unused": None},
        "fetch_files": ["out.txt", "missing.txt"],
    }
    r = requests.post(service.url + "/run_code", json=body, timeout=60).json()
    assert r["status"] == "Success" and r["run_result"]["stdout"] == "HELLO\n"
    assert r["files"] == {"out.txt": base64.b64encode(b"done").decode()}


def test_absolute_names_are_inside_the_job(service):
    """SandboxFusion's ``/mnt/data/...`` names: a file given there is the program's
    ``/mnt/data/...``, a file the program writes there is fetched; other absolute names are
    mapped into the job's directory (``/etc/hostname`` is not the host's, nor the sandbox's);
    nothing stays for the next job."""
    program = (
        "import os\n"
        "print(open('/mnt/data/in.txt').read(), open('etc/motd').read())\n"
        "open('/mnt/data/out.txt', 'w').write('written')\n"
        "print(sorted(os.listdir('mnt/data')))\n"
    )
    b64 = {k: base64.b64encode(v).decode() for k, v in {"in": b"given", "motd": b"m"}.items()}
    body = {
        "code": program,
        "language": "python",
        "files": {"/mnt/data/in.txt": b64["in"], "/etc/motd": b64["motd"]},
        "fetch_files": ["/mnt/data/out.txt", "/etc/hostname", "/etc/motd", "/../etc/passwd"],
    }
    r = requests.post(service.url + "/run_code", json=body, timeout=60).json()
    assert r["status"] == "Success", r
    assert r["run_result"]["stdout"] == "given m\n['in.txt', 'out.txt']\n"
    assert r["files"] == {
        "/mnt/data/out.txt": base64.b64encode(b"written").decode(),
        "/etc/motd": b64["motd"],
    }
    after = {"code": "import os\nprint(os.path.exists('/mnt/data/out.txt'))", "language": "python"}
    assert requests.post(service.url + "/run_code", json=after).json()["run_result"]["stdout"] == (
        "False\n"
    )
    bad = dict(body, files={"/../x": b64["in"]})
    resp = requests.post(service.url + "/run_code", json=bad).json()
    assert resp["status"] == "SandboxError" and "unsafe file name" in resp["message"]


CPP_SUM = '#include <cstdio>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}'


@pytest.mark.parametrize(
    "language, code",
    [
        ("cpp", CPP_SUM),
        ("c", '#include <stdio.h>\nint main(){int a,b;scanf("%d %d",&a,&b);printf("%d\\n",a+b);}'),
        (
            "nodejs",
            "const [a, b] = require('fs').readFileSync(0, 'utf8').split(' ').map(Number);\n"
            "console.log(a + b);",
        ),
        (
            "javascript",
            "const [a, b] = require('fs').readFileSync(0, 'utf8').split(' ').map(Number);\n"
            "console.log(a + b);",
        ),
        ("bash", "read a b\necho $((a + b))"),
        (
            "go",
            'package main\nimport "fmt"\nfunc main() {\n  var a, b int\n  fmt.Scan(&a, &b)\n'
            "  fmt.Println(a + b)\n}\n",
        ),
        (
            "java",
            "import java.util.*;\npublic class Solution {\n"
            "  public static void main(String[] x) {\n"
            "    Scanner s = new Scanner(System.in);\n"
            "    System.out.println(s.nextInt() + s.nextInt());\n  }\n}",
        ),
    ],
)
def test_compiled_and_other_languages(service, language, code):
    """The compile/run split of SandboxFusion: ``compile_result`` filled for compiled languages;
    the program reads stdin and its output is the run's. Both backends, one code path."""
    require_language(service, language)
    body = {"code": code, "language": language, "stdin": "20 22"}
    if language in ("c", "javascript"):  # not in the sandbox-fusion client's language list
        raw = requests.post(service.url + "/run_code", json=body, timeout=60)
        r = RunCodeResponse(**raw.json())
    else:
        r = run_code(RunCodeRequest(**body), service.url, 1)
    assert r.status == RunStatus.Success, r
    assert r.run_result.stdout == "42\n" and r.run_result.return_code == 0
    compiled = language in ("cpp", "c", "java", "go")
    assert (r.compile_result is not None) == compiled
    if compiled:
        assert r.compile_result.status == CommandRunStatus.Finished
        assert r.compile_result.return_code == 0


def test_localhost_resolves_and_loopback_works_inside_a_job(service):
    """SandboxFusion's ``test_isolation_network_server_localhost``: a job may serve and connect
    on its own loopback by name (its ``/etc/hosts`` names localhost), and reaches nothing else."""
    code = (
        "import socket\n"
        "srv = socket.socket(); srv.bind(('localhost', 0)); srv.listen(1)\n"
        "c = socket.create_connection(('localhost', srv.getsockname()[1]), timeout=5)\n"
        "conn, _ = srv.accept(); c.sendall(b'ping'); print(conn.recv(4).decode())\n"
    )
    r = call(service, code=code)
    assert r.status == RunStatus.Success and r.run_result.stdout == "ping\n", r


def test_cpp_compile_error_and_run_outcomes_as_verl_reads_them(service):
    """verl's compile-error case scores -4: status Failed, compile_result Finished with a
    non-zero return code and the compiler's stderr, no run_result; a runtime error and a time-out
    come back in run_result as for Python."""
    require_language(service, "cpp")
    url = service.url + "/run_code"
    body = {"code": "int main( { return 0; }", "language": "cpp", "compile_timeout": 10}
    r = requests.post(url, json=body, timeout=60).json()
    assert r["status"] == "Failed" and r["run_result"] is None and r["message"] == ""
    assert r["compile_result"]["status"] == "Finished"
    assert r["compile_result"]["return_code"] != 0 and "error" in r["compile_result"]["stderr"]
    body = {"code": "int main(){ return 3; }", "language": "cpp"}
    r = requests.post(url, json=body, timeout=60).json()
    assert r["status"] == "Failed" and r["run_result"]["return_code"] == 3
    body = {"code": "int main(){ while (1); }", "language": "cpp", "run_timeout": 1}
    r = requests.post(url, json=body, timeout=60).json()
    assert r["status"] == "Failed" and r["run_result"]["status"] == "TimeLimitExceeded"
    assert r["run_result"]["return_code"] is None


def test_verl_request_and_response_schema(service):
    """The exact JSON verl's ``call_sandbox_api`` posts; the response has SandboxFusion's keys."""
    payload = {
        "compile_timeout": 10,
        "run_timeout": 10,
        "code": "a, b = map(int, input().split())\nprint(a + b)",
        "stdin": "20 22",
        "memory_limit_MB": 1024,
        "language": "python",
        "files": {},
        "fetch_files": [],
    }
    r = requests.post(
        service.url + "/run_code",
        data=json.dumps(payload),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200
    body = r.json()
    assert set(body) == RESPONSE_KEYS and set(body["run_result"]) == RUN_RESULT_KEYS
    assert body["status"] == "Success" and body["run_result"]["stdout"] == "42\n"
    assert body["compile_result"] is None and body["files"] == {}
    assert requests.get(service.url + "/v1/ping").json() == "pong"


def test_concurrent_requests(service):
    codes = [f"print(sum(range({n})))" for n in range(40)]
    with ThreadPoolExecutor(8) as pool:
        out = list(pool.map(lambda c: call(service, code=c), codes))
    assert [r.run_result.stdout for r in out] == [f"{sum(range(n))}\n" for n in range(40)]


# ---------------------------------------------------------------- hostile programs

HOSTILE = [
    "infinite_loop",
    "fork_bomb",
    "memory_bomb",
    "one_huge_allocation",
    "network_tcp",
    "network_udp",
    "network_dns",
    "read_etc_shadow",
    "read_project_file",
    "read_environment_secret",
    "write_outside_tmp",
    "signal_parent",
    "daemon_outlives_job",
    "privilege_escalation",
]
BY_NAME = {a.name: a for a in ATTACKS}


@pytest.fixture(scope="module")
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(0.1)
    yield srv
    srv.close()


@pytest.fixture(scope="module")
def planted():
    paths = [ROOT / f".sandbox-test-secret-{uuid.uuid4().hex}", Path("/tmp") / SECRET]
    for p in paths:
        p.write_text(SECRET)
    yield paths
    for p in paths:
        p.unlink(missing_ok=True)


@pytest.fixture(scope="module")
def local_library():
    with sandboxes.LocalSandbox(workers=1) as sb:
        yield sb


@pytest.fixture(scope="module")
def docker_library(docker_service):
    with sandboxes.DockerSandbox(workers=1) as sb:
        yield sb


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_program_is_contained_like_through_the_library(
    request, listener, planted, name, kind
):
    """The same attack through the service and through the library (same backend, same
    limits) ends the same way; nothing leaks or reaches the host; the service keeps working."""
    service = request.getfixturevalue(f"{kind}_service")
    library = request.getfixturevalue(f"{kind}_library")
    attack = BY_NAME[name]
    targets = [str(ROOT / f"escape-{uuid.uuid4().hex}"), f"/tmp/escape-{uuid.uuid4().hex}"]
    code = (
        attack.code.replace("HOSTPORT", str(listener.getsockname()[1]))
        .replace("PLANTED", repr(str(planted[0])))
        .replace("WRITE_TARGETS", repr(targets))
        .replace("'SECRET'", repr(SECRET))
    )
    lim = attack.limits
    # the service's limits for this request are the attack's (wall = CPU time, output cap aside;
    # the service's jobs may make pipes and sockets: ipc)
    lim = sandboxes.Limits(wall_s=lim.wall_s, cpu_s=lim.wall_s, memory_mb=lim.memory_mb, ipc=True)
    t0 = time.monotonic()
    got = call(service, code=code, run_timeout=lim.wall_s, memory_limit_MB=lim.memory_mb)
    assert time.monotonic() - t0 <= lim.wall_s + 2.0
    want = to_response(library.run(code, limits=lim), lim)

    assert got.status.value == want.status.value, (got, want)
    assert got.run_result.status.value == want.run_result.status.value, (got, want)
    if want.run_result.status.value == "Finished" and "memory" not in want.message:
        assert got.run_result.stdout == want.run_result.stdout, (got, want)
    assert ("memory" in got.message) == ("memory" in want.message), (got, want)
    assert SECRET not in (got.run_result.stdout or "") + (got.run_result.stderr or "")
    assert not any(os.path.exists(p) for p in targets), "the job wrote to the host"
    assert all(p.read_text() == SECRET for p in planted)
    with pytest.raises(OSError):
        listener.accept()  # nothing reached the host's loopback
    follow = call(service, code="print(sum(map(int, input().split())))", stdin="20 22")
    assert follow.status == RunStatus.Success and follow.run_result.stdout == "42\n"


def test_languages_are_what_the_jobs_find(service):
    """``/v1/languages`` is asked of a job: locally it matches the host's toolchains, on Docker
    the image's, which carries them all (``pytest`` needs ``--site-packages``)."""
    from adapters.integrations.languages import TOOLCHAINS, available, languages

    listed = requests.get(service.url + "/v1/languages").json()
    if service.backend == "docker":
        every = {c.needs for c in TOOLCHAINS.values() if c.needs}
        assert listed == languages(every, pytest=False)
        assert {"cpp", "c", "java", "nodejs", "javascript", "go", "bash"} <= set(listed)
    else:
        assert listed == available(site_packages=False)


@pytest.mark.parametrize("kind", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_pytest_language_with_site_packages(request, kind):
    """SandboxFusion's ``pytest`` runner: the code is a test module; pytest's exit code decides
    the status. It needs pytest where the jobs' interpreter finds it (``--site-packages``): the
    host's base interpreter, or the image's ``python3-pytest``."""
    from adapters.integrations.languages import in_sandbox
    from adapters.integrations.sandbox_fusion import RunCodeRequest as Request
    from adapters.integrations.sandbox_fusion import ServiceLimits
    from adapters.integrations.sandbox_fusion import run_code as serve_one

    bounds = ServiceLimits()
    if kind == "docker":
        request.getfixturevalue("docker_service")  # fails or skips if Docker is unavailable
        make = sandboxes.DockerSandbox
    else:
        make = sandboxes.LocalSandbox
    with make(workers=1, limits=bounds.ceiling(), site_packages=True) as sb:
        langs = in_sandbox(sb)
        if "pytest" not in langs:
            if kind == "docker":
                pytest.fail("the sandbox image has no python3-pytest: rebuild it")
            pytest.skip("pytest is not installed for the jobs' (base) interpreter")
        ok = serve_one(
            sb,
            Request(language="pytest", code="def test_ok():\n    assert 2 == 2\n"),
            bounds,
            langs,
        )
        bad = serve_one(
            sb,
            Request(language="pytest", code="def test_no():\n    assert 2 == 3\n"),
            bounds,
            langs,
        )
    assert ok.status == "Success" and "1 passed" in ok.run_result.stdout
    assert bad.status == "Failed" and bad.run_result.return_code == 1
    assert "1 failed" in bad.run_result.stdout
