# Tests of scripts/check-step-kernels.py: the repository's kernels wait for the preceding step, and a kernel that does
# not, or a launch outside launch_kernel, fails.
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "check-step-kernels.py"


def run(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(root)], capture_output=True, text=True)


def kernels_file(root: pathlib.Path, name: str, text: str) -> None:
    folder = root / "src" / "backends" / "cuda" / "kernels"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_the_repository_passes():
    result = run(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "waits for the preceding step" in result.stdout


def test_kernels_that_wait_and_launches_through_launch_kernel_pass(tmp_path):
    kernels_file(tmp_path, "ok.cu", """
template <typename T>
__global__ void __launch_bounds__(256) scale_kernel(T* x, int n);  // a declaration
template <typename T>
__global__ void __launch_bounds__(256) scale_kernel(T* x, int n) {
  wait_for_preceding_steps();
  if (threadIdx.x < n) x[threadIdx.x] *= 2;
}
void launch(const StepLaunch& launch) { launch_kernel(launch, scale_kernel<float>, 1, 256, 0, nullptr, 0); }
// a comment may say <<< and cudaLaunchKernel(
""")
    result = run(tmp_path)
    assert result.returncode == 0, result.stdout


def test_a_kernel_without_the_wait_and_plain_launches_fail(tmp_path):
    kernels_file(tmp_path, "bad.cu", """
__global__ void early_kernel(float* x) {
  x[threadIdx.x] = 0;
  wait_for_preceding_steps();
}
void launch(cudaStream_t s) {
  early_kernel<<<1, 32, 0, s>>>(nullptr);
  cudaLaunchKernel(nullptr, 1, 1, nullptr, 0, s);
}
""")
    result = run(tmp_path)
    assert result.returncode == 1
    lines = result.stdout.strip().splitlines()
    assert lines[:3] == [
        "src/backends/cuda/kernels/bad.cu:2: kernel early_kernel does not begin with wait_for_preceding_steps()",
        "src/backends/cuda/kernels/bad.cu:7: a <<<>>> launch: use launch_kernel",
        "src/backends/cuda/kernels/bad.cu:8: cudaLaunchKernel: use launch_kernel or step_launch_config",
    ]
