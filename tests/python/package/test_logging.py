"""tensoracle.set_log_callback and set_log_level: the library's messages reach a Python callable, from any thread."""

from __future__ import annotations

import threading

import pytest

import small_model
import tensoracle


@pytest.fixture
def restore_logging():
    yield
    tensoracle.set_log_callback(None)
    tensoracle.set_log_level("warning")


def build(weights_file) -> bytes:
    net = small_model.graph(tensoracle.WeightStore.open(weights_file))
    config = tensoracle.BuilderConfig(profiles={"x": ([1, 8], [4, 8], [16, 8])}, time_kernels=False)
    return tensoracle.Builder(config).build(net)


def test_build_messages_reach_the_callback_at_info(weights_file, restore_logging):
    received = []
    tensoracle.set_log_callback(lambda severity, message: received.append((severity, message)))
    tensoracle.set_log_level("info")
    build(weights_file)
    infos = [m for s, m in received if s == "info"]
    assert any(m.startswith("build: ") and "layers for cpu at fp32" in m for m in infos), received
    assert any(m.startswith("build: done in ") for m in infos), received


def test_the_level_filters_before_the_callback(weights_file, restore_logging):
    received = []
    tensoracle.set_log_callback(lambda severity, message: received.append(severity))
    tensoracle.set_log_level("warning")
    build(weights_file)
    assert "info" not in received


def test_messages_from_another_thread_and_a_failing_callback(weights_file, restore_logging, monkeypatch):
    unraisable = []
    monkeypatch.setattr("sys.unraisablehook", lambda hook_args: unraisable.append(hook_args.exc_value))
    threads = set()

    def callback(severity, message):
        threads.add(threading.get_ident())
        raise RuntimeError("a broken log callback")

    tensoracle.set_log_callback(callback)
    tensoracle.set_log_level("info")
    worker = threading.Thread(target=build, args=(weights_file,))
    worker.start()
    worker.join()
    assert threads == {worker.ident}  # called on the building thread, which released the GIL during the build
    assert unraisable and all(isinstance(e, RuntimeError) for e in unraisable)  # reported, and the build finished


def test_none_restores_stderr_and_bad_callbacks_are_refused(weights_file, restore_logging, capfd):
    tensoracle.set_log_callback(lambda severity, message: None)
    tensoracle.set_log_callback(None)
    tensoracle.set_log_level("info")
    build(weights_file)
    assert "tensoracle info: build: " in capfd.readouterr().err
    with pytest.raises(TypeError, match="must be callable"):
        tensoracle.set_log_callback(42)
