# Compatibility of tensoracle's safetensors reader and writer with the official `safetensors` package, on fresh random files each run.
"""Files written by the official package (safetensors.numpy.save / save_file, numpy and ml_dtypes
arrays) are described by `tensoracle safetensors info --sha256` exactly as Python itself reads
them, and rewriting them with the `safetensors_rewrite` helper (SafetensorsFile::open +
write_safetensors) gives the bytes the official package writes, which it loads back bit for bit.

Environment: TENSORACLE_CLI (the `tensoracle` binary) and TENSORACLE_SAFETENSORS_REWRITE (the
`safetensors_rewrite` helper). Values are random; the seed is printed (shown on failure) and can
be fixed with TENSORACLE_TEST_SEED.

One deliberate exception to byte identity: the official writer emits `__metadata__` entries in
Rust HashMap order, which is random from one call to the next (check: save the same dict twice).
tensoracle writes them sorted by key. With two or more metadata entries the tests therefore check
that our file is the official file with its metadata entries sorted: same length, same tensor
entries and data, and the same header once parsed.
"""

import hashlib
import json
import os
import struct
import subprocess

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stnp
from safetensors import safe_open

# safetensors dtype name -> numpy dtype: every dtype tensoracle supports.
DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
    "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
FLOAT_DTYPES = ["F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"]
# The numpy front end of safetensors 0.8 can't build float8 arrays (it looks for numpy.float8_*);
# those tensors are checked through safetensors.deserialize only.
FRONTEND_CANNOT_LOAD = {"F8_E4M3", "F8_E5M2"}

# Metadata values that stress the JSON escaping: quotes, backslashes, newlines, control
# characters, non-ASCII text in every UTF-8 length, and an empty key and value.
TRICKY_TEXT = [
    'say "hi"',
    "back\\slash \\n not a newline",
    "line one\nline two\r\nline three",
    "tab\there, nul \x00 bell \x07 escape \x1b unit-sep \x1f del \x7f",
    "caf\u00e9 \u20ac \u4e2d\u6587 \U0001F600 \u2028 \ufeff",
    "",
    "{\"__metadata__\": 1}",
    "</script>&<>'",
]


# ---- fixtures and helpers ----


def _binary(variable):
    path = os.environ.get(variable)
    if not path:
        pytest.fail(f"{variable} is not set: point it at the built binary (see tests/CMakeLists.txt)", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{variable}={path} is not an executable file; build it first", pytrace=False)
    return path


@pytest.fixture(scope="session")
def cli():
    return _binary("TENSORACLE_CLI")


@pytest.fixture(scope="session")
def rewrite_tool():
    return _binary("TENSORACLE_SAFETENSORS_REWRITE")


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("TENSORACLE_TEST_SEED") or int.from_bytes(os.urandom(8), "little"))
    print(f"{request.node.name}: TENSORACLE_TEST_SEED={seed}")
    return np.random.default_rng(seed)


def random_array(rng, dtype_name, shape):
    """Random contents: every bit pattern for floats (NaNs with payloads, infinities, subnormals,
    negative zero) and integers, 0/1 for BOOL."""
    dtype = DTYPES[dtype_name]
    count = int(np.prod(shape, dtype=np.int64))
    if dtype_name == "BOOL":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    raw = rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def random_shape(rng, max_rank=4, max_elements=2048, allow_empty=True):
    rank = int(rng.integers(0, max_rank + 1))
    shape = []
    for _ in range(rank):
        low = 0 if allow_empty and rng.random() < 0.1 else 1
        shape.append(int(rng.integers(low, 9)))
    while int(np.prod(shape, dtype=np.int64)) > max_elements:
        shape[int(np.argmax(shape))] //= 2
    return tuple(shape)


def random_name(rng, index):
    """Unique tensor names, mostly checkpoint-like, some with characters that need escaping or
    that sort differently as UTF-8 bytes than as UTF-16 code units."""
    pieces = ["model", "layers", str(int(rng.integers(0, 64))), str(rng.choice(["attn", "mlp", "norm", "embed"])),
              str(rng.choice(["weight", "bias", "scale"]))]
    name = ".".join(pieces) + f".{index}"
    roll = rng.random()
    if roll < 0.05:
        name = str(rng.choice(["\u00e9", "\u4e2d", "\U0001F600", "\uff21", "Z", "_"])) + name
    elif roll < 0.08:
        name += str(rng.choice(['"q"', "\\", "\n", " ", "/", "\u2028"]))
    return name


def read_header(data):
    """(header length, [(name, entry)] in file order, metadata or None), parsed by Python."""
    (n,) = struct.unpack("<Q", data[:8])
    pairs = json.loads(data[8:8 + n].decode("utf-8"), object_pairs_hook=lambda p: p)
    metadata = None
    entries = []
    for key, value in pairs:
        if key == "__metadata__":
            metadata = dict(value)
        else:
            entries.append((key, dict(value)))
    return n, entries, metadata


def run(args, **kwargs):
    return subprocess.run(args, capture_output=True, timeout=60, **kwargs)


def info(cli, *paths):
    result = run([cli, "safetensors", "info", "--sha256", *map(str, paths)])
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert result.stderr == b""
    return json.loads(result.stdout)


def write_official(tmp_path, name, tensors, metadata):
    """The official package's file for these tensors: save_file on disk, and save() in memory
    (which must agree)."""
    path = tmp_path / name
    stnp.save_file(tensors, str(path), metadata=metadata)
    data = path.read_bytes()
    if metadata is None or len(metadata) <= 1:
        assert stnp.save(tensors, metadata=metadata) == data, "save() and save_file() disagree"
    return path, data


def sorted_metadata_variant(tensors, metadata):
    """The official bytes with the metadata entries sorted by key (the order tensoracle writes;
    the official order is random). Built from the official output without metadata, so the
    tensor entries, their order and the data are the official ones."""
    plain = stnp.save(tensors)
    (n,) = struct.unpack("<Q", plain[:8])
    body = plain[8:8 + n].rstrip(b" ")
    assert body.startswith(b"{") and body.endswith(b"}")
    entries = json.dumps(dict(sorted(metadata.items(), key=lambda kv: kv[0].encode("utf-8"))),
                         separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    header = b'{"__metadata__":' + entries + (b"," if body != b"{}" else b"") + body[1:]
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header + plain[8 + n:]


def check_info(cli, path, data, tensors, metadata):
    """`tensoracle safetensors info --sha256` reports exactly what Python reads from the file."""
    n, entries, header_metadata = read_header(data)
    assert header_metadata == metadata
    report = info(cli, path)
    assert list(report) == ["files"] and len(report["files"]) == 1
    file = report["files"][0]
    assert file["path"] == str(path)
    assert file["file_size"] == len(data)
    assert file["header_size"] == n
    assert file["metadata"] == metadata  # None when absent, {} when empty
    # File order: by data offset, then name.
    expected_order = sorted(entries, key=lambda e: (e[1]["data_offsets"][0], e[1]["data_offsets"][1], e[0].encode("utf-8")))
    assert [t["name"] for t in file["tensors"]] == [name for name, _ in expected_order]
    for reported, (name, entry) in zip(file["tensors"], expected_order):
        array = tensors[name]
        assert set(reported) == {"name", "dtype", "shape", "byte_size", "data_offsets", "sha256"}
        assert reported["dtype"] == entry["dtype"], name
        assert DTYPES[reported["dtype"]] == array.dtype, name
        assert reported["shape"] == entry["shape"] == list(array.shape), name
        assert reported["byte_size"] == array.nbytes, name
        assert reported["data_offsets"] == entry["data_offsets"], name
        begin, end = entry["data_offsets"]
        assert end - begin == array.nbytes
        assert data[8 + n + begin:8 + n + end] == array.tobytes(), name
        assert reported["sha256"] == hashlib.sha256(array.tobytes()).hexdigest(), name
    return file


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_official_loads(path, tensors, metadata):
    """The official package reads `path` back with the same tensors, bit for bit, and metadata."""
    data = path.read_bytes()
    loaded = dict(safetensors.deserialize(data))
    assert set(loaded) == set(tensors)
    for name, array in tensors.items():
        entry = loaded[name]
        assert DTYPES[entry["dtype"]] == array.dtype, name
        assert list(entry["shape"]) == list(array.shape), name
        assert bytes(entry["data"]) == array.tobytes(), name
    with safe_open(str(path), framework="np") as f:
        assert f.metadata() == metadata  # None when absent, {} when empty
        assert sorted(f.keys()) == sorted(tensors)
        for name, array in tensors.items():
            if np.dtype(array.dtype) in [DTYPES[d] for d in FRONTEND_CANNOT_LOAD]:
                continue
            assert same_bits(np.asarray(f.get_tensor(name)), array), name
    if not any(DTYPES[d] == a.dtype for d in FRONTEND_CANNOT_LOAD for a in tensors.values()):
        loaded = stnp.load_file(str(path))
        assert set(loaded) == set(tensors)
        for name, array in tensors.items():
            assert same_bits(loaded[name], array), name


def rewrite(rewrite_tool, source, target, drop_metadata=False):
    args = [rewrite_tool, str(source), str(target)] + (["--drop-metadata"] if drop_metadata else [])
    result = run(args)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return target.read_bytes()


def round_trip(cli, rewrite_tool, tmp_path, tensors, metadata=None, name="model"):
    """The whole check for one set of tensors: official file -> info -> rewrite -> identical bytes
    -> official load of the rewrite; and the same without metadata."""
    path, official = write_official(tmp_path, f"{name}.safetensors", tensors, metadata)
    check_info(cli, path, official, tensors, metadata)

    ours = rewrite(rewrite_tool, path, tmp_path / f"{name}.rewritten.safetensors")
    if metadata is None or len(metadata) <= 1:
        assert ours == official, "the rewrite differs from the official file"
    else:
        assert len(ours) == len(official)
        assert ours == sorted_metadata_variant(tensors, metadata), "the rewrite is not the official file with sorted metadata"
        assert read_header(ours)[1:] == read_header(official)[1:]
        assert ours[8 + read_header(ours)[0]:] == official[8 + read_header(official)[0]:]
    check_official_loads(tmp_path / f"{name}.rewritten.safetensors", tensors, metadata)
    check_info(cli, tmp_path / f"{name}.rewritten.safetensors", ours, tensors, metadata)

    if metadata is not None:
        bare = rewrite(rewrite_tool, path, tmp_path / f"{name}.bare.safetensors", drop_metadata=True)
        assert bare == stnp.save(tensors), "--drop-metadata differs from the official file without metadata"
        check_official_loads(tmp_path / f"{name}.bare.safetensors", tensors, None)
    return official


# ---- tests ----


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_every_dtype(cli, rewrite_tool, tmp_path, rng, dtype):
    tensors = {f"t{i}": random_array(rng, dtype, random_shape(rng, allow_empty=False)) for i in range(4)}
    tensors["big"] = random_array(rng, dtype, (64, 33))
    data = round_trip(cli, rewrite_tool, tmp_path, tensors)
    assert all(e["dtype"] == dtype for _, e in read_header(data)[1])


def test_all_dtypes_in_one_file_keep_the_official_order(cli, rewrite_tool, tmp_path, rng):
    # Names whose order disagrees with the dtype order, so both sort keys matter.
    tensors = {}
    for i, dtype in enumerate(DTYPES):
        for prefix in ("b", "a"):
            tensors[f"{prefix}{len(DTYPES) - i:02d}"] = random_array(rng, dtype, random_shape(rng, allow_empty=False))
    data = round_trip(cli, rewrite_tool, tmp_path, tensors, metadata={"format": "np"})
    order = [e["dtype"] for _, e in read_header(data)[1]]
    assert order == [d for d in ["I64", "F64", "F32", "I32", "BF16", "F16", "I16", "F8_E4M3", "F8_E5M2", "I8", "U8", "BOOL"]
                     for _ in range(2)]


def test_special_float_values(cli, rewrite_tool, tmp_path):
    tensors = {}
    for dtype in FLOAT_DTYPES:
        values = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, -np.nan, 1e-30, 65504.0, 448.0], dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            array = values.astype(DTYPES[dtype])
        # NaNs with every payload bit set, and the largest subnormal, from raw bits.
        raw = np.frombuffer(b"\xff" * DTYPES[dtype].itemsize + b"\x7f" * DTYPES[dtype].itemsize, dtype=DTYPES[dtype])
        tensors[f"special_{dtype}"] = np.concatenate([array, raw])
    round_trip(cli, rewrite_tool, tmp_path, tensors)


def test_scalars(cli, rewrite_tool, tmp_path, rng):
    tensors = {f"scalar_{d}": random_array(rng, d, ()) for d in DTYPES}
    data = round_trip(cli, rewrite_tool, tmp_path, tensors)
    assert all(e["shape"] == [] for _, e in read_header(data)[1])


def test_empty_tensors(cli, rewrite_tool, tmp_path, rng):
    tensors = {}
    for i, dtype in enumerate(DTYPES):
        tensors[f"empty_{dtype}"] = random_array(rng, dtype, [(0,), (3, 0), (0, 0, 2), (2, 5, 0)][i % 4])
        tensors[f"full_{dtype}"] = random_array(rng, dtype, (3,))
    data = round_trip(cli, rewrite_tool, tmp_path, tensors)
    offsets = {name: e["data_offsets"] for name, e in read_header(data)[1]}
    assert all(offsets[f"empty_{d}"][0] == offsets[f"empty_{d}"][1] for d in DTYPES)


def test_only_empty_tensors_and_no_tensors(cli, rewrite_tool, tmp_path):
    round_trip(cli, rewrite_tool, tmp_path, {"e": np.zeros((0, 4), np.float32), "f": np.zeros((0,), np.int8)}, name="only_empty")
    round_trip(cli, rewrite_tool, tmp_path, {}, name="nothing")
    round_trip(cli, rewrite_tool, tmp_path, {}, metadata={"k": "v"}, name="nothing_but_metadata")


@pytest.mark.parametrize(
    "metadata",
    [
        None,
        {},
        {"format": "pt"},
        {"": ""},
        *({"text": text} for text in TRICKY_TEXT),
        {"k\u00e9y \"quoted\"\n": "v\u00e4lue\\"},
        {"format": "pt", "source": "https://example.org/model", "description": "multi\nline"},
        {text or "empty": text for text in TRICKY_TEXT},
        {f"key{i:03d}": f"value {i}" for i in range(50)},
        {"big": "x" * 100_000},
    ],
    ids=["absent", "empty", "one", "empty-key-and-value", *(f"tricky-{i}" for i in range(len(TRICKY_TEXT))), "escaped-key",
         "three", "all-tricky", "fifty", "long-value"],
)
def test_metadata(cli, rewrite_tool, tmp_path, rng, metadata):
    tensors = {"w": random_array(rng, "F32", (4, 3)), "b": random_array(rng, "BF16", (3,))}
    round_trip(cli, rewrite_tool, tmp_path, tensors, metadata=metadata)


def test_official_metadata_order_is_random_but_ours_is_sorted(tmp_path):
    """Documents why multi-entry metadata is compared modulo order: the official writer itself
    is not deterministic there. If this ever fails, the official package became deterministic
    and round_trip() can demand plain byte identity again."""
    metadata = {f"k{i}": "v" for i in range(12)}
    tensors = {"x": np.zeros(1, np.uint8)}
    orders = {tuple(read_header(stnp.save(tensors, metadata=metadata))[2]) for _ in range(20)}
    assert len(orders) > 1


def test_many_tensors(cli, rewrite_tool, tmp_path, rng):
    dtypes = list(DTYPES)
    tensors = {}
    while len(tensors) < 500:
        name = random_name(rng, len(tensors))
        tensors[name] = random_array(rng, dtypes[int(rng.integers(0, len(dtypes)))], random_shape(rng, max_elements=64))
    round_trip(cli, rewrite_tool, tmp_path, tensors, metadata={"format": "pt", "count": "500"})


def test_names_needing_escapes_and_unicode_order(cli, rewrite_tool, tmp_path, rng):
    # UTF-8 byte order, as the official writer sorts: "Z" < "_" < "a" < "\u00e9" < "\uff21" < "\U0001F600"
    # (UTF-16 order would put U+1F600 before U+FF21).
    names = ["a", "Z", "_", "\u00e9", "\uff21", "\U0001F600", 'quote"d', "back\\slash", "new\nline", "tab\t",
             "ctrl\x01", "space name", "slash/name", "\u2028", "x" * 300]
    tensors = {name: random_array(rng, "F16", (2,)) for name in names}
    data = round_trip(cli, rewrite_tool, tmp_path, tensors)
    assert [name for name, _ in read_header(data)[1]] == sorted(names, key=lambda s: s.encode("utf-8"))


@pytest.mark.parametrize("iteration", range(6))
def test_random_files(cli, rewrite_tool, tmp_path, rng, iteration):
    dtypes = list(DTYPES)
    tensors = {}
    for index in range(int(rng.integers(1, 40))):
        tensors[random_name(rng, index)] = random_array(rng, dtypes[int(rng.integers(0, len(dtypes)))], random_shape(rng))
    metadata = [None, {}, {"format": "pt"}, {"a": "1", "b": TRICKY_TEXT[int(rng.integers(0, len(TRICKY_TEXT)))]}][iteration % 4]
    round_trip(cli, rewrite_tool, tmp_path, tensors, metadata=metadata)


def test_large_tensor_hash_and_bytes(cli, rewrite_tool, tmp_path, rng):
    # A few MB so that hashing and copying go through more than one page and buffer.
    tensors = {"large": random_array(rng, "F32", (1024, 1536)), "tail": random_array(rng, "U8", (7,))}
    round_trip(cli, rewrite_tool, tmp_path, tensors, metadata={"format": "pt"})


def test_info_on_several_official_files_at_once(cli, tmp_path, rng):
    files = []
    for i in (2, 0, 1):  # not in name order: the report keeps the command-line order
        tensors = {f"w{i}": random_array(rng, "BF16", (i + 1, 2))}
        metadata = None if i == 0 else {"i": str(i)}
        path, _ = write_official(tmp_path, f"f{i}.safetensors", tensors, metadata)
        files.append((path, tensors, metadata))
    report = info(cli, *[p for p, _, _ in files])
    assert [f["path"] for f in report["files"]] == [str(p) for p, _, _ in files]
    for entry, (path, tensors, metadata) in zip(report["files"], files):
        assert [t["name"] for t in entry["tensors"]] == list(tensors)
        assert [t["shape"] for t in entry["tensors"]] == [list(a.shape) for a in tensors.values()]
        assert entry["metadata"] == metadata


def test_rewrite_reports_errors(rewrite_tool, tmp_path):
    missing = tmp_path / "missing.safetensors"
    result = run([rewrite_tool, str(missing), str(tmp_path / "out.safetensors")])
    assert result.returncode == 1
    assert str(missing) in result.stderr.decode()
    assert not (tmp_path / "out.safetensors").exists()
    assert run([rewrite_tool]).returncode == 1
    assert run([rewrite_tool, str(missing)]).returncode == 1
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00[]")
    result = run([rewrite_tool, str(bad), str(tmp_path / "out.safetensors")])
    assert result.returncode == 1 and "invalid safetensors file" in result.stderr.decode()
    good = tmp_path / "good.safetensors"
    stnp.save_file({"x": np.zeros(2, np.float32)}, str(good))
    result = run([rewrite_tool, str(good), str(tmp_path / "no-such-dir" / "out.safetensors")])
    assert result.returncode == 1 and "no-such-dir" in result.stderr.decode()
