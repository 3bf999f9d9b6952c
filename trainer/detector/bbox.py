"""Box geometry in torch: conversions, IoU, anchor points, decoding and class-aware NMS.

Boxes are ``xyxy`` in pixels unless a name says otherwise.
"""

from __future__ import annotations

import torch
from torch import Tensor


def box_area(boxes: Tensor) -> Tensor:
    """Area of ``xyxy`` boxes (zero for inverted boxes)."""
    width = (boxes[..., 2] - boxes[..., 0]).clamp(min=0)
    return width * (boxes[..., 3] - boxes[..., 1]).clamp(min=0)


def box_iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise IoU of ``(N, 4)`` and ``(M, 4)`` boxes -> ``(N, M)``."""
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return inter / union.clamp(min=1e-9)


def aligned_iou(a: Tensor, b: Tensor, *, giou: bool = False, eps: float = 1e-7) -> Tensor:
    """IoU (or generalised IoU) of boxes paired element-wise: ``(..., 4)`` -> ``(...)``."""
    top_left = torch.maximum(a[..., :2], b[..., :2])
    bottom_right = torch.minimum(a[..., 2:], b[..., 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(-1)
    union = box_area(a) + box_area(b) - inter + eps
    iou = inter / union
    if not giou:
        return iou
    hull = (torch.maximum(a[..., 2:], b[..., 2:]) - torch.minimum(a[..., :2], b[..., :2]))
    hull_area = hull.clamp(min=0).prod(-1) + eps
    return iou - (hull_area - union) / hull_area


def make_anchors(sizes: list[tuple[int, int]], strides: list[int], *,
                 device: torch.device | None = None,
                 dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor]:
    """Anchor points (cell centres, pixels) ``(A, 2)`` and their strides ``(A, 1)`` for
    feature maps of ``(height, width)`` ``sizes``, level by level, row-major."""
    points, stride_col = [], []
    for (h, w), stride in zip(sizes, strides):
        ys = (torch.arange(h, device=device, dtype=dtype) + 0.5) * stride
        xs = (torch.arange(w, device=device, dtype=dtype) + 0.5) * stride
        grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
        points.append(torch.stack((grid_x, grid_y), -1).reshape(-1, 2))
        stride_col.append(torch.full((h * w, 1), float(stride), device=device, dtype=dtype))
    return torch.cat(points), torch.cat(stride_col)


def decode_ltrb(points: Tensor, distances: Tensor) -> Tensor:
    """Boxes from anchor points ``(A, 2)`` and pixel distances ``(..., A, 4)`` to the
    left, top, right and bottom edges."""
    return torch.cat((points - distances[..., :2], points + distances[..., 2:]), dim=-1)


def nms(boxes: Tensor, scores: Tensor, iou_threshold: float) -> Tensor:
    """Greedy non-maximum suppression; returns kept indices, highest score first.

    Vectorised: with boxes sorted by score, box ``i`` is kept iff no kept box before it
    overlaps it by more than the threshold. That recurrence has one solution (the greedy
    one) and iterating it from "keep all" fixes one more leading box per pass, so a few
    matrix passes replace a Python loop over the boxes."""
    order = scores.argsort(descending=True)
    if order.numel() == 0:
        return order
    iou = box_iou(boxes[order], boxes[order])
    overlaps = torch.triu(iou > iou_threshold, diagonal=1).float()  # [j, i]: j before i
    keep = torch.ones(order.numel(), dtype=torch.bool, device=boxes.device)
    for _ in range(order.numel()):
        suppressed = (keep.float() @ overlaps) > 0
        new_keep = ~suppressed
        if torch.equal(new_keep, keep):
            break
        keep = new_keep
    return order[keep]


def batched_nms(boxes: Tensor, scores: Tensor, classes: Tensor, iou_threshold: float) -> Tensor:
    """Class-aware NMS: boxes of different classes never suppress each other."""
    if boxes.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=boxes.device)
    # Shift each class into its own region of the plane, far from the others.
    offsets = classes.to(boxes.dtype)[:, None] * (boxes.max() - boxes.min() + 1)
    return nms(boxes + offsets, scores, iou_threshold)


def postprocess(boxes: Tensor, scores: Tensor, *, conf: float = 0.001, iou: float = 0.6,
                max_det: int = 100, max_candidates: int = 3000) -> list[Tensor]:
    """Per image: ``(N, 6)`` detections ``x0 y0 x1 y1 score class`` after class-aware NMS.

    ``boxes`` ``(B, A, 4)`` xyxy pixels and ``scores`` ``(B, A, C)`` probabilities; each
    anchor proposes its best class."""
    results = []
    for img_boxes, img_scores in zip(boxes, scores):
        best, cls = img_scores.max(dim=1)
        mask = best > conf
        img_boxes, best, cls = img_boxes[mask], best[mask], cls[mask]
        if best.numel() > max_candidates:
            top = best.topk(max_candidates).indices
            img_boxes, best, cls = img_boxes[top], best[top], cls[top]
        keep = batched_nms(img_boxes, best, cls, iou)[:max_det]
        results.append(torch.cat((img_boxes[keep], best[keep, None],
                                  cls[keep, None].to(img_boxes.dtype)), dim=1))
    return results
