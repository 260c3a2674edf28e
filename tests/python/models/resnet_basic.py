"""ResNet stage of two BasicBlocks (torchvision.models.resnet), the first with stride 2 and a
1x1-convolution downsample, and the same stage as a tensoracle network (NCHW, batch norm unfolded).
Also the torchvision helpers and the network pieces that resnet_bottleneck reuses."""
from __future__ import annotations

import torch
from torch import nn

from . import randomize_
from .builder import NetworkBuilder

NAME = "resnet_basic"
INPLANES = 16
PLANES = 32
BN_EPS = 1e-5
VARIANTS = {"": {}}


# ---- the torch module, following torchvision/models/resnet.py ----

def conv3x3(in_planes, out_planes, stride=1, groups=1, dilation=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=dilation, groups=groups, bias=False,
                     dilation=dilation)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        norm_layer = nn.BatchNorm2d
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


def make_layer(block, inplanes, planes, blocks, stride=1):
    """ResNet._make_layer: the first block changes stride/width through a downsample branch."""
    downsample = None
    if stride != 1 or inplanes != planes * block.expansion:
        downsample = nn.Sequential(conv1x1(inplanes, planes * block.expansion, stride),
                                   nn.BatchNorm2d(planes * block.expansion))
    layers = [block(inplanes, planes, stride, downsample)]
    inplanes = planes * block.expansion
    for _ in range(1, blocks):
        layers.append(block(inplanes, planes))
    return nn.Sequential(*layers)


class ResNetStage(nn.Module):
    """The layer2 stage of a ResNet-18 (narrowed): state_dict names read "layer2.0.conv1.weight"."""

    def __init__(self):
        super().__init__()
        self.layer2 = make_layer(BasicBlock, INPLANES, PLANES, blocks=2, stride=2)

    def forward(self, x):
        return self.layer2(x)


def create() -> nn.Module:
    return randomize_(ResNetStage())


def make_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch = int(torch.randint(1, 3, ()))
    size = int(torch.randint(9, 16, ()))  # odd sizes exercise the stride-2 output size formula
    return {"x": torch.randn(batch, INPLANES, size, size + 1, dtype=torch.float64).to(dtype)}


# ---- the network ----

def conv(b: NetworkBuilder, t: str, name: str, kernel: int, stride: int = 1, groups: int = 1) -> str:
    pad = kernel // 2
    attrs = {"stride": [stride, stride], "padding": [pad, pad], "dilation": [1, 1], "groups": groups}
    return b.layer("conv", [t, b.weight(name + ".weight"), None], attrs, name=name)


def batch_norm(b: NetworkBuilder, t: str, name: str) -> str:
    params = [b.weight(f"{name}.{p}") for p in ("running_mean", "running_var", "weight", "bias")]
    return b.layer("batch_norm", [t, *params], {"epsilon": BN_EPS}, name=name)


def basic_block(b: NetworkBuilder, x: str, prefix: str, stride: int, downsample: bool, out_name: str | None = None) -> str:
    out = conv(b, x, prefix + "conv1", 3, stride)
    out = b.layer("relu", [batch_norm(b, out, prefix + "bn1")], name=prefix + "relu1")
    out = batch_norm(b, conv(b, out, prefix + "conv2", 3), prefix + "bn2")
    identity = x
    if downsample:
        identity = batch_norm(b, conv(b, x, prefix + "downsample.0", 1, stride), prefix + "downsample.1")
    out = b.layer("add", [out, identity], name=prefix + "add")
    return b.layer("relu", [out], name=out_name or prefix + "relu2")


def network(dtype: str) -> NetworkBuilder:
    b = NetworkBuilder()
    x = b.input("x", dtype, [-1, INPLANES, -1, -1])
    h = basic_block(b, x, "layer2.0.", stride=2, downsample=True)
    b.output(basic_block(b, h, "layer2.1.", stride=1, downsample=False, out_name="output"))
    return b


# ---- sanity: the block against convolutions with batch norm folded in ----

@torch.no_grad()
def fold(conv_module: nn.Conv2d, bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    return conv_module.weight * scale[:, None, None, None], bn.bias - bn.running_mean * scale


@torch.no_grad()
def sanity() -> None:
    """BasicBlock in eval mode == relu(conv(relu(conv(x)))+downsample(x)) with each batch norm folded into
    its convolution's weight and bias (a computation that never calls BatchNorm2d)."""
    model = create().double()
    x = make_inputs(torch.float64)["x"]
    block = model.layer2[0]
    f = nn.functional
    w1, b1 = fold(block.conv1, block.bn1)
    w2, b2 = fold(block.conv2, block.bn2)
    wd, bd = fold(block.downsample[0], block.downsample[1])
    out = f.relu(f.conv2d(x, w1, b1, stride=2, padding=1))
    out = f.conv2d(out, w2, b2, padding=1) + f.conv2d(x, wd, bd, stride=2)
    torch.testing.assert_close(block(x.clone()), f.relu(out), rtol=1e-10, atol=1e-10)
