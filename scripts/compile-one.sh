#!/usr/bin/env bash
# Compiles one source file of the library with the exact command of a configured build (default build/), to a throwaway
# object under /tmp: a syntax and warning check that does not touch the build directory (safe beside a running ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
file=$(realpath "$1")
build=${2:-build}
cmd=$(python3 - "$build/compile_commands.json" "$file" <<'PY'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        args = shlex.split(e["command"])
        out = args.index("-o")
        args[out + 1] = "/tmp/compile-one-" + str(abs(hash(sys.argv[2]))) + ".o"
        print(e["directory"]); print(shlex.join(args))
        break
else:
    sys.exit(f"{sys.argv[2]} is not in {sys.argv[1]}")
PY
)
dir=$(head -n1 <<<"$cmd")
cd "$dir" && eval "$(tail -n1 <<<"$cmd")"
