"""The `tensoracle` console script: runs the C++ command bundled inside the package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tensoracle._cuda_libraries import library_dirs


def binary_path() -> Path:
    """Path of the bundled `tensoracle` executable."""
    return Path(os.path.abspath(__file__)).parent / "bin" / "tensoracle"


def main() -> None:
    """Replace this process with the bundled command, passing the arguments through."""
    binary = binary_path()
    if not binary.is_file():
        sys.stderr.write(f"tensoracle: the bundled command is missing ({binary}); reinstall the package\n")
        raise SystemExit(127)
    # The CUDA libraries of NVIDIA's wheels, when installed, come before the system's, as they do for the package
    # (_cuda_libraries.preload): a machine with only a driver and those wheels runs the command too.
    dirs = library_dirs()
    if dirs:
        existing = os.environ.get("LD_LIBRARY_PATH", "")
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(dirs + ([existing] if existing else []))
    os.execv(str(binary), [str(binary), *sys.argv[1:]])


if __name__ == "__main__":
    main()
