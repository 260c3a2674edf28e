"""Pickle bytes as torch.save writes them, for checkpoints written by hand without torch: the tests of
`tensoracle convert` (tests/python/test_convert.py, tests/python/package/test_convert.py) and the fuzz seeds
(tests/fuzz/make_pth_seeds.py)."""

import pickle
import struct


def unicode(s: str) -> bytes:
    b = s.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def integer(i: int) -> bytes:
    return pickle.BININT + struct.pack("<i", i)


def tuple_of(items) -> bytes:
    return pickle.MARK + b"".join(items) + pickle.TUPLE


def global_ref(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def empty_ordered_dict() -> bytes:
    return global_ref("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE


def tensor_v2(storage_type: str, key: str, numel: int, offset: int, shape, stride, legacy: bool = False) -> bytes:
    """A tensor on a typed storage (torch.FloatStorage, ...), rebuilt by _rebuild_tensor_v2; `legacy`: the
    persistent id of the legacy format (with its view metadata, None)."""
    pid = [unicode("storage"), global_ref("torch", storage_type), unicode(key), unicode("cpu"), integer(numel)]
    if legacy:
        pid.append(pickle.NONE)
    args = tuple_of([tuple_of(pid) + pickle.BINPERSID, integer(offset), tuple_of(map(integer, shape)),
                     tuple_of(map(integer, stride)), pickle.NEWFALSE, empty_ordered_dict()])
    return global_ref("torch._utils", "_rebuild_tensor_v2") + args + pickle.REDUCE


def tensor_v3(dtype: str, key: str, nbytes: int, offset: int, shape, stride) -> bytes:
    """A tensor of a dtype without a typed storage class (f8, uint16, ...), as torch >= 2.1 writes it: an untyped
    storage of bytes, rebuilt by _rebuild_tensor_v3 with the dtype (torch.float8_e4m3fn, ...)."""
    pid = tuple_of([unicode("storage"), global_ref("torch.storage", "UntypedStorage"), unicode(key), unicode("cpu"),
                    integer(nbytes)])
    args = tuple_of([pid + pickle.BINPERSID, integer(offset), tuple_of(map(integer, shape)),
                     tuple_of(map(integer, stride)), pickle.NEWFALSE, empty_ordered_dict(), global_ref("torch", dtype)])
    return global_ref("torch._utils", "_rebuild_tensor_v3") + args + pickle.REDUCE


def mapping(items: dict, ordered: bool = False) -> bytes:
    """A whole pickle (protocol 2): a dict, or an OrderedDict, of name -> pickled value."""
    body = b"".join(unicode(k) + v for k, v in items.items())
    head = empty_ordered_dict() if ordered else pickle.EMPTY_DICT
    return pickle.PROTO + b"\x02" + head + pickle.MARK + body + pickle.SETITEMS + pickle.STOP
