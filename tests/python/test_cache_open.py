# Multi-process tests of open_engine: concurrent opens build once, SIGKILLed builds never leave an accepted bad file.
"""Environment: TENSORACLE_CACHE_OPEN_CHILD, the `cache_open_child` test helper (tests/tools).

Each child process calls open_engine for a CPU engine y = x·Wᵀ + b over a safetensors file written
here with the official safetensors package, runs it, and prints {"built", "path", "output"}; every
call of its graph function appends a line to a log file. Outputs are checked against NumPy.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import safetensors.numpy as stnp

IN, OUT = 512, 2048   # 4 MiB of weights: writing the engine takes long enough to be interrupted


@pytest.fixture(scope="module")
def child():
    path = os.environ.get("TENSORACLE_CACHE_OPEN_CHILD")
    if not path:
        pytest.fail("TENSORACLE_CACHE_OPEN_CHILD is not set: point it at the built cache_open_child", pytrace=False)
    return path


@pytest.fixture
def setup(tmp_path):
    rng = np.random.default_rng(1234)
    weight = rng.standard_normal((OUT, IN), dtype=np.float32)
    bias = rng.standard_normal(OUT, dtype=np.float32)
    weights = tmp_path / "model.safetensors"
    stnp.save_file({"fc.weight": weight, "fc.bias": bias}, str(weights))
    x = (np.arange(2 * IN) % 17).astype(np.float32).reshape(2, IN) * 0.125 - 1.0
    expected = (x.astype(np.float64) @ weight.T.astype(np.float64) + bias).astype(np.float32).reshape(-1)
    cache = tmp_path / "cache"
    return {"cache": cache, "weights": weights, "log": tmp_path / "graph.log", "expected": expected}


def command(child, setup, *extra):
    return [child, str(setup["cache"]), str(setup["weights"]), str(setup["log"]), *map(str, extra)]


def finish(process, timeout=120):
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"exit {process.returncode}: {stderr.decode(errors='replace')}"
    return json.loads(stdout)


def check_output(result, setup):
    np.testing.assert_allclose(np.array(result["output"], dtype=np.float32), setup["expected"], rtol=1e-4, atol=1e-3)


def graph_calls(setup):
    try:
        return len(setup["log"].read_text().splitlines())
    except FileNotFoundError:
        return 0


def cache_files(setup):
    return sorted(p.name for p in setup["cache"].iterdir()) if setup["cache"].exists() else []


def test_eight_processes_build_once(child, setup):
    processes = [subprocess.Popen(command(child, setup, "--sleep-ms", 500), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(8)]
    results = [finish(p) for p in processes]
    assert graph_calls(setup) == 1
    assert sum(r["built"] for r in results) == 1
    assert len({r["path"] for r in results}) == 1
    for result in results:
        check_output(result, setup)
    engines = [n for n in cache_files(setup) if n.endswith(".engine")]
    assert len(engines) == 1
    assert not [n for n in cache_files(setup) if ".engine.tmp-" in n]
    # And a later process reuses it without calling the graph.
    result = finish(subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    assert result["built"] is False
    assert graph_calls(setup) == 1


def test_sigkill_at_random_moments_never_leaves_an_accepted_bad_engine(child, setup):
    rng = random.Random(20261130)
    # How long one uninterrupted build takes, to spread the kills over all of it.
    start = time.monotonic()
    finish(subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    build_seconds = time.monotonic() - start
    outcomes = {"reused": 0, "rebuilt": 0}
    for trial in range(40):
        if trial % 4 != 3:   # mostly from an empty cache; sometimes with a complete engine being force-rebuilt
            shutil.rmtree(setup["cache"], ignore_errors=True)
        extra = ["--force"] if trial % 4 == 3 else []
        victim = subprocess.Popen(command(child, setup, "--sleep-ms", rng.choice([0, 0, 20]), *extra),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, build_seconds * 1.2))
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        result = finish(subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
        check_output(result, setup)
        outcomes["rebuilt" if result["built"] else "reused"] += 1
        names = cache_files(setup)
        assert not [n for n in names if ".engine.tmp-" in n], (trial, names)
        engines = [setup["cache"] / n for n in names if n.endswith(".engine")]
        assert len(engines) == 1 and engines[0].stat().st_size > 0, (trial, names)
    # Both kinds of moments were hit.
    assert outcomes["rebuilt"] > 0 and outcomes["reused"] > 0, outcomes


def test_waiting_processes_survive_a_killed_builder(child, setup):
    builder = subprocess.Popen(command(child, setup, "--sleep-ms", 3000), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while graph_calls(setup) == 0:   # the builder holds the lock and is inside its graph function
        assert time.monotonic() < deadline and builder.poll() is None
        time.sleep(0.01)
    waiters = [subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for _ in range(3)]
    time.sleep(0.5)
    assert all(w.poll() is None for w in waiters), "the waiters should wait for the build"
    builder.send_signal(signal.SIGKILL)
    builder.wait()
    results = [finish(w) for w in waiters]
    assert graph_calls(setup) == 2        # the killed build, then exactly one of the waiters
    assert sum(r["built"] for r in results) == 1
    for result in results:
        check_output(result, setup)


def test_read_only_cache_with_a_valid_engine_still_opens(child, setup):
    first = finish(subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    engine = setup["cache"] / os.path.basename(first["path"])
    prefix = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if not setpriv:
            pytest.skip("running as root without setpriv: permission bits cannot be enforced")
        prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner", "--"]
    engine.chmod(0o400)
    setup["cache"].chmod(0o500)
    try:
        result = finish(subprocess.Popen(prefix + command(child, setup), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE))
    finally:
        setup["cache"].chmod(0o700)
        engine.chmod(0o600)
    assert result["built"] is False
    check_output(result, setup)
    assert graph_calls(setup) == 1
    assert not [n for n in cache_files(setup) if n.endswith(".engine") and n != engine.name]


def test_saved_files_match_an_independent_reading_of_the_format(child, setup):
    result = finish(subprocess.Popen(command(child, setup), stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    engine = setup["cache"] / os.path.basename(result["path"])
    data = engine.read_bytes()
    assert data[:11] == b"TENSORACLE\x01"
    length = int.from_bytes(data[11:19], "big")
    header_bytes, plan = data[19:19 + length], data[19 + length:]
    header = json.loads(header_bytes)
    assert header_bytes == json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    assert sorted(header) == ["conditions", "plan_sha256", "shape_tensor_outputs"]
    assert header["plan_sha256"] == hashlib.sha256(plan).hexdigest()
    assert header["shape_tensor_outputs"] == []
    weights_sha = hashlib.sha256(setup["weights"].read_bytes()).hexdigest()
    assert header["conditions"]["weights"] == [weights_sha]
    conditions_bytes = json.dumps(header["conditions"], sort_keys=True, separators=(",", ":")).encode()
    assert engine.name == f"child-linear-{hashlib.sha256(conditions_bytes).hexdigest()}.engine"
    assert stat_mode(engine) == 0o600 and stat_mode(setup["cache"]) == 0o700
    # The weight record: named by the absolute path, canonical, checksummed, with the file's identity.
    absolute = os.path.abspath(setup["weights"])
    record_path = setup["cache"] / f"weight-{hashlib.sha256(os.fsencode(absolute)).hexdigest()}.json"
    record_bytes = record_path.read_bytes()
    record = json.loads(record_bytes)
    assert record_bytes == json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    st = os.stat(absolute)
    body = {k: v for k, v in record.items() if k != "checksum"}
    assert body == {"version": 1, "path": absolute, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                    "device": st.st_dev, "inode": st.st_ino, "sha256": weights_sha}
    assert record["checksum"] == hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert stat_mode(record_path) == 0o600


def stat_mode(path):
    return os.stat(path).st_mode & 0o777
