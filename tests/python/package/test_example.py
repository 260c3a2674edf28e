"""examples/python: the inference script builds on the first run and reuses the cached engine on the second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "python" / "infer.py"


def test_example_builds_then_reuses(tmp_path):
    outputs = []
    for _ in range(2):
        result = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
        outputs.append(result.stdout)
    assert outputs[0].startswith("engine built:") and "passed" in outputs[0]
    assert outputs[1].startswith("engine reused:") and "passed" in outputs[1]
