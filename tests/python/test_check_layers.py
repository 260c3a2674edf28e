# Tests of scripts/check-layers.py: the repository's includes point down, and an upward or sideways include fails.
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-layers.py"


def run(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def make_tree(root: pathlib.Path, files: dict) -> None:
    for path, text in files.items():
        p = root / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    (root / "include" / "tensoracle").mkdir(parents=True, exist_ok=True)


def test_the_repository_passes():
    result = run(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every include points down" in result.stdout


def test_an_include_that_points_up_fails(tmp_path):
    make_tree(tmp_path, {
        "src/core/dims.cpp": '#include "core/bytes.hpp"\n#include "graph/graph.hpp"\n#include "tensoracle/dims.hpp"\n',
        "src/core/bytes.hpp": "",
        "src/graph/graph.hpp": '#include "core/bytes.hpp"\n',
    })
    result = run(tmp_path)
    assert result.returncode == 1
    assert result.stdout.strip().splitlines() == [
        'src/core/dims.cpp (core) includes "graph/graph.hpp" (graph): up']


def test_sideways_includes_and_unknown_folders_fail(tmp_path):
    make_tree(tmp_path, {
        "src/builder/builder.cpp": '#include "runtime/engine.hpp"\n#include "plan/plan_format.hpp"\n',
        "src/backends/cpu/cpu_target.cpp": '#include "backends/target.hpp"\n#include "backends/cuda/check.hpp"\n',
        "src/extra/thing.cpp": "",
        "include/tensoracle/api.hpp": '#include "graph/graph.hpp"\n',
    })
    lines = run(tmp_path).stdout.strip().splitlines()
    assert 'src/builder/builder.cpp (builder) includes "runtime/engine.hpp" (runtime): sideways' in lines
    assert ('src/backends/cpu/cpu_target.cpp (backends/cpu) includes "backends/cuda/check.hpp" (backends/cuda): '
            'sideways') in lines
    assert any(line.startswith("src/extra/thing.cpp: not in a known layer folder") for line in lines)
    assert 'include/tensoracle/api.hpp: a public header includes "graph/graph.hpp" from src/' in lines
    assert len(lines) == 4
