# Tests of the `tensoracle` command line: --version, --help, usage errors and `safetensors info` over several files.
"""Environment: TENSORACLE_CLI, the `tensoracle` binary."""

import json
import os
import pathlib
import re
import subprocess

import numpy as np
import pytest
import safetensors.numpy as stnp

PROJECT_ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path:
        pytest.fail("TENSORACLE_CLI is not set: point it at the built `tensoracle` binary", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"TENSORACLE_CLI={path} is not an executable file; build it first", pytrace=False)
    return path


def run(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, timeout=60)


def describe(result):
    return (f"exit {result.returncode}\nstdout: {result.stdout.decode(errors='replace')[:2000]!r}\n"
            f"stderr: {result.stderr.decode(errors='replace')[:2000]!r}")


def project_version():
    text = (PROJECT_ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    match = re.search(r"project\(\s*tensoracle\s+VERSION\s+(\d+\.\d+\.\d+)", text)
    assert match, "no project(tensoracle VERSION x.y.z) in the top-level CMakeLists.txt"
    return match.group(1)


@pytest.fixture
def files(tmp_path):
    """Three valid files with different contents, and one invalid one."""
    paths = {}
    for i, (dtype, metadata) in enumerate([(np.float32, None), (np.int8, {"format": "np"}), (np.float16, {})]):
        path = tmp_path / f"valid{i}.safetensors"
        stnp.save_file({f"tensor{i}": np.arange(i + 2, dtype=dtype), f"extra{i}": np.zeros((i, 2), dtype=np.uint8)},
                       str(path), metadata=metadata)
        paths[f"valid{i}"] = path
    bad = tmp_path / "invalid.safetensors"
    bad.write_bytes(stnp.save({"t": np.zeros(2, np.float32)}) + b"\x00")  # one trailing byte
    paths["invalid"] = bad
    return paths


def test_version(cli):
    result = run(cli, "--version")
    assert result.returncode == 0, describe(result)
    first_line = result.stdout.decode().splitlines()[0]
    assert re.fullmatch(r"tensoracle \d+\.\d+\.\d+", first_line), first_line
    assert first_line == f"tensoracle {project_version()}"
    assert result.stderr == b""


def test_help(cli):
    result = run(cli, "--help")
    assert result.returncode == 0, describe(result)
    out = result.stdout.decode()
    assert "safetensors" in out
    assert "Usage:" in out
    assert "--version" in out
    assert result.stderr == b""


def test_no_arguments_is_a_usage_error(cli):
    result = run(cli)
    assert result.returncode == 2, describe(result)
    assert result.stdout == b""
    assert "tensoracle --help" in result.stderr.decode(), describe(result)


def test_safetensors_info_help(cli):
    result = run(cli, "safetensors", "info", "--help")
    assert result.returncode == 0, describe(result)
    out = result.stdout.decode()
    assert "--sha256" in out and "FILE" in out
    assert "Exit status" in out


def test_info_one_file(cli, files):
    result = run(cli, "safetensors", "info", files["valid1"])
    assert result.returncode == 0, describe(result)
    assert result.stderr == b""
    report = json.loads(result.stdout)
    assert list(report) == ["files"]
    (entry,) = report["files"]
    assert list(entry) == ["path", "file_size", "header_size", "metadata", "tensors"]
    assert entry["path"] == str(files["valid1"])
    assert entry["file_size"] == files["valid1"].stat().st_size
    assert entry["metadata"] == {"format": "np"}
    # I8 tensor1 [3] and U8 extra1 [1,2]: the official writer puts I8 before U8.
    assert entry["tensors"] == [
        {"name": "tensor1", "dtype": "I8", "shape": [3], "byte_size": 3, "data_offsets": [0, 3]},
        {"name": "extra1", "dtype": "U8", "shape": [1, 2], "byte_size": 2, "data_offsets": [3, 5]},
    ]


def test_info_several_files_in_order(cli, files):
    order = [files["valid2"], files["valid0"], files["valid1"], files["valid0"]]  # any order, repeats allowed
    result = run(cli, "safetensors", "info", *order)
    assert result.returncode == 0, describe(result)
    report = json.loads(result.stdout)
    assert [f["path"] for f in report["files"]] == [str(p) for p in order]
    assert [f["metadata"] for f in report["files"]] == [{}, None, {"format": "np"}, None]
    for entry, path in zip(report["files"], order):
        i = path.name[len("valid")]
        assert sorted(t["name"] for t in entry["tensors"]) == sorted([f"tensor{i}", f"extra{i}"])
        assert all("sha256" not in t for t in entry["tensors"])


def test_info_sha256_flag_on_several_files(cli, files):
    result = run(cli, "safetensors", "info", "--sha256", files["valid0"], files["valid2"])
    assert result.returncode == 0, describe(result)
    report = json.loads(result.stdout)
    assert len(report["files"]) == 2
    assert all(re.fullmatch(r"[0-9a-f]{64}", t["sha256"]) for f in report["files"] for t in f["tensors"])
    # The empty tensor extra0 (shape [0,2]) hashes as the empty string.
    extra0 = next(t for t in report["files"][0]["tensors"] if t["name"] == "extra0")
    assert extra0["sha256"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_info_zero_size_tensor_at_the_end_of_an_empty_data_section(cli, tmp_path):
    # What the fuzzer found: a zero-size tensor last in a file with no data bytes at all (header only).
    path = tmp_path / "zero.safetensors"
    header = b'{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}}'
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    assert stnp.load_file(str(path))["a"].shape == (0,)  # the official reader accepts it too
    result = run(cli, "safetensors", "info", "--sha256", path)
    assert result.returncode == 0, describe(result)
    (entry,) = json.loads(result.stdout)["files"]
    assert entry["file_size"] == 8 + len(header)
    assert entry["tensors"] == [
        {
            "name": "a",
            "dtype": "F32",
            "shape": [0],
            "byte_size": 0,
            "data_offsets": [0, 0],
            "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        }
    ]


def test_messages_quoting_file_bytes_escape_them(cli, tmp_path):
    # A header holding the bytes FF FE: the JSON parser's message quotes them, and stderr used to carry them raw
    # (invalid UTF-8 on the terminal). Control characters from a file (an ESC sequence here) are escaped too.
    path = tmp_path / "ff-fe.safetensors"
    header = b'{"a\xff\xfe":{}}    '
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    escape = tmp_path / "esc.safetensors"
    header = b'{"\\u001b[2Jx":{"dtype":"F32","shape":[1],"data_offsets":[0,8]}}'
    escape.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    for file, shown in ((path, "last read: '\"a\\xff'"), (escape, "\\x1b[2Jx")):
        result = run(cli, "safetensors", "info", file)
        assert result.returncode == 1, describe(result)
        stderr = result.stderr.decode("utf-8")  # strict: raises on invalid UTF-8
        assert all(c in "\n\t" or (ord(c) >= 0x20 and not 0x7F <= ord(c) <= 0x9F) for c in stderr), stderr
        assert shown in stderr, stderr
        assert str(file) in stderr


@pytest.mark.parametrize("invalid_first", [False, True], ids=["valid-then-invalid", "invalid-then-valid"])
def test_one_invalid_file_fails_the_whole_call(cli, files, invalid_first):
    args = [files["invalid"], files["valid0"]] if invalid_first else [files["valid0"], files["invalid"]]
    result = run(cli, "safetensors", "info", *args)
    assert result.returncode == 1, describe(result)
    assert result.stdout == b"", describe(result)
    stderr = result.stderr.decode()
    assert stderr.startswith(f"tensoracle: {files['invalid']}: invalid safetensors file: "), describe(result)
    assert str(files["valid0"]) not in stderr
    assert "the file holds 9 bytes after the header" in stderr


def test_every_invalid_file_is_reported(cli, files, tmp_path):
    missing = tmp_path / "missing.safetensors"
    result = run(cli, "safetensors", "info", files["invalid"], files["valid1"], missing)
    assert result.returncode == 1, describe(result)
    assert result.stdout == b""
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 2, describe(result)
    assert lines[0].startswith(f"tensoracle: {files['invalid']}: ")
    assert lines[1].startswith(f"tensoracle: {missing}: ")
