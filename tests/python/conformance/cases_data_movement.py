"""Conformance cases of the data_movement ops: reshape, transpose, slice, concat, split, gather,
squeeze, unsqueeze, expand, pad, space_to_depth. References are PyTorch (and NumPy's pad), independent of the
engine's index arithmetic: slices use Python's own slice semantics, which ONNX follows."""
import numpy as np
import torch

from .framework import DTYPE_NAMES, FLOAT_TYPES, Case, randint

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

ALL_TYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32, torch.int16,
             torch.int8, torch.uint8, torch.bool)


def make(*shape, dtype=torch.float32):
    """Random values of any dtype (floats normal, integers over most of their range, bools half true)."""
    if dtype in FLOAT_TYPES:
        return torch.randn(shape, dtype=torch.float64).to(dtype)  # randn(*shape) rejects the scalar shape ()
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype == torch.uint8:
        return randint(*shape, low=0, high=256, dtype=dtype)
    if dtype == torch.int8:
        return randint(*shape, low=-128, high=128, dtype=dtype)
    if dtype == torch.int64:
        return torch.randint(-2**62, 2**62, shape, dtype=torch.int64)
    return randint(*shape, low=-30000, high=30000, dtype=dtype)


def tag(dtype):
    return DTYPE_NAMES[dtype]


def one(op, inputs, attrs, outputs=("y",)):
    return [{"op": op, "inputs": list(inputs), "outputs": list(outputs), "attrs": attrs}]


# ---- references ----

def python_slice(x, starts, ends, axes, steps):
    """ONNX slice through Python's slice(): same negative-index and clamping rules."""
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = x.shape[a]
        idx = list(range(d))[slice(s, e, st)]
        x = torch.index_select(x, a % x.dim(), torch.tensor(idx, dtype=torch.int64))
    return x


def gather_ref(data, indices, axis):
    axis %= data.dim()
    d = data.shape[axis]
    wrapped = torch.where(indices < 0, indices + d, indices).to(torch.int64)
    flat = torch.index_select(data, axis, wrapped.reshape(-1))
    return flat.reshape(data.shape[:axis] + indices.shape + data.shape[axis + 1:])


def numpy_pad(x, pads, mode, value=0.0):
    rank = x.dim()
    if rank == 0:
        return x.clone()  # np.pad rejects an empty pad_width
    widths = list(zip(pads[:rank], pads[rank:]))
    a = x.numpy()
    if mode == "constant":
        out = np.pad(a, widths, mode="constant", constant_values=np.array(value).astype(a.dtype))
    else:
        out = np.pad(a, widths, mode={"reflect": "reflect", "edge": "edge"}[mode])
    return torch.from_numpy(np.ascontiguousarray(out))


# ---- cases ----

def reshape_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"reshape_copy_and_infer_{tag(dt)}", one("reshape", ["x"], {"shape": [0, -1, 2]}),
                          {"x": make(3, 5, 2, 2, dtype=dt)}, lambda t: {"y": t["x"].reshape(3, 10, 2)}))
    cases += [
        Case("reshape_flatten_f32", one("reshape", ["x"], {"shape": [-1]}), {"x": make(2, 7, 3)},
             lambda t: {"y": t["x"].reshape(-1)}),
        Case("reshape_to_scalar_i32", one("reshape", ["x"], {"shape": []}), {"x": make(1, 1, dtype=torch.int32)},
             lambda t: {"y": t["x"].reshape(())}),
        Case("reshape_from_scalar_f16", one("reshape", ["x"], {"shape": [1, -1, 1]}), {"x": make(dtype=torch.float16)},
             lambda t: {"y": t["x"].reshape(1, 1, 1)}),
        Case("reshape_empty_f32", one("reshape", ["x"], {"shape": [5, -1, 3]}), {"x": make(0, 15)},
             lambda t: {"y": t["x"].reshape(5, 0, 3)}),
        Case("reshape_dynamic_split_heads_f32", one("reshape", ["x"], {"shape": [0, 0, 4, -1]}), {"x": make(2, 7, 24)},
             lambda t: {"y": t["x"].reshape(2, 7, 4, 6)}, dynamic={"x": [-1, -1, 24]}),
        Case("reshape_dynamic_merge_bf16", one("reshape", ["x"], {"shape": [-1, 6]}), {"x": make(5, 4, 3, dtype=torch.bfloat16)},
             lambda t: {"y": t["x"].reshape(-1, 6)}, dynamic={"x": [-1, 4, 3]}),
        Case("reshape_words_f16", one("reshape", ["x"], {"shape": [-1]}), {"x": make(4, 64, dtype=torch.float16)},
             lambda t: {"y": t["x"].reshape(-1)}),
        Case("reshape_dynamic_no_infer_bool", one("reshape", ["x"], {"shape": [0, 2, 2]}), {"x": make(3, 4, dtype=torch.bool)},
             lambda t: {"y": t["x"].reshape(3, 2, 2)}, dynamic={"x": [-1, 4]}),
    ]
    return cases


def transpose_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"transpose_4d_{tag(dt)}", one("transpose", ["x"], {"perm": [2, 0, 3, 1]}),
                          {"x": make(2, 3, 5, 7, dtype=dt)}, lambda t: {"y": t["x"].permute(2, 0, 3, 1)}))
    cases += [
        Case("transpose_2d_odd_f32", one("transpose", ["x"], {"perm": [1, 0]}), {"x": make(13, 7)},
             lambda t: {"y": t["x"].t()}),
        Case("transpose_negative_perm_f64", one("transpose", ["x"], {"perm": [-1, 0, 1]}), {"x": make(3, 4, 5, dtype=torch.float64)},
             lambda t: {"y": t["x"].permute(2, 0, 1)}),
        Case("transpose_identity_i8", one("transpose", ["x"], {"perm": [0, 1, 2]}), {"x": make(2, 3, 4, dtype=torch.int8)},
             lambda t: {"y": t["x"]}),
        Case("transpose_empty_f32", one("transpose", ["x"], {"perm": [1, 2, 0]}), {"x": make(3, 0, 2)},
             lambda t: {"y": t["x"].permute(1, 2, 0)}),
        Case("transpose_size1_f32", one("transpose", ["x"], {"perm": [2, 1, 0]}), {"x": make(1, 5, 1)},
             lambda t: {"y": t["x"].permute(2, 1, 0)}),
        Case("transpose_dynamic_f16", one("transpose", ["x"], {"perm": [0, 2, 1, 3]}), {"x": make(2, 7, 3, 5, dtype=torch.float16)},
             lambda t: {"y": t["x"].permute(0, 2, 1, 3)}, dynamic={"x": [-1, -1, 3, 5]}),
        Case("transpose_heads_odd_f16", one("transpose", ["x"], {"perm": [0, 2, 1, 3]}), {"x": make(3, 5, 4, 7, dtype=torch.float16)},
             lambda t: {"y": t["x"].permute(0, 2, 1, 3)}),
        Case("transpose_nchw_nhwc_f16", one("transpose", ["x"], {"perm": [0, 2, 3, 1]}), {"x": make(2, 16, 9, 10, dtype=torch.float16)},
             lambda t: {"y": t["x"].permute(0, 2, 3, 1)}),
        Case("transpose_2d_tiled_f32", one("transpose", ["x"], {"perm": [1, 0]}), {"x": make(65, 33)},
             lambda t: {"y": t["x"].t()}),
    ]
    # The CUDA kernel's paths: runs of the last axis moved as 16-byte words; a shared-memory tile transpose of the
    # last two axes (with part-full tiles).
    for dt in (torch.float32, torch.float16, torch.int8, torch.float64):
        cases.append(Case(f"transpose_heads_{tag(dt)}", one("transpose", ["x"], {"perm": [0, 2, 1, 3]}),
                          {"x": make(4, 16, 12, 64, dtype=dt)}, lambda t: {"y": t["x"].permute(0, 2, 1, 3)}))
        cases.append(Case(f"transpose_tiled_{tag(dt)}", one("transpose", ["x"], {"perm": [0, 2, 1]}),
                          {"x": make(3, 40, 70, dtype=dt)}, lambda t: {"y": t["x"].permute(0, 2, 1)}))
    return cases


def slice_case(name, x, starts, ends, axes, steps=None, dynamic=None):
    attrs = {"starts": starts, "ends": ends, "axes": axes}
    if steps is not None:
        attrs["steps"] = steps
    return Case(name, one("slice", ["x"], attrs), {"x": x},
                lambda t: {"y": python_slice(t["x"], starts, ends, axes, steps)}, dynamic=dynamic or {})


def slice_cases():
    cases = [slice_case(f"slice_step2_{tag(dt)}", make(11, 7, dtype=dt), [1, -1], [10, 0], [0, 1], [2, -3]) for dt in ALL_TYPES]
    cases += [
        slice_case("slice_basic_f32", make(10, 7, 5), [2], [8], [1]),
        slice_case("slice_reverse_f32", make(9, 4), [-1], [INT64_MIN], [0], [-1]),
        slice_case("slice_reverse_step3_f64", make(10, 4, dtype=torch.float64), [100], [-100], [0], [-3]),
        slice_case("slice_to_end_int64_max_f32", make(6, 5), [2], [INT64_MAX], [-1]),
        slice_case("slice_negative_indices_f16", make(6, 9, dtype=torch.float16), [-3, -7], [-1, 8], [0, 1], [1, 2]),
        slice_case("slice_clamped_f32", make(5, 6), [-100, 3], [100, 1000], [0, 1]),
        slice_case("slice_empty_result_f32", make(5, 6), [4], [2], [0]),
        slice_case("slice_empty_input_f32", make(0, 6), [1], [3], [0]),
        slice_case("slice_empty_input_reverse_f32", make(0, 6), [-1], [INT64_MIN], [0], [-1]),
        slice_case("slice_default_axes_i64", make(7, 8, 3, dtype=torch.int64), [1, 2], [6, 8], []),
        slice_case("slice_huge_negative_step_f32", make(7, 3), [5], [-100], [0], [INT64_MIN]),
        slice_case("slice_three_axes_bf16", make(5, 6, 7, dtype=torch.bfloat16), [0, -2, 1], [5, 0, 7], [0, 1, 2], [2, -1, 3]),
        slice_case("slice_dynamic_tail_f32", make(7, 4), [1], [INT64_MAX], [0], dynamic={"x": [-1, 4]}),
        slice_case("slice_dynamic_last2_bool", make(5, 4, dtype=torch.bool), [-2], [INT64_MAX], [0], dynamic={"x": [-1, 4]}),
        slice_case("slice_dynamic_reverse_f32", make(6, 4), [-1], [INT64_MIN], [0], [-2], dynamic={"x": [-1, 4]}),
        slice_case("slice_dynamic_one_row_f32", make(1, 4), [1], [-1], [0], [3], dynamic={"x": [-1, 4]}),
        slice_case("slice_dynamic_middle_u8", make(13, 4, dtype=torch.uint8), [1], [-1], [0], [3], dynamic={"x": [-1, -1]}),
        slice_case("slice_words_last_f16", make(6, 64, dtype=torch.float16), [8], [40], [1]),
        slice_case("slice_words_rows_f32", make(10, 32), [2], [9], [0]),
    ]
    return cases


def concat_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"concat_three_{tag(dt)}", one("concat", ["a", "b", "c"], {"axis": 1}),
                          {"a": make(2, 3, 5, dtype=dt), "b": make(2, 1, 5, dtype=dt), "c": make(2, 7, 5, dtype=dt)},
                          lambda t: {"y": torch.cat([t["a"], t["b"], t["c"]], 1)}))
    cases += [
        Case("concat_last_axis_f32", one("concat", ["a", "b"], {"axis": -1}), {"a": make(3, 4, 2), "b": make(3, 4, 13)},
             lambda t: {"y": torch.cat([t["a"], t["b"]], -1)}),
        Case("concat_first_axis_f64", one("concat", ["a", "b"], {"axis": 0}),
             {"a": make(1, 4, dtype=torch.float64), "b": make(6, 4, dtype=torch.float64)},
             lambda t: {"y": torch.cat([t["a"], t["b"]], 0)}),
        Case("concat_single_input_i32", one("concat", ["a"], {"axis": 0}), {"a": make(3, 2, dtype=torch.int32)},
             lambda t: {"y": t["a"].clone()}),
        Case("concat_with_empty_f32", one("concat", ["a", "b", "c"], {"axis": 1}),
             {"a": make(2, 0, 3), "b": make(2, 4, 3), "c": make(2, 0, 3)},
             lambda t: {"y": torch.cat([t["a"], t["b"], t["c"]], 1)}),
        Case("concat_all_empty_f32", one("concat", ["a", "b"], {"axis": 0}), {"a": make(0, 3), "b": make(0, 3)},
             lambda t: {"y": torch.cat([t["a"], t["b"]], 0)}),
        Case("concat_same_input_twice_f16", one("concat", ["a", "a"], {"axis": 0}), {"a": make(2, 3, dtype=torch.float16)},
             lambda t: {"y": torch.cat([t["a"], t["a"]], 0)}),
        Case("concat_dynamic_kv_cache_f32", one("concat", ["past", "new"], {"axis": 2}),
             {"past": make(1, 2, 5, 4), "new": make(1, 2, 1, 4)},
             lambda t: {"y": torch.cat([t["past"], t["new"]], 2)},
             dynamic={"past": [-1, 2, -1, 4], "new": [-1, 2, -1, 4]}),
        Case("concat_words_last_f16", one("concat", ["a", "b"], {"axis": -1}),
             {"a": make(4, 3, 40, dtype=torch.float16), "b": make(4, 3, 24, dtype=torch.float16)},
             lambda t: {"y": torch.cat([t["a"], t["b"]], -1)}),
        Case("concat_ten_f32", one("concat", [f"x{i}" for i in range(10)], {"axis": 1}),
             {f"x{i}": make(2, i + 1, 3) for i in range(10)},
             lambda t: {"y": torch.cat([t[f"x{i}"] for i in range(10)], 1)}),
    ]
    return cases


def split_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"split_three_{tag(dt)}", one("split", ["x"], {"sizes": [3, 1, 5], "axis": 1}, ["a", "b", "c"]),
                          {"x": make(2, 9, 3, dtype=dt)},
                          lambda t: dict(zip("abc", torch.split(t["x"], [3, 1, 5], 1)))))
    cases += [
        Case("split_with_zero_f32", one("split", ["x"], {"sizes": [2, 0, 5], "axis": -1}, ["a", "b", "c"]), {"x": make(3, 7)},
             lambda t: dict(zip("abc", torch.split(t["x"], [2, 0, 5], -1)))),
        Case("split_single_f64", one("split", ["x"], {"sizes": [4], "axis": 0}, ["a"]), {"x": make(4, 3, dtype=torch.float64)},
             lambda t: {"a": t["x"].clone()}),
        Case("split_empty_outer_f32", one("split", ["x"], {"sizes": [1, 2], "axis": 1}, ["a", "b"]), {"x": make(0, 3)},
             lambda t: dict(zip("ab", torch.split(t["x"], [1, 2], 1)))),
        Case("split_dynamic_qkv_f16", one("split", ["x"], {"sizes": [8, 4, 4], "axis": -1}, ["q", "k", "v"]),
             {"x": make(2, 5, 16, dtype=torch.float16)},
             lambda t: dict(zip("qkv", torch.split(t["x"], [8, 4, 4], -1))), dynamic={"x": [-1, -1, 16]}),
        Case("split_words_qkv_f16", one("split", ["x"], {"sizes": [32, 32, 32], "axis": -1}, ["q", "k", "v"]),
             {"x": make(2, 8, 96, dtype=torch.float16)},
             lambda t: dict(zip("qkv", torch.split(t["x"], [32, 32, 32], -1)))),
        Case("split_ten_f32", one("split", ["x"], {"sizes": [2] * 10, "axis": 1}, [f"y{i}" for i in range(10)]),
             {"x": make(3, 20)},
             lambda t: {f"y{i}": p for i, p in enumerate(torch.split(t["x"], [2] * 10, 1))}),
    ]
    return cases


def gather_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"gather_axis1_{tag(dt)}", one("gather", ["data", "idx"], {"axis": 1}),
                          {"data": make(3, 7, 2, dtype=dt), "idx": randint(2, 5, low=-7, high=7)},
                          lambda t: {"y": gather_ref(t["data"], t["idx"], 1)}))
    cases += [
        Case("gather_embedding_i32_indices_f32", one("gather", ["table", "ids"], {"axis": 0}),
             {"table": make(13, 8), "ids": randint(2, 5, low=-13, high=13, dtype=torch.int32)},
             lambda t: {"y": gather_ref(t["table"], t["ids"], 0)}),
        Case("gather_scalar_index_f32", one("gather", ["data", "idx"], {"axis": -1}),
             {"data": make(4, 5), "idx": torch.tensor(-2, dtype=torch.int64)},
             lambda t: {"y": gather_ref(t["data"], t["idx"], -1)}),
        Case("gather_repeated_indices_i64", one("gather", ["data", "idx"], {"axis": 0}),
             {"data": make(3, 4, dtype=torch.int64), "idx": torch.tensor([2, 2, -1, 0, -3], dtype=torch.int64)},
             lambda t: {"y": gather_ref(t["data"], t["idx"], 0)}),
        Case("gather_empty_indices_f32", one("gather", ["data", "idx"], {"axis": 0}),
             {"data": make(4, 3), "idx": torch.zeros(0, 2, dtype=torch.int64)},
             lambda t: {"y": gather_ref(t["data"], t["idx"], 0)}),
        Case("gather_dynamic_ids_bf16", one("gather", ["table", "ids"], {"axis": 0}),
             {"table": make(11, 6, dtype=torch.bfloat16), "ids": randint(3, 7, low=0, high=11)},
             lambda t: {"y": gather_ref(t["table"], t["ids"], 0)}, dynamic={"ids": [-1, -1]}),
        Case("gather_last_axis_f16", one("gather", ["data", "idx"], {"axis": 2}),
             {"data": make(2, 3, 5, dtype=torch.float16), "idx": randint(4, low=-5, high=5, dtype=torch.int32)},
             lambda t: {"y": gather_ref(t["data"], t["idx"], 2)}),
    ]
    return cases


def squeeze_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"squeeze_all_{tag(dt)}", one("squeeze", ["x"], {"axes": []}), {"x": make(1, 3, 1, 4, 1, dtype=dt)},
                          lambda t: {"y": t["x"].reshape(3, 4)}))
    cases += [
        Case("squeeze_axes_f32", one("squeeze", ["x"], {"axes": [0, -1]}), {"x": make(1, 3, 1, 4, 1)},
             lambda t: {"y": t["x"].reshape(3, 1, 4)}),
        Case("squeeze_to_scalar_f64", one("squeeze", ["x"], {"axes": []}), {"x": make(1, 1, dtype=torch.float64)},
             lambda t: {"y": t["x"].reshape(())}),
        Case("squeeze_empty_f32", one("squeeze", ["x"], {"axes": [1]}), {"x": make(0, 1, 3)},
             lambda t: {"y": t["x"].reshape(0, 3)}),
        Case("squeeze_dynamic_f16", one("squeeze", ["x"], {"axes": [1]}), {"x": make(5, 1, 6, dtype=torch.float16)},
             lambda t: {"y": t["x"].squeeze(1)}, dynamic={"x": [-1, 1, -1]}),
        Case("squeeze_dynamic_axis_i64", one("squeeze", ["x"], {"axes": [0]}), {"x": make(1, 6, dtype=torch.int64)},
             lambda t: {"y": t["x"].squeeze(0)}, dynamic={"x": [-1, 6]}),
    ]
    return cases


def unsqueeze_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"unsqueeze_two_{tag(dt)}", one("unsqueeze", ["x"], {"axes": [0, -1]}), {"x": make(3, 5, dtype=dt)},
                          lambda t: {"y": t["x"].reshape(1, 3, 5, 1)}))
    cases += [
        Case("unsqueeze_middle_f32", one("unsqueeze", ["x"], {"axes": [3, 1]}), {"x": make(2, 7)},
             lambda t: {"y": t["x"].reshape(2, 1, 7, 1)}),
        Case("unsqueeze_scalar_f32", one("unsqueeze", ["x"], {"axes": [0]}), {"x": make()},
             lambda t: {"y": t["x"].reshape(1)}),
        Case("unsqueeze_empty_f32", one("unsqueeze", ["x"], {"axes": [1]}), {"x": make(0, 4)},
             lambda t: {"y": t["x"].reshape(0, 1, 4)}),
        Case("unsqueeze_dynamic_mask_bool", one("unsqueeze", ["x"], {"axes": [1, 2]}), {"x": make(3, 9, dtype=torch.bool)},
             lambda t: {"y": t["x"][:, None, None, :]}, dynamic={"x": [-1, -1]}),
    ]
    return cases


def expand_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(Case(f"expand_broadcast_{tag(dt)}", one("expand", ["x"], {"shape": [2, 3, 5]}), {"x": make(3, 1, dtype=dt)},
                          lambda t: {"y": t["x"].expand(2, 3, 5).clone()}))
    cases += [
        Case("expand_keep_dims_f32", one("expand", ["x"], {"shape": [4, -1, -1, 7]}), {"x": make(1, 3, 1)},
             lambda t: {"y": t["x"].expand(4, -1, -1, 7).clone()}),
        Case("expand_scalar_f64", one("expand", ["x"], {"shape": [2, 3]}), {"x": make(dtype=torch.float64)},
             lambda t: {"y": t["x"].expand(2, 3).clone()}),
        Case("expand_same_shape_i16", one("expand", ["x"], {"shape": [2, 3]}), {"x": make(2, 3, dtype=torch.int16)},
             lambda t: {"y": t["x"].clone()}),
        Case("expand_to_zero_f32", one("expand", ["x"], {"shape": [3, 0]}), {"x": make(3, 1)},
             lambda t: {"y": t["x"].expand(3, 0).clone()}),
        Case("expand_new_zero_dim_f32", one("expand", ["x"], {"shape": [0, 3, 1]}), {"x": make(3, 1)},
             lambda t: {"y": t["x"].expand(0, 3, 1).clone()}),
        Case("expand_dynamic_keep_f16", one("expand", ["x"], {"shape": [2, -1, 6]}), {"x": make(5, 1, dtype=torch.float16)},
             lambda t: {"y": t["x"].expand(2, -1, 6).clone()}, dynamic={"x": [-1, -1]}),
        Case("expand_dynamic_stretch_f32", one("expand", ["x"], {"shape": [4, 6]}), {"x": make(1, 6)},
             lambda t: {"y": t["x"].expand(4, 6).clone()}, dynamic={"x": [-1, 6]}),
        Case("expand_words_rows_f16", one("expand", ["x"], {"shape": [7, 64]}), {"x": make(1, 64, dtype=torch.float16)},
             lambda t: {"y": t["x"].expand(7, 64).clone()}),
    ]
    return cases


def pad_case(name, x, pads, mode="constant", value=None, dynamic=None):
    attrs = {"pads": pads, "mode": mode}
    if value is not None:
        attrs["value"] = value
    return Case(name, one("pad", ["x"], attrs), {"x": x},
                lambda t: {"y": numpy_pad(t["x"], pads, mode, value or 0.0)}, dynamic=dynamic or {})


def pad_cases():
    cases = []
    for dt in ALL_TYPES:
        cases.append(pad_case(f"pad_constant_{tag(dt)}", make(3, 5, dtype=dt), [1, 0, 2, 3], value=2.0))
        cases.append(pad_case(f"pad_reflect_{tag(dt)}", make(4, 5, dtype=dt), [3, 0, 1, 4], mode="reflect"))
        cases.append(pad_case(f"pad_edge_{tag(dt)}", make(3, 5, dtype=dt), [2, 6, 5, 1], mode="edge"))
    cases += [
        pad_case("pad_constant_zero_default_f32", make(2, 3, 4), [0, 1, 2, 2, 1, 0]),
        pad_case("pad_constant_fraction_f16", make(2, 3, dtype=torch.float16), [1, 1, 1, 1], value=0.1),
        pad_case("pad_constant_negative_value_f32", make(7), [4, 2], value=-3.5),
        pad_case("pad_constant_truncates_i32", make(2, 2, dtype=torch.int32), [1, 1, 1, 1], value=-2.0),
        pad_case("pad_constant_empty_dim_f32", make(0, 3), [2, 1, 0, 1], value=1.0),
        # The last axis alone (a faster CUDA path): channels-last images padded from 3 to 8 channels, and both ends.
        pad_case("pad_last_axis_channels_f16", make(2, 5, 4, 3, dtype=torch.float16), [0, 0, 0, 0, 0, 0, 0, 5]),
        pad_case("pad_last_axis_both_ends_f32", make(3, 4, 6), [0, 0, 2, 0, 0, 3], value=1.5),
        pad_case("pad_last_axis_8_byte_rows_bf16", make(5, 3, dtype=torch.bfloat16), [0, 1, 0, 0], value=-2.0),
        # Rows and columns alone (an image's, before its space-to-depth form): one block per output row on CUDA.
        pad_case("pad_last_two_axes_f16", make(2, 3, 9, 11, dtype=torch.float16), [0, 0, 3, 2, 0, 0, 1, 4]),
        pad_case("pad_last_two_axes_wide_rows_i8", make(2, 5, 300, dtype=torch.int8), [0, 1, 2, 0, 2, 3], value=7.0),
        # Trailing axes no pad touches, whole 16-byte words (the CUDA kernel moves words): a row in front of the
        # sequence (ViT's class token), reflect and edge padding of outer axes, a constant other than zero.
        pad_case("pad_outer_axes_words_f16", make(2, 3, 24, dtype=torch.float16), [0, 1, 0, 0, 0, 0]),
        pad_case("pad_outer_axes_words_reflect_f32", make(3, 4, 2, 8), [1, 0, 0, 0, 1, 2, 0, 0], mode="reflect"),
        pad_case("pad_outer_axes_words_edge_bf16", make(3, 2, 16, dtype=torch.bfloat16), [2, 1, 0, 0, 1, 0], mode="edge"),
        pad_case("pad_outer_axes_words_value_bf16", make(2, 16, dtype=torch.bfloat16), [1, 0, 2, 0], value=-1.25),
        pad_case("pad_reflect_3d_f64", make(2, 3, 4, dtype=torch.float64), [1, 2, 3, 1, 0, 2], mode="reflect"),
        pad_case("pad_reflect_size1_axis_unpadded_f32", make(1, 4), [0, 1, 0, 2], mode="reflect"),
        pad_case("pad_edge_1d_f32", make(3), [5, 7], mode="edge"),
        pad_case("pad_edge_empty_unpadded_axis_f32", make(0, 3), [0, 1, 0, 2], mode="edge"),
        pad_case("pad_scalar_f32", make(), []),
        pad_case("pad_nothing_bf16", make(4, 5, dtype=torch.bfloat16), [0, 0, 0, 0], mode="reflect"),
        pad_case("pad_dynamic_constant_f32", make(5, 3), [1, 0, 2, 1], value=0.5, dynamic={"x": [-1, 3]}),
        pad_case("pad_dynamic_reflect_f16", make(6, 4, dtype=torch.float16), [2, 1, 3, 0], mode="reflect", dynamic={"x": [-1, -1]}),
        pad_case("pad_dynamic_edge_i64", make(2, 4, dtype=torch.int64), [3, 0, 0, 3], mode="edge", dynamic={"x": [-1, 4]}),
    ]
    return cases


def space_to_depth_ref(x, block, pads, layout, channels):
    """torch's pad, reshape and permute: channel (by * block + bx) * C + c (ONNX's DCR order), zero channels appended."""
    top, left, bottom, right = pads
    p = torch.nn.functional.pad(x.to(torch.float64) if x.dtype.is_floating_point else x, (left, right, top, bottom))
    p = p.to(x.dtype)
    n, c, h, w = p.shape
    y = p.reshape(n, c, h // block, block, w // block, block).permute(0, 3, 5, 1, 2, 4)
    y = y.reshape(n, block * block * c, h // block, w // block)
    if channels > block * block * c:
        y = torch.cat([y, torch.zeros(n, channels - block * block * c, h // block, w // block, dtype=x.dtype)], 1)
    return (y.permute(0, 2, 3, 1) if layout == "nhwc" else y).contiguous()


def space_to_depth_case(name, x, block, pads=(0, 0, 0, 0), layout="nchw", channels=None, dynamic=None):
    attrs = {"block_size": block, "pads": list(pads), "output_layout": layout}
    if channels is not None:
        attrs["channels"] = channels
    filled = x.shape[1] * block * block
    return Case(name, one("space_to_depth", ["x"], attrs), {"x": x},
                lambda t: {"y": space_to_depth_ref(t["x"], block, pads, layout, channels or filled)},
                dynamic=dynamic or {})


def space_to_depth_cases():
    return [
        # ResNet's stem input (the channels-last pass's form): padded by 3 and to whole cells, 12 channels to 16.
        space_to_depth_case("space_to_depth_stem_nhwc_f16", make(2, 3, 15, 18, dtype=torch.float16), 2, (3, 3, 4, 3),
                            "nhwc", 16),
        space_to_depth_case("space_to_depth_stem_dynamic_batch_bf16", make(3, 3, 14, 10, dtype=torch.bfloat16), 2,
                            (3, 3, 3, 3), "nhwc", 16, dynamic={"x": [-1, 3, 14, 10]}),
        space_to_depth_case("space_to_depth_onnx_nchw_f32", make(2, 4, 6, 8), 2),
        space_to_depth_case("space_to_depth_block3_nhwc_i8", make(1, 5, 9, 6, dtype=torch.int8), 3, channels=48),
        space_to_depth_case("space_to_depth_odd_channels_nhwc_f16", make(2, 3, 4, 6, dtype=torch.float16), 2,
                            (1, 0, 1, 2), "nhwc", 13),
        space_to_depth_case("space_to_depth_wide_rows_nchw_f64", make(1, 2, 4, 8, dtype=torch.float64), 2, (2, 0, 0, 4)),
        space_to_depth_case("space_to_depth_block1_u8", make(2, 3, 5, 7, dtype=torch.uint8), 1, (1, 2, 0, 1)),
        space_to_depth_case("space_to_depth_bool", make(1, 2, 4, 4, dtype=torch.bool), 2, layout="nhwc", channels=10),
    ]


def cases():
    return (reshape_cases() + transpose_cases() + slice_cases() + concat_cases() + split_cases() + gather_cases() +
            squeeze_cases() + unsqueeze_cases() + expand_cases() + pad_cases() + space_to_depth_cases())
