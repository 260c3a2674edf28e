"""Plugin layers from Python: load_plugin_library, Network.add_plugin with fields, open_engine with plugins=, and the
CorruptEngineError of a saved engine whose plugin library is not loaded (in a second process)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import safetensors.numpy as stnp

import tensoracle

PLUGIN = os.environ.get("TENSORACLE_TEST_PLUGIN", "")
pytestmark = pytest.mark.skipif(
    not PLUGIN, reason="needs the test plugin library of a CMake build (ctest sets TENSORACLE_TEST_PLUGIN)"
)


def graph(weights):
    net = tensoracle.Network()
    x = net.add_input("x", "f32", [-1, 4])
    y = net.add_plugin("test.scale_bias", "1", [x, weights["b"]], {"alpha": 0.75}, name="scaled")[0]
    net.mark_output(y, "y")
    return net


def declaration(plugins):
    return tensoracle.EngineDeclaration(
        name="plugin-model",
        graph_version=1,
        inputs=[tensoracle.TensorSpec("x", "f32", [-1, 4])],
        outputs=[tensoracle.TensorSpec("y", "f32", [-1, 4])],
        builder=tensoracle.BuilderConfig(target="cpu", profiles={"x": ([1, 4], [2, 4], [8, 4])}),
        plugins=plugins,
    )


@pytest.fixture
def weights(tmp_path):
    b = np.array([1.0, -2.0, 0.5, 4.0], np.float32)
    path = tmp_path / "w.safetensors"
    stnp.save_file({"b": b}, str(path))
    return path, b


def test_load_plugin_library_lists_its_plugins():
    plugins = tensoracle.load_plugin_library(PLUGIN)
    assert {(p["type"], p["version"]) for p in plugins} == {
        ("test.scale_bias", "1"), ("test.outer", "1"), ("test.cuda_only", "1"), ("test.host_only", "1")}
    assert all(len(p["library_sha256"]) == 64 for p in plugins)
    assert {p["type"] for p in tensoracle.loaded_plugins()} >= {"test.scale_bias", "test.outer"}


def test_add_plugin_shapes_fields_and_errors():
    tensoracle.load_plugin_library(PLUGIN)
    net = tensoracle.Network()
    u = net.add_input("u", "f32", [-1])
    v = net.add_input("v", "f32", [3])
    product, joined = net.add_plugin("test.outer", "1", [u, v])
    assert net.shape(product) == [-1, 3] and net.shape(joined) == [-1]
    x = net.add_input("x", "f32", [2, 4])
    with pytest.raises(tensoracle.GraphError, match="unknown field 'gamma'"):
        net.add_plugin("test.scale_bias", "1", [x, np.ones(4, np.float32)], {"gamma": 1.0})
    with pytest.raises(tensoracle.GraphError, match="no loaded plugin library provides plugin 'nope' version '1'"):
        net.add_plugin("nope", "1", [x])


def test_open_engine_with_plugins_runs_the_plugin(weights, tmp_path):
    path, b = weights
    handle = tensoracle.open_engine(declaration([PLUGIN]), [path], graph, cache_dir=tmp_path / "cache")
    assert handle.built
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    y = handle.create_execution().run({"x": x})["y"]
    np.testing.assert_allclose(y, 0.75 * x + b, rtol=1e-6, atol=1e-6)
    again = tensoracle.open_engine(declaration([PLUGIN]), [path], graph, cache_dir=tmp_path / "cache")
    assert not again.built and again.path == handle.path


def test_a_saved_engine_whose_plugin_is_not_loaded_is_a_corrupt_engine_error(weights, tmp_path):
    # Built by a process that loaded the library itself rather than declaring it: the declaration (and so the cache
    # entry) names no plugin library, and a process that doesn't load it can't use the saved engine.
    path, _ = weights
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tensoracle, test_plugins
        if sys.argv[1] == "build":
            tensoracle.load_plugin_library({PLUGIN!r})
        try:
            h = tensoracle.open_engine(test_plugins.declaration([]), [{str(path)!r}], test_plugins.graph,
                                       cache_dir={str(tmp_path / "cache")!r})
            print("built" if h.built else "reused")
        except tensoracle.CorruptEngineError as e:
            print("CorruptEngineError:", e)
        """
    )
    run = lambda mode: subprocess.run([sys.executable, "-c", script, mode], capture_output=True, text=True)  # noqa
    first = run("build")
    assert first.returncode == 0 and first.stdout.strip() == "built", first.stderr
    second = run("reuse")
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("CorruptEngineError:"), second.stdout + second.stderr
    assert "check the plugin libraries" in second.stdout.lower() or "plugin_libraries" in second.stdout
