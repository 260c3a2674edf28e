"""Op-conformance suite: every case of tests/python/conformance/cases_*.py run on the CPU reference
executor and compared with PyTorch (float64 reference). Runs under a Python that has torch.

With TENSORACLE_CONFORMANCE_TARGET=cuda (or cpu) every case is also built as an engine for that target
and its outputs are compared with the CPU reference's (conformance/targets.py); the cases then run
concurrently."""
import importlib
import pkgutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conformance  # noqa: E402
from conformance.framework import cli_path, run_case  # noqa: E402
from conformance.targets import only_library_races, run_all, target  # noqa: E402

SEED = int(torch.randint(0, 2**31 - 1, ()).item())


def all_cases():
    torch.manual_seed(SEED)
    cases = []
    for module in sorted(m.name for m in pkgutil.iter_modules(conformance.__path__) if m.name.startswith("cases_")):
        cases += importlib.import_module(f"conformance.{module}").cases()
    return cases


CASES = all_cases()


@pytest.fixture(scope="module")
def target_results(request, tmp_path_factory):
    """Problems of every selected case (pytest -k) on the engine target, run all at once (None without a target)."""
    if not target():
        return None
    selected = {item.callspec.params["case"].name for item in request.session.items
                if hasattr(item, "callspec") and "case" in item.callspec.params}
    base = tmp_path_factory.mktemp("conformance_" + target())
    return base, run_all([c for c in CASES if c.name in selected], base, cli_path(), target())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_conformance(case, tmp_path, target_results):
    if target_results is None:
        problems = run_case(case, tmp_path / case.name, cli_path())
        assert not problems, f"seed {SEED}; inputs kept in {tmp_path / case.name}\n" + "\n".join(problems)
    else:
        base, results = target_results
        problems = results[case.name]
        assert not problems, f"seed {SEED}; inputs kept in {base / case.name}\n" + "\n".join(problems)


def test_case_names_are_unique():
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


def test_racecheck_reports_only_inside_library_kernels_are_told_apart():
    library = ("========= Error: Race reported between Read access at "
               "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_32_64x256x64_4x1x1_cga1x1x1_kernel0_0"
               "+0x2e0\n=========     and Write access at "
               "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_32_64x256x64_4x1x1_cga1x1x1_kernel0_0"
               "+0x6920 [16 hazards]\n========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)\n")
    ours = ("========= Error: Race reported between Write access at void tensoracle::cuda::(anonymous namespace)::"
            "attention_causal_poison_kernel<false>(AttentionParams)+0x2e0\n=========     and Read access at void "
            "tensoracle::cuda::(anonymous namespace)::attention_causal_poison_kernel<false>(AttentionParams)+0x690\n")
    assert only_library_races(library)
    assert not only_library_races(ours)
    assert not only_library_races(library + ours)  # one of ours among them fails the case
    assert not only_library_races("========= ERROR SUMMARY: 0 errors\n")
