"""tensoracle.bundle and tensoracle.producer: cubin_sm, the documented digest checked with Python's json, CUDA C++ and
Triton bundles (real nvcc / Triton, no GPU), inspect_wheel on libraries and wheels built here."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import tensoracle
import tensoracle.bundle as bundle

KERNELS = r"""
extern "C" __global__ void scale(float* out, const float* in, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * s;
}
#ifndef VALUE
#define VALUE 1
#endif
extern "C" __global__ void fill(int* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = VALUE;
}
"""


def _have_nvcc() -> bool:
    try:
        tensoracle._tensoracle.bundle_find_tool("nvcc", "", [])
        return True
    except tensoracle.NotFoundError:
        return False


needs_nvcc = pytest.mark.skipif(not _have_nvcc(), reason="no nvcc (install nvidia-cuda-nvcc or a CUDA toolkit)")
needs_cxx = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler to build a plugin library")


def _elf_header(abi: int, flags: int, machine: int = 190) -> bytes:
    ident = b"\x7fELF" + bytes([2, 1, 1, 0x33 if abi == 7 else 0x41, abi]) + bytes(7)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0, 0, 0, flags, 64, 0, 0, 0, 0, 0)


def _digest(doc: dict) -> str:
    """The digest as docs/cubin-bundles.md defines it, computed with Python's json."""
    body = {k: v for k, v in doc.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cuda_kernels(src: Path, value: int = 7):
    from tensoracle.producer import Arg, KernelSpec

    src.mkdir(parents=True, exist_ok=True)
    (src / "kernels.cu").write_text(KERNELS)
    return [
        KernelSpec("scale", source=src / "kernels.cu",
                   args=[Arg("out", "pointer", divisibility=16), ("in", "pointer", 1, 16), ("s", "f32"), ("n", "i32")],
                   threads=128),
        KernelSpec("fill.v", source=src / "kernels.cu", entry="fill",
                   args=[{"name": "out", "type": "pointer"}, ("n", "i64")], constants={"VALUE": value}),
    ]


def _build_library(bundle_dir: Path, out: Path) -> Path:
    include = Path(tensoracle.__file__).resolve().parents[2] / "include"
    if not (include / "tensoracle" / "cubin_bundle.hpp").is_file():
        include = Path(__file__).resolve().parents[3] / "include"
    subprocess.run(["c++", "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{include}", "-o", str(out),
                    str(bundle_dir / "bundle.cpp")], check=True)
    return out


def test_errors_and_imports():
    assert issubclass(bundle.CubinArchitectureError, bundle.BundleError)
    assert issubclass(bundle.BundleError, tensoracle.Error) and issubclass(bundle.BundleError, ValueError)
    code = ("import sys, tensoracle, tensoracle.bundle; "
            "assert 'tensoracle.producer' not in sys.modules and 'triton' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
    for name in bundle.__all__:
        assert (getattr(bundle, name).__doc__ or "").strip(), name


def test_cubin_sm_reads_both_abi_layouts():
    assert bundle.cubin_sm(_elf_header(7, 0x560556)) == 86
    assert bundle.cubin_sm(_elf_header(7, 0x5a055a)) == 90
    assert bundle.cubin_sm(_elf_header(8, 0x6005604)) == 86
    assert bundle.cubin_sm(_elf_header(8, 0x6007802)) == 120
    with pytest.raises(bundle.CubinArchitectureError):
        bundle.cubin_sm(_elf_header(8, 0x560556))  # the ABI 7 layout read as 8: SM 5
    with pytest.raises(bundle.CubinArchitectureError, match="ABI version 6"):
        bundle.cubin_sm(_elf_header(6, 0x56))
    with pytest.raises(bundle.BundleError, match="e_machine 190") as info:
        bundle.cubin_sm(_elf_header(8, 0x6005604, machine=62))
    assert not isinstance(info.value, bundle.CubinArchitectureError)
    with pytest.raises(bundle.BundleError, match="shorter than an ELF header"):
        bundle.cubin_sm(b"\x7fELF")


@pytest.mark.parametrize("path, why", [("/abs/x.cubin", "absolute POSIX"), ("a/../x", "'..'"), ("C:/x", "Windows drive"),
                                       ("\\x", "Windows root"), ("a\\b", "backslash")])
def test_paths_must_be_safe_and_relative(path, why):
    bundle.check_relative_path("cubins/sm86/x.cubin")
    with pytest.raises(bundle.BundleError, match=why):
        bundle.check_relative_path(path)


@needs_nvcc
def test_cuda_bundle_round_trip(tmp_path):
    from tensoracle.producer import compile_bundle

    out = tmp_path / "bundle"
    report = compile_bundle(_cuda_kernels(tmp_path / "src"), out, architectures=["sm86", 120])
    assert report["architectures"] == ["sm86", "sm120"]
    assert [k["name"] for k in report["kernels"]] == ["scale", "fill.v"]
    assert report["kernels"][1]["constants"] == {"VALUE": "7"}
    assert report["kernels"][0]["source"] == "kernels.cu"
    assert report["kernels"][0]["source_sha256"] == hashlib.sha256(KERNELS.encode()).hexdigest()
    doc = json.loads((out / "bundle.json").read_text())
    assert doc["digest"] == report["digest"] == _digest(doc)
    for kernel in doc["kernels"]:
        for cubin in kernel["cubins"]:
            data = (out / cubin["path"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == cubin["sha256"]
            assert bundle.cubin_sm(out / cubin["path"]) == cubin["sm"]
            assert cubin["path"] == f"cubins/sm{cubin['sm']}/{kernel['name']}.cubin"
    params = bundle.kernel_params((out / "cubins/sm86/scale.cubin").read_bytes(), "scale")
    assert [p["size"] for p in params] == [8, 8, 4, 4]
    assert bundle.inspect_bundle(out, allowed=["sm86", "sm120"])["digest"] == report["digest"]
    with pytest.raises(bundle.CubinArchitectureError):
        bundle.inspect_bundle(out, allowed=[86])
    # An edit without a new digest is caught.
    doc["kernels"][0]["threads"] = 64
    (out / "bundle.json").write_text(json.dumps(doc))
    with pytest.raises(bundle.BundleError, match="does not match its contents"):
        bundle.inspect_bundle(out)


@needs_nvcc
def test_producer_rejects_a_wrong_abi_and_a_missing_tool(tmp_path):
    from tensoracle.producer import Arg, KernelSpec, compile_bundle

    kernels = _cuda_kernels(tmp_path / "src")
    wrong = [KernelSpec("scale", source=kernels[0].source, args=[Arg("out", "pointer"), Arg("n", "i32")])]
    with pytest.raises(bundle.BundleError, match="parameter ABI"):
        compile_bundle(wrong, tmp_path / "out", architectures=["sm86"])
    assert not (tmp_path / "out").exists()
    with pytest.raises(tensoracle.NotFoundError, match="nvidia-cuda-nvcc"):
        compile_bundle(kernels, tmp_path / "out", architectures=["sm86"], nvcc=tmp_path / "no" / "nvcc")
    assert not (tmp_path / "out").exists()
    with pytest.raises(bundle.BundleError, match="either source"):
        compile_bundle([KernelSpec("x", args=[])], tmp_path / "out")


@needs_nvcc
@needs_cxx
def test_inspect_wheel_accepts_the_library_and_rejects_another_bundle(tmp_path):
    from tensoracle.producer import compile_bundle

    a = tmp_path / "a"
    compile_bundle(_cuda_kernels(tmp_path / "src"), a, architectures=["sm89"])
    lib = _build_library(a, tmp_path / "libplugin.so")
    report = bundle.inspect_wheel(lib, a)
    assert report["ok"] and report["digest_present"] and len(report["matched"]) == 2 and report["extra"] == []
    wheel = tmp_path / "model-1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("model/__init__.py", "")
        z.write(lib, "model/lib/libplugin.so")
        z.writestr("model-1.0.dist-info/RECORD", "")
    report = bundle.inspect_wheel(wheel, a)
    assert report["ok"] and report["member"] == "model/lib/libplugin.so"

    b = tmp_path / "b"
    compile_bundle(_cuda_kernels(tmp_path / "src2", value=8), b, architectures=["sm89"])
    with pytest.raises(bundle.BundleError, match="does not embed exactly") as info:
        bundle.inspect_wheel(lib, b)
    assert [m["kernel"] for m in info.value.report["missing"]] == ["fill.v"]
    assert len(info.value.report["extra"]) == 1
    with pytest.raises(bundle.BundleError, match="no shared library in it embeds exactly"):
        bundle.inspect_wheel(wheel, b)
    assert bundle.inspect_library(lib, b)["ok"] is False

    evil = tmp_path / "evil.whl"
    with zipfile.ZipFile(evil, "w") as z:
        z.write(lib, "../libplugin.so")
    with pytest.raises(bundle.BundleError, match="'..'"):
        bundle.inspect_wheel(evil, a)


@needs_nvcc
def test_cli_bundle_commands(tmp_path):
    cli = Path(tensoracle.__file__).parent / "bin" / "tensoracle"
    cli = os.environ.get("TENSORACLE_CLI", str(cli))
    if not Path(cli).is_file():
        pytest.skip("no tensoracle command next to the package")
    (tmp_path / "k.cu").write_text(KERNELS)
    spec = {"kernels": [{"name": "scale", "source": "k.cu",
                         "args": [{"name": "out", "type": "pointer"}, {"name": "in", "type": "pointer"},
                                  {"name": "s", "type": "f32"}, {"name": "n", "type": "i32"}]}]}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = tmp_path / "bundle"
    r = subprocess.run([cli, "bundle", "compile", str(tmp_path / "spec.json"), "--out", str(out), "--arch", "sm86"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kernels"][0]["cubins"][0]["path"] == "cubins/sm86/scale.cubin"
    r = subprocess.run([cli, "bundle", "inspect", str(out)], capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["architectures"] == ["sm86"]
    (out / "cubins/sm86/scale.cubin").write_bytes(b"\x7fELF" + bytes(100))
    r = subprocess.run([cli, "bundle", "inspect", str(out)], capture_output=True, text=True)
    assert r.returncode == 1 and "bytes, bundle.json records" in r.stderr
    r = subprocess.run([cli, "bundle", "compile", str(tmp_path / "spec.json"), "--out", str(out), "--arch", "sm99"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "sm99" in r.stderr
    r = subprocess.run([cli, "bundle", "inspect"], capture_output=True, text=True)
    assert r.returncode == 2


# ---- Triton (skipped where Triton is not installed) ----

TRITON_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)
'''


def _triton_module(tmp_path: Path):
    pytest.importorskip("triton")
    import importlib.util

    path = tmp_path / "triton_kernels.py"
    path.write_text(TRITON_SOURCE)
    spec = importlib.util.spec_from_file_location("triton_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _triton_spec(module, name="add"):
    from tensoracle.producer import Arg, KernelSpec

    return KernelSpec(name, fn=module.add_kernel, constants={"BLOCK": 128}, num_warps=4,
                      args=[Arg("x_ptr", "*fp32", divisibility=16), Arg("y_ptr", "*fp32", divisibility=16),
                            Arg("out_ptr", "*fp32", divisibility=16), Arg("n", "i32")])


def test_triton_bundle(tmp_path):
    module = _triton_module(tmp_path)
    from tensoracle.producer import compile_bundle

    out = tmp_path / "bundle"
    report = compile_bundle([_triton_spec(module)], out, architectures=["sm80", "sm90", "sm120"])
    kernel = report["kernels"][0]
    assert kernel["kind"] == "triton" and kernel["entry"] == "add_kernel"
    assert kernel["scratch_pointers"] == 2 and kernel["threads"] == 128
    assert kernel["constants"] == {"BLOCK": "128"}
    assert [a["divisibility"] for a in kernel["args"]] == [16, 16, 16, 1]
    assert kernel["source"] == "triton_kernels.py"
    import triton

    assert report["tools"]["triton"] == triton.__version__ and "ptxas" in report["tools"]
    for cubin in kernel["cubins"]:
        data = (out / cubin["path"]).read_bytes()
        assert bundle.cubin_sm(data) == cubin["sm"]
        # Triton's two scratch pointers follow the four public parameters.
        assert [p["size"] for p in bundle.kernel_params(data, "add_kernel")] == [8, 8, 8, 4, 8, 8]
    doc = json.loads((out / "bundle.json").read_text())
    assert doc["digest"] == _digest(doc)


def test_triton_with_an_older_ptxas_writes_abi_7_cubins(tmp_path):
    module = _triton_module(tmp_path)
    import triton

    old = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not old.is_file():
        pytest.skip("this Triton ships no ptxas")
    from tensoracle.producer import compile_bundle

    out = tmp_path / "bundle"
    report = compile_bundle([_triton_spec(module)], out, architectures=["sm80", "sm86"], ptxas=old)
    for cubin in report["kernels"][0]["cubins"]:
        data = (out / cubin["path"]).read_bytes()
        if report["tools"]["ptxas"].split(".")[0] == "12":
            assert data[8] == 7  # e_ident[EI_ABIVERSION]: the layout ptxas 12 writes
        assert bundle.cubin_sm(data) == cubin["sm"]


def test_triton_producer_checks(tmp_path):
    module = _triton_module(tmp_path)
    from tensoracle.producer import Arg, KernelSpec, compile_bundle

    bad = KernelSpec("add", fn=module.add_kernel, constants={"BLOCK": 128},
                     args=[Arg("x_ptr", "*fp32"), Arg("out_ptr", "*fp32"), Arg("n", "i32")])
    with pytest.raises(bundle.BundleError, match="must be the parameters"):
        compile_bundle([bad], tmp_path / "out", architectures=["sm86"])
    assert not (tmp_path / "out").exists()
    # A nonzero scratch requirement is refused by the writer.
    from tensoracle import producer

    tool = tensoracle._tensoracle.bundle_find_tool("ptxas", "", producer.site_packages())
    record = producer._compile_triton(_triton_spec(module), [86], tool, str(tmp_path), str(tmp_path / "cache"))
    record["cubins"][0]["scratch_bytes"] = 64
    with pytest.raises(bundle.BundleError, match="scratch"):
        tensoracle._tensoracle.bundle_produce("", str(tmp_path), str(tmp_path / "out"), [86], "", "", [], [record],
                                              {}, ["add"])
    assert not (tmp_path / "out").exists()
    # Declared without the scratch pointers, the ABI does not match.
    record["cubins"][0]["scratch_bytes"] = 0
    record["kind"] = "cuda"
    record["scratch_pointers"] = 0
    with pytest.raises(bundle.BundleError, match="parameter ABI"):
        tensoracle._tensoracle.bundle_produce("", str(tmp_path), str(tmp_path / "out"), [86], "", "", [], [record],
                                              {}, ["add"])


def test_triton_producer_imports_no_torch(tmp_path):
    pytest.importorskip("triton")
    (tmp_path / "triton_kernels.py").write_text(TRITON_SOURCE)
    code = f"""
import sys
sys.path.insert(0, {str(tmp_path)!r})
import triton_kernels
from tensoracle.producer import Arg, KernelSpec, compile_bundle
compile_bundle([KernelSpec("add", fn=triton_kernels.add_kernel, constants={{"BLOCK": 64}},
                           args=[Arg("x_ptr", "*fp32"), Arg("y_ptr", "*fp32"), Arg("out_ptr", "*fp32"),
                                 Arg("n", "i32")])], {str(tmp_path / "b")!r}, architectures=["sm86"])
assert "torch" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_nvcc
def test_cuda_and_triton_kernels_share_a_bundle_in_the_callers_order(tmp_path):
    module = _triton_module(tmp_path)
    from tensoracle.producer import compile_bundle

    cuda = _cuda_kernels(tmp_path / "src")
    out = tmp_path / "bundle"
    report = compile_bundle([cuda[0], _triton_spec(module), cuda[1]], out, architectures=["sm89"],
                            source_root=tmp_path)
    assert [(k["name"], k["kind"]) for k in report["kernels"]] == [("scale", "cuda"), ("add", "triton"),
                                                                   ("fill.v", "cuda")]
    assert report["kernels"][0]["source"] == "src/kernels.cu"
    assert set(report["tools"]) == {"nvcc", "ptxas", "triton"}
    assert bundle.inspect_bundle(out)["digest"] == report["digest"]
