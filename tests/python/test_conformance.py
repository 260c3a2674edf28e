"""Op-conformance suite: every case of tests/python/conformance/cases_*.py run on the CPU reference
executor and compared with PyTorch (float64 reference). Runs under a Python that has torch."""
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance  # noqa: E402
from conformance.framework import cli_path, run_case  # noqa: E402

SEED = int(torch.randint(0, 2**31 - 1, ()).item())


def all_cases():
    torch.manual_seed(SEED)
    cases = []
    for module in sorted(m.name for m in pkgutil.iter_modules(conformance.__path__) if m.name.startswith("cases_")):
        cases += importlib.import_module(f"conformance.{module}").cases()
    return cases


CASES = all_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_conformance(case, tmp_path):
    problems = run_case(case, tmp_path / case.name, cli_path())
    assert not problems, f"seed {SEED}; inputs kept in {tmp_path / case.name}\n" + "\n".join(problems)


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
