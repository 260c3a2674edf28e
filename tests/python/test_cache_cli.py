# Tests of `tensoracle cache list|prune` on cache directories written by an independent Python writer of the engine format.
"""Environment: TENSORACLE_CLI, the `tensoracle` binary.

The engine files here are written from the format's specification, not by the library: magic
b"TENSORACLE\\x01", an 8-byte big-endian header length, json.dumps(header, sort_keys=True,
separators=(",", ":")), then the plan. Weight records likewise: weight-<sha256 of the absolute
path>.json with a checksum over the canonical JSON of the record without it.
"""

import hashlib
import json
import os
import shutil
import stat
import subprocess
import time

import pytest

DAY_NS = 86400 * 10**9
NOTICE = "Removed engines will be rebuilt the next time they are used."


# ---- the independent writer ----

def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")


def engine_bytes(conditions, plan=b"plan bytes", shape_tensor_outputs=(), header=None):
    if header is None:
        header = {"conditions": conditions, "plan_sha256": hashlib.sha256(plan).hexdigest(),
                  "shape_tensor_outputs": list(shape_tensor_outputs)}
    header_bytes = header if isinstance(header, bytes) else canonical(header)
    return b"TENSORACLE\x01" + len(header_bytes).to_bytes(8, "big") + header_bytes + plan


def write_engine(directory, name, conditions=None, plan=b"plan bytes", mtime_ns=None, **kwargs):
    path = directory / name
    path.write_bytes(engine_bytes(conditions if conditions is not None else {"name": name}, plan, **kwargs))
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))
    return path


def write_weight_record(directory, weight_path, sha256, *, size=1, mtime_ns=1, device=1, inode=1, checksum=None):
    weight_path = os.path.abspath(weight_path)
    record = {"version": 1, "path": weight_path, "size": size, "mtime_ns": mtime_ns, "device": device,
              "inode": inode, "sha256": sha256}
    record["checksum"] = checksum or hashlib.sha256(canonical(record)).hexdigest()
    name = "weight-" + hashlib.sha256(os.fsencode(weight_path)).hexdigest() + ".json"
    (directory / name).write_bytes(canonical(record))
    return directory / name


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


# ---- running the command ----

@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path:
        pytest.fail("TENSORACLE_CLI is not set: point it at the built `tensoracle` binary", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"TENSORACLE_CLI={path} is not an executable file; build it first", pytrace=False)
    return path


@pytest.fixture
def cache(tmp_path):
    """The cache directory ($XDG_CACHE_HOME/tensoracle) with XDG_CACHE_HOME pointing into tmp_path."""
    directory = tmp_path / "xdg" / "tensoracle"
    directory.mkdir(parents=True)
    return directory


def environment(cache_dir, **extra):
    env = dict(os.environ)
    env["XDG_CACHE_HOME"] = str(cache_dir.parent)
    env.pop("TENSORACLE_TEST_PRUNE_PAUSE", None)
    env.update(extra)
    return env


def run(cli, cache_dir, *args, prefix=(), env=None):
    return subprocess.run([*prefix, cli, *map(str, args)], capture_output=True, timeout=60,
                          env=env or environment(cache_dir))


def describe(result):
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[:3000]!r}\n"
            f"stderr: {result.stderr.decode(errors='replace')[:3000]!r}")


def documents(stdout):
    """The JSON documents printed one after another."""
    text = stdout.decode("ascii")  # ensure_ascii output
    decoder = json.JSONDecoder()
    out, index = [], 0
    while True:
        while index < len(text) and text[index].isspace():
            index += 1
        if index == len(text):
            return out
        value, index = decoder.raw_decode(text, index)
        out.append(value)


def listing(cli, cache_dir, *args):
    result = run(cli, cache_dir, "cache", "list", *args)
    assert result.returncode == 0, describe(result)
    (doc,) = documents(result.stdout)
    return doc


def prune(cli, cache_dir, *args, expect=0):
    result = run(cli, cache_dir, "cache", "prune", *args)
    assert result.returncode == expect, describe(result)
    plan, outcome = documents(result.stdout)
    assert list(plan) == ["plan"] and list(outcome) == ["result"]
    return plan["plan"], outcome["result"]


def snapshot(directory):
    """Every file's contents and times, to check that nothing changed."""
    out = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        out[path.name] = (path.read_bytes() if stat.S_ISREG(st.st_mode) and st.st_mode & 0o400 else None,
                          st.st_mtime_ns, st.st_size)
    return out


def files(directory):
    return sorted(p.name for p in directory.iterdir())


def utc(ns):
    seconds, nanos = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def unprivileged():
    """A command prefix under which file permission bits apply (root bypasses them)."""
    if os.geteuid() != 0:
        return ()
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("running as root without setpriv: permission bits cannot be enforced")
    return (setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner,-linux_immutable", "--")


# ---- cache list ----

def test_list_reports_every_field(cli, cache):
    conditions = {"name": "bert", "graph_version": 2, "weights": [digest("w")], "target": {"kind": "cpu"},
                  "builder": {"precision": "fp32", "profiles": {}}, "nested": [1, 2.5, None, True]}
    path = write_engine(cache, "bert.engine", conditions, mtime_ns=1_700_000_000_123_456_789)
    doc = listing(cli, cache)
    assert list(doc) == ["directory", "entries", "total_size_bytes"]
    assert doc["directory"] == str(cache)
    (entry,) = doc["entries"]
    assert entry == {
        "file": "bert.engine",
        "size_bytes": path.stat().st_size,
        "recorded_at": "2023-11-14T22:13:20.123456789Z",
        "recorded_at_ns": 1_700_000_000_123_456_789,
        "status": "recognized",
        "reason": None,
        "conditions": conditions,
        "weight_paths": [{"sha256": digest("w"), "paths": []}],
    }
    assert doc["total_size_bytes"] == path.stat().st_size


def test_list_uses_home_cache_when_xdg_is_unset_or_empty(cli, tmp_path):
    home = tmp_path / "home"
    directory = home / ".cache" / "tensoracle"
    directory.mkdir(parents=True)
    write_engine(directory, "a.engine")
    for xdg in (None, ""):
        env = dict(os.environ, HOME=str(home))
        env.pop("XDG_CACHE_HOME", None)
        if xdg is not None:
            env["XDG_CACHE_HOME"] = xdg
        result = subprocess.run([cli, "cache", "list"], capture_output=True, timeout=60, env=env)
        assert result.returncode == 0, describe(result)
        doc = json.loads(result.stdout)
        assert doc["directory"] == str(directory)
        assert [e["file"] for e in doc["entries"]] == ["a.engine"]


def test_list_cache_dir_option_overrides_the_environment(cli, cache, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    write_engine(other, "x.engine")
    write_engine(cache, "y.engine")
    doc = listing(cli, cache, "--cache-dir", other)
    assert doc["directory"] == str(other)
    assert [e["file"] for e in doc["entries"]] == ["x.engine"]


def test_list_missing_directory_is_empty_and_not_created(cli, tmp_path):
    directory = tmp_path / "nothing" / "tensoracle"
    doc = listing(cli, directory)
    assert doc == {"directory": str(directory), "entries": [], "total_size_bytes": 0}
    assert not directory.parent.exists()


def test_list_orders_by_name_and_totals_every_engine_file(cli, cache):
    sizes = {}
    for name in ["c.engine", "a.engine", "b.engine"]:
        sizes[name] = write_engine(cache, name, {"name": name}, plan=b"x" * len(name) * 7).stat().st_size
    (cache / "empty.engine").write_bytes(b"")
    (cache / "junk.engine").write_bytes(b"junk")
    # Files that are not engines are not listed and do not count.
    (cache / "notes.txt").write_bytes(b"hello")
    (cache / ".a.engine.tmp-1-abc").write_bytes(b"partial")
    write_weight_record(cache, "/w", digest("w"))
    doc = listing(cli, cache)
    assert [e["file"] for e in doc["entries"]] == ["a.engine", "b.engine", "c.engine", "empty.engine", "junk.engine"]
    assert doc["total_size_bytes"] == sum(sizes.values()) + 4
    for entry in doc["entries"]:
        st = (cache / entry["file"]).stat()
        assert entry["size_bytes"] == st.st_size
        assert entry["recorded_at_ns"] == st.st_mtime_ns
        assert entry["recorded_at"] == utc(st.st_mtime_ns)


def test_list_empty_file_is_building_or_leftover(cli, cache):
    (cache / "b.engine").write_bytes(b"")
    (entry,) = listing(cli, cache)["entries"]
    assert entry["status"] == "building or leftover"
    assert entry["reason"] is None and entry["conditions"] is None and entry["weight_paths"] == []
    assert entry["size_bytes"] == 0


@pytest.mark.parametrize("contents, reason", [
    (b"garbage that is long enough to hold a header", "incomplete engine file"),
    (b"TENSORACLE\x01\x00\x00", "incomplete engine file"),
    (b"TENSORACLE", "incomplete engine file"),
    (engine_bytes({"a": 1})[:40], "invalid engine header"),               # truncated header
    (engine_bytes({"a": 1}, plan=b""), "invalid engine header"),          # no plan after the header
    (engine_bytes(None, header=b"{not json"), "invalid engine header"),
    (engine_bytes(None, header=canonical([1, 2])), "invalid engine header"),
    (engine_bytes(None, header=canonical({"conditions": [1]})), "invalid engine header"),
    (engine_bytes(None, header=canonical({"plan_sha256": "x"})), "invalid engine header"),
    (engine_bytes(None, header=canonical({"conditions": {}, "shape_tensor_outputs": [1]})), "invalid engine header"),
    (engine_bytes(None, header=b'{"conditions":{"a":"\xff"}}'), "invalid engine header"),
    (b"TENSORACLE\x01" + b"\x00" * 8 + b"{}", "invalid engine header"),            # zero length
    (b"TENSORACLE\x01" + b"\xff" * 8 + b"{}", "invalid engine header"),            # length past the end
])
def test_list_bad_headers_are_unrecognized_with_a_reason(cli, cache, contents, reason):
    (cache / "bad.engine").write_bytes(contents)
    (entry,) = listing(cli, cache)["entries"]
    assert entry["status"] == "unrecognized"
    assert entry["reason"].startswith(reason), entry["reason"]
    assert entry["conditions"] is None and entry["weight_paths"] == []
    assert entry["size_bytes"] == len(contents)


def test_list_odd_but_valid_headers_are_recognized(cli, cache):
    odd = {
        "empty.engine": {},
        "unicode.engine": {"名前": "モデル", "emoji": "\U0001F600", "ctl": "\x00\x7f", "weights": "not a list"},
        "numbers.engine": {"big": 10**30, "neg": -1, "float": 1e-7, "weights": [1, "XYZ", digest("a"), digest("a")]},
    }
    for name, conditions in odd.items():
        write_engine(cache, name, conditions)
    # Extra header fields and a missing plan_sha256 are not the listing's business.
    (cache / "extra.engine").write_bytes(engine_bytes(None, header=canonical({"conditions": {"k": 1}, "more": 1})))
    # A damaged plan is not noticed: the listing never reads it.
    data = bytearray(engine_bytes({"k": 2}))
    data[-1] ^= 0xFF
    (cache / "damaged.engine").write_bytes(bytes(data))
    result = run(cli, cache, "cache", "list")
    assert result.returncode == 0, describe(result)
    assert result.stdout.isascii()
    entries = {e["file"]: e for e in json.loads(result.stdout)["entries"]}
    assert all(e["status"] == "recognized" for e in entries.values()), entries
    assert entries["empty.engine"]["conditions"] == {}
    assert entries["unicode.engine"]["conditions"] == odd["unicode.engine"]
    assert entries["unicode.engine"]["weight_paths"] == []
    assert entries["numbers.engine"]["conditions"]["neg"] == -1
    assert entries["numbers.engine"]["conditions"]["float"] == 1e-7
    assert entries["numbers.engine"]["weight_paths"] == [{"sha256": digest("a"), "paths": []}]
    assert entries["extra.engine"]["conditions"] == {"k": 1}
    assert entries["damaged.engine"]["conditions"] == {"k": 2}


def test_list_weight_paths_come_from_valid_records_only(cli, cache, tmp_path):
    w1, w2, w3 = digest("one"), digest("two"), digest("three")
    write_engine(cache, "m-a.engine", {"name": "m", "graph_version": 1, "weights": [w1, w2]})
    write_engine(cache, "m-b.engine", {"name": "m", "graph_version": 1, "weights": [w3]})
    write_weight_record(cache, tmp_path / "b" / "one.safetensors", w1)
    write_weight_record(cache, tmp_path / "a" / "one.safetensors", w1)   # two paths with the same contents
    write_weight_record(cache, tmp_path / "bad.safetensors", w2, checksum="0" * 64)  # checksum mismatch
    # A record whose sha256 is w3 but whose file was renamed: still a path hint.
    write_weight_record(cache, "/gone/three.safetensors", w3)
    (cache / ("weight-" + "f" * 64 + ".json")).write_bytes(b"{broken")
    entries = {e["file"]: e for e in listing(cli, cache)["entries"]}
    assert entries["m-a.engine"]["weight_paths"] == [
        {"sha256": w1, "paths": sorted([str(tmp_path / "a" / "one.safetensors"),
                                        str(tmp_path / "b" / "one.safetensors")])},
        {"sha256": w2, "paths": []},
    ]
    assert entries["m-b.engine"]["weight_paths"] == [{"sha256": w3, "paths": ["/gone/three.safetensors"]}]
    # Same name and graph version, told apart by their conditions.
    assert entries["m-a.engine"]["conditions"] != entries["m-b.engine"]["conditions"]


def test_list_never_opens_weight_files(cli, cache, tmp_path):
    fifo = tmp_path / "weights.fifo"   # opening it for reading would block the command
    os.mkfifo(fifo)
    write_weight_record(cache, fifo, digest("w"))
    write_engine(cache, "a.engine", {"weights": [digest("w")]})
    (entry,) = listing(cli, cache)["entries"]
    assert entry["weight_paths"] == [{"sha256": digest("w"), "paths": [str(fifo)]}]


def test_list_changes_nothing(cli, cache):
    write_engine(cache, "a.engine", mtime_ns=10**18)
    (cache / "b.engine").write_bytes(b"")
    (cache / "c.engine").write_bytes(b"junk")
    write_weight_record(cache, "/w", digest("w"))
    os.utime(cache, ns=(10**18, 10**18))
    before = snapshot(cache)
    listing(cli, cache)
    listing(cli, cache)
    assert snapshot(cache) == before
    assert cache.stat().st_mtime_ns == 10**18


def test_list_special_files_are_unrecognized_and_never_opened(cli, cache):
    os.mkfifo(cache / "fifo.engine")
    (cache / "dir.engine").mkdir()
    (cache / "link.engine").symlink_to(write_engine(cache.parent, "target.engine"))
    doc = listing(cli, cache)
    entries = {e["file"]: e for e in doc["entries"]}
    assert set(entries) == {"fifo.engine", "dir.engine", "link.engine"}
    for entry in entries.values():
        assert entry["status"] == "unrecognized"
        assert entry["reason"] == "not a regular file"


def test_list_unreadable_file_is_unrecognized(cli, cache):
    path = write_engine(cache, "secret.engine")
    path.chmod(0)
    result = run(cli, cache, "cache", "list", prefix=unprivileged())
    assert result.returncode == 0, describe(result)
    (entry,) = json.loads(result.stdout)["entries"]
    assert entry["status"] == "unrecognized"
    assert "Permission denied" in entry["reason"]


def test_list_unreadable_directory_is_exit_1(cli, cache):
    write_engine(cache, "a.engine")
    cache.chmod(0)
    try:
        result = run(cli, cache, "cache", "list", prefix=unprivileged())
    finally:
        cache.chmod(0o700)
    assert result.returncode == 1, describe(result)
    assert result.stdout == b""
    assert str(cache).encode() in result.stderr


def test_list_directory_that_is_a_file_is_exit_1(cli, tmp_path):
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "tensoracle").write_bytes(b"not a directory")
    result = run(cli, tmp_path / "xdg" / "tensoracle", "cache", "list")
    assert result.returncode == 1, describe(result)
    assert b"not a directory" in result.stderr


def test_list_read_only_cache_is_fine(cli, cache):
    write_engine(cache, "a.engine")
    cache.chmod(0o500)
    try:
        result = run(cli, cache, "cache", "list", prefix=unprivileged())
    finally:
        cache.chmod(0o700)
    assert result.returncode == 0, describe(result)


# ---- cache prune: usage ----

@pytest.mark.parametrize("args", [
    [],
    ["--unused-for", "1", "--max-size", "1"],
    ["--unused-for", "-1"], ["--unused-for", "nan"], ["--unused-for", "inf"], ["--unused-for", "1e999"],
    ["--unused-for", "abc"], ["--unused-for", ""], ["--unused-for", "0x10"],
    ["--max-size", "1GB"], ["--max-size", "-5"], ["--max-size", "x"], ["--max-size", "1PiB"], ["--max-size", "GiB"],
    ["--max-size", "nan"], ["--max-size", "1.2.3"],
    ["--max-size"], ["--unused-for"], ["--bogus"], ["extra-argument", "--max-size", "1"],
])
def test_prune_invalid_usage_is_exit_2_and_changes_nothing(cli, cache, args):
    write_engine(cache, "a.engine", mtime_ns=1)
    before = snapshot(cache)
    result = run(cli, cache, "cache", "prune", *args)
    assert result.returncode == 2, describe(result)
    assert result.stdout == b""
    assert result.stderr
    assert snapshot(cache) == before


@pytest.mark.parametrize("args", [["cache"], ["cache", "list", "--bogus"], ["cache", "list", "extra"],
                                  ["cache", "bogus"], ["cache", "list", "--cache-dir"]])
def test_cache_invalid_usage_is_exit_2(cli, cache, args):
    result = run(cli, cache, *args)
    assert result.returncode == 2, describe(result)
    assert result.stdout == b""


def test_help_explains_each_command(cli, cache):
    result = run(cli, cache, "cache", "--help")
    assert result.returncode == 0, describe(result)
    assert b"list" in result.stdout and b"prune" in result.stdout
    result = run(cli, cache, "cache", "list", "--help")
    assert result.returncode == 0, describe(result)
    assert b"building or leftover" in result.stdout
    result = run(cli, cache, "cache", "prune", "--help")
    assert result.returncode == 0, describe(result)
    for text in [b"--unused-for", b"--max-size", b"--dry-run", b"KiB", b"TiB", b"strictly", b"Exit status"]:
        assert text in result.stdout, text
    result = run(cli, cache, "--help")
    assert b"cache" in result.stdout


# ---- cache prune: selection ----

def test_prune_unused_for_selects_strictly_earlier_than_the_cutoff(cli, cache):
    now = time.time_ns()
    write_engine(cache, "old.engine", mtime_ns=now - 3 * DAY_NS)
    write_engine(cache, "just-over.engine", mtime_ns=now - 2 * DAY_NS - 60 * 10**9)
    write_engine(cache, "just-under.engine", mtime_ns=now - 2 * DAY_NS + 60 * 10**9)
    write_engine(cache, "new.engine", mtime_ns=now)
    plan, result = prune(cli, cache, "--unused-for", "2")
    assert [e["file"] for e in plan["selected"]] == ["old.engine", "just-over.engine"]
    assert plan["criterion"]["unused_for_days"] == 2.0
    cutoff = plan["criterion"]["cutoff_ns"]
    assert now - 2 * DAY_NS <= cutoff <= time.time_ns() - 2 * DAY_NS
    assert plan["criterion"]["cutoff"] == utc(cutoff)
    assert [e["file"] for e in result["removed"]] == ["old.engine", "just-over.engine"]
    assert files(cache) == ["just-under.engine", "new.engine"]


def test_prune_unused_for_accepts_fractional_days_of_24_hours(cli, cache):
    now = time.time_ns()
    hour = 3600 * 10**9
    write_engine(cache, "13h.engine", mtime_ns=now - 13 * hour)
    write_engine(cache, "11h.engine", mtime_ns=now - 11 * hour)
    write_engine(cache, "7h.engine", mtime_ns=now - 7 * hour)
    plan, _ = prune(cli, cache, "--unused-for", "0.5", "--dry-run")
    assert [e["file"] for e in plan["selected"]] == ["13h.engine"]
    plan, _ = prune(cli, cache, "--unused-for", ".25", "--dry-run")
    assert [e["file"] for e in plan["selected"]] == ["13h.engine", "11h.engine", "7h.engine"]
    plan, _ = prune(cli, cache, "--unused-for", "1e-1", "--dry-run")   # 2.4 hours
    assert len(plan["selected"]) == 3


def test_prune_unused_for_zero_spares_engines_recorded_in_the_future(cli, cache):
    write_engine(cache, "past.engine", mtime_ns=time.time_ns() - 10**9)
    write_engine(cache, "future.engine", mtime_ns=time.time_ns() + DAY_NS)
    plan, result = prune(cli, cache, "--unused-for", "0")
    assert [e["file"] for e in plan["selected"]] == ["past.engine"]
    assert files(cache) == ["future.engine"]


def test_prune_max_size_removes_oldest_first_ties_by_name(cli, cache):
    size = write_engine(cache, "d.engine", mtime_ns=4 * 10**18).stat().st_size
    write_engine(cache, "c.engine", {"name": "d.engine"}, mtime_ns=2 * 10**18)
    write_engine(cache, "b.engine", {"name": "d.engine"}, mtime_ns=2 * 10**18)
    write_engine(cache, "a.engine", {"name": "d.engine"}, mtime_ns=3 * 10**18)
    assert all((cache / n).stat().st_size == size for n in files(cache))
    plan, result = prune(cli, cache, "--max-size", str(2 * size + 1))
    assert [e["file"] for e in plan["selected"]] == ["b.engine", "c.engine"]
    assert plan["total_size_bytes"] == 4 * size
    assert plan["projected_total_size_bytes"] == 2 * size
    assert plan["criterion"] == {"max_size_bytes": 2 * size + 1}
    assert files(cache) == ["a.engine", "d.engine"]
    assert result["removed_size_bytes"] == 2 * size
    assert result["remaining_total_size_bytes"] == 2 * size


def test_prune_max_size_that_already_fits_removes_nothing(cli, cache):
    size = write_engine(cache, "a.engine").stat().st_size
    plan, result = prune(cli, cache, "--max-size", str(size))
    assert plan["selected"] == [] and result["removed"] == []
    assert files(cache) == ["a.engine"]


@pytest.mark.parametrize("text, limit", [
    ("0", 0), ("1234", 1234), ("1234.9", 1234), ("10B", 10), ("10b", 10), ("1KiB", 1024), ("1kib", 1024),
    ("0.5KIB", 512), ("1.5GiB", 1610612736), ("10GiB", 10 * 2**30), ("1MiB", 2**20), ("2tib", 2 * 2**40),
    ("0.3MiB", 314572), ("1e3", 1000), ("1e-3KiB", 1),
])
def test_prune_max_size_units(cli, cache, text, limit):
    plan, _ = prune(cli, cache, "--max-size", text, "--dry-run")
    assert plan["criterion"] == {"max_size_bytes": limit}


def test_prune_never_removes_empty_or_unrecognized_files_but_counts_them(cli, cache):
    size = write_engine(cache, "a.engine", mtime_ns=10**18).stat().st_size
    (cache / "building.engine").write_bytes(b"")
    (cache / "junk.engine").write_bytes(b"j" * 10)
    os.utime(cache / "junk.engine", ns=(1, 1))   # the oldest file of all
    os.utime(cache / "building.engine", ns=(1, 1))
    plan, result = prune(cli, cache, "--max-size", "10")
    assert [e["file"] for e in plan["selected"]] == ["a.engine"]
    excluded = {e["file"]: e for e in plan["excluded"]}
    assert set(excluded) == {"building.engine", "junk.engine"}
    assert excluded["building.engine"]["status"] == "building or leftover"
    assert excluded["junk.engine"]["status"] == "unrecognized"
    assert excluded["junk.engine"]["reason"].startswith("incomplete engine file")
    assert plan["total_size_bytes"] == size + 10
    assert result["excluded"] == plan["excluded"]
    assert result["remaining_total_size_bytes"] == 10
    assert files(cache) == ["building.engine", "junk.engine"]
    # Unused-for mode too: both are older than any cutoff and still kept.
    plan, _ = prune(cli, cache, "--unused-for", "1")
    assert plan["selected"] == []
    assert files(cache) == ["building.engine", "junk.engine"]


def test_prune_unattainable_size_is_exit_1(cli, cache):
    write_engine(cache, "a.engine", mtime_ns=10**18)
    (cache / "junk.engine").write_bytes(b"j" * 100)
    plan, result = prune(cli, cache, "--max-size", "99", "--dry-run", expect=1)
    assert plan["size_limit_attainable"] is False and result["size_limit_attainable"] is False
    assert [e["file"] for e in plan["selected"]] == ["a.engine"]
    assert files(cache) == ["a.engine", "junk.engine"]
    plan, result = prune(cli, cache, "--max-size", "99", expect=1)
    assert [e["file"] for e in result["removed"]] == ["a.engine"]
    assert result["remaining_total_size_bytes"] == 100
    assert files(cache) == ["junk.engine"]
    prune(cli, cache, "--max-size", "100")


def test_prune_keeps_weight_records_and_other_files(cli, cache):
    write_engine(cache, "a.engine", {"weights": [digest("w")]}, mtime_ns=1)
    record = write_weight_record(cache, "/w", digest("w"))
    (cache / "notes.txt").write_bytes(b"x")
    prune(cli, cache, "--max-size", "0")
    assert files(cache) == sorted([record.name, "notes.txt"])


def test_prune_prints_plan_then_result(cli, cache):
    size = write_engine(cache, "a.engine", mtime_ns=1).stat().st_size
    (cache / "e.engine").write_bytes(b"")
    plan, result = prune(cli, cache, "--unused-for", "30")
    assert list(plan) == ["directory", "dry_run", "criterion", "total_size_bytes", "selected", "selected_size_bytes",
                          "excluded", "projected_total_size_bytes", "size_limit_attainable", "notice"]
    assert plan["directory"] == str(cache)
    assert plan["dry_run"] is False
    assert plan["notice"] == NOTICE
    assert plan["selected"] == [{"file": "a.engine", "size_bytes": size, "recorded_at": utc(1), "recorded_at_ns": 1}]
    assert plan["selected_size_bytes"] == size
    assert list(result) == ["dry_run", "removed", "excluded", "failed", "missing", "removed_size_bytes",
                            "remaining_total_size_bytes", "size_limit_attainable"]
    assert result["removed"] == plan["selected"]
    assert result["failed"] == [] and result["missing"] == []
    assert result["removed_size_bytes"] == size
    assert result["remaining_total_size_bytes"] == 0


def test_prune_dry_run_changes_nothing_and_projects_the_total(cli, cache):
    sizes = [write_engine(cache, f"{i}.engine", {"i": i}, mtime_ns=(i + 1) * 10**9).stat().st_size for i in range(3)]
    (cache / "e.engine").write_bytes(b"")
    write_weight_record(cache, "/w", digest("w"))
    before = snapshot(cache)
    for args in (["--max-size", str(sizes[2])], ["--unused-for", "0"]):
        plan, result = prune(cli, cache, *args, "--dry-run")
        assert plan["dry_run"] is True and result["dry_run"] is True
        assert result["removed"] == [] and result["failed"] == [] and result["missing"] == []
        assert result["removed_size_bytes"] == 0
        assert result["remaining_total_size_bytes"] == sum(sizes)
        assert result["projected_total_size_bytes"] == sum(sizes) - plan["selected_size_bytes"]
        assert result["projected_total_size_bytes"] == plan["projected_total_size_bytes"]
        assert snapshot(cache) == before
    assert [e["file"] for e in plan["selected"]] == ["0.engine", "1.engine", "2.engine"]


def test_prune_missing_directory_is_empty_success(cli, tmp_path):
    directory = tmp_path / "none" / "tensoracle"
    plan, result = prune(cli, directory, "--max-size", "0")
    assert plan["selected"] == [] and result["remaining_total_size_bytes"] == 0
    assert not directory.parent.exists()


def test_prune_directory_that_is_a_file_is_exit_1(cli, tmp_path):
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "tensoracle").write_bytes(b"")
    result = run(cli, tmp_path / "xdg" / "tensoracle", "cache", "prune", "--max-size", "0")
    assert result.returncode == 1, describe(result)


# ---- cache prune: changes between plan and removal (through the TENSORACLE_TEST_PRUNE_PAUSE hook) ----

def prune_with_pause(cli, cache, change, *args):
    """Runs prune, calls `change()` after the plan is printed and before anything is removed."""
    process = subprocess.Popen([cli, "cache", "prune", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=environment(cache, TENSORACLE_TEST_PRUNE_PAUSE="1"))
    try:
        plan_lines = []
        while True:
            line = process.stdout.readline()
            assert line, "the plan never ended: " + process.stderr.read().decode(errors="replace")
            plan_lines.append(line)
            if line.rstrip(b"\n") == b"}":
                break
        plan = json.loads(b"".join(plan_lines))["plan"]
        change()
        stdout, stderr = process.communicate(b"\n", timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    result = json.loads(stdout)["result"]
    return process.returncode, plan, result, stderr


def test_prune_file_vanishing_before_removal_is_missing(cli, cache):
    sizes = {n: write_engine(cache, n, {"n": n}, mtime_ns=1).stat().st_size for n in ["a.engine", "b.engine"]}
    rc, plan, result, stderr = prune_with_pause(cli, cache, lambda: (cache / "a.engine").unlink(), "--max-size", "0")
    assert rc == 0, stderr
    assert [e["file"] for e in plan["selected"]] == ["a.engine", "b.engine"]
    assert [e["file"] for e in result["missing"]] == ["a.engine"]
    assert [e["file"] for e in result["removed"]] == ["b.engine"]
    assert result["removed_size_bytes"] == sizes["b.engine"]
    assert result["failed"] == []
    assert files(cache) == []


def test_prune_whole_directory_vanishing_is_missing(cli, cache):
    write_engine(cache, "a.engine", mtime_ns=1)
    rc, _, result, stderr = prune_with_pause(cli, cache, lambda: shutil.rmtree(cache), "--unused-for", "0")
    assert rc == 0, stderr
    assert [e["file"] for e in result["missing"]] == ["a.engine"]
    assert result["removed_size_bytes"] == 0


def test_prune_changed_files_are_failed_and_left_in_place(cli, cache):
    names = ["grown.engine", "touched.engine", "replaced.engine", "kept.engine"]
    for name in names:
        write_engine(cache, name, {"n": name}, mtime_ns=10**9)

    def change():
        with open(cache / "grown.engine", "ab") as f:
            f.write(b"more")
        os.utime(cache / "grown.engine", ns=(10**9, 10**9))
        os.utime(cache / "touched.engine", ns=(2 * 10**9, 2 * 10**9))
        replacement = cache / "replacement"
        replacement.write_bytes((cache / "replaced.engine").read_bytes())
        os.utime(replacement, ns=(10**9, 10**9))
        os.replace(replacement, cache / "replaced.engine")

    rc, plan, result, stderr = prune_with_pause(cli, cache, change, "--unused-for", "1")
    assert rc == 1, stderr
    assert len(plan["selected"]) == 4
    failed = {f["file"]: f["reason"] for f in result["failed"]}
    assert set(failed) == {"grown.engine", "touched.engine", "replaced.engine"}
    assert "size" in failed["grown.engine"]
    assert "recorded time" in failed["touched.engine"]
    assert "inode" in failed["replaced.engine"]
    assert all("left in place" in reason for reason in failed.values())
    assert [e["file"] for e in result["removed"]] == ["kept.engine"]
    assert files(cache) == ["grown.engine", "replaced.engine", "touched.engine"]


def test_prune_failed_deletion_in_read_only_directory_is_exit_1(cli, cache):
    write_engine(cache, "a.engine", mtime_ns=1)
    cache.chmod(0o500)
    try:
        result = run(cli, cache, "cache", "prune", "--max-size", "0", prefix=unprivileged())
    finally:
        cache.chmod(0o700)
    assert result.returncode == 1, describe(result)
    plan, outcome = (d[k] for d, k in zip(documents(result.stdout), ["plan", "result"]))
    assert [e["file"] for e in plan["selected"]] == ["a.engine"]
    assert [f["file"] for f in outcome["failed"]] == ["a.engine"]
    assert "Permission denied" in outcome["failed"][0]["reason"]
    assert outcome["removed"] == [] and outcome["removed_size_bytes"] == 0
    assert files(cache) == ["a.engine"]


def test_prune_dry_run_in_read_only_directory_succeeds(cli, cache):
    write_engine(cache, "a.engine", mtime_ns=1)
    cache.chmod(0o500)
    try:
        result = run(cli, cache, "cache", "prune", "--max-size", "0", "--dry-run", prefix=unprivileged())
    finally:
        cache.chmod(0o700)
    assert result.returncode == 0, describe(result)
    assert files(cache) == ["a.engine"]
