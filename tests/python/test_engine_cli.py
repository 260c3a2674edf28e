# Tests of `tensoracle build`, `inspect`, `run` (engines) and `bench` on the CPU target (and CUDA where a GPU exists).
"""Environment: TENSORACLE_CLI, the `tensoracle` binary; TENSORACLE_REQUIRE_GPU=1 makes the CUDA cases mandatory."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest
import safetensors.numpy as stnp


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("TENSORACLE_CLI must name the built `tensoracle` binary", pytrace=False)
    return path


def run(cli, *args, timeout=300, env=None):
    return subprocess.run([cli, *map(str, args)], capture_output=True, timeout=timeout, env=env)


def describe(result):
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[:3000]!r}\n"
            f"stderr: {result.stderr.decode(errors='replace')[:3000]!r}")


def gpu_available(cli):
    out = run(cli, "--version").stdout.decode()
    return "GPU 0:" in out


def skip_without_gpu(cli):
    """Skips the calling test where no GPU is visible; fails it instead under TENSORACLE_REQUIRE_GPU=1."""
    if not gpu_available(cli):
        if os.environ.get("TENSORACLE_REQUIRE_GPU") == "1":
            pytest.fail("TENSORACLE_REQUIRE_GPU=1 but no GPU is visible")
        pytest.skip("no CUDA GPU on this machine")


@pytest.fixture
def model(tmp_path):
    """A two-layer MLP with a dynamic batch: network JSON, weights, and NumPy parameters."""
    rng = np.random.default_rng(5)
    w1 = rng.standard_normal((32, 16)).astype(np.float32) * 0.25
    b1 = rng.standard_normal(32).astype(np.float32) * 0.1
    w2 = rng.standard_normal((8, 32)).astype(np.float32) * 0.25
    stnp.save_file({"w1": w1, "b1": b1, "w2": w2}, str(tmp_path / "weights.safetensors"))
    network = {
        "format": "tensoracle-network", "version": 1,
        "inputs": [{"name": "x", "dtype": "f32", "shape": [-1, 16]}],
        "constants": [{"name": "w1", "weight": "w1", "file": "weights.safetensors"},
                      {"name": "b1", "weight": "b1", "file": "weights.safetensors"},
                      {"name": "w2", "weight": "w2", "file": "weights.safetensors"}],
        "layers": [
            {"name": "fc1", "op": "linear", "inputs": ["x", "w1", "b1"], "outputs": ["h"]},
            {"name": "act", "op": "relu", "inputs": ["h"], "outputs": ["a"]},
            {"name": "fc2", "op": "linear", "inputs": ["a", "w2", None], "outputs": ["logits"]},
            {"name": "sm", "op": "softmax", "inputs": ["logits"], "outputs": ["probs"], "attrs": {"axis": -1}},
        ],
        "outputs": ["probs", "logits"],
    }
    (tmp_path / "net.json").write_text(json.dumps(network))
    return tmp_path, (w1, b1, w2)


def numpy_forward(x, params):
    w1, b1, w2 = (p.astype(np.float64) for p in params)
    logits = np.maximum(x.astype(np.float64) @ w1.T + b1, 0) @ w2.T
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), logits


def build(cli, directory, target, precision="fp32", profile="x=1x16:4x16:8x16"):
    engine = directory / f"net_{target.replace(':', '')}_{precision}.engine"
    result = run(cli, "build", directory / "net.json", "-o", engine, "--target", target, "--precision", precision,
                 "--profile", profile)
    assert result.returncode == 0, describe(result)
    info = json.loads(result.stdout)
    assert info["engine"] == str(engine) and info["bytes"] == engine.stat().st_size
    return engine


@pytest.mark.parametrize("precision,tolerance", [("fp32", 1e-5), ("fp16", 2e-2), ("bf16", 6e-2)])
def test_cpu_engine_matches_numpy(cli, model, precision, tolerance):
    directory, params = model
    engine = build(cli, directory, "cpu", precision)
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float32)
    stnp.save_file({"x": x}, str(directory / "in.safetensors"))
    result = run(cli, "run", engine, "--inputs", directory / "in.safetensors", "-o", directory / "out.safetensors")
    assert result.returncode == 0, describe(result)
    out = stnp.load_file(str(directory / "out.safetensors"))
    probs, logits = numpy_forward(x, params)
    assert out["probs"].dtype == np.float32 and out["probs"].shape == (5, 8)
    rel = np.linalg.norm(out["logits"] - logits) / np.linalg.norm(logits)
    assert rel < tolerance, rel
    assert np.abs(out["probs"] - probs).max() < tolerance * 10


def test_cuda_libraries_are_opened_only_when_a_gpu_is_queried(cli, model):
    # cuBLASLt (half a gigabyte) is opened at run time beside the GPU's start, not linked: a CPU engine's build and run
    # never load it; a device query (--version) does, and reports its version. The dynamic loader's own log says which
    # files it opened (LD_DEBUG=files).
    directory, _ = model
    engine = build(cli, directory, "cpu")
    x = np.zeros((2, 16), np.float32)
    stnp.save_file({"x": x}, str(directory / "in.safetensors"))
    traced = dict(os.environ, LD_DEBUG="files")
    for args in (["build", directory / "net.json", "-o", directory / "again.engine", "--target", "cpu",
                  "--profile", "x=1x16:4x16:8x16"],
                 ["run", engine, "--inputs", directory / "in.safetensors", "-o", directory / "out.safetensors"]):
        result = run(cli, *args, env=traced)
        assert result.returncode == 0, describe(result)
        assert b"libcublasLt" not in result.stderr, args[0]
    version = run(cli, "--version", timeout=60, env=traced)
    assert version.returncode == 0, describe(version)
    if b"CUDA backend: built" in version.stdout:
        assert b"libcublasLt" in version.stderr
        assert b"cuBLASLt 0," not in version.stdout and b"cuBLASLt " in version.stdout


def test_inspect_prints_the_manifest(cli, model):
    directory, _ = model
    engine = build(cli, directory, "cpu")
    result = run(cli, "inspect", engine)
    assert result.returncode == 0, describe(result)
    manifest = json.loads(result.stdout)
    assert manifest["format"] == "tensoracle-engine"
    assert manifest["target"]["kind"] == "cpu"
    assert manifest["precision"] == "fp32"
    assert manifest["inputs"][0]["profile"] == {"min": [1, 16], "opt": [4, 16], "max": [8, 16]}
    assert [s["kernel"] for s in manifest["steps"]] == [
        "linear_cpu_reference", "relu_cpu_reference", "linear_cpu_reference", "softmax_cpu_reference"]
    assert manifest["steps"][0]["outputs"][0]["opt_shape"] == [4, 32]
    assert manifest["memory"]["arena_bytes"] >= 8 * 32 * 4
    assert {w["tensor"] for w in manifest["weights"]} == {"w1", "b1", "w2"}


def test_damaged_engines_are_clean_errors(cli, model):
    directory, _ = model
    engine = build(cli, directory, "cpu")
    data = engine.read_bytes()
    cases = {"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"TSRPLAN\0" + b"\xff" * 100,
             "flipped_manifest": data[:40] + bytes([data[40] ^ 0x20]) + data[41:],
             "flipped_format": data.replace(b'"tensoracle-engine"', b'"tensoracle-engind"', 1),
             "bad_total_size": data[:24] + (len(data) + 1).to_bytes(8, "little") + data[32:]}
    for name, content in cases.items():
        path = directory / f"{name}.engine"
        path.write_bytes(content)
        result = run(cli, "inspect", path)
        assert result.returncode == 1, name + ": " + describe(result)
        assert str(path) in result.stderr.decode(), name + ": " + describe(result)


def test_cache_entries_are_engines_too(cli, model):
    """A file in the cache's container (the reference's format, written here by hand) runs and inspects like
    the engine inside it; a damaged plan is caught by the header's checksum."""
    import hashlib
    directory, params = model
    plan = build(cli, directory, "cpu").read_bytes()
    header = json.dumps({"conditions": {"name": "t"}, "plan_sha256": hashlib.sha256(plan).hexdigest(),
                         "shape_tensor_outputs": []}, sort_keys=True, separators=(",", ":")).encode()
    entry = directory / "t.engine"
    entry.write_bytes(b"TENSORACLE\x01" + len(header).to_bytes(8, "big") + header + plan)
    result = run(cli, "inspect", entry)
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout)["format"] == "tensoracle-engine"
    x = np.random.default_rng(3).standard_normal((2, 16)).astype(np.float32)
    stnp.save_file({"x": x}, str(directory / "in.safetensors"))
    result = run(cli, "run", entry, "--inputs", directory / "in.safetensors", "-o", directory / "out.safetensors")
    assert result.returncode == 0, describe(result)
    _, logits = numpy_forward(x, params)
    got = stnp.load_file(str(directory / "out.safetensors"))["logits"]
    assert np.linalg.norm(got - logits) / np.linalg.norm(logits) < 1e-5
    damaged = bytearray(entry.read_bytes())
    damaged[-1] ^= 1
    entry.write_bytes(bytes(damaged))
    result = run(cli, "inspect", entry)
    assert result.returncode == 1 and "checksum" in result.stderr.decode(), describe(result)


def test_shapes_outside_the_profile(cli, model):
    directory, _ = model
    engine = build(cli, directory, "cpu")
    stnp.save_file({"x": np.zeros((9, 16), np.float32)}, str(directory / "big.safetensors"))
    result = run(cli, "run", engine, "--inputs", directory / "big.safetensors", "-o", directory / "o.safetensors")
    assert result.returncode == 1, describe(result)
    assert "outside its profile" in result.stderr.decode()


def test_build_errors(cli, model):
    directory, _ = model
    result = run(cli, "build", directory / "net.json", "-o", directory / "e.engine", "--target", "cpu")
    assert result.returncode == 1 and "profile" in result.stderr.decode(), describe(result)
    result = run(cli, "build", directory / "net.json", "-o", directory / "e.engine", "--precision", "fp8")
    assert result.returncode == 1 and "precision" in result.stderr.decode(), describe(result)
    result = run(cli, "build", directory / "net.json", "-o", directory / "e.engine", "--target", "tpu")
    assert result.returncode == 1 and "target" in result.stderr.decode(), describe(result)
    result = run(cli, "build", directory / "net.json")
    assert result.returncode == 2, describe(result)
    assert not (directory / "e.engine").exists()


def test_build_draws_a_progress_bar_on_a_terminal(cli, model):
    """On a terminal, stderr's last line is redrawn in place ("\\r", clear line) with the layers done; piped, there
    is no bar (the other tests read stderr through a pipe)."""
    import pty
    directory, _ = model
    engine = directory / "tty.engine"
    cmd = [str(cli), "build", str(directory / "net.json"), "-o", str(engine), "--target", "cpu",
           "--profile", "x=1x16:4x16:8x16"]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not data:
            break
        chunks.append(data)
    stdout, _ = proc.communicate(timeout=120)
    os.close(leader)
    terminal = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 0, terminal
    assert json.loads(stdout)["engine"] == str(engine)
    assert "\r\x1b[K" in terminal and "choosing kernels [" in terminal, terminal
    layers = len(json.loads(run(cli, "inspect", engine).stdout)["steps"])
    assert f"{layers}/{layers}" in terminal, terminal
    piped = run(cli, "build", directory / "net.json", "-o", directory / "piped.engine", "--target", "cpu",
                "--profile", "x=1x16:4x16:8x16")
    assert piped.returncode == 0 and b"choosing kernels" not in piped.stderr, describe(piped)


def test_bench_reports_percentiles(cli, model):
    directory, _ = model
    engine = build(cli, directory, "cpu")
    result = run(cli, "bench", engine, "--shape", "x=8x16", "--iterations", "30", "--warmup", "3", "--per-step")
    assert result.returncode == 0, describe(result)
    report = json.loads(result.stdout)
    assert report["shapes"] == {"x": [8, 16]}
    lat = report["latency_ms"]
    assert 0 < lat["min"] <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
    # The enqueue call is part of each timed run, so its percentiles never exceed the run's.
    enq = report["enqueue_ms"]
    assert 0 < enq["min"] <= enq["p50"] <= enq["max"]
    assert enq["p50"] <= lat["p50"] and enq["max"] <= lat["max"]
    assert report["throughput_per_s"] > 0
    assert [s["layer"] for s in report["steps"]] == ["fc1", "act", "fc2", "sm"]


def test_cuda_engine_matches_cpu_engine(cli, model):
    skip_without_gpu(cli)
    directory, params = model
    x = np.random.default_rng(2).standard_normal((7, 16)).astype(np.float32)
    stnp.save_file({"x": x}, str(directory / "in.safetensors"))
    probs, logits = numpy_forward(x, params)
    for precision, tolerance in [("fp32", 1e-5), ("tf32", 5e-3), ("fp16", 2e-2), ("bf16", 6e-2)]:
        engine = build(cli, directory, "cuda", precision)
        manifest = json.loads(run(cli, "inspect", engine).stdout)
        assert manifest["target"]["kind"] == "cuda"
        result = run(cli, "run", engine, "--inputs", directory / "in.safetensors", "-o", directory / "out.safetensors")
        assert result.returncode == 0, describe(result)
        out = stnp.load_file(str(directory / "out.safetensors"))
        rel = np.linalg.norm(out["logits"] - logits) / np.linalg.norm(logits)
        assert rel < tolerance, (precision, rel)
        result = run(cli, "bench", engine, "--iterations", "20", "--per-step")
        assert result.returncode == 0, describe(result)
        assert json.loads(result.stdout)["target_time_ms"]["p50"] > 0


def test_cuda_commands_end_without_teardown_and_lose_no_output(cli, model):
    """After a CUDA engine, `run` and `bench` end the process without CUDA's teardown at exit (process_exit.cpp);
    their files, stdout (a pipe: fully buffered) and stderr must still be complete, with the teardown or without."""
    skip_without_gpu(cli)
    directory, params = model
    x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
    stnp.save_file({"x": x}, str(directory / "in.safetensors"))
    _, logits = numpy_forward(x, params)
    engine = build(cli, directory, "cuda", "fp32")
    for teardown in ("0", "1"):
        env = dict(os.environ, TENSORACLE_EXIT_TEARDOWN=teardown)
        out = directory / f"out{teardown}.safetensors"
        result = run(cli, "run", engine, "--inputs", directory / "in.safetensors", "-o", out, "--verbose", env=env)
        assert result.returncode == 0, describe(result)
        stderr = result.stderr.decode()
        assert "first inference" in stderr and "engine, context and buffers released" in stderr, describe(result)
        got = stnp.load_file(str(out))["logits"]
        assert np.linalg.norm(got - logits) / np.linalg.norm(logits) < 1e-5
        result = run(cli, "bench", engine, "--iterations", "5", env=env)
        assert result.returncode == 0, describe(result)
        assert json.loads(result.stdout)["target_time_ms"]["p50"] > 0
