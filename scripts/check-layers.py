#!/usr/bin/env python3
"""Fails when a source file of src/ includes a header of a layer above its own (docs/architecture.md, "Layers").

Layers, lowest first; a file may include headers of its own folder and of lower layers only. Folders on one
level (io and compare; graph and convert; backends/cpu and backends/cuda; builder and runtime) do not include
each other. The files directly in src/backends/ are the backend interface, below the backends that implement it.
Public headers (include/tensoracle/) are the API and may be included from anywhere, but include nothing from src/.

Usage: scripts/check-layers.py [REPO]   (exit 1 and one line per upward include when there are any)
"""
import pathlib
import re
import sys

LAYERS = [
    ["core", "cubin_plugin"],  # cubin_plugin: compiled into plugin libraries, public headers and cuda.h only
    ["io", "compare", "bundle", "plugins"],
    ["graph", "convert"],
    ["backends/common"],  # the backend interface (backends/target.hpp) and backend_for
    ["backends/cpu", "backends/cuda"],
    ["plan"],
    ["builder", "runtime"],
    ["cache", "calibrate"],  # calibrate: the network rewriting of builder/, the CPU reference through the public API
]
LEVEL = {folder: level for level, folders in enumerate(LAYERS) for folder in folders}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def component(path: str) -> str | None:
    """The layer folder of a path relative to src/ (backends/<name> for backend files), None if unknown."""
    parts = path.split("/")
    if parts[0] == "backends":
        return "backends/" + parts[1] if len(parts) > 2 else "backends/common"
    return parts[0] if parts[0] in LEVEL else None


def main() -> int:
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    src = repo / "src"
    problems = []
    for f in sorted(p for p in src.rglob("*") if p.suffix in {".hpp", ".cpp", ".cu", ".cuh", ".h"}):
        rel = f.relative_to(src).as_posix()
        own = component(rel)
        if own is None:
            problems.append(f"src/{rel}: not in a known layer folder ({', '.join(sorted(LEVEL))})")
            continue
        for target in INCLUDE.findall(f.read_text(encoding="utf-8")):
            if target.startswith("tensoracle/"):
                continue
            other = component(target)
            if other is None:
                if (f.parent / target).exists():
                    continue  # a header next to the file, included by its bare name
                problems.append(f"src/{rel}: includes \"{target}\", which is in no layer")
            elif other != own and LEVEL[other] >= LEVEL[own]:
                way = "up" if LEVEL[other] > LEVEL[own] else "sideways"
                problems.append(f"src/{rel} ({own}) includes \"{target}\" ({other}): {way}")
    for f in sorted((repo / "include" / "tensoracle").rglob("*.hpp")):
        for target in INCLUDE.findall(f.read_text(encoding="utf-8")):
            if not target.startswith("tensoracle/"):
                problems.append(f"{f.relative_to(repo)}: a public header includes \"{target}\" from src/")
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} include(s) against the layering of docs/architecture.md", file=sys.stderr)
        return 1
    print("check-layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
