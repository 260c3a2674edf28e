#!/usr/bin/env python3
"""Writes small PyTorch checkpoints by hand (zip and legacy formats, pickle opcodes as torch.save writes them), as
seeds for fuzz_pth_reader. Needs no torch; every run writes the same bytes."""
import pickle
import struct
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import torch_pickle as tp  # noqa: E402  (tests/python/torch_pickle.py)


def archive(entries, zip64=False) -> bytes:
    import io

    buf = io.BytesIO()
    old = zipfile.ZIP64_LIMIT
    if zip64:
        zipfile.ZIP64_LIMIT = 16
    try:
        with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as z:
            for name, data in entries:
                z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    finally:
        zipfile.ZIP64_LIMIT = old
    return buf.getvalue()


def legacy(obj_pickle: bytes, storages) -> bytes:
    out = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2)
    out += pickle.dumps({"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4}},
                        protocol=2)
    out += obj_pickle + pickle.dumps([k for k, _, _ in storages], protocol=2)
    for _, count, data in storages:
        out += struct.pack("<q", count) + data
    return out


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    floats = struct.pack("<12f", *range(12))
    sd = tp.mapping(ordered=True, items={
        "w": tp.tensor_v2("FloatStorage", "0", 12, 0, (3, 4), (4, 1)),
        "t": tp.tensor_v2("FloatStorage", "0", 12, 2, (2, 3), (1, 4)),
        "h": tp.tensor_v2("HalfStorage", "1", 4, 0, (4,), (1,)),
        "e": tp.tensor_v3("float8_e4m3fn", "2", 3, 0, (3,), (1,)),
        "s": tp.tensor_v2("LongStorage", "3", 1, 0, (), ()),
    })
    entries = [("archive/data.pkl", sd), ("archive/byteorder", b"little"), ("archive/data/0", floats),
               ("archive/data/1", b"\x00<\x00@\x00B\x00D"), ("archive/data/2", b"\x01\x02\x03"),
               ("archive/data/3", struct.pack("<q", 7)), ("archive/version", b"3\n")]
    seeds = {
        "zip_state_dict": archive(entries),
        "zip64_state_dict": archive(entries, zip64=True),
        "zip_big_endian": archive([("m/data.pkl", tp.mapping({"w": tp.tensor_v2("IntStorage", "0", 2, 0, (2,), (1,))}, ordered=True)),
                                   ("m/byteorder", b"big"), ("m/data/0", struct.pack(">2i", 1, -2))]),
        "zip_nested": archive([("n/data.pkl", pickle.PROTO + b"\x02" + pickle.EMPTY_DICT + pickle.MARK + tp.unicode("model") +
                                tp.mapping({"a": tp.tensor_v2("BFloat16Storage", "0", 2, 0, (2,), (1,))}, ordered=True)[2:-1] +
                                tp.unicode("epoch") + tp.integer(3) + tp.unicode("cfg") +
                                pickle.dumps({"lr": 0.5, "names": ["a", "b"], "t": (1, None, True)}, protocol=2)[2:-1] +
                                pickle.SETITEMS + pickle.STOP),
                               ("n/data/0", b"\x80\x3f\x00\x40")]),
        "zip_malicious": archive([("x/data.pkl", pickle.PROTO + b"\x02" + tp.global_ref("os", "system") + tp.tuple_of([tp.unicode("true")]) +
                                   pickle.REDUCE + pickle.STOP)]),
        "legacy_state_dict": legacy(
            tp.mapping({"w": tp.tensor_v2("FloatStorage", "k0", 12, 0, (3, 4), (4, 1), legacy=True),
                        "b": tp.tensor_v2("ShortStorage", "k1", 2, 0, (2,), (1,), legacy=True)}, ordered=False),
            [("k0", 12, floats), ("k1", 2, b"\x01\x00\x02\x00")]),
        "pickle_protocol4": archive([("p/data.pkl", pickle.dumps({"a": [1, 2.5, "x", b"y", {3, 4}], "b": (None,)},
                                                                  protocol=4))]),
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)
    print(f"make_pth_seeds: {len(seeds)} seeds in {out}")


if __name__ == "__main__":
    main()
