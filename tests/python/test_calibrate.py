"""Tests of `tensoracle calibrate`: activation ranges against what PyTorch computes for the same network and batches
(max over the batches, NumPy's percentile, NumPy implementations of the documented entropy and MSE choices on the same
histogram), the quantized network's outputs against PyTorch's float64 quantize-dequantize of the same scales, the
quantized weights against PyTorch's per-channel quantization, weight-only and per-tensor modes, and the errors.

Runs under a Python with torch (Debian's python3-torch 1.13). Environment: TENSORACLE_CLI, the `tensoracle` binary."""
import json
import math
import os
import subprocess

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

CLI = os.environ.get("TENSORACLE_CLI", "build/tools/cli/tensoracle")
BINS = 2048


def run(*args, check=True):
    proc = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


class Mlp(torch.nn.Module):
    """linear -> relu -> linear, and a 3x3 convolution branch, as the network JSON below describes."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x, img):
        return self.fc2(torch.relu(self.fc1(x))), self.conv(img)


def write_network(folder, model):
    weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(folder / "weights.safetensors"))
    net = {
        "format": "tensoracle-network", "version": 1,
        "inputs": [{"name": "x", "dtype": "f32", "shape": [-1, 16]}, {"name": "img", "dtype": "f32", "shape": [2, 3, 6, 6]}],
        "constants": [{"name": k, "weight": k, "file": "weights.safetensors"} for k in weights],
        "layers": [
            {"name": "fc1", "op": "linear", "inputs": ["x", "fc1.weight", "fc1.bias"], "outputs": ["h"]},
            {"name": "act", "op": "relu", "inputs": ["h"], "outputs": ["a"]},
            {"name": "fc2", "op": "linear", "inputs": ["a", "fc2.weight", "fc2.bias"], "outputs": ["y"]},
            {"name": "conv", "op": "conv", "inputs": ["img", "conv.weight", "conv.bias"], "outputs": ["z"],
             "attrs": {"padding": [1, 1]}},
        ],
        "outputs": ["y", "z"],
    }
    (folder / "net.json").write_text(json.dumps(net))
    return folder / "net.json"


def batches(folder, count, seed=0, heavy_tail=False, rows=5):
    g = torch.Generator().manual_seed(seed)
    files, data = [], []
    for b in range(count):
        x = torch.randn(rows, 16, generator=g)
        if heavy_tail:
            x[0, :4] *= 25.0  # a few outliers
        img = torch.randn(2, 3, 6, 6, generator=g)
        path = folder / f"batch{b}.safetensors"
        save_file({"x": x, "img": img}, str(path))
        files.append(path)
        data.append((x, img))
    return files, data


def activations(model, data):
    """|x| of each calibrated activation over every batch: fc1's x, fc2's a, conv's img."""
    seen = {"x": [], "a": [], "img": []}
    with torch.no_grad():
        for x, img in data:
            seen["x"].append(x.abs().flatten())
            seen["a"].append(torch.relu(model.fc1(x)).abs().flatten())
            seen["img"].append(img.abs().flatten())
    return {k: torch.cat(v).double().numpy() for k, v in seen.items()}


def calibrate(tmp_path, method, extra=(), count=3, heavy_tail=False, rows=5):
    model = Mlp()
    net = write_network(tmp_path, model)
    files, data = batches(tmp_path, count, heavy_tail=heavy_tail, rows=rows)
    args = ["calibrate", net, "-o", tmp_path / "q.json", "--method", method, "-q"]
    for f in files:
        args += ["--batch", f]
    report = json.loads(run(*args, *extra).stdout)
    return model, data, report, {a["tensor"]: a for a in report["activations"]}


def fake_quant(t, scale, qmax=127.0, axis=None):
    """PyTorch's quantize-dequantize in float64: round half to even of t/scale, clamped to [-128, 127]."""
    t = t.double()
    s = torch.as_tensor(scale, dtype=torch.float64)
    if axis is not None:
        shape = [1] * t.dim()
        shape[axis] = -1
        s = s.reshape(shape)
    return torch.clamp(torch.round(t / s), -128.0, qmax) * s


def test_max_ranges_and_the_quantized_network_match_pytorch(tmp_path):
    model, data, report, acts = calibrate(tmp_path, "max")
    assert report["batches"] == 3 and report["method"] == "max"
    seen = activations(model, data)
    for name, values in seen.items():
        assert acts[name]["max_abs"] == pytest.approx(values.max(), rel=1e-6)
        assert acts[name]["amax"] == pytest.approx(values.max(), rel=1e-6)
        assert acts[name]["scale"] == pytest.approx(values.max() / 127, rel=1e-6)
        assert acts[name]["values"] == values.size
    assert acts["a"]["layers"] == ["fc2"]
    # The quantized weights and their per-channel scales, against PyTorch's.
    q = load_file(str(tmp_path / "q.safetensors"))
    for name in ("fc1.weight", "fc2.weight", "conv.weight"):
        w = getattr(model, name.split(".")[0]).weight.detach()
        amax = w.abs().reshape(w.shape[0], -1).max(dim=1).values
        scale = (amax.double() / 127).float()
        assert torch.equal(q[name + ".scale"], scale), name
        expected = torch.clamp(torch.round(w.double() / scale.double().reshape([-1] + [1] * (w.dim() - 1))), -128, 127)
        assert q[name + ".quantized"].dtype == torch.int8
        assert torch.equal(q[name + ".quantized"].to(torch.float64), expected), name
    # The quantized network on the CPU reference against PyTorch's quantize-dequantize of the same scales.
    x, img = data[0]
    out = tmp_path / "out.safetensors"
    run("run", tmp_path / "q.json", "--inputs", tmp_path / "batch0.safetensors", "-o", out)
    got = load_file(str(out))
    ws = {n: q[n + ".scale"].double() for n in ("fc1.weight", "fc2.weight", "conv.weight")}
    with torch.no_grad():
        xq = fake_quant(x, acts["x"]["scale"])
        w1 = fake_quant(model.fc1.weight, ws["fc1.weight"], axis=0)
        a = torch.relu(xq @ w1.T + model.fc1.bias.double())
        aq = fake_quant(a.float(), acts["a"]["scale"])
        w2 = fake_quant(model.fc2.weight, ws["fc2.weight"], axis=0)
        y = aq @ w2.T + model.fc2.bias.double()
        imgq = fake_quant(img, acts["img"]["scale"])
        wc = fake_quant(model.conv.weight, ws["conv.weight"], axis=0)
        z = torch.nn.functional.conv2d(imgq, wc, model.conv.bias.double(), padding=1)
    for name, want in (("y", y), ("z", z)):
        err = (got[name].double() - want).norm() / want.norm()
        assert err < 1e-5, (name, float(err))
    # And it is a quantized network: further from the float one than rounding alone.
    with torch.no_grad():
        float_y, _ = model(x, img)
    assert (got["y"] - float_y).norm() / float_y.norm() > 1e-4


@pytest.mark.parametrize("qtype", ["i8", "f8e4m3"])
def test_an_engine_of_the_quantized_network_multiplies_quantized_operands(tmp_path, qtype):
    """The builder lowers each calibrated linear to one quantized_linear (tensoracle inspect says so, and the weights
    stay quantized: the engine holds fewer weight bytes than the float one's), with the results of the quantized
    network's own math (PyTorch's quantize-dequantize in float64)."""
    model, data, report, acts = calibrate(tmp_path, "max", extra=("--type", qtype))
    engine, float_engine = tmp_path / "q.engine", tmp_path / "f.engine"
    profile = ["--profile", "x=5x16"]
    run("build", tmp_path / "q.json", "-o", engine, "-t", "cpu", "-p", "fp32", *profile, "-q")
    run("build", tmp_path / "net.json", "-o", float_engine, "-t", "cpu", "-p", "fp32", *profile, "-q")
    manifest = json.loads(run("inspect", engine).stdout)
    quantized = {s["layer"]: s["quantized"] for s in manifest["steps"] if "quantized" in s}
    assert quantized == {"fc1": qtype, "fc2": qtype}
    assert {s["op"] for s in manifest["steps"] if s["layer"] in quantized} == {"quantized_linear"}
    weight_bytes = lambda m: sum(w["size"] for w in m["weights"])  # noqa: E731
    float_manifest = json.loads(run("inspect", float_engine).stdout)
    # fc1 and fc2's weights: 1 byte instead of 4 per value, plus a 4-byte scale per output feature.
    saved = (16 * 32 + 32 * 8) * 3 - (32 + 8) * 4
    assert weight_bytes(float_manifest) - weight_bytes(manifest) >= saved - 64
    out = tmp_path / "engine_out.safetensors"
    run("run", engine, "--inputs", tmp_path / "batch0.safetensors", "-o", out)
    got = load_file(str(out))["y"].double()
    q = read_safetensors_f64(tmp_path / "q.safetensors")
    x, _ = data[0]
    quant = (lambda t, s, axis=None: fake_quant(t, s, axis=axis)) if qtype == "i8" else \
        (lambda t, s, axis=None: fake_quant_e4m3(t, s, axis))
    with torch.no_grad():
        w1 = q["fc1.weight.quantized"] * q["fc1.weight.scale"][:, None]
        w2 = q["fc2.weight.quantized"] * q["fc2.weight.scale"][:, None]
        a = torch.relu(quant(x, acts["x"]["scale"]) @ w1.T + model.fc1.bias.double())
        y = quant(a.float(), acts["a"]["scale"]) @ w2.T + model.fc2.bias.double()
    err = (got - y).norm() / y.norm()
    assert err < 1e-5, float(err)


def e4m3_value(bits):
    """The value of an e4m3fn byte (no infinities; 0x7F and 0xFF are NaN)."""
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** -9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


def read_safetensors_f64(path):
    """Every tensor of a safetensors file as float64, F8_E4M3 included (torch 1.13 has no float8 dtype)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + size])
    table = torch.tensor([e4m3_value(b) for b in range(256)], dtype=torch.float64)
    numpy_types = {"F32": np.float32, "I8": np.int8, "F16": np.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        data = raw[8 + size + start:8 + size + end]
        if info["dtype"] == "F8_E4M3":
            t = table[torch.tensor(list(data), dtype=torch.long)]
        else:
            t = torch.from_numpy(np.frombuffer(data, dtype=numpy_types[info["dtype"]]).astype(np.float64))
        out[name] = t.reshape(info["shape"])
    return out


def fake_quant_e4m3(t, scale, axis=None):
    """t / scale rounded to e4m3fn (saturating at ±448) times scale, in float64."""
    assert axis is None
    v = (t.double() / scale).clamp(-448.0, 448.0)
    exponent = torch.floor(torch.log2(v.abs().clamp(min=2.0 ** -9))).clamp(min=-6)
    step = torch.pow(2.0, exponent - 3)
    return torch.round(v / step) * step * scale


def test_percentile_is_the_order_statistic_within_a_bin(tmp_path):
    model, data, report, acts = calibrate(tmp_path, "percentile", ("--percentile", "99.5"), rows=400)
    for name, values in activations(model, data).items():
        width = 2 * values.max() / BINS  # the histogram's range is at most twice the largest |x|
        # The definition: the upper edge of the bin holding the ceil(n·p/100)-th smallest |x|.
        v = np.sort(values)[math.ceil(values.size * 99.5 / 100) - 1]
        assert v - 1e-6 <= acts[name]["amax"] <= v + width + 1e-6, name
        assert acts[name]["amax"] < values.max()
    # Where the values are dense (6400 per batch), that is NumPy's percentile within a bin or two.
    x = activations(model, data)["x"]
    assert abs(acts["x"]["amax"] - np.percentile(x, 99.5)) <= 4 * x.max() / BINS


def reference_histogram(values):
    """One batch: the histogram's range is the largest |x| exactly, with that value in the last bin."""
    top = values.max()
    idx = np.minimum((values * (BINS / top)).astype(np.int64), BINS - 1)
    return np.bincount(idx, minlength=BINS).astype(np.float64), top / BINS


def reference_entropy(counts, width):
    """docs/precision.md's entropy choice: thresholds i = 128..bins bins; P = bins below i with the rest folded into
    bin i-1; Q = those bins merged into 128 levels and spread evenly over the level's non-empty bins; least KL(P||Q)."""
    best, best_i = math.inf, len(counts)
    for i in range(128, len(counts) + 1):
        p = counts[:i].copy()
        p[i - 1] += counts[i:].sum()
        q = np.zeros(i)
        for j in range(128):
            lo, hi = j * i // 128, (j + 1) * i // 128
            level = counts[lo:hi]
            held = np.count_nonzero(level)
            if held:
                q[lo:hi] = np.where(level != 0, level.sum() / held, 0.0)
        p_n, q_n = p / p.sum(), q / q.sum()
        nz = p_n > 0
        qq = np.where(q_n[nz] > 0, q_n[nz], 1e-12)
        kl = float(np.sum(p_n[nz] * np.log(p_n[nz] / qq)))
        if kl < best:
            best, best_i = kl, i
    return best_i * width


def reference_mse(counts, width, top):
    best, best_amax = math.inf, top
    centres = (np.arange(len(counts)) + 0.5) * width
    for k in range(1, len(counts) + 1):
        amax = min(top, k * width)
        scale = amax / 127
        deq = np.round(np.minimum(centres / scale, 127)) * scale
        err = float(np.sum(counts * (centres - deq) ** 2))
        if err < best:
            best, best_amax = err, amax
    return best_amax


@pytest.mark.parametrize("method", ["entropy", "mse"])
def test_entropy_and_mse_match_numpy_implementations_of_their_definitions(tmp_path, method):
    model, data, report, acts = calibrate(tmp_path, method, count=1, heavy_tail=True, rows=64)
    seen = activations(model, data)
    # The inputs are the same values on both sides; fc2's input is computed by each side's own product, so its
    # histogram can differ by a value at a bin edge: it is only checked to be clipped within its range.
    for name in ("x", "img"):
        values = seen[name]
        counts, width = reference_histogram(values)
        want = reference_entropy(counts, width) if method == "entropy" else reference_mse(counts, width, values.max())
        assert abs(acts[name]["amax"] - want) <= 2 * width, (name, acts[name]["amax"], want)
    assert 0 < acts["a"]["amax"] <= acts["a"]["max_abs"]
    # With outliers, both clip below the largest |x| of the input with them.
    assert acts["x"]["amax"] < acts["x"]["max_abs"]


def test_weight_only_and_per_tensor_weights(tmp_path):
    model = Mlp()
    net = write_network(tmp_path, model)
    report = json.loads(run("calibrate", net, "-o", tmp_path / "w.json", "--weight-only", "--per-tensor-weights",
                            "--type", "f8e4m3", "-q").stdout)
    assert report["activations"] == [] and report["batches"] == 0
    assert {w["tensor"] for w in report["quantized_weights"]} == {"fc1.weight", "fc2.weight", "conv.weight"}
    assert all(w["channels"] == 1 and w["axis"] == -1 for w in report["quantized_weights"])
    doc = json.loads((tmp_path / "w.json").read_text())
    ops = [layer["op"] for layer in doc["layers"]]
    assert ops.count("dequantize") == 3 and "quantize" not in ops
    # torch 1.13 has no float8 dtype: the header says what was written, and the scale is read as f32.
    raw = (tmp_path / "w.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    assert header["fc1.weight.quantized"]["dtype"] == "F8_E4M3"
    assert header["fc1.weight.quantized"]["shape"] == [32, 16]
    begin, end = header["fc1.weight.scale"]["data_offsets"]
    start = 8 + int.from_bytes(raw[:8], "little")
    scale = float(np.frombuffer(raw[start + begin:start + end], dtype="<f4")[0])
    assert scale == pytest.approx(float(model.fc1.weight.abs().max()) / 448, rel=1e-6)


def test_an_engine_of_a_weight_only_network_keeps_its_weights_quantized(tmp_path):
    """--weight-only i8: the builder lowers each linear to a weight-only quantized_linear (inspect: quantized i8,
    weight_only), whose float x times the quantized weight gives PyTorch's float64 product of x and the dequantized
    weight; the engine holds a byte per weight value of fc1 and fc2 (the conv's weight-only pattern stays float)."""
    model = Mlp()
    net = write_network(tmp_path, model)
    run("calibrate", net, "-o", tmp_path / "w.json", "--weight-only", "-q")
    engine, float_engine = tmp_path / "w.engine", tmp_path / "f.engine"
    profile = ["--profile", "x=5x16"]
    run("build", tmp_path / "w.json", "-o", engine, "-t", "cpu", "-p", "fp32", *profile, "-q")
    run("build", net, "-o", float_engine, "-t", "cpu", "-p", "fp32", *profile, "-q")
    manifest = json.loads(run("inspect", engine).stdout)
    quantized = {s["layer"]: (s["quantized"], s.get("weight_only")) for s in manifest["steps"] if "quantized" in s}
    assert quantized == {"fc1": ("i8", True), "fc2": ("i8", True)}
    weight_bytes = lambda m: sum(w["size"] for w in m["weights"])  # noqa: E731
    saved = (16 * 32 + 32 * 8) * 3 - (32 + 8) * 4
    assert weight_bytes(json.loads(run("inspect", float_engine).stdout)) - weight_bytes(manifest) >= saved - 64
    _, data = batches(tmp_path, 1)
    out = tmp_path / "engine_out.safetensors"
    run("run", engine, "--inputs", tmp_path / "batch0.safetensors", "-o", out)
    got = load_file(str(out))["y"].double()
    q = read_safetensors_f64(tmp_path / "w.safetensors")
    x, _ = data[0]
    with torch.no_grad():
        w1 = q["fc1.weight.quantized"] * q["fc1.weight.scale"][:, None]
        w2 = q["fc2.weight.quantized"] * q["fc2.weight.scale"][:, None]
        a = torch.relu(x.double() @ w1.T + model.fc1.bias.double())
        y = a.float().double() @ w2.T + model.fc2.bias.double()
    err = (got - y).norm() / y.norm()
    assert err < 1e-5, float(err)


def test_quantize_residuals_quantizes_a_residual_blocks_input_once_for_the_conv_and_the_add(tmp_path):
    """conv -> add(conv, x) -> relu: with --quantize-residuals the add reads x's dequantize (the one conv reads), and
    the network's results are PyTorch's float64 quantize-dequantize of the same scales."""
    torch.manual_seed(5)
    conv = torch.nn.Conv2d(16, 16, 3, padding=1)
    save_file({k: v.detach().contiguous() for k, v in conv.state_dict().items()}, str(tmp_path / "w.safetensors"))
    net = {
        "format": "tensoracle-network", "version": 1,
        "inputs": [{"name": "x", "dtype": "f32", "shape": [2, 16, 5, 5]}],
        "constants": [{"name": k, "weight": k, "file": "w.safetensors"} for k in ("weight", "bias")],
        "layers": [
            {"name": "conv", "op": "conv", "inputs": ["x", "weight", "bias"], "outputs": ["c"],
             "attrs": {"padding": [1, 1]}},
            {"name": "residual", "op": "add", "inputs": ["c", "x"], "outputs": ["s"]},
            {"name": "act", "op": "relu", "inputs": ["s"], "outputs": ["y"]},
        ],
        "outputs": ["y"],
    }
    (tmp_path / "net.json").write_text(json.dumps(net))
    x = torch.randn(2, 16, 5, 5, generator=torch.Generator().manual_seed(1))
    save_file({"x": x}, str(tmp_path / "b.safetensors"))
    plain = json.loads(run("calibrate", tmp_path / "net.json", "-o", tmp_path / "p.json", "-b", tmp_path / "b.safetensors",
                           "-q").stdout)
    assert [a["layers"] for a in plain["activations"]] == [["conv"]]
    report = json.loads(run("calibrate", tmp_path / "net.json", "-o", tmp_path / "q.json", "-b",
                            tmp_path / "b.safetensors", "--quantize-residuals", "-q").stdout)
    [act] = report["activations"]
    assert act["tensor"] == "x" and act["layers"] == ["conv", "residual"]
    doc = json.loads((tmp_path / "q.json").read_text())
    add = next(layer for layer in doc["layers"] if layer["op"] == "add")
    conv_layer = next(layer for layer in doc["layers"] if layer["op"] == "conv")
    assert add["inputs"][1] == conv_layer["inputs"][0] == "x.dequantized"
    run("run", tmp_path / "q.json", "--inputs", tmp_path / "b.safetensors", "-o", tmp_path / "out.safetensors")
    got = load_file(str(tmp_path / "out.safetensors"))["y"].double()
    q = load_file(str(tmp_path / "q.safetensors"))
    with torch.no_grad():
        xq = fake_quant(x, act["scale"])
        wq = fake_quant(conv.weight, q["weight.scale"].double(), axis=0)
        want = torch.relu(torch.nn.functional.conv2d(xq, wq, conv.bias.double(), padding=1) + xq)
    assert float((got - want).norm() / want.norm()) < 1e-5


def gpu_available():
    return "GPU 0:" in run("--version").stdout


def test_cuda_target_gives_pytorchs_ranges_and_the_cpu_targets_network(tmp_path):
    """--target cuda runs the float network as an fp32 engine on the GPU (built again for the batch of other rows):
    the ranges are PyTorch's over every batch, and the network written is the CPU target's (same layers, same quantized
    weights, scales equal up to the f32 rounding of the sums). Without a GPU the command fails naming CUDA and writes
    nothing; the rest of the test then needs a GPU (it runs on the device, scripts/gpu-perf.sh PERF_PYTEST)."""
    model = Mlp()
    net = write_network(tmp_path, model)
    files, data = batches(tmp_path, 2, rows=5)
    (tmp_path / "more").mkdir()
    more, more_data = batches(tmp_path / "more", 1, seed=1, rows=7)
    args = ["calibrate", net, "--method", "max", "-q"] + [a for f in files + more for a in ("--batch", f)]
    if not gpu_available():
        if os.environ.get("TENSORACLE_REQUIRE_GPU") == "1":
            pytest.fail("TENSORACLE_REQUIRE_GPU=1 but no GPU is visible")
        p = run(*args, "-o", tmp_path / "gpu.json", "--target", "cuda", check=False)
        assert p.returncode == 1 and "cuda" in p.stderr.lower(), p.stderr
        assert not (tmp_path / "gpu.json").exists() and not (tmp_path / "gpu.safetensors").exists()
        pytest.skip("no GPU: --target cuda fails cleanly here; the ranges on the GPU are checked on a GPU machine")
    gpu = json.loads(run(*args, "-o", tmp_path / "gpu.json", "--target", "cuda").stdout)
    cpu = json.loads(run(*args, "-o", tmp_path / "cpu.json").stdout)
    assert gpu["target"] == "cuda:0" and cpu["target"] == "cpu" and gpu["batches"] == 3
    acts = {a["tensor"]: a for a in gpu["activations"]}
    on_cpu = {a["tensor"]: a for a in cpu["activations"]}
    for name, values in activations(model, data + more_data).items():
        assert acts[name]["max_abs"] == pytest.approx(values.max(), rel=1e-5), name
        assert acts[name]["values"] == values.size, name
        assert acts[name]["scale"] == pytest.approx(on_cpu[name]["scale"], rel=1e-5), name
    gpu_net, cpu_net = (json.loads((tmp_path / f"{t}.json").read_text()) for t in ("gpu", "cpu"))
    assert [(l["op"], l["inputs"]) for l in gpu_net["layers"]] == [(l["op"], l["inputs"]) for l in cpu_net["layers"]]
    gq, cq = load_file(str(tmp_path / "gpu.safetensors")), load_file(str(tmp_path / "cpu.safetensors"))
    assert sorted(gq) == sorted(cq)
    for name in gq:
        if name.endswith(".quantized"):
            assert torch.equal(gq[name], cq[name]), name


def test_errors_name_the_problem(tmp_path):
    model = Mlp()
    net = write_network(tmp_path, model)
    files, _ = batches(tmp_path, 1)
    p = run("calibrate", net, "-o", tmp_path / "q.json", check=False)
    assert p.returncode == 1 and "--batch" in p.stderr
    p = run("calibrate", net, "-o", tmp_path / "q.json", "--batch", files[0], "--method", "entropy", "--type", "f8e4m3",
            check=False)
    assert p.returncode == 1 and "entropy" in p.stderr
    p = run("calibrate", net, "-o", tmp_path / "q.json", "--batch", files[0], "--method", "median", check=False)
    assert p.returncode == 1 and "median" in p.stderr
    p = run("calibrate", net, "-o", tmp_path / "q.json", "--batch", files[0], "--target", "tpu", check=False)
    assert p.returncode == 1 and "target 'tpu'" in p.stderr
    save_file({"x": torch.randn(5, 16)}, str(tmp_path / "partial.safetensors"))
    p = run("calibrate", net, "-o", tmp_path / "q.json", "--batch", tmp_path / "partial.safetensors", check=False)
    assert p.returncode == 1 and "img" in p.stderr
    assert not (tmp_path / "q.json").exists()
