"""tensoracle.bundle: inspect cubin bundles and the plugin libraries or model wheels that embed them
(docs/cubin-bundles.md). Importing it imports neither the producer nor Triton."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from typing import Any, Dict, Iterable, List, Optional, Union

from . import _tensoracle

PathLike = Union[str, "os.PathLike[str]"]

BundleError = _tensoracle.BundleError
CubinArchitectureError = _tensoracle.CubinArchitectureError

# Endings of the shared libraries a model wheel may carry its plugin in.
_LIBRARY_ENDINGS = (".so", ".dll", ".dylib")


def cubin_sm(cubin: Union[bytes, bytearray, memoryview, PathLike]) -> int:
    """The SM (10 * major + minor: 86, 90, 120) a cubin was compiled for, from its ELF header.

    cubin: the cubin's bytes, or the path of a cubin file. Reads ELF ABI version 7 (ptxas up to 12.x: the SM in
    e_flags' low byte) and version 8 (ptxas 13.x: e_flags bits 8-15). Raises BundleError for bytes that are not a
    64-bit CUDA ELF file (too short, another machine) and CubinArchitectureError for another ABI version or an SM
    this library does not know.
    """
    if isinstance(cubin, (bytes, bytearray, memoryview)):
        return _tensoracle.bundle_cubin_sm(bytes(cubin), "cubin")
    path = os.fspath(cubin)
    with open(path, "rb") as f:
        data = f.read()
    return _tensoracle.bundle_cubin_sm(data, path)


def kernel_params(cubin: Union[bytes, bytearray, memoryview], entry: str) -> List[Dict[str, int]]:
    """The parameters of a cubin's kernel entry as its .nv.info.<entry> section records them, in order:
    [{"ordinal", "offset", "size"}]. Raises BundleError when the cubin has no such entry."""
    return [{"ordinal": o, "offset": off, "size": s}
            for o, off, s in _tensoracle.bundle_kernel_params(bytes(cubin), str(entry))]


def check_relative_path(path: str, what: str = "path") -> None:
    """Raises BundleError unless `path` is a relative, '/'-separated path that stays inside its root: not absolute
    (POSIX "/x"), no Windows drive ("C:") or root ("\\x"), no backslash and no "..", "." or empty component."""
    _tensoracle.bundle_check_relative_path(str(path), str(what))


def _architectures(values: Optional[Iterable[Union[int, str]]]) -> List[int]:
    if values is None:
        return []
    if isinstance(values, str):
        return list(_tensoracle.bundle_parse_architectures(values))
    return list(_tensoracle.bundle_parse_architectures(",".join(str(v) for v in values)))


def inspect_bundle(bundle_dir: PathLike, *, allowed: Optional[Iterable[Union[int, str]]] = None) -> Dict[str, Any]:
    """Checks a bundle directory and returns its report.

    Checks bundle.json (strict schema, digest) and every cubin: a safe relative path inside the bundle, its size and
    SHA-256 as recorded, and the SM of its ELF header equal to its record's and its directory's (cubins/sm<NN>/).
    allowed: architectures ("sm86", 86, ...) every cubin must be one of. Returns {"bundle", "digest",
    "format_version", "architectures", "tools", "kernels": [{name, entry, kind, threads, scratch_pointers, args,
    constants, source, source_sha256, cubins: [{sm, path, size, sha256, shared_bytes}]}]}. Raises BundleError or
    CubinArchitectureError for the first check that fails, IoError when a file cannot be read.
    """
    return json.loads(_tensoracle.bundle_inspect(os.fspath(bundle_dir), _architectures(allowed)))


def inspect_library(library: PathLike, bundle_dir: PathLike) -> Dict[str, Any]:
    """Whether a plugin shared library embeds exactly a bundle's cubins, as a report (never raised for a mismatch).

    Inspects the bundle, scans the library for embedded CUDA ELF images and compares their SHA-256 with the
    bundle's cubins. Returns {"ok", "library", "bundle", "digest", "digest_present", "embedded_cubins", "matched",
    "missing": [{kernel, sm, path, ...}], "extra": [{offset, size, sha256, sm}]}; ok is true when nothing is
    missing or extra and the bundle's digest string occurs in the library.
    """
    return json.loads(_tensoracle.bundle_inspect_library(os.fspath(library), os.fspath(bundle_dir)))


def _mismatch(report: Dict[str, Any]) -> str:
    return (f"{report['library']} does not embed exactly bundle {report['digest']}: "
            f"{len(report['missing'])} of its cubins missing, {len(report['extra'])} other CUDA images, digest string "
            f"{'present' if report['digest_present'] else 'absent'}; build the plugin from this bundle's bundle.cpp")


def _is_library(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return base.endswith(_LIBRARY_ENDINGS) or ".so." in base


def inspect_wheel(wheel_or_library: PathLike, bundle_dir: PathLike, *,
                  library: Optional[str] = None) -> Dict[str, Any]:
    """Checks that a model wheel's plugin library (or a plugin library itself) embeds exactly a bundle's cubins.

    wheel_or_library: a .whl file, or a plugin shared library. In a wheel, every member name must be a safe relative
    path (no absolute, "..", drive or root paths: BundleError otherwise); the shared libraries in it are checked, or
    only the member named by `library`, and the one that embeds the bundle is reported. Returns the report of
    inspect_library (plus "wheel" and "member" for a wheel). Raises BundleError when no library embeds exactly the
    bundle (the exception's `report` attribute holds the report, or the list of reports for a wheel).
    """
    path = os.fspath(wheel_or_library)
    if not zipfile.is_zipfile(path):
        report = inspect_library(path, bundle_dir)
        if not report["ok"]:
            error = BundleError(_mismatch(report))
            error.report = report
            raise error
        return report
    inspect_bundle(bundle_dir)  # an invalid bundle fails first, whatever the wheel holds
    with zipfile.ZipFile(path) as wheel:
        names = []
        for info in wheel.infolist():
            check_relative_path(info.filename.rstrip("/") if info.is_dir() else info.filename,
                                f"wheel {path}: member")
            if not info.is_dir() and (info.filename == library if library is not None else _is_library(info.filename)):
                names.append(info.filename)
        if not names:
            raise BundleError(f"wheel {path}: " + (f"has no member {library!r}" if library is not None
                                                   else "holds no shared library (.so, .dll); is the plugin in it?"))
        reports = []
        work = tempfile.mkdtemp(prefix="tensoracle-wheel-")
        try:
            for i, name in enumerate(names):
                target = os.path.join(work, f"{i}-{name.rsplit('/', 1)[-1]}")
                with wheel.open(name) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
                report = inspect_library(target, bundle_dir)
                report["library"] = f"{path}!{name}"
                report["wheel"] = path
                report["member"] = name
                if report["ok"]:
                    return report
                reports.append(report)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    best = max(reports, key=lambda r: len(r["matched"]))
    error = BundleError(f"wheel {path}: no shared library in it embeds exactly the bundle; closest: " + _mismatch(best))
    error.report = reports
    raise error


__all__ = [
    "BundleError",
    "CubinArchitectureError",
    "check_relative_path",
    "cubin_sm",
    "inspect_bundle",
    "inspect_library",
    "inspect_wheel",
    "kernel_params",
]
