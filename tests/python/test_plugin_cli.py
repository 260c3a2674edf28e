# Plugin layers through the command, each step in a fresh process: build and run with --plugin, and the errors of an
# engine whose plugin library is missing or changed.
"""Environment: TENSORACLE_CLI (the `tensoracle` binary), TENSORACLE_TEST_PLUGIN (tests/plugins' library);
TENSORACLE_REQUIRE_GPU=1 makes the CUDA case mandatory."""

import json
import os
import shutil
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


@pytest.fixture(scope="module")
def plugin_library():
    path = os.environ.get("TENSORACLE_TEST_PLUGIN")
    if not path or not os.path.exists(path):
        pytest.fail("TENSORACLE_TEST_PLUGIN must name the test plugin library", pytrace=False)
    return path


def run(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, timeout=300)


def describe(result):
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[:3000]!r}\n"
            f"stderr: {result.stderr.decode(errors='replace')[:3000]!r}")


@pytest.fixture
def model(tmp_path, plugin_library):
    """y = relu(test.scale_bias(x, b, alpha=1.75)), {product, joined} = test.outer(u, v); a private copy of the
    library (tests change it)."""
    library = tmp_path / "libplugins.so"
    shutil.copyfile(plugin_library, library)
    rng = np.random.default_rng(7)
    b = rng.standard_normal(8).astype(np.float32)
    stnp.save_file({"b": b}, str(tmp_path / "weights.safetensors"))
    network = {
        "format": "tensoracle-network", "version": 1,
        "inputs": [{"name": "x", "dtype": "f32", "shape": [-1, 8]}, {"name": "u", "dtype": "f32", "shape": [3]},
                   {"name": "v", "dtype": "f32", "shape": [2]}],
        "constants": [{"name": "b", "weight": "b", "file": "weights.safetensors"}],
        "layers": [
            {"name": "scaled", "op": "plugin", "inputs": ["x", "b"], "outputs": ["s"],
             "attrs": {"type": "test.scale_bias", "version": "1", "field_names": "alpha", "f:alpha": 1.75}},
            {"name": "act", "op": "relu", "inputs": ["s"], "outputs": ["y"]},
            {"name": "outer", "op": "plugin", "inputs": ["u", "v"], "outputs": ["product", "joined"],
             "attrs": {"type": "test.outer", "version": "1", "field_names": ""}},
        ],
        "outputs": ["y", "product", "joined"],
    }
    (tmp_path / "net.json").write_text(json.dumps(network))
    x = rng.standard_normal((4, 8)).astype(np.float32)
    u = np.array([1, 2, 3], np.float32)
    v = np.array([-1, 0.5], np.float32)
    stnp.save_file({"x": x, "u": u, "v": v}, str(tmp_path / "inputs.safetensors"))
    expected = {"y": np.maximum(1.75 * x.astype(np.float64) + b, 0), "product": np.outer(u, v),
                "joined": np.concatenate([u, v])}
    return tmp_path, library, expected


def build(cli, tmp_path, library, target="cpu", precision="fp32"):
    engine = tmp_path / f"model-{target}-{precision}.engine"
    r = run(cli, "build", tmp_path / "net.json", "-o", engine, "--target", target, "--precision", precision,
            "--profile", "x=1x8:4x8:16x8", "--plugin", library, "-q")
    assert r.returncode == 0, describe(r)
    return engine


def run_engine(cli, tmp_path, engine, *plugins):
    out = tmp_path / "out.safetensors"
    args = ["run", engine, "-i", tmp_path / "inputs.safetensors", "-o", out]
    for p in plugins:
        args += ["--plugin", p]
    return run(cli, *args), out


def check_outputs(out, expected, tolerance):
    got = stnp.load_file(str(out))
    for name, want in expected.items():
        np.testing.assert_allclose(got[name], want, rtol=tolerance, atol=tolerance, err_msg=name)


def test_build_inspect_and_run_with_plugin_libraries(cli, model):
    tmp_path, library, expected = model
    engine = build(cli, tmp_path, library)
    r, out = run_engine(cli, tmp_path, engine, library)
    assert r.returncode == 0, describe(r)
    check_outputs(out, expected, 1e-6)
    r = run(cli, "inspect", engine, "--plugin", library)
    assert r.returncode == 0, describe(r)
    manifest = json.loads(r.stdout)
    recorded = {(p["type"], p["version"]): p for p in manifest["plugins"]}
    assert set(recorded) == {("test.scale_bias", "1"), ("test.outer", "1")}
    import hashlib
    digest = hashlib.sha256(library.read_bytes()).hexdigest()
    assert all(p["sha256"] == digest and p["library"] == "libplugins.so" for p in recorded.values())


def test_a_network_with_plugin_layers_needs_the_library(cli, model):
    tmp_path, library, _ = model
    r = run(cli, "build", tmp_path / "net.json", "-o", tmp_path / "x.engine", "--target", "cpu",
            "--profile", "x=1x8:4x8:16x8", "-q")
    assert r.returncode == 1, describe(r)
    assert b"no loaded plugin library provides plugin 'test.scale_bias' version '1'" in r.stderr, describe(r)
    assert b"layer 'scaled'" in r.stderr, describe(r)


def test_an_engine_without_its_plugin_library_is_refused(cli, model):
    tmp_path, library, _ = model
    engine = build(cli, tmp_path, library)
    r, _ = run_engine(cli, tmp_path, engine)
    assert r.returncode == 1, describe(r)
    assert b"check the plugin libraries" in r.stderr, describe(r)
    assert b"the engine needs plugin 'test.scale_bias' version '1'" in r.stderr, describe(r)
    r = run(cli, "inspect", engine)
    assert r.returncode == 1 and b"check the plugin libraries" in r.stderr, describe(r)


def test_an_engine_with_a_changed_plugin_library_is_refused(cli, model):
    tmp_path, library, _ = model
    engine = build(cli, tmp_path, library)
    with open(library, "ab") as f:  # still a loadable library; another SHA-256
        f.write(b"\0" * 64)
    r, _ = run_engine(cli, tmp_path, engine, library)
    assert r.returncode == 1, describe(r)
    assert b"from the library it was built with" in r.stderr, describe(r)


def test_libraries_that_are_not_plugins_are_refused(cli, model, tmp_path):
    model_path, _, _ = model
    not_library = tmp_path / "libnothing.so"
    not_library.write_bytes(b"not an ELF file")
    r = run(cli, "build", model_path / "net.json", "-o", tmp_path / "x.engine", "--target", "cpu",
            "--profile", "x=1x8:4x8:16x8", "--plugin", not_library, "-q")
    assert r.returncode == 1, describe(r)
    assert b"libnothing.so: can't be loaded" in r.stderr, describe(r)


def test_cuda_engine_with_plugin_layers(cli, model):
    tmp_path, library, expected = model
    version = run(cli, "--version").stdout.decode()
    if "GPU 0:" not in version:
        if os.environ.get("TENSORACLE_REQUIRE_GPU") == "1":
            pytest.fail("TENSORACLE_REQUIRE_GPU=1 but no GPU")
        pytest.skip("no CUDA GPU")
    for precision, tolerance in (("fp32", 1e-6), ("fp16", 4e-3)):
        engine = build(cli, tmp_path, library, target="cuda", precision=precision)
        r, out = run_engine(cli, tmp_path, engine, library)
        assert r.returncode == 0, describe(r)
        check_outputs(out, expected, tolerance)
