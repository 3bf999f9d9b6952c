"""``gpdet``: a compact anchor-free detector family (sizes n, s, m).

A CSP backbone (strides 8, 16, 32 feed the neck), a PAN neck, and a decoupled head that
predicts, for every cell of every level, class logits and the distances from the cell's
centre to the box edges. Sizes differ only by width and depth multipliers, so a
checkpoint rebuilds its architecture from ``family``, ``size`` and ``nc`` alone.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from trainer.detector.bbox import decode_ltrb, make_anchors

FAMILY = "gpdet"

#: size -> (width multiplier, depth multiplier)
SIZES: dict[str, tuple[float, float]] = {"n": (0.25, 0.34), "s": (0.5, 0.34), "m": (0.75, 0.67)}

#: Channels of the stem and of the four backbone stages at width 1.0 (strides 2..32).
_BASE_WIDTHS = (64, 128, 256, 384, 512)
#: Blocks in the four backbone stages at depth 1.0.
_BASE_DEPTHS = (3, 6, 6, 3)
STRIDES = (8, 16, 32)


class ModelError(ValueError):
    """An unknown model name or a checkpoint that does not describe a known model."""


def _ch(base: int, width: float) -> int:
    return max(8, int(math.ceil(base * width / 8) * 8))


def _n(base: int, depth: float) -> int:
    return max(1, round(base * depth))


class ConvBlock(nn.Sequential):
    """Convolution, batch norm, SiLU."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, s: int = 1) -> None:
        super().__init__(nn.Conv2d(c_in, c_out, k, s, k // 2, bias=False),
                         nn.BatchNorm2d(c_out, eps=1e-3, momentum=0.03), nn.SiLU(inplace=True))


class Bottleneck(nn.Module):
    """Two 3x3 convolutions with a residual connection."""

    def __init__(self, c: int, shortcut: bool = True) -> None:
        super().__init__()
        self.cv1, self.cv2 = ConvBlock(c, c), ConvBlock(c, c)
        self.shortcut = shortcut

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block."""
        y = self.cv2(self.cv1(x))
        return x + y if self.shortcut else y


class CSPBlock(nn.Module):
    """Cross-stage partial block: half the channels go through ``n`` bottlenecks, every
    intermediate output is concatenated and fused by a 1x1 convolution."""

    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        self.hidden = c_out // 2
        self.cv1 = ConvBlock(c_in, 2 * self.hidden, 1)
        self.blocks = nn.ModuleList(Bottleneck(self.hidden, shortcut) for _ in range(n))
        self.cv2 = ConvBlock((2 + n) * self.hidden, c_out, 1)

    def forward(self, x: Tensor) -> Tensor:
        """Apply the block."""
        parts = list(self.cv1(x).chunk(2, dim=1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        return self.cv2(torch.cat(parts, dim=1))


class Head(nn.Module):
    """Per level: a box branch (4 edge distances) and a class branch (``nc`` logits)."""

    def __init__(self, channels: tuple[int, ...], nc: int) -> None:
        super().__init__()
        self.nc = nc
        c_box = max(16, channels[0] // 4)
        c_cls = max(channels[0], min(nc, 100))
        self.box = nn.ModuleList(
            nn.Sequential(ConvBlock(c, c_box), ConvBlock(c_box, c_box), nn.Conv2d(c_box, 4, 1))
            for c in channels)
        self.cls = nn.ModuleList(
            nn.Sequential(ConvBlock(c, c_cls), ConvBlock(c_cls, c_cls), nn.Conv2d(c_cls, nc, 1))
            for c in channels)

    def init_biases(self, imgsz: int = 640) -> None:
        """Start with few confident cells and boxes about two strides from their centre."""
        for box, cls, stride in zip(self.box, self.cls, STRIDES):
            nn.init.constant_(box[-1].bias, math.log(math.expm1(2.0)))
            nn.init.constant_(cls[-1].bias, math.log(5 / self.nc / (imgsz / stride) ** 2))

    def forward(self, feats: list[Tensor]) -> tuple[Tensor, Tensor]:
        """Flattened ``(B, A, nc)`` logits and ``(B, A, 4)`` raw distances, level by level."""
        logits = [cls(f).flatten(2) for cls, f in zip(self.cls, feats)]
        dists = [box(f).flatten(2) for box, f in zip(self.box, feats)]
        return torch.cat(logits, 2).transpose(1, 2), torch.cat(dists, 2).transpose(1, 2)


class Detector(nn.Module):
    """The ``gpdet`` detector. ``forward`` returns raw outputs for the loss;
    :meth:`decode` turns them into pixel boxes and class probabilities."""

    def __init__(self, size: str, nc: int) -> None:
        super().__init__()
        if size not in SIZES:
            raise ModelError(f"unknown {FAMILY} size {size!r}: use one of {', '.join(SIZES)}")
        width, depth = SIZES[size]
        self.size, self.nc = size, nc
        c0, c1, c2, c3, c4 = (_ch(c, width) for c in _BASE_WIDTHS)
        d1, d2, d3, d4 = (_n(d, depth) for d in _BASE_DEPTHS)
        self.stem = ConvBlock(3, c0, 3, 2)
        self.stage1 = nn.Sequential(ConvBlock(c0, c1, 3, 2), CSPBlock(c1, c1, d1))
        self.stage2 = nn.Sequential(ConvBlock(c1, c2, 3, 2), CSPBlock(c2, c2, d2))
        self.stage3 = nn.Sequential(ConvBlock(c2, c3, 3, 2), CSPBlock(c3, c3, d3))
        self.stage4 = nn.Sequential(ConvBlock(c3, c4, 3, 2), CSPBlock(c4, c4, d4))
        n = _n(3, depth)
        self.top_down4 = CSPBlock(c4 + c3, c3, n, shortcut=False)
        self.top_down3 = CSPBlock(c3 + c2, c2, n, shortcut=False)
        self.down3 = ConvBlock(c2, c2, 3, 2)
        self.bottom_up4 = CSPBlock(c2 + c3, c3, n, shortcut=False)
        self.down4 = ConvBlock(c3, c3, 3, 2)
        self.bottom_up5 = CSPBlock(c3 + c4, c4, n, shortcut=False)
        self.head = Head((c2, c3, c4), nc)
        self._anchor_cache: dict[tuple[Any, ...], tuple[Tensor, Tensor]] = {}

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Raw ``(B, A, nc)`` class logits and ``(B, A, 4)`` distance logits."""
        p3 = self.stage2(self.stage1(self.stem(x)))
        p4 = self.stage3(p3)
        p5 = self.stage4(p4)
        t4 = self.top_down4(torch.cat((F.interpolate(p5, scale_factor=2.0), p4), 1))
        n3 = self.top_down3(torch.cat((F.interpolate(t4, scale_factor=2.0), p3), 1))
        n4 = self.bottom_up4(torch.cat((self.down3(n3), t4), 1))
        n5 = self.bottom_up5(torch.cat((self.down4(n4), p5), 1))
        return self.head([n3, n4, n5])

    def anchors(self, imgsz: int, device: torch.device,
                dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
        """Anchor points ``(A, 2)`` and strides ``(A, 1)`` for square ``imgsz`` inputs."""
        key = (imgsz, device, dtype)
        if key not in self._anchor_cache:
            sizes = [(math.ceil(imgsz / s), math.ceil(imgsz / s)) for s in STRIDES]
            self._anchor_cache[key] = make_anchors(sizes, list(STRIDES), device=device,
                                                   dtype=dtype)
        return self._anchor_cache[key]

    @staticmethod
    def distances(raw: Tensor, strides: Tensor) -> Tensor:
        """Pixel distances from raw distance logits (non-negative, in stride units)."""
        return F.softplus(raw.float()) * strides

    def decode(self, logits: Tensor, raw: Tensor, imgsz: int) -> tuple[Tensor, Tensor]:
        """``(B, A, 4)`` xyxy pixel boxes clipped to the image, ``(B, A, nc)`` scores."""
        points, strides = self.anchors(imgsz, raw.device)
        boxes = decode_ltrb(points, self.distances(raw, strides)).clamp(0, imgsz)
        return boxes, logits.float().sigmoid()


def parse_model_name(name: str) -> str:
    """The size letter of a built-in model name (``n``, ``gpdet-n``, ``gpdetn``...)."""
    text = name.strip().lower()
    for prefix in (f"{FAMILY}-", f"{FAMILY}_", FAMILY):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    if text in SIZES:
        return text
    choices = ", ".join(f"{FAMILY}-{s}" for s in SIZES)
    raise ModelError(f"unknown model {name!r}: use {choices} (or n/s/m), "
                     "or a path to a .pt checkpoint")


def build_model(size: str, nc: int, imgsz: int = 640) -> Detector:
    """A freshly initialised detector."""
    model = Detector(size, nc)
    model.head.init_biases(imgsz)
    return model


def parameter_count(model: nn.Module) -> int:
    """Number of parameters."""
    return sum(p.numel() for p in model.parameters())
