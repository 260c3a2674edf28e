# Speed and peak memory of `tensoracle convert` on a checkpoint of at least 1 GB, against copying the file.
"""Writes a torch.save checkpoint of --size-gb (default 1.1 GB: one 256 MiB tensor, the rest 64 MiB tensors and a few
small ones), then measures, each the median of --repeat runs after one warm-up:

- copy: shutil.copyfile of the checkpoint (copy_file_range/sendfile) plus fsync, as the converter fsyncs;
- convert: `tensoracle convert CKPT OUT.safetensors` as a child process (its wall time and its ru_maxrss);
- convert --dtype f16: the same with a cast of every tensor (read, convert, write in chunks; informative).

Requirements (issue 16): convert speed >= 0.5x copy speed, and peak memory (the child's ru_maxrss) less than
256 MiB above the largest tensor. Prints both numbers and the ratios; exit status 1 when a requirement fails.

Usage: /usr/bin/python3 bench/convert_benchmark.py --cli build/tools/cli/tensoracle [--dir DIR] [--size-gb 1.1]
(needs torch to write the checkpoint; DIR needs about 3x the size free).
"""
from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20


def child_run(argv):
    """Runs argv; returns (seconds, ru_maxrss in bytes) of that child alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    return seconds, usage.ru_maxrss * 1024


def copy_once(src, dst):
    start = time.perf_counter()
    shutil.copyfile(src, dst)
    fd = os.open(dst, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.environ.get("TENSORACLE_CLI", "tensoracle"))
    ap.add_argument("--dir", default=None, help="where to write the files (default: a temporary folder)")
    ap.add_argument("--size-gb", type=float, default=1.1)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="convert-bench-", dir=args.dir)
    try:
        largest = 256 * MiB
        ckpt = os.path.join(work, "model.pt")
        # Written by a separate process: a child's ru_maxrss counts the pages it shares with its parent until exec,
        # so this process must stay small.
        writer = f"""
import collections, torch
total, largest, MiB = {int(args.size_gb * 1e9)}, {largest}, {MiB}
sd = collections.OrderedDict()
g = torch.Generator().manual_seed(0)
sd["embed.weight"] = torch.randn(largest // 4, generator=g).reshape(-1, 1024)
size, i = largest, 0
while size < total:
    sd[f"layers.{{i}}.weight"] = torch.randn(64 * MiB // 4, generator=g).reshape(-1, 4096)
    sd[f"layers.{{i}}.bias"] = torch.randn(4096, generator=g)
    size += 64 * MiB + 4096 * 4
    i += 1
sd["norm.weight"] = torch.ones(4096).half()
torch.save(sd, {ckpt!r})
print(len(sd))
"""
        count = int(subprocess.run([sys.executable, "-c", writer], check=True, capture_output=True, text=True).stdout)
        ckpt_bytes = os.path.getsize(ckpt)
        out = os.path.join(work, "model.safetensors")
        copy_dst = os.path.join(work, "copy.pt")

        copy_once(ckpt, copy_dst)  # warm-up: page cache in the same state for both
        os.unlink(copy_dst)
        child_run([args.cli, "convert", ckpt, out])
        os.unlink(out)
        copies, converts, rss = [], [], []
        for _ in range(args.repeat):  # alternated, so that drift of the disk affects both alike
            copies.append(copy_once(ckpt, copy_dst))
            os.unlink(copy_dst)
            t, r = child_run([args.cli, "convert", ckpt, out])
            converts.append(t)
            rss.append(r)
            os.unlink(out)
        t16, r16 = child_run([args.cli, "convert", ckpt, out, "--dtype", "f16"])
        os.unlink(out)

        copy_s, convert_s = statistics.median(copies), statistics.median(converts)
        copy_speed = ckpt_bytes / copy_s / 1e9
        convert_speed = ckpt_bytes / convert_s / 1e9
        ratio = convert_speed / copy_speed
        peak = max(rss)
        over = peak - largest
        print(f"checkpoint: {ckpt_bytes / 1e9:.2f} GB, {count} tensors, largest {largest / MiB:.0f} MiB")
        print(f"copy (copyfile + fsync): {copy_s:.3f} s = {copy_speed:.2f} GB/s (median of {args.repeat})")
        print(f"convert:                 {convert_s:.3f} s = {convert_speed:.2f} GB/s (median of {args.repeat})")
        print(f"speed ratio convert/copy: {ratio:.2f} (required >= 0.5)")
        print(f"peak memory (ru_maxrss): {peak / MiB:.1f} MiB = largest tensor {over / MiB:+.1f} MiB "
              f"(required < +256 MiB)")
        print(f"convert --dtype f16:     {t16:.3f} s = {ckpt_bytes / t16 / 1e9:.2f} GB/s read, "
              f"ru_maxrss {r16 / MiB:.1f} MiB (informative)")
        ok = ratio >= 0.5 and over < 256 * MiB
        print("PASS" if ok else "FAIL")
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
