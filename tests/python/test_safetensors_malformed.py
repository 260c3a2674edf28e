# `tensoracle safetensors info` on the malformed corpus of make_malformed_corpus.py: every file is rejected cleanly with the right message.
"""For every file of the corpus: exit status 1 (never a signal), nothing on stdout, and on stderr
"tensoracle: <path>: invalid safetensors file: ..." containing the rule's expected substring.
The official `safetensors` package must reject the same files, except where tensoracle is
deliberately stricter (STRICTER_THAN_OFFICIAL, each with the reason); for those the test checks
that the official package does accept them, so the list stays true.

Environment: TENSORACLE_CLI, the `tensoracle` binary.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import safetensors.numpy as stnp
from safetensors import safe_open

HERE = pathlib.Path(__file__).resolve().parent
GENERATOR = HERE / "make_malformed_corpus.py"

_spec = importlib.util.spec_from_file_location("make_malformed_corpus", GENERATOR)
_generator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_generator)
CASES = [stem + ".safetensors" for stem, _, _ in _generator.cases()]

# Files the official package (safetensors 0.8) loads but tensoracle rejects on purpose.
STRICTER_THAN_OFFICIAL = {
    "dtype_unsupported_u16.safetensors": "U16/U32/U64/F8_E8M0 are valid safetensors dtypes that tensoracle does not support",
    "dtype_unsupported_u32.safetensors": "unsupported dtype",
    "dtype_unsupported_u64.safetensors": "unsupported dtype",
    "dtype_unsupported_f8_e8m0.safetensors": "unsupported dtype (the official numpy front end can't load it either, "
                                             "but the official header parser accepts it)",
    "duplicate_tensor_name_identical.safetensors": "serde keeps one of two identical entries; a duplicated name is ambiguous",
    "duplicate_metadata_key.safetensors": "serde keeps the last value of a repeated __metadata__ key silently",
    "header_leading_space.safetensors": "the official parser skips whitespace before the '{'; tensoracle wants the object first",
    "metadata_null.safetensors": "serde reads \"__metadata__\": null as absent metadata",
    "tensor_entry_array.safetensors": "serde accepts a tensor entry written as an array [dtype, shape, data_offsets]",
    "unknown_field.safetensors": "serde ignores unknown fields in a tensor entry; tensoracle treats them as a sign of a format it doesn't know",
}

# Known reader bugs, found by this corpus: the test is expected to fail until the reader is fixed
# (strict: once it passes, remove the entry here).
KNOWN_READER_BUGS: dict[str, str] = {}

# Every rule of the format, by the file-name prefix of its cases: the corpus must cover all.
RULES = [
    "short_file", "header_length_past_end", "header_length_over_limit", "header_not_utf8", "header_not_json",
    "header_json_array", "header_json_string", "dtype_unknown", "dtype_unsupported", "shape_negative_dim",
    "shape_non_integer_dim", "shape_element_count_overflow", "offsets_overlap", "offsets_gap", "offsets_past_end",
    "offsets_end_before_begin", "offsets_byte_count", "trailing_bytes", "duplicate_tensor_name", "metadata_string",
    "metadata_value", "missing_field", "unknown_field", "offsets_arity",
]


def _cli():
    path = os.environ.get("TENSORACLE_CLI")
    if not path:
        pytest.fail("TENSORACLE_CLI is not set: point it at the built `tensoracle` binary", pytrace=False)
    if not os.access(path, os.X_OK):
        pytest.fail(f"TENSORACLE_CLI={path} is not an executable file; build it first", pytrace=False)
    return path


@pytest.fixture(scope="module")
def cli():
    return _cli()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Runs the generator as a program into a fresh directory: (directory, expectations)."""
    directory = tmp_path_factory.mktemp("malformed")
    result = subprocess.run([sys.executable, str(GENERATOR), str(directory)], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    expectations = json.loads((directory / "expectations.json").read_text(encoding="utf-8"))
    return directory, expectations


def run(args):
    return subprocess.run([str(a) for a in args], capture_output=True, timeout=60)


def text(data):
    # Messages quote header bytes, which may not be UTF-8 in this corpus.
    return data.decode("utf-8", errors="replace")


def describe(result):
    return f"exit {result.returncode}\nstdout: {text(result.stdout)[:500]!r}\nstderr: {text(result.stderr)[:2000]!r}"


def official_header_accepts(path):
    """True when the official Rust header parser and validator accept the file."""
    try:
        with safe_open(str(path), framework="np") as f:
            f.keys()
            f.metadata()
        return True
    except Exception:  # noqa: BLE001 (any rejection counts)
        return False


def test_corpus_covers_every_rule(corpus):
    directory, expectations = corpus
    assert sorted(expectations) == sorted(CASES), "expectations.json and the generator's cases disagree"
    for rule in RULES:
        assert any(name.startswith(rule) for name in expectations), f"no corpus file for rule {rule}"
    for name, expected in expectations.items():
        assert (directory / name).is_file(), name
        assert expected and expected == expected.lower(), name
    assert set(STRICTER_THAN_OFFICIAL) <= set(expectations)
    assert set(KNOWN_READER_BUGS) <= set(expectations)


def test_control_a_valid_file_is_accepted(cli, tmp_path):
    """Guards the test itself: a valid file passes, so the rejections below mean something."""
    path = tmp_path / "valid.safetensors"
    stnp.save_file({"a": np.arange(4, dtype=np.float32)}, str(path), metadata={"k": "v"})
    result = run([cli, "safetensors", "info", path])
    assert result.returncode == 0, describe(result)
    assert json.loads(result.stdout)["files"][0]["tensors"][0]["name"] == "a"


def _known_bug(name):
    reason = KNOWN_READER_BUGS.get(name)
    return [pytest.mark.xfail(reason=f"reader bug: {reason}", strict=True)] if reason else []


@pytest.mark.parametrize("name", [pytest.param(n, id=n.removesuffix(".safetensors"), marks=_known_bug(n)) for n in CASES])
def test_tensoracle_rejects(cli, corpus, name):
    directory, expectations = corpus
    path = directory / name
    result = run([cli, "safetensors", "info", path])
    assert result.returncode >= 0, f"crashed with signal {-result.returncode}\n{describe(result)}"
    assert result.returncode == 1, describe(result)
    assert result.stdout == b"", describe(result)
    stderr = text(result.stderr)
    assert stderr.startswith(f"tensoracle: {path}: invalid safetensors file: "), describe(result)
    assert expectations[name] in stderr.lower(), f"expected {expectations[name]!r}\n{describe(result)}"
    assert stderr.count("\n") == 1, f"one line per error\n{describe(result)}"


@pytest.mark.parametrize("name", [pytest.param(n, id=n.removesuffix(".safetensors")) for n in CASES])
def test_official_package_agrees(corpus, name):
    directory, _ = corpus
    path = directory / name
    if name in STRICTER_THAN_OFFICIAL:
        assert official_header_accepts(path), (
            f"the official package now rejects {name}: remove it from STRICTER_THAN_OFFICIAL")
        return
    with pytest.raises(Exception):  # noqa: B017 (SafetensorError, or whatever the official package raises)
        stnp.load_file(str(path))
    assert not official_header_accepts(path), f"the official header parser accepts {name}"


def test_all_files_in_one_call(cli, corpus):
    """Many bad files at once: every one is reported, still exit 1 and nothing on stdout."""
    directory, expectations = corpus
    names = [n for n in CASES if n not in KNOWN_READER_BUGS]
    result = run([cli, "safetensors", "info", *(directory / n for n in names)])
    assert result.returncode == 1, describe(result)
    assert result.stdout == b""
    lines = text(result.stderr).splitlines()
    assert len(lines) == len(names), describe(result)
    for line, name in zip(lines, names):
        assert line.startswith(f"tensoracle: {directory / name}: "), line
        assert expectations[name] in line.lower(), line


@pytest.mark.parametrize(
    "args",
    [
        ["safetensors", "info"],  # no FILE
        ["safetensors", "info", "--no-such-option", "x.safetensors"],
        ["safetensors", "info", "--sha256"],
        ["safetensors"],  # no subcommand
        ["safetensors", "frobnicate", "x.safetensors"],
        ["--no-such-option"],
    ],
    ids=["no-file", "unknown-option", "flag-but-no-file", "no-subcommand", "unknown-subcommand", "unknown-global-option"],
)
def test_usage_errors_exit_2(cli, args):
    result = run([cli, *args])
    assert result.returncode == 2, describe(result)
    assert result.stdout == b"", describe(result)
    assert result.stderr.strip(), describe(result)


def test_missing_file_exits_1_naming_it(cli, tmp_path):
    missing = tmp_path / "does-not-exist.safetensors"
    result = run([cli, "safetensors", "info", missing])
    assert result.returncode == 1, describe(result)
    assert result.stdout == b""
    assert text(result.stderr).startswith(f"tensoracle: {missing}: "), describe(result)
    assert "no such file" in text(result.stderr).lower(), describe(result)


def test_directory_exits_1_naming_it(cli, tmp_path):
    result = run([cli, "safetensors", "info", tmp_path])
    assert result.returncode == 1, describe(result)
    assert result.stdout == b""
    assert str(tmp_path) in text(result.stderr), describe(result)
