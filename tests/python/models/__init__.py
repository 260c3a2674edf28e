"""Model-level tests: small real architectures written as the public PyTorch implementations write them
(Hugging Face transformers, torchvision), and the same computation as a tensoracle network JSON.

Each model module defines:
  NAME        the model's name in test ids
  VARIANTS    {variant name: keyword arguments of network()}; "" is the plain network
  create()    -> torch.nn.Module in eval mode with fresh random float32 weights; its state_dict names are
                 those of the public implementation, and the network refers to weights by those names
  make_inputs(dtype) -> {input name: tensor of `dtype`}, fresh random, sizes of dynamic dims random too;
                 module(**inputs) computes the output
  network(dtype, **variant) -> NetworkBuilder whose single output is named "output"
  sanity()    optional: checks the torch module against an independent composition
"""
from __future__ import annotations

import torch

MODELS = ["bert", "gpt2", "llama", "resnet_basic", "resnet_bottleneck"]


@torch.no_grad()
def randomize_(module: torch.nn.Module) -> torch.nn.Module:
    """Overwrites every parameter and float buffer with random values of a realistic scale: matrices
    N(0, 1/fan_in), so each branch contributes as much as the residual it is added to (with the usual
    init std of 0.02 the residual would hide most errors in the branch); norm scales near 1; small
    biases and running means; running variances in [0.5, 2]."""
    for m in module.modules():
        for name, p in m.named_parameters(recurse=False):
            if p.dim() >= 2:
                # GPT-2's Conv1D stores its weight [in, out]; every other layer [out, in, ...].
                fan_in = p.shape[0] if type(m).__name__ == "Conv1D" else p[0].numel()
                p.copy_(torch.randn_like(p) / fan_in ** 0.5)
            elif name == "weight":
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
        for name, b in m.named_buffers(recurse=False):
            if name == "running_mean":
                b.copy_(0.2 * torch.randn_like(b))
            elif name == "running_var":
                b.copy_(0.5 + 1.5 * torch.rand_like(b))
    return module.eval()
