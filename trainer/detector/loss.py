"""The detection loss: task-aligned assignment, BCE for classes, GIoU for boxes.

Assignment (as in TOOD and YOLOv8): every cell whose centre lies inside a ground truth
box is a candidate for it; candidates are ranked by ``score^alpha * IoU^beta`` (the
predicted score of the box's class and the IoU of the predicted box), the top ``k`` become
positives, and a cell claimed by several boxes keeps the one it overlaps most. The class
target of a positive is its normalised alignment, so well-localised cells learn to be
confident.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn import functional as F

from trainer.detector.bbox import aligned_iou, decode_ltrb
from trainer.detector.model import Detector

LOSS_PARTS = ("box", "cls")


@dataclass(frozen=True)
class LossGains:
    """Weights of the loss parts."""

    box: float = 7.5
    cls: float = 1.0


def pad_targets(targets: Tensor, batch: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(N, 6)`` rows ``image class x0 y0 x1 y1`` to per-image padded tensors: classes
    ``(B, G)``, boxes ``(B, G, 4)`` and a validity mask ``(B, G)``."""
    image = targets[:, 0].long()
    counts = torch.bincount(image, minlength=batch) if len(targets) else torch.zeros(
        batch, dtype=torch.long, device=targets.device)
    g = max(int(counts.max()) if len(counts) else 0, 1)
    cls = torch.zeros(batch, g, dtype=torch.long, device=targets.device)
    boxes = torch.zeros(batch, g, 4, dtype=targets.dtype, device=targets.device)
    mask = torch.zeros(batch, g, dtype=torch.bool, device=targets.device)
    if len(targets):
        order = torch.argsort(image, stable=True)
        image, rows = image[order], targets[order]
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.arange(len(rows), device=targets.device) - starts[image]
        cls[image, slot] = rows[:, 1].long()
        boxes[image, slot] = rows[:, 2:6]
        mask[image, slot] = True
    return cls, boxes, mask


@torch.no_grad()
def assign(scores: Tensor, pred_boxes: Tensor, points: Tensor, gt_cls: Tensor,
           gt_boxes: Tensor, gt_mask: Tensor, *, topk: int = 10, alpha: float = 0.5,
           beta: float = 6.0, eps: float = 1e-9) -> tuple[Tensor, Tensor, Tensor]:
    """Task-aligned assignment. Returns the foreground mask ``(B, A)``, target boxes
    ``(B, A, 4)`` and soft class targets ``(B, A, nc)``."""
    b, a, nc = scores.shape
    g = gt_boxes.shape[1]
    # Cells whose centre lies strictly inside the box: (B, G, A).
    lt = points[None, None] - gt_boxes[:, :, None, :2]
    rb = gt_boxes[:, :, None, 2:] - points[None, None]
    inside = (torch.cat((lt, rb), -1).amin(-1) > eps) & gt_mask[..., None]
    iou = aligned_iou(gt_boxes[:, :, None, :], pred_boxes[:, None, :, :]).clamp(min=0)
    iou = iou * inside
    cls_score = scores.transpose(1, 2).gather(1, gt_cls[..., None].expand(b, g, a))
    align = cls_score.pow(alpha) * iou.pow(beta) * inside
    top = align.topk(min(topk, a), dim=-1).indices
    positive = torch.zeros_like(inside).scatter_(-1, top, True) & inside
    # A cell claimed by several boxes keeps the box it overlaps most.
    claimed = positive.sum(1)  # (B, A)
    if bool((claimed > 1).any()):
        best = F.one_hot(iou.argmax(1), g).transpose(1, 2).bool()  # (B, G, A)
        positive = torch.where((claimed > 1)[:, None, :], best & inside, positive)
    foreground = positive.any(1)
    owner = positive.float().argmax(1)  # (B, A)
    target_boxes = gt_boxes.gather(1, owner[..., None].expand(b, a, 4))
    target_cls = gt_cls.gather(1, owner)
    align = align * positive
    norm = (align * iou.amax(-1, keepdim=True) / (align.amax(-1, keepdim=True) + eps)).amax(1)
    target_scores = F.one_hot(target_cls, nc).to(scores.dtype) * (norm * foreground)[..., None]
    return foreground, target_boxes, target_scores


def detection_loss(logits: Tensor, raw_dist: Tensor, targets: Tensor, points: Tensor,
                   strides: Tensor, gains: LossGains = LossGains()) -> tuple[Tensor, Tensor]:
    """Total loss (a scalar to backpropagate) and its detached parts ``[box, cls]``.

    ``logits`` ``(B, A, nc)``, ``raw_dist`` ``(B, A, 4)`` as the model returns them,
    ``targets`` ``(N, 6)`` rows ``image class x0 y0 x1 y1`` in pixels."""
    logits, raw_dist = logits.float(), raw_dist.float()
    batch = logits.shape[0]
    pred_boxes = decode_ltrb(points, Detector.distances(raw_dist, strides))
    gt_cls, gt_boxes, gt_mask = pad_targets(targets.to(logits.device), batch)
    foreground, target_boxes, target_scores = assign(
        logits.detach().sigmoid(), pred_boxes.detach(), points, gt_cls, gt_boxes, gt_mask)
    score_sum = target_scores.sum().clamp(min=1.0)
    cls_loss = F.binary_cross_entropy_with_logits(logits, target_scores, reduction="sum")
    cls_loss = cls_loss / score_sum
    if bool(foreground.any()):
        weight = target_scores.sum(-1)[foreground]
        giou = aligned_iou(pred_boxes[foreground], target_boxes[foreground], giou=True)
        box_loss = ((1.0 - giou) * weight).sum() / score_sum
    else:
        box_loss = pred_boxes.sum() * 0.0
    parts = torch.stack((box_loss * gains.box, cls_loss * gains.cls))
    return parts.sum(), parts.detach()
