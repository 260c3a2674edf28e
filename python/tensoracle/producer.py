"""tensoracle.producer: compile CUDA C++ and Triton kernels into a cubin bundle (docs/cubin-bundles.md).

Needs no GPU and never imports torch. Triton is imported only when a Triton kernel is compiled; ``import tensoracle``
and ``import tensoracle.bundle`` import neither this module nor Triton.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import site
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _tensoracle
from .bundle import BundleError, CubinArchitectureError, check_relative_path

PathLike = Union[str, "os.PathLike[str]"]

# Argument types: the bundle's names, and the Triton signature types that map onto them.
_TYPES = ("pointer", "i32", "i64", "u32", "u64", "f32", "f64")
_TRITON_SCALARS = {"i32": "i32", "i64": "i64", "u32": "u32", "u64": "u64", "fp32": "f32", "fp64": "f64"}
_TRITON_OF = {"i32": "i32", "i64": "i64", "u32": "u32", "u64": "u64", "f32": "fp32", "f64": "fp64"}
# Triton appends these two pointer parameters to every kernel; the launcher passes null for both.
_TRITON_SCRATCH_POINTERS = 2


@dataclass(frozen=True)
class Arg:
    """One public kernel argument, in the kernel's parameter order.

    type: "pointer", "i32", "i64", "u32", "u64", "f32" or "f64"; for Triton kernels a Triton signature type
    ("*fp32", "*fp16", "i32", "fp32"; a pointer's pointee is needed). count: consecutive parameters of the type
    (CUDA C++ only). divisibility: the values (addresses, for pointers) are multiples of it (Triton:
    tt.divisibility, e.g. 16); 1 means no rule.
    """

    name: str
    type: str
    count: int = 1
    divisibility: int = 1

    @property
    def bundle_type(self) -> str:
        """The bundle's name of the type ("pointer", "f32", ...)."""
        if self.type.startswith("*"):
            return "pointer"
        if self.type in _TYPES:
            return self.type
        if self.type in _TRITON_SCALARS:
            return _TRITON_SCALARS[self.type]
        raise BundleError(f"arg '{self.name}': type '{self.type}' is not one of {', '.join(_TYPES)} (or a Triton "
                          f"type such as *fp32, i32, fp32)")


ArgLike = Union[Arg, Tuple[Any, ...], Mapping[str, Any]]


def _to_arg(value: ArgLike) -> Arg:
    if isinstance(value, Arg):
        return value
    if isinstance(value, Mapping):
        return Arg(**value)
    if isinstance(value, tuple) and 2 <= len(value) <= 4:
        return Arg(*value)
    raise BundleError(f"an arg must be Arg(name, type, count, divisibility), a tuple of those or a dict, not {value!r}")


@dataclass(frozen=True)
class KernelSpec:
    """One kernel of a bundle: a CUDA C++ kernel (``source``) or a Triton kernel (``fn``).

    name: the bundle's name for it ([A-Za-z0-9_.-]; it names the cubin files), e.g. "dot.specialized".
    args: its public arguments in parameter order (Arg, (name, type[, count, divisibility]) or dicts); for Triton,
    every parameter that is not a constant. constants: CUDA C++: -DNAME=VALUE defines; Triton: the tl.constexpr
    parameters' values. CUDA C++: source (a .cu file), entry (its extern "C" name; default: name), threads (the block
    size it is written for; 0: the caller chooses), shared_bytes (dynamic shared memory a launch needs), nvcc_flags,
    ptxas_flags. Triton: fn (a triton.jit function), num_warps (threads = 32 * num_warps), num_stages, options
    (more triton.compile options).
    """

    name: str
    args: Sequence[ArgLike] = ()
    constants: Mapping[str, Any] = field(default_factory=dict)
    source: Optional[PathLike] = None
    entry: Optional[str] = None
    threads: int = 0
    shared_bytes: int = 0
    nvcc_flags: Sequence[str] = ()
    ptxas_flags: Sequence[str] = ()
    fn: Any = None
    num_warps: int = 4
    num_stages: int = 3
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        """"cuda" or "triton"."""
        if (self.fn is None) == (self.source is None):
            raise BundleError(f"kernel '{self.name}': give either source (a CUDA C++ file) or fn (a Triton kernel)")
        return "triton" if self.fn is not None else "cuda"


def site_packages() -> List[str]:
    """The running Python's site-packages directories, where the nvidia-cuda-nvcc wheel puts nvidia/cu13/bin."""
    found: List[str] = []
    candidates = [sysconfig.get_paths().get("purelib"), sysconfig.get_paths().get("platlib")]
    with contextlib.suppress(AttributeError):
        candidates += site.getsitepackages()
    with contextlib.suppress(AttributeError):
        candidates.append(site.getusersitepackages())
    candidates += [p for p in sys.path if p.endswith("site-packages")]
    for path in candidates:
        if path and os.path.isdir(path) and path not in found:
            found.append(path)
    return found


def _constant_text(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _source_root(kernels: Sequence[KernelSpec], source_root: Optional[PathLike]) -> str:
    if source_root is not None:
        return os.path.abspath(os.fspath(source_root))
    dirs = []
    for k in kernels:
        if k.kind == "cuda":
            dirs.append(os.path.dirname(os.path.abspath(os.fspath(k.source))))
        else:
            dirs.append(os.path.dirname(os.path.abspath(_triton_source_file(k))))
    return os.path.commonpath(dirs) if dirs else os.getcwd()


def _relative(path: str, root: str, what: str) -> str:
    rel = os.path.relpath(os.path.abspath(path), root).replace(os.sep, "/")
    check_relative_path(rel, f"{what} (relative to the source root {root})")
    return rel


def _cuda_spec(kernel: KernelSpec, root: str) -> Dict[str, Any]:
    args = [_to_arg(a) for a in kernel.args]
    return {
        "name": kernel.name,
        "source": _relative(os.fspath(kernel.source), root, f"kernel '{kernel.name}': source"),
        "entry": kernel.entry or kernel.name,
        "args": [{"name": a.name, "type": a.bundle_type, "count": a.count, "divisibility": a.divisibility}
                 for a in args],
        "constants": {str(k): _constant_text(v) for k, v in kernel.constants.items()},
        "threads": int(kernel.threads),
        "shared_bytes": int(kernel.shared_bytes),
        "nvcc_flags": [str(f) for f in kernel.nvcc_flags],
        "ptxas_flags": [str(f) for f in kernel.ptxas_flags],
    }


# ---- Triton ----

def _triton_function(fn: Any) -> Any:
    """The JITFunction under autotune/heuristics wrappers."""
    while not hasattr(fn, "arg_names") and hasattr(fn, "fn"):
        fn = fn.fn
    if not hasattr(fn, "arg_names"):
        raise BundleError(f"{fn!r} is not a Triton kernel (a @triton.jit function)")
    return fn


def _triton_source_file(kernel: KernelSpec) -> str:
    fn = _triton_function(kernel.fn)
    return inspect.getsourcefile(getattr(fn, "fn", fn)) or "<unknown>"


def _triton_source_text(fn: Any) -> str:
    text = getattr(fn, "src", None)
    return text if isinstance(text, str) else inspect.getsource(getattr(fn, "fn", fn))


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _compile_triton(kernel: KernelSpec, architectures: Sequence[int], ptxas: str, root: str,
                    cache_dir: str) -> Dict[str, Any]:
    import triton  # noqa: PLC0415 (only here: the rest of tensoracle never imports Triton)
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource  # noqa: PLC0415

    fn = _triton_function(kernel.fn)
    where = f"kernel '{kernel.name}'"
    args = [_to_arg(a) for a in kernel.args]
    constants = dict(kernel.constants)
    unknown = [c for c in constants if c not in fn.arg_names]
    if unknown:
        raise BundleError(f"{where}: constants {unknown} are not parameters of {fn.__name__}{tuple(fn.arg_names)}")
    expected = [n for n in fn.arg_names if n not in constants]
    if [a.name for a in args] != expected:
        raise BundleError(f"{where}: args {[a.name for a in args]} must be the parameters of {fn.__name__} that are "
                          f"not constants, in order: {expected}")
    signature: Dict[str, str] = {}
    attrs: Dict[Tuple[int, ...], List[List[Any]]] = {}
    by_name = {a.name: a for a in args}
    for index, name in enumerate(fn.arg_names):
        if name in constants:
            signature[name] = "constexpr"
            continue
        a = by_name[name]
        if a.count != 1:
            raise BundleError(f"{where}: arg '{name}' has count {a.count}; a Triton parameter is one value")
        if a.type.startswith("*"):
            signature[name] = a.type
        elif a.type in _TRITON_SCALARS:
            signature[name] = a.type
        elif a.type in _TRITON_OF:
            signature[name] = _TRITON_OF[a.type]
        else:
            raise BundleError(f"{where}: arg '{name}' type '{a.type}': give a Triton type (*fp32, *fp16, i32, i64, "
                              f"u32, u64, fp32, fp64)")
        if a.divisibility != 1:
            attrs[(index,)] = [["tt.divisibility", int(a.divisibility)]]
    options = {"num_warps": int(kernel.num_warps), "num_stages": int(kernel.num_stages), **dict(kernel.options)}
    source_text = _triton_source_text(fn)
    record: Dict[str, Any] = {
        "name": kernel.name,
        "kind": "triton",
        "args": [{"name": a.name, "type": a.bundle_type, "count": 1, "divisibility": int(a.divisibility)}
                 for a in args],
        "constants": {k: _constant_text(v) for k, v in constants.items()},
        "scratch_pointers": _TRITON_SCRATCH_POINTERS,
        "source": _relative(_triton_source_file(kernel), root, f"{where}: source"),
        "source_sha256": hashlib.sha256(source_text.encode("utf-8")).hexdigest(),
        "cubins": [],
    }
    from triton.backends.nvidia import compiler as nvidia_compiler  # noqa: PLC0415

    env = {"TRITON_PTXAS_PATH": ptxas, "TRITON_PTXAS_BLACKWELL_PATH": ptxas, "TRITON_CACHE_DIR": cache_dir}
    threads = None
    entry = None
    with _environment(env):
        for sm in architectures:
            src = ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)
            try:
                compiled = triton.compile(src, target=GPUTarget("cuda", int(sm), 32), options=options)
            except Exception as e:  # Triton's own errors: report them as the bundle's, naming the kernel
                raise BundleError(f"{where} (sm{sm}): Triton failed to compile it: {e}") from e
            used = nvidia_compiler.get_ptxas(int(sm)).path
            if os.path.realpath(used) != os.path.realpath(ptxas):
                raise BundleError(f"{where} (sm{sm}): Triton used ptxas {used}, not {ptxas} (is {ptxas} runnable?)")
            md = compiled.metadata
            if getattr(md, "num_ctas", 1) != 1:
                raise BundleError(f"{where}: num_ctas {md.num_ctas}; bundle kernels launch one CTA per cluster")
            scratch = int(getattr(md, "global_scratch_size", 0) or 0) + int(getattr(md, "profile_scratch_size", 0) or 0)
            threads = int(md.num_warps) * int(getattr(md, "warp_size", 32))
            entry = md.name
            record["cubins"].append({"sm": int(sm), "data": bytes(compiled.asm["cubin"]),
                                     "shared_bytes": int(md.shared), "scratch_bytes": scratch})
    record["entry"] = entry
    record["threads"] = threads
    return record


# ---- the producer ----

def compile_bundle(
    kernels: Sequence[KernelSpec],
    out_dir: PathLike,
    *,
    architectures: Optional[Sequence[Union[int, str]]] = None,
    source_root: Optional[PathLike] = None,
    nvcc: Optional[PathLike] = None,
    ptxas: Optional[PathLike] = None,
) -> Dict[str, Any]:
    """Compiles kernels into a cubin bundle in out_dir and returns the bundle's inspect report.

    kernels: KernelSpec records (CUDA C++ and Triton may be mixed). architectures: "sm86", 86, ... (default: sm80,
    sm86, sm89, sm90, sm120). source_root: the directory the bundle's source paths are relative to (default: the
    common directory of the kernels' sources). nvcc, ptxas: tool paths; each one given overrides its default
    independently, and the defaults are searched in this Python's nvidia-cuda-nvcc wheel (site-packages/nvidia/
    cu13/bin), then PATH, then /usr/local/cuda/bin. Triton kernels are compiled with triton.compile for each
    CUDA target (no GPU needed) using that ptxas; Triton's two scratch pointer parameters are declared
    (scratch_pointers 2) and any nonzero scratch size is rejected. Every cubin's entry must take exactly the declared
    args. Nothing is written unless everything compiles and passes; the bundle (bundle.json, cubins/, bundle.cpp)
    is renamed into place. Raises BundleError / CubinArchitectureError, NotFoundError for a missing tool.
    """
    kernels = list(kernels)
    if not kernels:
        raise BundleError("compile_bundle: no kernels")
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise BundleError(f"compile_bundle: kernel names must be unique: {names}")
    archs = list(_tensoracle.bundle_parse_architectures(",".join(str(a) for a in architectures))) \
        if architectures else list(_tensoracle.bundle_default_architectures())
    root = _source_root(kernels, source_root)
    sites = site_packages()
    nvcc_path = os.fspath(nvcc) if nvcc is not None else ""
    ptxas_path = os.fspath(ptxas) if ptxas is not None else ""
    cuda = [_cuda_spec(k, root) for k in kernels if k.kind == "cuda"]
    triton_kernels = [k for k in kernels if k.kind == "triton"]
    compiled: List[Dict[str, Any]] = []
    tools: Dict[str, str] = {}
    if triton_kernels:
        import triton  # noqa: PLC0415

        tool = _tensoracle.bundle_find_tool("ptxas", ptxas_path, sites)
        tools = {"triton": str(triton.__version__), "ptxas": _tensoracle.bundle_tool_version(tool)}
        with tempfile.TemporaryDirectory(prefix="tensoracle-triton-cache-") as cache_dir:
            compiled = [_compile_triton(k, archs, tool, root, cache_dir) for k in triton_kernels]
    spec_json = json.dumps({"kernels": cuda}) if cuda else ""
    return json.loads(_tensoracle.bundle_produce(spec_json, root, os.fspath(out_dir), archs, nvcc_path, ptxas_path,
                                                 sites, compiled, tools, names))


__all__ = [
    "Arg",
    "BundleError",
    "CubinArchitectureError",
    "KernelSpec",
    "compile_bundle",
    "site_packages",
]
