"""Conformance cases of the reduction family: reduce_sum/mean/max/min/prod, argmax/argmin, top_k (references in
float64 or int64; top_k's expected order is torch.sort(stable=True), since torch.topk may order ties differently)."""
import torch

from .framework import Case, rand, randint, randn

FLOATS = [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"), (torch.float64, "f64")]
INTS = [(torch.int64, "i64"), (torch.int32, "i32"), (torch.int16, "i16"), (torch.int8, "i8"), (torch.uint8, "u8")]
INF = float("inf")
NAN = float("nan")


def layer(op, inputs, outputs=("y",), **attrs):
    return [{"op": op, "inputs": list(inputs), "outputs": list(outputs), "attrs": attrs}]


# ---- reduce_* ----

def reduce_ref(op, x, axes, keep):
    dims = tuple(axes) if axes else tuple(range(x.dim()))
    if x.dim() == 0:
        dims = ()
    if op == "sum":
        y = torch.sum(x, dim=dims, keepdim=keep) if dims else x.clone()
    elif op == "mean":
        y = torch.mean(x, dim=dims, keepdim=keep) if dims else x.clone()
    elif op == "max":
        y = torch.amax(x, dim=dims, keepdim=keep) if dims else x.clone()
    elif op == "min":
        y = torch.amin(x, dim=dims, keepdim=keep) if dims else x.clone()
    else:  # torch.prod takes one dim at a time
        y = x
        for d in sorted((d % x.dim() for d in dims), reverse=True):
            y = torch.prod(y, dim=d, keepdim=keep)
    # torch promotes integer sums and products to int64; the op keeps the input dtype (wrapping).
    return y.to(x.dtype) if not x.dtype.is_floating_point else y


def reduce_cases():
    out = []

    def case(op, what, x, dtype_name, axes, keep=0, dynamic=None, attrs=None):
        a = {"axes": axes, "keep_dims": keep} if attrs is None else attrs
        return Case(f"reduce_{op}_{what}_{dtype_name}", layer(f"reduce_{op}", ["x"], **a), {"x": x},
                    lambda t: {"y": reduce_ref(op, t["x"], axes, bool(keep))}, dynamic={"x": dynamic} if dynamic else {})

    for op in ("sum", "mean", "max", "min", "prod"):
        # prod: values near 1 so products neither underflow nor overflow in f16/bf16
        gen = (lambda *s, dtype: rand(*s, dtype=dtype, low=0.6, high=1.5)) if op == "prod" else \
            (lambda *s, dtype: randn(*s, dtype=dtype))
        for dtype, name in FLOATS:
            out.append(case(op, "axes", gen(2, 3, 5, 7, dtype=dtype), name, [1, 3]))
        out.append(case(op, "all", gen(3, 4, 5, dtype=torch.float32), "f32", []))
        out.append(case(op, "all_keep", gen(3, 4, 5, dtype=torch.float32), "f32", [], keep=1))
        out.append(case(op, "negative_axes_keep", gen(2, 3, 13, dtype=torch.float32), "f32", [-1, 0], keep=1))
        out.append(case(op, "last_axis", gen(4, 13, dtype=torch.float32), "f32", [-1]))
        out.append(case(op, "size1", gen(4, 1, 3, dtype=torch.float32), "f32", [1]))
        out.append(case(op, "dynamic", gen(3, 4, 5, dtype=torch.float32), "f32", [1], dynamic=[-1, -1, 5]))
        out.append(case(op, "dynamic_keep", gen(3, 4, 5, dtype=torch.float32), "f32", [0, 2], keep=1,
                        dynamic=[-1, 4, -1]))
        out.append(case(op, "scalar", torch.tensor(0.75), "f32", [], keep=1))
        out.append(case(op, "default_axes", gen(3, 5, dtype=torch.float32), "f32", [], attrs={}))
        out.append(case(op, "empty_kept_dim", gen(0, 5, dtype=torch.float32), "f32", [1]))
        if op not in ("max", "min"):
            # the empty sum is 0, the empty product 1, the empty mean NaN (as torch)
            out.append(case(op, "empty_axis", gen(3, 0, 4, dtype=torch.float32), "f32", [1]))
            out.append(case(op, "empty_all", gen(0, dtype=torch.float32), "f32", []))
        if op != "mean":
            for dtype, name in INTS:
                lo, hi = (-3, 4) if op == "prod" else ((0, 200) if dtype == torch.uint8 else (-100, 100))
                out.append(case(op, "axes", randint(2, 3, 7, low=lo, high=hi, dtype=dtype), name, [0, 2]))
            out.append(case(op, "all", randint(5, 9, dtype=torch.int32), "i32", []))
        if op in ("max", "min"):
            x = randn(3, 6)
            x[0, 2] = NAN
            x[1, 1] = INF
            x[2, 4] = -INF
            out.append(case(op, "special_values", x, "f32", [1]))
    # sums that overflow the dtype wrap around (int64 arithmetic, then truncation to the dtype)
    out.append(case("sum", "wrap", randint(4, 50, low=-128, high=128, dtype=torch.int8), "i8", [1]))
    big = torch.full((3, 4), 2**62, dtype=torch.int64)
    out.append(case("sum", "wrap", big, "i64", [1]))
    out.append(case("prod", "wrap", randint(2, 40, low=-1000, high=1000, dtype=torch.int64), "i64", [1]))
    out.append(case("sum", "special_values", torch.tensor([[1.0, INF, 2.0], [INF, -INF, 0.0], [NAN, 1.0, 1.0]]),
                    "f32", [1]))
    return out


# ---- argmax / argmin ----

def arg_ref(fn, x, axis, keep):
    if x.dim() == 0:
        return torch.zeros((), dtype=torch.int64)
    return fn(x, dim=axis, keepdim=keep)


def arg_cases():
    out = []
    for op, fn in (("argmax", torch.argmax), ("argmin", torch.argmin)):
        def case(what, x, dtype_name, axis, keep=0, dynamic=None, fn=fn, op=op):
            return Case(f"{op}_{what}_{dtype_name}", layer(op, ["x"], axis=axis, keep_dims=keep), {"x": x},
                        lambda t: {"y": arg_ref(fn, t["x"], axis, bool(keep))}, dynamic={"x": dynamic} if dynamic else {})

        for dtype, name in FLOATS:
            out.append(case("axis1", randn(4, 13, 3, dtype=dtype), name, 1))
        for dtype, name in INTS:
            lo, hi = (0, 10) if dtype == torch.uint8 else (-5, 5)
            # a small range makes ties frequent: the first index wins
            out.append(case("ties", randint(5, 17, low=lo, high=hi, dtype=dtype), name, -1))
        out.append(case("ties", randint(6, 9, low=-3, high=3).to(torch.float32), "f32", 0))
        out.append(case("keep_dims", randn(3, 5, 7), "f32", -2, keep=1))
        out.append(case("negative_axis", randn(3, 5, 7), "f32", -1))
        out.append(case("dynamic", randn(3, 11), "f32", 1, dynamic=[-1, -1]))
        out.append(case("size1", randn(4, 1), "f32", 1))
        out.append(case("empty_kept_dim", randn(0, 5), "f32", 1))
        out.append(case("scalar", torch.tensor(2.5), "f32", 0))
        x = randn(4, 6)
        x[0, 3] = NAN
        x[0, 5] = NAN
        x[1, 2] = INF
        x[2, 1] = -INF
        x[3, :] = -INF
        out.append(case("special_values", x, "f32", 1))
    return out


# ---- top_k ----

def top_k_ref(x, k, axis, largest):
    values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
    return {"values": values.narrow(axis, 0, k), "indices": indices.narrow(axis, 0, k)}


def top_k_cases():
    out = []

    def case(what, x, dtype_name, k, axis=None, largest=None, dynamic=None):
        attrs = {"k": k}
        if axis is not None:
            attrs["axis"] = axis
        if largest is not None:
            attrs["largest"] = largest
        ax = -1 if axis is None else axis
        lg = True if largest is None else bool(largest)
        return Case(f"top_k_{what}_{dtype_name}", layer("top_k", ["x"], outputs=("values", "indices"), **attrs),
                    {"x": x}, lambda t: top_k_ref(t["x"], k, ax, lg), dynamic={"x": dynamic} if dynamic else {})

    for dtype, name in FLOATS:
        out.append(case("last_axis", randn(4, 17, dtype=dtype), name, 5))
        out.append(case("smallest", randn(4, 17, dtype=dtype), name, 5, largest=0))
    for dtype, name in INTS:
        lo, hi = (0, 10) if dtype == torch.uint8 else (-5, 5)
        out.append(case("ties", randint(3, 19, low=lo, high=hi, dtype=dtype), name, 7))
    out.append(case("ties_smallest", randint(3, 19, low=-5, high=5), "i64", 7, largest=0))
    out.append(case("ties", randint(3, 19, low=-5, high=5).to(torch.bfloat16), "bf16", 7))
    out.append(case("axis0", randn(13, 3, 2), "f32", 4, axis=0))
    out.append(case("middle_axis", randn(2, 9, 3), "f32", 3, axis=-2))
    out.append(case("k_equals_dim", randn(3, 7), "f32", 7))
    out.append(case("k0", randn(3, 7), "f32", 0))
    out.append(case("k1", randn(5, 7), "f32", 1, largest=0))
    out.append(case("dynamic", randn(3, 12), "f32", 4, dynamic=[-1, -1]))
    out.append(case("empty_batch", randn(0, 6), "f32", 2))
    out.append(case("empty_axis_k0", randn(3, 0), "f32", 0))
    x = randn(3, 8)
    x[0, 1] = NAN
    x[0, 6] = NAN
    x[1, 3] = INF
    x[2, 0] = -INF
    out.append(case("special_values", x, "f32", 4))
    out.append(case("special_values_smallest", x.clone(), "f32", 8, largest=0))
    # GPT-2 sampling: top 50 of a 50257-token vocabulary
    out.append(case("vocabulary", randn(2, 50257), "f32", 50))
    return out


def cases():
    return reduce_cases() + arg_cases() + top_k_cases()
