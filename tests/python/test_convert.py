"""`tensoracle convert` against PyTorch (the independent writer and loader) and the official safetensors package.

Run with a Python that has torch, safetensors and pytest (Debian's /usr/bin/python3 in CI; torch 2.x on the GPU
machine). Checkpoints are written by torch.save in both formats (and by hand with zipfile + pickle opcodes for what
the running torch can't write: f8 storages under torch 1.13, ZIP64 structures, other top folders); each converted
file is read with the safetensors package and compared bit for bit with what torch.load returns. Malicious pickles
must be refused without running anything; damaged files must give exit status 1 and a message, never a crash.
"""
from __future__ import annotations

import collections
import io
import json
import os
import pickle
import pickletools
import struct
import subprocess
import zipfile

import pytest
import safetensors
import safetensors.torch
import torch

import torch_pickle as tp  # tests/python/torch_pickle.py (pytest puts this folder on sys.path)

CLI = os.environ.get("TENSORACLE_CLI", "tensoracle")
HAS_F8 = hasattr(torch, "float8_e4m3fn") and hasattr(torch, "float8_e5m2")


def run(*args, check_rc=None):
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert p.returncode >= 0, f"killed by signal {-p.returncode}: {p.stderr}"
    if check_rc is not None:
        assert p.returncode == check_rc, f"rc {p.returncode}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p


def convert(ckpt, out, *args):
    return run("convert", ckpt, out, *args, check_rc=0)


def raw_bytes(t: torch.Tensor) -> bytes:
    """The little-endian bytes of a tensor's elements in row-major order."""
    t = t.detach().contiguous()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.view(torch.int16)
    elif HAS_F8 and t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.view(torch.uint8)
    return t.numpy().tobytes()


def load_torch(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except TypeError:  # torch 1.13 has weights_only, older ones not
        return torch.load(path, map_location="cpu")


def read_safetensors_raw(path):
    """Header and per-tensor bytes, parsed by hand (for dtypes the running torch lacks)."""
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], info["shape"], data[8 + n + b : 8 + n + e])
    return header, out


def assert_same(expected: dict, path, names=None, any_nan=False):
    """The file holds exactly `expected` (name -> torch tensor), bit for bit, read with the safetensors package.
    With any_nan, a NaN matches any NaN (the bits a cast gives a NaN differ between torch versions and paths)."""
    got = safetensors.torch.load_file(str(path))
    assert sorted(got) == sorted(names or expected)
    for name, want in expected.items():
        have = got[name]
        assert have.dtype == want.dtype, name
        assert list(have.shape) == list(want.shape), name
        if any_nan and have.is_floating_point():
            nan = torch.isnan(want.double())
            assert torch.equal(torch.isnan(have.double()), nan), name
            have, want = have.double()[~nan], want.double()[~nan]
            assert torch.equal(torch.signbit(have), torch.signbit(want)), name
        assert raw_bytes(have) == raw_bytes(want), name


def all_dtype_tensors(gen):
    t = {
        "f64": torch.randn(3, 5, dtype=torch.float64, generator=gen),
        "f32": torch.randn(4, 7, generator=gen),
        "f16": torch.randn(2, 3, 4, generator=gen).half(),
        "bf16": torch.randn(6, 2, generator=gen).bfloat16(),
        "i64": torch.randint(-(2**62), 2**62, (5,), dtype=torch.int64, generator=gen),
        "i32": torch.randint(-(2**31), 2**31 - 1, (3, 3), dtype=torch.int32, generator=gen),
        "i16": torch.randint(-(2**15), 2**15 - 1, (9,), dtype=torch.int16, generator=gen),
        "i8": torch.randint(-128, 127, (2, 2), dtype=torch.int8, generator=gen),
        "u8": torch.randint(0, 255, (11,), dtype=torch.uint8, generator=gen),
        "bool": torch.rand(3, 4, generator=gen) > 0.5,
        "scalar": torch.tensor(3.25),
        "scalar_i64": torch.tensor(7),
        "empty": torch.zeros(0, 3),
        "empty_i32": torch.zeros(4, 0, dtype=torch.int32),
        "special": torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45, 65504.0]),
    }
    if HAS_F8:
        t["f8e4m3"] = torch.randn(10, generator=gen).to(torch.float8_e4m3fn)
        t["f8e5m2"] = torch.randn(2, 5, generator=gen).to(torch.float8_e5m2)
    return t


@pytest.fixture(params=["zip", "legacy"])
def fmt(request):
    return request.param


def save(obj, path, fmt):
    torch.save(obj, path, _use_new_zipfile_serialization=(fmt == "zip"))


def load_reference(path, tensors, fmt):
    """The tensors torch loads back from `path`, else (torch 2.x writes f8 tensors into legacy archives that its own
    loader refuses) the tensors that were given to torch.save."""
    try:
        return load_torch(path)
    except AttributeError:
        if not (HAS_F8 and fmt == "legacy"):
            raise
        return tensors


def save_all_dtypes(tensors, path, fmt):
    """Saves; where the running torch can't write f8 tensors in the legacy format itself, saves without them (the
    hand-written f8 archives below cover the reading)."""
    try:
        save(tensors, path, fmt)
    except Exception:
        if not (HAS_F8 and fmt == "legacy"):
            raise
        for k in ("f8e4m3", "f8e5m2"):
            tensors.pop(k)
        save(tensors, path, fmt)


def test_every_dtype_bit_for_bit_and_byte_identical(tmp_path, fmt):
    gen = torch.Generator().manual_seed(1)
    tensors = all_dtype_tensors(gen)
    ckpt = tmp_path / "all.pt"
    save_all_dtypes(tensors, ckpt, fmt)
    out = tmp_path / "all.safetensors"
    summary = json.loads(convert(ckpt, out).stdout)
    assert summary["tensors"] == len(tensors) and summary["skipped"] == []
    loaded = load_reference(ckpt, tensors, fmt)
    assert_same(loaded, out)
    # Byte-identical to what the official package writes for the same tensors.
    assert out.read_bytes() == safetensors.torch.save({k: v.contiguous() for k, v in loaded.items()})


def test_parameters_tied_views_and_strides(tmp_path, fmt):
    gen = torch.Generator().manual_seed(2)
    base = torch.randn(6, 8, generator=gen)
    ints = torch.arange(60, dtype=torch.int16).reshape(5, 12)
    half = torch.randn(4, 4, generator=gen).half()
    obj = collections.OrderedDict(
        [
            ("param", torch.nn.Parameter(torch.randn(3, 2, generator=gen))),
            ("base", base),
            ("tied", base),  # the same tensor twice
            ("rows", base[2:5]),  # storage offset
            ("transposed", base.t()),
            ("every_other", base[:, ::2]),
            ("column", base[:, 3]),
            ("corner", base[1:4, 2:7].t()),
            ("expanded", torch.randn(3, 1, generator=gen).expand(3, 4)),  # stride 0
            ("int_view", ints[1:, ::3]),
            ("half_t", half.t()),
            ("permuted", torch.randn(2, 3, 4, generator=gen).permute(2, 0, 1)),
        ]
    )
    ckpt = tmp_path / "views.pt"
    save(obj, ckpt, fmt)
    out = tmp_path / "views.safetensors"
    convert(ckpt, out)
    loaded = load_torch(ckpt)
    assert_same(loaded, out)
    assert out.read_bytes() == safetensors.torch.save({k: v.detach().contiguous().clone() for k, v in loaded.items()})
    # --no-duplicates refuses storages shared by several tensors, and writes nothing.
    out2 = tmp_path / "refused.safetensors"
    p = run("convert", ckpt, out2, "--no-duplicates", check_rc=1)
    assert "share storage" in p.stderr and "tied" in p.stderr
    assert not out2.exists() and sorted(os.listdir(tmp_path)) == ["views.pt", "views.safetensors"]


def test_state_dicts_of_real_modules(tmp_path, fmt):
    torch.manual_seed(3)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 10),
        torch.nn.LayerNorm(10),
    )
    model(torch.randn(2, 3, 6, 6))  # running stats and num_batches_tracked change
    emb = torch.nn.Embedding(20, 6)
    lstm = torch.nn.LSTM(6, 5, num_layers=2)
    for name, module in [("seq", model), ("emb", emb), ("lstm", lstm)]:
        sd = module.state_dict()
        ckpt = tmp_path / f"{name}.pt"
        save(sd, ckpt, fmt)
        out = tmp_path / f"{name}.safetensors"
        convert(ckpt, out)
        assert_same(load_torch(ckpt), out)
    # Parameters themselves (nn.Parameter objects) rather than a state dict.
    params = dict(model.named_parameters())
    save(params, tmp_path / "params.pt", fmt)
    convert(tmp_path / "params.pt", tmp_path / "params.safetensors")
    assert_same(load_torch(tmp_path / "params.pt"), tmp_path / "params.safetensors")


def training_checkpoint():
    torch.manual_seed(4)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(5, 4)).sum().backward()
    opt.step()
    return model, {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "epoch": 7,
        "config": {"lr": 0.01, "name": "run-1", "betas": (0.9, 0.999), "flag": True, "none": None},
    }


def test_nested_checkpoint_default_key_and_flattening(tmp_path, fmt):
    model, ckpt_obj = training_checkpoint()
    ckpt = tmp_path / "train.pt"
    save(ckpt_obj, ckpt, fmt)
    loaded = load_torch(ckpt)
    # The default takes the "model" entry.
    out = tmp_path / "model.safetensors"
    p = convert(ckpt, out)
    assert_same(loaded["model"], out)
    assert json.loads(p.stdout)["skipped"] == []
    # --key selects nested entries; nested mappings become dotted names (the optimizer state's int keys too).
    out = tmp_path / "state.safetensors"
    convert(ckpt, out, "--key", "optimizer.state")
    expected = {f"{pid}.{k}": v for pid, s in loaded["optimizer"]["state"].items() for k, v in s.items()
                if isinstance(v, torch.Tensor)}
    assert_same(expected, out)
    # --key to a single tensor.
    out = tmp_path / "one.safetensors"
    convert(ckpt, out, "--key", "model.0.weight")
    assert_same({"model.0.weight": loaded["model"]["0.weight"]}, out)
    # A checkpoint without a state_dict/model/module entry: everything, flattened; non-tensors skipped with a note.
    obj = {"encoder": {"w": torch.ones(2), "inner": {"b": torch.zeros(3, dtype=torch.int64)}}, "step": 5,
           "history": [1.0, 2.0], "tensors": [torch.full((2,), 3.0), torch.full((1,), 4.0)]}
    save(obj, tmp_path / "misc.pt", fmt)
    p = convert(tmp_path / "misc.pt", tmp_path / "misc.safetensors")
    loaded = load_torch(tmp_path / "misc.pt")
    assert_same({"encoder.w": loaded["encoder"]["w"], "encoder.inner.b": loaded["encoder"]["inner"]["b"],
                 "tensors.0": loaded["tensors"][0], "tensors.1": loaded["tensors"][1]}, tmp_path / "misc.safetensors")
    assert "skipped 'step' (int)" in p.stderr and "skipped 'history' (list)" in p.stderr
    skipped = {s["name"]: s["type"] for s in json.loads(p.stdout)["skipped"]}
    assert skipped == {"step": "int", "history": "list"}
    # A key that is not there.
    p = run("convert", ckpt, tmp_path / "x.safetensors", "--key", "nope", check_rc=1)
    assert "nope" in p.stderr and not (tmp_path / "x.safetensors").exists()


def test_list_prints_the_tree(tmp_path, fmt):
    _, ckpt_obj = training_checkpoint()
    ckpt = tmp_path / "train.pt"
    save(ckpt_obj, ckpt, fmt)
    listing = json.loads(run("convert", "--list", ckpt, check_rc=0).stdout)
    assert listing["format"] == fmt and listing["byteorder"] == "little" and listing["default_key"] == "model"
    tree = listing["tree"]
    assert tree["type"] == "dict"
    w = tree["entries"]["model"]["entries"]["0.weight"]
    assert w == {"type": "tensor", "dtype": "F32", "torch_dtype": "float32", "shape": [3, 4], "bytes": 48,
                 "parameter": False}
    assert tree["entries"]["epoch"] == {"type": "int", "value": 7}
    cfg = tree["entries"]["config"]["entries"]
    assert cfg["lr"] == {"type": "float", "value": 0.01} and cfg["name"] == {"type": "str", "value": "run-1"}
    assert cfg["flag"] == {"type": "bool", "value": True} and cfg["none"] == {"type": "None", "value": None}
    assert cfg["betas"]["type"] == "tuple" and len(cfg["betas"]["items"]) == 2
    groups = tree["entries"]["optimizer"]["entries"]["param_groups"]
    assert groups["type"] == "list" and groups["items"][0]["entries"]["lr"]["value"] == 0.01
    assert not list(tmp_path.glob("*.safetensors"))


def test_dtype_cast_matches_torch(tmp_path, fmt):
    gen = torch.Generator().manual_seed(5)
    tensors = all_dtype_tensors(gen)
    tensors["wide"] = torch.randn(1000, dtype=torch.float64, generator=gen) * 1e3
    ckpt = tmp_path / "all.pt"
    save_all_dtypes(tensors, ckpt, fmt)
    loaded = load_reference(ckpt, tensors, fmt)
    for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16), ("f32", torch.float32)]:
        out = tmp_path / f"as_{name}.safetensors"
        convert(ckpt, out, "--dtype", name)
        expected = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in loaded.items()}
        assert_same(expected, out, any_nan=True)
    p = run("convert", ckpt, tmp_path / "bad.safetensors", "--dtype", "i8", check_rc=2)
    assert "--dtype" in p.stderr


def test_metadata_like_the_official_writer(tmp_path):
    t = {"a": torch.arange(4.0), "b": torch.ones(2, dtype=torch.int8)}
    torch.save(t, tmp_path / "m.pt")
    out = tmp_path / "m.safetensors"
    convert(tmp_path / "m.pt", out, "--metadata", "format=pt")
    assert out.read_bytes() == safetensors.torch.save(t, metadata={"format": "pt"})
    convert(tmp_path / "m.pt", out, "--metadata", "format=pt", "--metadata", "source=a=b")
    with safetensors.safe_open(str(out), framework="pt") as f:
        assert f.metadata() == {"format": "pt", "source": "a=b"}
    run("convert", "--metadata", "a=1", tmp_path / "m.pt", "--metadata", "b=2", out, check_rc=0)  # one value each
    with safetensors.safe_open(str(out), framework="pt") as f:
        assert f.metadata() == {"a": "1", "b": "2"}
    run("convert", tmp_path / "m.pt", out, "--metadata", "novalue", check_rc=2)


def hf_shards(sizes: dict, max_size: int):
    """Hugging Face's split_torch_state_dict_into_shards (huggingface_hub.serialization), restated."""
    shards, current, current_size = [], [], 0
    for name, size in sizes.items():
        if size > max_size:
            shards.append([name])
            continue
        if current_size + size > max_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(name)
        current_size += size
    if current:
        shards.append(current)
    return shards


def test_shards_and_index(tmp_path):
    gen = torch.Generator().manual_seed(6)
    t = collections.OrderedDict()
    for i, n in enumerate([100, 300, 50, 700, 20, 20, 260, 5]):
        t[f"layer.{i}.weight"] = torch.randn(n, generator=gen)  # n * 4 bytes
    torch.save(t, tmp_path / "big.pt")
    out = tmp_path / "model.safetensors"
    p = convert(tmp_path / "big.pt", out, "--max-shard-size", "1kB")
    expected_shards = hf_shards({k: v.numel() * 4 for k, v in t.items()}, 1000)
    n = len(expected_shards)
    names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    assert json.loads(p.stdout)["files"] == [str(tmp_path / f) for f in names] + [str(tmp_path / "model.safetensors.index.json")]
    index_text = (tmp_path / "model.safetensors.index.json").read_text()
    weight_map = {k: names[i] for i, shard in enumerate(expected_shards) for k in shard}
    expected_index = {"metadata": {"total_size": sum(v.numel() * 4 for v in t.values())}, "weight_map": weight_map}
    assert index_text == json.dumps(expected_index, indent=2, sort_keys=True) + "\n"  # as save_pretrained writes it
    for i, shard in enumerate(expected_shards):
        assert_same({k: t[k] for k in shard}, tmp_path / names[i])
    assert not out.exists()
    # One shard: just the file.
    convert(tmp_path / "big.pt", tmp_path / "one.safetensors", "--max-shard-size", "5GiB")
    assert_same(t, tmp_path / "one.safetensors")
    assert not (tmp_path / "one.safetensors.index.json").exists()
    run("convert", tmp_path / "big.pt", tmp_path / "x.safetensors", "--max-shard-size", "lots", check_rc=2)


# ---- archives written by hand: other top folders, ZIP64, f8 storages, big-endian ----

def rezip(src, dst, rename=lambda n: n, drop=(), replace=None, compression=zipfile.ZIP_STORED):
    replace = replace or {}
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=compression) as zout:
        for info in zin.infolist():
            if info.filename in drop:
                continue
            data = replace.get(info.filename, zin.read(info.filename))
            zout.writestr(rename(info.filename), data)


def test_top_folder_not_named_archive(tmp_path):
    t = {"x": torch.arange(12, dtype=torch.int32).reshape(3, 4), "y": torch.randn(5).bfloat16()}
    torch.save(t, tmp_path / "my.model.v2.pt")  # torch names the folder after the file
    top = zipfile.ZipFile(tmp_path / "my.model.v2.pt").namelist()[0].split("/")[0]
    convert(tmp_path / "my.model.v2.pt", tmp_path / "a.safetensors")
    assert_same(t, tmp_path / "a.safetensors")
    # Rewritten with another top folder by Python's zipfile (no 64-byte alignment).
    rezip(tmp_path / "my.model.v2.pt", tmp_path / "re.pt", rename=lambda n: n.replace(top + "/", "weights_folder/", 1))
    assert_same(load_torch(tmp_path / "re.pt"), tmp_path / "a.safetensors")
    convert(tmp_path / "re.pt", tmp_path / "b.safetensors")
    assert (tmp_path / "b.safetensors").read_bytes() == (tmp_path / "a.safetensors").read_bytes()


def test_zip64_structures(tmp_path, monkeypatch):
    gen = torch.Generator().manual_seed(7)
    t = {"w": torch.randn(64, 33, generator=gen), "i": torch.arange(10)}
    torch.save(t, tmp_path / "t.pt")
    # Python's zipfile writes ZIP64 extra fields and end records past ZIP64_LIMIT: lower it so a small archive has
    # every ZIP64 structure a multi-gigabyte checkpoint has.
    monkeypatch.setattr(zipfile, "ZIP64_LIMIT", 16)
    rezip(tmp_path / "t.pt", tmp_path / "z64.pt")
    monkeypatch.undo()
    raw = (tmp_path / "z64.pt").read_bytes()
    assert b"PK\x06\x06" in raw and b"PK\x06\x07" in raw  # ZIP64 end record and locator
    # (torch's own reader refuses some of what zipfile writes this way; the tensors are those of the original.)
    with zipfile.ZipFile(tmp_path / "z64.pt") as z:
        assert z.testzip() is None
    assert_same(load_torch(tmp_path / "t.pt"), convert_and_path(tmp_path, "z64.pt"))


def convert_and_path(tmp_path, name):
    out = tmp_path / (name + ".safetensors")
    convert(tmp_path / name, out)
    return out


def write_archive(path, entries: dict, pickled: bytes, top="archive", byteorder="little"):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{top}/data.pkl", pickled)
        if byteorder is not None:
            z.writestr(f"{top}/byteorder", byteorder)
        for key, data in entries.items():
            z.writestr(f"{top}/data/{key}", data)
        z.writestr(f"{top}/version", "3\n")


def test_f8_storages_written_by_hand(tmp_path):
    e4m3 = bytes(range(256))  # every bit pattern
    e5m2 = bytes(reversed(range(256)))
    pickled = tp.mapping({
        "e4m3": tp.tensor_v3("float8_e4m3fn", "0", 256, 0, (16, 16), (16, 1)),
        "e5m2_view": tp.tensor_v3("float8_e5m2", "1", 256, 3, (5, 4), (1, 10)),
    })
    write_archive(tmp_path / "f8.pt", {"0": e4m3, "1": e5m2}, pickled)
    out = convert_and_path(tmp_path, "f8.pt")
    _, tensors = read_safetensors_raw(out)
    assert tensors["e4m3"] == ("F8_E4M3", [16, 16], e4m3)
    want = bytes(e5m2[3 + r + 10 * c] for r in range(5) for c in range(4))
    assert tensors["e5m2_view"] == ("F8_E5M2", [5, 4], want)
    if HAS_F8:  # the running torch reads the same archive
        assert_same(load_torch(tmp_path / "f8.pt"), out)
    else:
        with safetensors.safe_open(str(out), framework="numpy") as f:
            assert sorted(f.keys()) == ["e4m3", "e5m2_view"]


def test_big_endian_archive(tmp_path):
    values = [1.5, -2.25, 1e30, float("inf")]
    ints = [1, -2, 2**40, -(2**50)]
    pickled = tp.mapping({
        "f": tp.tensor_v2("FloatStorage", "0", 4, 0, (4,), (1,)),
        "h": tp.tensor_v2("HalfStorage", "1", 3, 1, (2,), (1,)),
        "l": tp.tensor_v2("LongStorage", "2", 4, 0, (2, 2), (1, 2)),
        "b": tp.tensor_v2("ByteStorage", "3", 3, 0, (3,), (1,)),
    })
    entries = {"0": struct.pack(">4f", *values), "1": struct.pack(">3e", 0.5, -1.0, 2.0),
               "2": struct.pack(">4q", *ints), "3": b"\x01\x02\x03"}
    write_archive(tmp_path / "be.pt", entries, pickled, byteorder="big")
    out = convert_and_path(tmp_path, "be.pt")
    expected = {"f": torch.tensor(values), "h": torch.tensor([-1.0, 2.0]).half(),
                "l": torch.tensor(ints).reshape(2, 2).t(), "b": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    assert_same(expected, out)
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 1):
        assert_same(load_torch(tmp_path / "be.pt"), out)  # torch >= 2.1 honours byteorder


# ---- malicious pickles: refused, nothing written, nothing run ----

class Reduce:
    def __init__(self, func, args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


class SetState:
    """An object whose unpickling would call __setstate__ (NEWOBJ + BUILD)."""

    def __init__(self, marker):
        self.marker = marker

    def __setstate__(self, state):
        open(state["marker"], "w").close()


def malicious_objects(marker):
    import builtins
    import subprocess as sp
    import argparse

    yield "os.system", Reduce(os.system, (f"touch {marker}",))
    yield "eval", Reduce(builtins.eval, (f"open({str(marker)!r}, 'w')",))
    yield "popen", Reduce(sp.Popen, (["touch", str(marker)],))
    yield "setstate", SetState(str(marker))
    yield "other_module", argparse.Namespace(a=1)


@pytest.mark.parametrize("case", ["os.system", "eval", "popen", "setstate"])
def test_control_the_payloads_run_when_unpickled(tmp_path, case):
    """Control: Python's own unpickler does run each payload (so the refusal test below means something)."""
    marker = tmp_path / "marker"
    payload = next(p for n, p in malicious_objects(marker) if n == case)
    result = pickle.loads(pickle.dumps(payload, protocol=2))
    if case == "popen":
        result.wait()
    assert marker.exists()


@pytest.mark.parametrize("case", ["os.system", "eval", "popen", "setstate", "other_module"])
def test_malicious_pickles_are_refused(tmp_path, fmt, case):
    marker = tmp_path / "marker"
    payload = next(p for n, p in malicious_objects(marker) if n == case)
    # The global as torch.save's pickler (protocol 2, Python 2 names for some modules) writes it.
    global_name = next(arg.replace(" ", ".") for op, arg, _ in pickletools.genops(
        pickle.dumps(payload, protocol=2)) if op.name == "GLOBAL")
    ckpt = tmp_path / "evil.pt"
    save({"weight": torch.ones(2), "payload": payload}, ckpt, fmt)
    assert not marker.exists()
    out = tmp_path / "out.safetensors"
    for args in (["convert", ckpt, out], ["convert", "--list", ckpt], ["convert", ckpt, out, "--key", "weight"]):
        p = run(*args, check_rc=1)
        assert "not a plain weights checkpoint" in p.stderr and global_name in p.stderr, p.stderr
        assert p.stdout == ""
    assert not marker.exists()
    assert sorted(os.listdir(tmp_path)) == ["evil.pt"]


def test_hand_made_refusals(tmp_path):
    def expect(pickled, *needles):
        write_archive(tmp_path / "x.pt", {"0": b"\0" * 16}, pickled)
        p = run("convert", tmp_path / "x.pt", tmp_path / "x.safetensors", check_rc=1)
        for needle in needles:
            assert needle in p.stderr, p.stderr
        assert not (tmp_path / "x.safetensors").exists()

    proto = pickle.PROTO + b"\x02"
    # BUILD on an allowlisted global that is not a dict or tensor (a storage class's __setstate__).
    expect(proto + tp.global_ref("torch", "FloatStorage") + pickle.EMPTY_DICT + pickle.BUILD + pickle.STOP,
           "not a plain weights checkpoint", "BUILD of torch.FloatStorage")
    # REDUCE of an allowlisted global that is not callable here.
    expect(proto + tp.global_ref("torch", "float16") + pickle.EMPTY_TUPLE + pickle.REDUCE + pickle.STOP,
           "REDUCE of torch.float16")
    # STACK_GLOBAL (protocol 4) of a forbidden name.
    expect(b"\x80\x04" + pickle.SHORT_BINUNICODE + b"\x05posix" + pickle.SHORT_BINUNICODE + b"\x06system" +
           pickle.STACK_GLOBAL + pickle.STOP, "global posix.system")
    # INST and OBJ create instances.
    expect(proto + b"ios\nsystem\n" + pickle.STOP, "INST")
    # NEWOBJ of something else than Parameter.
    expect(proto + tp.global_ref("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE +
           pickle.EMPTY_TUPLE + pickle.NEWOBJ + pickle.STOP, "NEWOBJ of dict")


# ---- damaged archives: exit 1 with a message, never a crash ----

def expect_failure(tmp_path, ckpt, *needles):
    out = tmp_path / "out.safetensors"
    p = run("convert", ckpt, out)
    assert p.returncode == 1, f"rc {p.returncode}: {p.stderr}"
    assert p.stderr.startswith("tensoracle: ") and "unexpected" not in p.stderr, p.stderr
    for needle in needles:
        assert needle in p.stderr, p.stderr
    assert not out.exists() and not [f for f in os.listdir(tmp_path) if ".tmp-" in f]
    return p.stderr


def test_truncated_files(tmp_path, fmt):
    gen = torch.Generator().manual_seed(8)
    ckpt = tmp_path / "good.pt"
    save({"a": torch.randn(50, 20, generator=gen), "b": torch.arange(7)}, ckpt, fmt)
    data = ckpt.read_bytes()
    cuts = sorted(set(list(range(0, len(data), max(1, len(data) // 40))) + [len(data) - k for k in (1, 2, 8, 22, 23)]))
    for cut in cuts:
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        expect_failure(tmp_path, tmp_path / "cut.pt")


def test_damaged_archives(tmp_path):
    t = {"a": torch.arange(16, dtype=torch.float32).reshape(4, 4)}
    torch.save(t, tmp_path / "good.pt")
    top = zipfile.ZipFile(tmp_path / "good.pt").namelist()[0].split("/")[0]
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04" + os.urandom(300))
    expect_failure(tmp_path, tmp_path / "junk.pt", "zip")
    (tmp_path / "text.pt").write_text("hello")
    expect_failure(tmp_path, tmp_path / "text.pt", "not a PyTorch checkpoint")
    rezip(tmp_path / "good.pt", tmp_path / "missing.pt", drop={f"{top}/data/0"})
    expect_failure(tmp_path, tmp_path / "missing.pt", "storage '0' is missing")
    rezip(tmp_path / "good.pt", tmp_path / "short.pt", replace={f"{top}/data/0": b"\0" * 40})
    expect_failure(tmp_path, tmp_path / "short.pt", "storage '0'", "fewer than")
    rezip(tmp_path / "good.pt", tmp_path / "deflated.pt", compression=zipfile.ZIP_DEFLATED)
    expect_failure(tmp_path, tmp_path / "deflated.pt", "compressed")
    # CRC of data.pkl.
    raw = bytearray((tmp_path / "good.pt").read_bytes())
    pos = raw.index(b"_rebuild_tensor_v2")
    raw[pos] ^= 0x20
    (tmp_path / "crc.pt").write_bytes(raw)
    expect_failure(tmp_path, tmp_path / "crc.pt", "CRC")


def test_hostile_pickles(tmp_path):
    def expect(pickled, *needles, entries=None):
        write_archive(tmp_path / "h.pt", entries if entries is not None else {"0": b"\0" * 64}, pickled)
        return expect_failure(tmp_path, tmp_path / "h.pt", *needles)

    proto = pickle.PROTO + b"\x02"
    # Offsets and sizes out of range of the storage (16 floats of 4 bytes).
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 16, 10, (8,), (1,))}), "reaches past the end")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 16, 0, (4, 4), (4, 2))}), "reaches past the end")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 64, 0, (64,), (1,))}), "fewer than")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 16, 0, (2**31 - 1, 2**31 - 1, 2**31 - 1), (0, 0, 0))}),
           "more than 2^62 elements")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 16, 0, (2, 2), (2**31 - 1, 1))}), "reaches past")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "0", 16, 0, (-1,), (1,))}), "negative size")
    expect(tp.mapping({"t": tp.tensor_v2("FloatStorage", "9", 16, 0, (4,), (1,))}), "storage '9' is missing")
    # Recursion bombs: deep nesting of lists (no MARK) and of MARKs.
    expect(proto + pickle.EMPTY_LIST * 100000 + pickle.APPEND * 99999 + pickle.STOP, "nested deeper")
    expect(proto + pickle.MARK * 100000 + pickle.STOP, "MARKs nested deeper")
    # Shared references that make an exponential tree: L[i] = [L[i-1], L[i-1]].
    bomb = proto + pickle.MARK + pickle.MARK + tp.tensor_v2("FloatStorage", "0", 16, 0, (4,), (1,)) + pickle.LIST + pickle.BINPUT + b"\x00"
    for i in range(1, 60):
        bomb += pickle.MARK + pickle.BINGET + bytes([i - 1]) + pickle.BINGET + bytes([i - 1]) + pickle.LIST
        bomb += pickle.BINPUT + bytes([i])
    expect(bomb + pickle.LIST + pickle.STOP, "too large")
    # Absurd lengths.
    expect(proto + pickle.BINUNICODE + struct.pack("<I", 2**31) + b"abc" + pickle.STOP, "ends first")
    expect(proto + pickle.BINGET + b"\x07" + pickle.STOP, "memo entry 7")
    expect(proto + b"\xff" + pickle.STOP, "unsupported pickle opcode 0xff")
    expect(proto + pickle.NONE, "without STOP")


def test_many_tensors_and_a_large_pickle(tmp_path, fmt):
    # 12,000 tensors: the pickle alone is over 1 MiB (the legacy reader then reads further into the file).
    gen = torch.Generator().manual_seed(9)
    base = torch.randn(12000, generator=gen)
    sd = collections.OrderedDict((f"blocks.{i}.scale", base[i : i + 1].clone()) for i in range(12000))
    save(sd, tmp_path / "many.pt", fmt)
    out = convert_and_path(tmp_path, "many.pt")
    assert_same(load_torch(tmp_path / "many.pt"), out)
