"""open_engine from Python: miss then hit (in another process), force_rebuild, every cache error, list and prune."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import small_model
import tensoracle

HERE = Path(__file__).parent


def open_small(weights_file, cache_dir, graph=small_model.graph, **kwargs):
    return tensoracle.open_engine(
        kwargs.pop("declaration", small_model.declaration()), [weights_file], graph, cache_dir=cache_dir, **kwargs
    )


def never_called(weights):
    raise AssertionError("graph must not be called on a cache hit")


def test_miss_then_hit_in_a_second_process(weights_file, cache_dir):
    calls = []

    def graph(weights):
        calls.append(1)
        return small_model.graph(weights)

    handle = open_small(weights_file, cache_dir, graph)
    assert handle.built and calls == [1]
    assert handle.path.parent == cache_dir and handle.path.name.startswith("small-mlp-")
    assert handle.path.suffix == ".engine" and handle.path.stat().st_size > 0
    assert handle.conditions["graph_version"] == 1

    script = textwrap.dedent(
        f"""
        import sys, json
        sys.path.insert(0, {str(HERE)!r})
        import numpy as np, small_model, tensoracle
        def graph(weights):
            raise RuntimeError("graph called on a hit")
        h = tensoracle.open_engine(small_model.declaration(), [{str(weights_file)!r}], graph,
                                   cache_dir={str(cache_dir)!r})
        x = np.random.default_rng(7).standard_normal((3, small_model.IN)).astype(np.float32)
        out = h.create_execution().run({{"x": x}})["probs"]
        ref = small_model.reference({str(weights_file)!r}, x)
        print(json.dumps({{"built": h.built, "path": str(h.path), "err": float(np.abs(out - ref).max())}}))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["built"] is False
    assert report["path"] == str(handle.path)
    assert report["err"] < 1e-5


def test_hit_in_the_same_process_and_force_rebuild(weights_file, cache_dir):
    first = open_small(weights_file, cache_dir)
    second = open_small(weights_file, cache_dir, never_called)
    assert first.built and not second.built and first.path == second.path
    calls = []

    def graph(weights):
        calls.append(1)
        return small_model.graph(weights)

    rebuilt = open_small(weights_file, cache_dir, graph, force_rebuild=True)
    assert rebuilt.built and calls == [1] and rebuilt.path == first.path


def test_graph_version_and_weights_change_the_file(weights_file, cache_dir, tmp_path):
    a = open_small(weights_file, cache_dir)
    b = open_small(weights_file, cache_dir, declaration=small_model.declaration(graph_version=2))
    other = small_model.make_weights(tmp_path / "other.safetensors", seed=9)
    c = open_small(other, cache_dir)
    assert b.built and c.built and len({a.path, b.path, c.path}) == 3


def test_graph_errors_propagate(weights_file, cache_dir):
    def bad_graph(weights):
        raise KeyError("from the graph function")

    with pytest.raises(KeyError, match="from the graph function"):
        open_small(weights_file, cache_dir, bad_graph)
    with pytest.raises(tensoracle.InvalidArgumentError, match="must return a tensoracle.Network"):
        open_small(weights_file, cache_dir, lambda weights: 42)
    # The failed builds left nothing that blocks the next open.
    assert open_small(weights_file, cache_dir).built


def write_engine_file(path: Path, header: dict, plan: bytes) -> None:
    body = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    path.write_bytes(b"TENSORACLE\x01" + struct.pack(">Q", len(body)) + body + plan)


def test_corrupt_engine_errors(weights_file, cache_dir):
    path = open_small(weights_file, cache_dir).path
    good = path.read_bytes()
    path.write_bytes(good[:5])  # truncated inside the magic
    with pytest.raises(tensoracle.CorruptEngineError, match="incomplete") as info:
        open_small(weights_file, cache_dir, never_called)
    assert isinstance(info.value, tensoracle.EngineCacheError) and isinstance(info.value, ValueError)
    damaged = bytearray(good)
    damaged[-1] ^= 0xFF  # the plan no longer matches plan_sha256
    path.write_bytes(bytes(damaged))
    with pytest.raises(tensoracle.CorruptEngineError, match="checksum"):
        open_small(weights_file, cache_dir, never_called)
    path.write_bytes(b"TENSORACLE\x01" + struct.pack(">Q", 3) + b"{x}" + b"plan")
    with pytest.raises(tensoracle.CorruptEngineError, match="invalid engine header"):
        open_small(weights_file, cache_dir, never_called)


def test_condition_error_from_a_crafted_header(weights_file, cache_dir):
    path = open_small(weights_file, cache_dir).path
    header = tensoracle.read_engine_header(path)
    plan = path.read_bytes()[header["plan_offset"] :]
    conditions = dict(header["conditions"], graph_version=99)
    write_engine_file(
        path, {"conditions": conditions, "plan_sha256": header["plan_sha256"], "shape_tensor_outputs": []}, plan
    )
    with pytest.raises(tensoracle.EngineConditionError):
        open_small(weights_file, cache_dir, never_called)
    # force_rebuild replaces the unusable file.
    assert open_small(weights_file, cache_dir, force_rebuild=True).built
    assert not open_small(weights_file, cache_dir, never_called).built


def test_io_error_when_the_declaration_differs(weights_file, cache_dir):
    with pytest.raises(tensoracle.EngineIOError) as info:
        open_small(weights_file, cache_dir, declaration=small_model.declaration(out_dtype="f16"))
    assert isinstance(info.value, tensoracle.EngineCacheError)


def test_cache_list_and_prune_match_the_command(weights_file, cache_dir):
    handle = open_small(weights_file, cache_dir)
    listing = tensoracle.cache_list(cache_dir)
    assert [e["file"] for e in listing["entries"]] == [handle.path.name]
    assert listing["entries"][0]["status"] == "recognized"
    assert listing["entries"][0]["conditions"] == handle.conditions
    command = subprocess.run(
        [sys.executable, "-c", "import tensoracle._cli as c; c.main()", "cache", "list", "--cache-dir", str(cache_dir)],
        capture_output=True,
        text=True,
    )
    assert command.returncode == 0, command.stderr
    assert json.loads(command.stdout) == listing
    plan, result = tensoracle.cache_prune(cache_dir, max_size=0, dry_run=True)
    assert plan["plan"]["dry_run"] is True
    assert [e["file"] for e in plan["plan"]["selected"]] == [handle.path.name]
    assert result["result"]["removed"] == [] and handle.path.exists()
    plan, result = tensoracle.cache_prune(cache_dir, unused_for=0.0)
    assert [e["file"] for e in result["result"]["removed"]] == [handle.path.name]
    assert not handle.path.exists()
    with pytest.raises(tensoracle.InvalidArgumentError):
        tensoracle.cache_prune(cache_dir)
    with pytest.raises(tensoracle.InvalidArgumentError):
        tensoracle.cache_prune(cache_dir, unused_for="-1")


def test_inspect(weights_file, cache_dir):
    handle = open_small(weights_file, cache_dir)
    manifest = tensoracle.inspect(handle.path)
    assert manifest == handle.engine.manifest()
