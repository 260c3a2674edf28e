# Writes a corpus of malformed safetensors files, one or more per validation rule of the reader, with the message each must produce.
"""Usage: make_malformed_corpus.py OUTDIR

Writes OUTDIR/<case>.safetensors for every case below and OUTDIR/expectations.json, which maps
each file name to a lower-case substring that the reader's error message for that file must
contain (the messages come from src/io/safetensors_reader.cpp). Every file breaks exactly one rule,
so the expected message is unambiguous. The corpus is deterministic; it is also used as the seed
corpus of the fuzz target tests/fuzz/fuzz_safetensors_reader.cpp.
"""

import json
import os
import struct
import sys

MAX_HEADER_SIZE = 100_000_000  # SafetensorsFile::kMaxHeaderSize, the official library's limit


def pack(header, data=b"", pad=True):
    """A file: 8-byte little-endian header length, the header (a dict is dumped compactly and
    padded with spaces to a multiple of 8 as the official writer does; str/bytes are used as is)
    and the data section."""
    if isinstance(header, dict):
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        if pad:
            text += b" " * (-len(text) % 8)
    elif isinstance(header, str):
        text = header.encode("utf-8")
    else:
        text = bytes(header)
    return struct.pack("<Q", len(text)) + text + bytes(data)


def tensor(dtype="F32", shape=(1,), offsets=(0, 4), **extra):
    listed = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731 (non-lists are kept to break the format)
    entry = {"dtype": dtype, "shape": listed(shape), "data_offsets": listed(offsets)}
    entry.update(extra)
    return entry


def without(entry, field):
    return {k: v for k, v in entry.items() if k != field}


def raw_entry(name, body):
    """Text of a header with one tensor whose entry is the given raw JSON text."""
    return '{"%s":%s}' % (name, body)


VALID_ENTRY = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
FOUR_BYTES = b"\x00\x00\x80\x3f"  # 1.0f


def cases():
    """(file stem, file bytes, expected lower-case message substring)."""
    out = []

    def add(stem, content, expected):
        assert expected == expected.lower(), stem
        out.append((stem, content, expected))

    # ---- the length prefix ----
    add("short_file_empty", b"", "the file has 0 bytes, fewer than the 8-byte header length")
    add("short_file_7_bytes", b"\x02\x00\x00\x00\x00\x00\x00", "the file has 7 bytes, fewer than the 8-byte header length")
    add("header_length_past_end", struct.pack("<Q", 100) + b"{}      ", "the header length 100 runs past the end of the file (8 bytes")
    good = pack({"a": tensor()}, FOUR_BYTES)
    n = struct.unpack("<Q", good[:8])[0]
    add("header_length_past_end_by_one", struct.pack("<Q", len(good) - 8 + 1) + good[8:], f"the header length {len(good) - 8 + 1} runs past the end")
    add("header_length_zero_with_data", struct.pack("<Q", 0) + b"{}", "the header does not start with '{'")
    add("header_length_over_limit", struct.pack("<Q", MAX_HEADER_SIZE + 1) + b"{}      ",
        f"the header length is {MAX_HEADER_SIZE + 1} bytes, over the limit of {MAX_HEADER_SIZE} bytes")
    add("header_length_max_u64", b"\xff" * 8 + b"{}      ", "over the limit of 100000000 bytes")
    add("header_length_sign_bit", struct.pack("<Q", 1 << 63) + b"{}      ", "over the limit of 100000000 bytes")
    del n

    # ---- the header text ----
    add("header_not_utf8_in_key", pack(b'{"a\xff":' + VALID_ENTRY.encode() + b"}", FOUR_BYTES), "ill-formed utf-8 byte")
    add("header_not_utf8_overlong", pack(b'{"a\xc0\x80":' + VALID_ENTRY.encode() + b"}", FOUR_BYTES), "ill-formed utf-8 byte")
    add("header_not_utf8_in_metadata",
        pack(b'{"__metadata__":{"k":"caf\xe9"},"a":' + VALID_ENTRY.encode() + b"}", FOUR_BYTES), "ill-formed utf-8 byte")
    add("header_not_utf8_lone_surrogate",
        pack('{"__metadata__":{"k":"\\ud800"},"a":' + VALID_ENTRY + "}", FOUR_BYTES), "not valid utf-8 json")
    add("header_not_json_truncated", pack('{"a":{"dtype":"F32","shape":[1],', FOUR_BYTES), "the header is not valid utf-8 json")
    add("header_not_json_trailing_garbage", pack(raw_entry("a", VALID_ENTRY) + " x", FOUR_BYTES), "the header is not valid utf-8 json")
    add("header_not_json_single_quotes", pack("{'a':1}", b""), "the header is not valid utf-8 json")
    add("header_not_json_comment", pack('{/* c */"a":' + VALID_ENTRY + "}", FOUR_BYTES), "the header is not valid utf-8 json")
    add("header_not_json_nul_padding", pack(raw_entry("a", VALID_ENTRY).encode() + b"\x00\x00", FOUR_BYTES),
        "the header is not valid utf-8 json")
    add("header_not_json_nul_hiding_text", pack(raw_entry("a", VALID_ENTRY).encode() + b'\x00,"b":{"dtype":"U8","shape":[1]}\xff}', FOUR_BYTES),
        "the header is not valid utf-8 json")
    add("header_json_array", pack("[]      ", b""), "the header does not start with '{' (not a json object)")
    add("header_json_array_of_objects", pack('[{"a":' + VALID_ENTRY + "}]", FOUR_BYTES), "(not a json object)")
    add("header_json_string", pack('"text"  ', b""), "(not a json object)")
    add("header_json_number", pack("12345678", b""), "(not a json object)")
    add("header_leading_space", pack(" " + raw_entry("a", VALID_ENTRY), FOUR_BYTES), "the header does not start with '{'")
    add("header_utf8_bom", pack("\ufeff" + raw_entry("a", VALID_ENTRY), FOUR_BYTES), "the header does not start with '{'")
    # Nesting deep enough to exhaust the stack of any recursive JSON walk (parse, dump, destroy):
    # the official parser stops at depth 128. Each file is about 200 kB.
    deep = "[" * 100_000 + "]" * 100_000
    add("deep_nesting_in_shape", pack('{"a":{"dtype":"U8","shape":[%s],"data_offsets":[0,0]}}' % deep, b""),
        "the header nests json more than 16 levels deep")
    add("deep_nesting_in_data_offsets", pack('{"a":{"dtype":"U8","shape":[0],"data_offsets":[%s,0]}}' % deep, b""),
        "the header nests json more than 16 levels deep")
    add("deep_nesting_in_metadata", pack('{"__metadata__":{"k":%s}}' % deep, b""), "the header nests json more than 16 levels deep")
    add("deep_nesting_in_unknown_field", pack('{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":%s}}' % deep, b""),
        "the header nests json more than 16 levels deep")

    # ---- dtypes ----
    add("dtype_unknown", pack({"a": tensor(dtype="F128")}, FOUR_BYTES), "unknown or unsupported dtype 'f128'")
    add("dtype_lower_case", pack({"a": tensor(dtype="f32")}, FOUR_BYTES), "unknown or unsupported dtype 'f32'")
    add("dtype_empty", pack({"a": tensor(dtype="")}, FOUR_BYTES), "unknown or unsupported dtype ''")
    add("dtype_unsupported_u16", pack({"a": tensor(dtype="U16", shape=[2])}, FOUR_BYTES), "unknown or unsupported dtype 'u16'")
    add("dtype_unsupported_u32", pack({"a": tensor(dtype="U32")}, FOUR_BYTES), "unknown or unsupported dtype 'u32'")
    add("dtype_unsupported_u64", pack({"a": tensor(dtype="U64", offsets=[0, 8])}, FOUR_BYTES * 2), "unknown or unsupported dtype 'u64'")
    add("dtype_unsupported_f8_e8m0", pack({"a": tensor(dtype="F8_E8M0", shape=[4])}, FOUR_BYTES), "unknown or unsupported dtype 'f8_e8m0'")
    add("dtype_not_a_string", pack({"a": tensor(dtype=4)}, FOUR_BYTES), "tensor 'a': dtype must be a string")

    # ---- shapes ----
    add("shape_negative_dim", pack({"a": tensor(shape=[-1])}, FOUR_BYTES), "shape must hold non-negative integers, found -1")
    add("shape_non_integer_dim", pack({"a": tensor(shape=[1.5])}, FOUR_BYTES), "shape must hold non-negative integers, found 1.5")
    add("shape_integral_float_dim", pack({"a": tensor(shape=[1.0])}, FOUR_BYTES), "shape must hold non-negative integers, found 1.0")
    add("shape_string_dim", pack({"a": tensor(shape=["1"])}, FOUR_BYTES), 'shape must hold non-negative integers, found "1"')
    add("shape_null_dim", pack({"a": tensor(shape=[None])}, FOUR_BYTES), "shape must hold non-negative integers, found null")
    add("shape_nested_dim", pack({"a": tensor(shape=[[1]])}, FOUR_BYTES), "shape must hold non-negative integers, found a list")
    add("shape_negative_zero_dim", pack('{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,0]}}', b""),
        "shape must hold non-negative integers, found")
    add("shape_not_an_array", pack({"a": tensor(shape=1)}, FOUR_BYTES), "tensor 'a': shape must be an array")
    add("shape_dim_beyond_u64", pack('{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}}', b""),
        "shape must hold non-negative integers, found 1.8446744073709552e+19")
    add("shape_dim_beyond_i64", pack({"a": tensor(dtype="U8", shape=[2**63], offsets=[0, 0])}, b""),
        "shape dimension 9223372036854775808 is too large")
    add("shape_element_count_overflow", pack({"a": tensor(dtype="U8", shape=[2**32, 2**32], offsets=[0, 0])}, b""),
        "shape [4294967296,4294967296] overflows the byte size")
    add("shape_element_count_overflow_before_zero",
        pack({"a": tensor(dtype="U8", shape=[2**40, 2**40, 0], offsets=[0, 0])}, b""), "overflows the byte size")
    add("shape_byte_size_overflow", pack({"a": tensor(dtype="F64", shape=[2**61], offsets=[0, 0])}, b""),
        "shape [2305843009213693952] overflows the byte size")

    # ---- data offsets ----
    two = lambda a, b, data: pack({"a": tensor(offsets=a), "b": tensor(offsets=b)}, data)  # noqa: E731
    add("offsets_overlap", two([0, 4], [2, 6], b"\x00" * 6), "tensor 'b': data_offsets [2,6] overlap tensor 'a', which ends at 4")
    add("offsets_identical", two([0, 4], [0, 4], FOUR_BYTES), "data_offsets [0,4] overlap tensor 'a'")
    add("offsets_overlap_reverse_names", two([2, 6], [0, 4], b"\x00" * 6), "tensor 'a': data_offsets [2,6] overlap tensor 'b'")
    add("offsets_gap_between", two([0, 4], [8, 12], b"\x00" * 12),
        "tensor 'b': data_offsets [8,12] leave a gap: the previous tensor 'a' ends at 4")
    add("offsets_gap_at_start", pack({"a": tensor(offsets=[4, 8])}, b"\x00" * 8),
        "tensor 'a': data_offsets [4,8] leave a gap: the previous tensor ends at 0")
    add("offsets_past_end", pack({"a": tensor(shape=[2], offsets=[0, 8])}, FOUR_BYTES),
        "tensor 'a': data_offsets [0,8] run past the end of the file (the data section has 4 bytes)")
    add("offsets_past_end_huge", pack({"a": tensor(dtype="U8", shape=[2**63 - 1], offsets=[0, 2**63 - 1])}, b""),
        "run past the end of the file (the data section has 0 bytes)")
    add("offsets_end_before_begin", pack({"a": tensor(offsets=[4, 0])}, FOUR_BYTES), "tensor 'a': data_offsets [4,0] end before they begin")
    add("offsets_byte_count_too_small", pack({"a": tensor(shape=[2], offsets=[0, 4])}, FOUR_BYTES),
        "data_offsets [0,4] cover 4 bytes but dtype f32 and shape [2] need 8")
    add("offsets_byte_count_too_large", pack({"a": tensor(dtype="F16", shape=[1], offsets=[0, 4])}, FOUR_BYTES),
        "data_offsets [0,4] cover 4 bytes but dtype f16 and shape [1] need 2")
    add("offsets_byte_count_scalar", pack({"a": tensor(dtype="I64", shape=[], offsets=[0, 4])}, FOUR_BYTES),
        "cover 4 bytes but dtype i64 and shape [] need 8")
    add("offsets_byte_count_empty", pack({"a": tensor(shape=[0], offsets=[0, 4])}, FOUR_BYTES),
        "cover 4 bytes but dtype f32 and shape [0] need 0")
    add("offsets_negative", pack({"a": tensor(offsets=[-4, 0])}, FOUR_BYTES), "data_offsets must hold non-negative integers, found -4")
    add("offsets_float", pack({"a": tensor(offsets=[0, 4.0])}, FOUR_BYTES), "data_offsets must hold non-negative integers, found 4.0")
    add("offsets_arity_one", pack({"a": tensor(offsets=[4])}, FOUR_BYTES), "tensor 'a': data_offsets must be an array of two integers")
    add("offsets_arity_three", pack({"a": tensor(offsets=[0, 4, 4])}, FOUR_BYTES), "data_offsets must be an array of two integers")
    add("offsets_arity_zero", pack({"a": tensor(offsets=[])}, FOUR_BYTES), "data_offsets must be an array of two integers")
    add("offsets_not_an_array", pack({"a": tensor(offsets={"begin": 0, "end": 4})}, FOUR_BYTES),
        "data_offsets must be an array of two integers")
    add("trailing_bytes", pack({"a": tensor()}, FOUR_BYTES + b"\x00"),
        "the tensors cover 4 bytes of data but the file holds 5 bytes after the header")
    add("trailing_bytes_no_tensors", pack({}, FOUR_BYTES), "the tensors cover 0 bytes of data but the file holds 4 bytes after the header")
    add("trailing_bytes_after_empty_tensor", pack({"a": tensor(shape=[0], offsets=[0, 0])}, FOUR_BYTES),
        "the tensors cover 0 bytes of data but the file holds 4 bytes")

    # ---- names and fields ----
    add("duplicate_tensor_name_identical", pack(raw_entry("a", VALID_ENTRY)[:-1] + ',"a":' + VALID_ENTRY + "}", FOUR_BYTES),
        "the header names 'a' more than once")
    add("duplicate_tensor_name_different",
        pack(raw_entry("a", VALID_ENTRY)[:-1] + ',"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', FOUR_BYTES * 2),
        "the header names 'a' more than once")
    add("duplicate_field_in_tensor", pack('{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', FOUR_BYTES),
        "the header names 'dtype' more than once")
    add("duplicate_metadata_key", pack('{"__metadata__":{"k":"1","k":"2"},"a":' + VALID_ENTRY + "}", FOUR_BYTES),
        "the header names 'k' more than once")
    add("duplicate_metadata_block", pack('{"__metadata__":{},"__metadata__":{},"a":' + VALID_ENTRY + "}", FOUR_BYTES),
        "the header names '__metadata__' more than once")
    add("metadata_string", pack({"__metadata__": "format=pt", "a": tensor()}, FOUR_BYTES), "__metadata__ must be an object mapping strings to strings")
    add("metadata_array", pack({"__metadata__": [["k", "v"]], "a": tensor()}, FOUR_BYTES), "__metadata__ must be an object")
    add("metadata_null", pack({"__metadata__": None, "a": tensor()}, FOUR_BYTES), "__metadata__ must be an object")
    add("metadata_value_number", pack({"__metadata__": {"k": 1}, "a": tensor()}, FOUR_BYTES),
        "__metadata__ must map strings to strings, but 'k' holds 1")
    add("metadata_value_null", pack({"__metadata__": {"k": None}, "a": tensor()}, FOUR_BYTES), "but 'k' holds null")
    add("metadata_value_object", pack({"__metadata__": {"ok": "v", "nested": {"x": "y"}}, "a": tensor()}, FOUR_BYTES),
        "but 'nested' holds an object")
    add("metadata_value_bool", pack({"__metadata__": {"k": True}, "a": tensor()}, FOUR_BYTES), "but 'k' holds true")
    add("tensor_entry_not_an_object", pack({"a": 4}, b""), "tensor 'a': its entry is not an object")
    add("tensor_entry_array", pack({"a": ["F32", [1], [0, 4]]}, FOUR_BYTES), "tensor 'a': its entry is not an object")
    add("missing_field_dtype", pack({"a": without(tensor(), "dtype")}, FOUR_BYTES), "tensor 'a': missing field 'dtype'")
    add("missing_field_shape", pack({"a": without(tensor(), "shape")}, FOUR_BYTES), "tensor 'a': missing field 'shape'")
    add("missing_field_data_offsets", pack({"a": without(tensor(), "data_offsets")}, FOUR_BYTES), "tensor 'a': missing field 'data_offsets'")
    add("missing_all_fields", pack({"a": {}}, FOUR_BYTES), "missing field 'dtype'")
    add("unknown_field", pack({"a": tensor(extra="x")}, FOUR_BYTES), "tensor 'a': unknown field 'extra' (expected dtype, shape, data_offsets)")
    add("unknown_field_case", pack({"a": {"DType": "F32", "shape": [1], "data_offsets": [0, 4]}}, FOUR_BYTES), "unknown field 'dtype'")
    add("error_names_the_bad_tensor", pack({"fine": tensor(), "zbad": tensor(dtype="X", offsets=[4, 8])}, FOUR_BYTES * 2),
        "tensor 'zbad': unknown or unsupported dtype 'x'")
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    outdir = argv[1]
    os.makedirs(outdir, exist_ok=True)
    expectations = {}
    for stem, content, expected in cases():
        name = stem + ".safetensors"
        assert name not in expectations, name
        with open(os.path.join(outdir, name), "wb") as f:
            f.write(content)
        expectations[name] = expected
    with open(os.path.join(outdir, "expectations.json"), "w", encoding="utf-8") as f:
        json.dump(expectations, f, indent=2, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
