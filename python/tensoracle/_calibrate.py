"""tensoracle.Calibrator: calibration for explicit quantization on the CPU reference or a CUDA GPU
(docs/precision.md)."""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Union

import numpy as np

from . import _tensoracle

PathLike = Union[str, "os.PathLike[str]"]


class Calibrator:
    """Runs a float Network on calibration batches (on the CPU reference, or with target="cuda" / "cuda:N" as an fp32
    engine on that GPU; "auto": the first GPU, else the CPU), chooses a scale for every activation that a
    matrix product or convolution reads, and gives the network back with quantize -> dequantize layers there and its
    weights quantized.

    method: "max" (largest |x|), "percentile" (of |x|, `percentile`), "entropy" (least KL divergence of the int8
    quantized distribution; int8 only) or "mse" (least quantization error). dtype: "i8" or "f8e4m3".
    activations=False quantizes the weights only (no batches needed). per_channel_weights: one weight scale per output
    channel (else one per weight). ops: the layers whose inputs are quantized; skip_layers: layer names left in float.
    quantize_residuals=True also quantizes the residual input of residual adds (a convolution's or linear's result
    plus an earlier activation), TensorRT's placement for CNN blocks: the quantized convolution then reads its residual
    quantized and its result stays quantized for the next block. On a GPU target the first batch builds the engine
    (every calibrated activation an output, each step on its first kernel) and a batch of other input shapes builds it
    again; the activations come back to the host for the histograms.
    The network must not be handed to open_engine while the calibrator uses it.
    """

    def __init__(
        self,
        network: "_tensoracle.Network",
        *,
        method: str = "max",
        percentile: float = 99.99,
        dtype: str = "i8",
        activations: bool = True,
        per_channel_weights: bool = True,
        ops: Iterable[str] = ("linear", "matmul", "conv"),
        skip_layers: Iterable[str] = (),
        bins: int = 2048,
        quantize_residuals: bool = False,
        target: str = "cpu",
    ) -> None:
        self._calibrator = _tensoracle._Calibrator(
            network, method, float(percentile), dtype, bool(activations), bool(per_channel_weights),
            [str(o) for o in ops], [str(s) for s in skip_layers], int(bins), bool(quantize_residuals),
            str(target))

    def add_batch(self, inputs: Mapping[str, Any]) -> None:
        """Runs the network on one batch (every input by name: NumPy arrays or anything np.asarray takes, with the
        declared dtypes) and records the activations."""
        tensors = []
        for name, value in inputs.items():
            array = np.ascontiguousarray(np.asarray(value))
            tensors.append((str(name), _tensoracle.dtype_name(array.dtype), list(array.shape), array.tobytes()))
        self._calibrator.add_batch(tensors)

    @property
    def batches(self) -> int:
        return self._calibrator.batches

    def activation_ranges(self) -> List[Dict[str, Any]]:
        """[{tensor, layers, max_abs, amax, scale, values}] per calibrated activation."""
        return self._calibrator.activation_ranges()

    def weight_scales(self) -> List[Dict[str, Any]]:
        """[{tensor, layer, axis, scales}] per quantized weight (axis -1: one scale)."""
        return self._calibrator.weight_scales()

    def quantized_network(self) -> "_tensoracle.Network":
        """The network with quantize/dequantize inserted and the weights quantized (constants it keeps)."""
        return self._calibrator.quantized_network()

    def write(self, json_path: PathLike, source: Optional[PathLike] = None) -> str:
        """Writes the quantized network as JSON and, beside it, the safetensors file of the constants it made (its
        path is returned). source: the original network JSON, against which its relative weight paths resolve."""
        return self._calibrator.write_quantized_network(os.fspath(json_path), "" if source is None else os.fspath(source))
