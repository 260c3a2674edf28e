"""tensoracle.convert and tensoracle.list_checkpoint: a hand-written checkpoint converted, read back with the
official safetensors package and opened as a WeightStore; refusals and errors as Python exceptions."""

from __future__ import annotations

import pickle
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

import tensoracle

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch_pickle as tp  # noqa: E402  (tests/python/torch_pickle.py)


def _checkpoint(path: Path, extra: bytes = b"") -> Path:
    body = tp.unicode("model") + pickle.EMPTY_DICT + pickle.MARK
    body += tp.unicode("fc.weight") + tp.tensor_v2("FloatStorage", "0", 6, 0, (2, 3), (1, 2))  # a transposed view
    body += tp.unicode("fc.bias") + tp.tensor_v2("LongStorage", "1", 2, 0, (2,), (1,)) + pickle.SETITEMS
    body += tp.unicode("epoch") + tp.integer(4) + extra
    pkl = pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK + body + pickle.SETITEMS + pickle.STOP
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("ckpt/data.pkl", pkl)
        z.writestr("ckpt/data/0", np.arange(6, dtype="<f4").tobytes())
        z.writestr("ckpt/data/1", np.array([5, -6], dtype="<i8").tobytes())
    return path


def test_convert_and_open_as_weight_store(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "c.pt")
    listing = tensoracle.list_checkpoint(ckpt)
    assert listing["default_key"] == "model"
    assert listing["tree"]["entries"]["model"]["entries"]["fc.weight"]["shape"] == [2, 3]
    summary = tensoracle.convert(ckpt, tmp_path / "c.safetensors", metadata={"format": "pt"})
    assert [t["name"] for t in summary["tensors"]] == ["fc.weight", "fc.bias"]
    assert summary["files"] == [str(tmp_path / "c.safetensors")] and summary["skipped"] == []
    got = load_file(str(tmp_path / "c.safetensors"))
    np.testing.assert_array_equal(got["fc.weight"], np.arange(6, dtype=np.float32).reshape(3, 2).T)
    np.testing.assert_array_equal(got["fc.bias"], np.array([5, -6]))
    store = tensoracle.WeightStore.open([str(tmp_path / "c.safetensors")])
    assert sorted(store.names()) == ["fc.bias", "fc.weight"]
    half = tensoracle.convert(ckpt, tmp_path / "h.safetensors", dtype="f16")
    assert half["tensors"][0]["dtype"] == "F16" and half["tensors"][1]["dtype"] == "I64"


def test_refusals_are_python_exceptions(tmp_path: Path) -> None:
    evil = _checkpoint(tmp_path / "e.pt", tp.unicode("x") + tp.global_ref("os", "system") + tp.tuple_of([tp.unicode("true")]) + pickle.REDUCE)
    with pytest.raises(tensoracle.FormatError, match="not a plain weights checkpoint: global os.system"):
        tensoracle.convert(evil, tmp_path / "e.safetensors")
    with pytest.raises(tensoracle.FormatError):
        tensoracle.list_checkpoint(evil)
    assert not (tmp_path / "e.safetensors").exists()
    with pytest.raises(tensoracle.IoError):
        tensoracle.convert(tmp_path / "missing.pt", tmp_path / "m.safetensors")
    with pytest.raises(tensoracle.NotFoundError):
        tensoracle.convert(_checkpoint(tmp_path / "c.pt"), tmp_path / "k.safetensors", key="nope")
    with pytest.raises(tensoracle.InvalidArgumentError):
        tensoracle.convert(tmp_path / "c.pt", tmp_path / "s.safetensors", max_shard_size="lots")
