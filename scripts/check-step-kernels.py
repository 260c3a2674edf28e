#!/usr/bin/env python3
"""Checks the CUDA steps' kernels against programmatic launch's rule (CI runs this).

The execution context launches the steps' own kernels with programmatic dependent launch on sm_90 (a kernel may start
before the one before it in the stream has finished), which is correct only when the kernel waits for it before
touching memory. So in src/backends/cuda/kernels every __global__ function's first statement is
wait_for_preceding_steps(), or read_older_results_before_the_wait() with that wait later in its body (step_wait.cuh
says when early reads are correct), and every launch goes through launch_kernel or step_launch_config (no <<<>>>, no plain
cudaLaunchKernel). Exit status 1 with each offending place named, else 0.

    scripts/check-step-kernels.py [ROOT]   (ROOT: the repository, by default this script's)
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent
KERNELS = ROOT / "src" / "backends" / "cuda" / "kernels"


def matching(text: str, start: int, open_char: str, close_char: str) -> int:
    depth = 0
    for i in range(start, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced")


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def problems_in(path: pathlib.Path) -> list:
    text = path.read_text()
    where = path.relative_to(ROOT)
    found = []
    for match in re.finditer(r"\b__global__\b", text):
        paren = text.index("(", match.end())
        if text[match.end():paren].rstrip().endswith("__launch_bounds__"):
            paren = text.index("(", matching(text, paren, "(", ")") + 1)
        close = matching(text, paren, "(", ")")
        brace = text.find("{", close)
        semicolon = text.find(";", close)
        if brace < 0 or (0 <= semicolon < brace):
            continue  # a declaration
        name = re.findall(r"(\w+)\s*$", text[:paren])
        body = re.sub(r"^(kernels::)", "", text[brace + 1:].lstrip())  # the wait may be named with its namespace
        kernel = name[-1] if name else "?"
        if body.startswith("read_older_results_before_the_wait();"):
            # step_wait.cuh: early reads of older results only; the wait must still come before anything is written.
            if not re.search(r"\bwait_for_preceding_steps\(\);", text[brace:matching(text, brace, "{", "}")]):
                found.append(f"{where}:{line_of(text, match.start())}: kernel {kernel} begins with "
                             "read_older_results_before_the_wait() but never calls wait_for_preceding_steps()")
        elif not body.startswith("wait_for_preceding_steps();"):
            found.append(f"{where}:{line_of(text, match.start())}: kernel {kernel} does not begin "
                         "with wait_for_preceding_steps()")
    for pattern, what in ((r"<<<", "a <<<>>> launch: use launch_kernel"),
                          (r"\bcudaLaunchKernel\s*\(", "cudaLaunchKernel: use launch_kernel or step_launch_config")):
        for match in re.finditer(pattern, text):
            line_start = text.rfind("\n", 0, match.start()) + 1
            if text[line_start:match.start()].lstrip().startswith("//"):
                continue
            found.append(f"{where}:{line_of(text, match.start())}: {what}")
    return found


def main() -> int:
    problems = []
    files = sorted(list(KERNELS.glob("*.cu")) + list(KERNELS.glob("*.cuh")))
    for path in files:
        if path.name.startswith("cutlass_gemm_sm90"):
            continue  # CUTLASS's kernels wait themselves (CUTLASS_ENABLE_GDC_FOR_SM90)
        problems += problems_in(path)
    for p in problems:
        print(p)
    if problems:
        print(f"check-step-kernels: {len(problems)} problems (see scripts/check-step-kernels.py)")
        return 1
    print(f"check-step-kernels: every kernel of {len(files)} files waits for the preceding step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
