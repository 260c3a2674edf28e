"""A ResNet-50-style Bottleneck block (torchvision.models.resnet, stride on the 3x3 convolution as in
ResNet v1.5) with a stride-2 1x1-convolution downsample, and the same block as a tensoracle network."""
from __future__ import annotations

import torch
from torch import nn

from . import randomize_
from .builder import NetworkBuilder
from .resnet_basic import batch_norm, conv, conv1x1, conv3x3, fold, make_layer

NAME = "resnet_bottleneck"
INPLANES = 24
PLANES = 8  # output channels PLANES * 4 = 32
VARIANTS = {"": {}}


# ---- the torch module, following torchvision/models/resnet.py ----

class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64, dilation=1):
        super().__init__()
        norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)
        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)
        out = self.conv3(out)
        out = self.bn3(out)
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        out = self.relu(out)
        return out


class ResNetStage(nn.Module):
    """The first block of a ResNet-50's layer2 (narrowed): state_dict names read "layer2.0.conv3.weight"."""

    def __init__(self):
        super().__init__()
        self.layer2 = make_layer(Bottleneck, INPLANES, PLANES, blocks=1, stride=2)

    def forward(self, x):
        return self.layer2(x)


def create() -> nn.Module:
    return randomize_(ResNetStage())


def make_inputs(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    batch = int(torch.randint(1, 3, ()))
    size = int(torch.randint(7, 14, ()))
    return {"x": torch.randn(batch, INPLANES, size + 1, size, dtype=torch.float64).to(dtype)}


# ---- the network ----

def network(dtype: str) -> NetworkBuilder:
    b = NetworkBuilder()
    x = b.input("x", dtype, [-1, INPLANES, -1, -1])
    p = "layer2.0."
    out = b.layer("relu", [batch_norm(b, conv(b, x, p + "conv1", 1), p + "bn1")], name=p + "relu1")
    out = b.layer("relu", [batch_norm(b, conv(b, out, p + "conv2", 3, stride=2), p + "bn2")], name=p + "relu2")
    out = batch_norm(b, conv(b, out, p + "conv3", 1), p + "bn3")
    identity = batch_norm(b, conv(b, x, p + "downsample.0", 1, stride=2), p + "downsample.1")
    out = b.layer("add", [out, identity], name=p + "add")
    b.output(b.layer("relu", [out], name="output"))
    return b


# ---- sanity: the block against convolutions with batch norm folded in ----

@torch.no_grad()
def sanity() -> None:
    model = create().double()
    x = make_inputs(torch.float64)["x"]
    block = model.layer2[0]
    f = nn.functional
    w1, b1 = fold(block.conv1, block.bn1)
    w2, b2 = fold(block.conv2, block.bn2)
    w3, b3 = fold(block.conv3, block.bn3)
    wd, bd = fold(block.downsample[0], block.downsample[1])
    out = f.relu(f.conv2d(x, w1, b1))
    out = f.relu(f.conv2d(out, w2, b2, stride=2, padding=1))
    out = f.conv2d(out, w3, b3) + f.conv2d(x, wd, bd, stride=2)
    torch.testing.assert_close(block(x.clone()), f.relu(out), rtol=1e-10, atol=1e-10)
