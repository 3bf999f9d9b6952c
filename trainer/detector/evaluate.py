"""Detection metrics computed the COCO way: precision, recall, mAP50 and mAP50-95.

The matching and averaging follow pycocotools' ``COCOeval`` for boxes with area range
"all" and ``maxDets=100``: per image and class, detections sorted by score (stable) are
matched greedily to the unmatched ground truth box of highest IoU at each threshold
0.50:0.05:0.95; precision is made monotone and sampled at 101 recall points; the mean
runs over classes that have ground truth. A test checks agreement with pycocotools.

Precision and recall are reported at IoU 0.5 and at the confidence that maximises the
mean F1 over classes, the way Ultralytics and LibreYOLO report P and R.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALL_POINTS = np.linspace(0.0, 1.0, 101)


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of xyxy boxes ``(N, 4)`` and ``(M, 4)``."""
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(br - tl, 0, None).prod(-1)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_detections(ious: np.ndarray, thresholds: np.ndarray = IOU_THRESHOLDS) -> np.ndarray:
    """Greedy COCO matching. ``ious`` is ``(D, G)`` with detections sorted by score; returns
    a ``(T, D)`` bool array: detection ``d`` is a true positive at threshold ``t``."""
    n_t, (n_d, n_g) = len(thresholds), ious.shape
    matched = np.zeros((n_t, n_d), dtype=bool)
    if n_d == 0 or n_g == 0:
        return matched
    limits = np.minimum(thresholds, 1 - 1e-10)[:, None]
    taken = np.zeros((n_t, n_g), dtype=bool)
    rows = np.arange(n_t)
    for d in range(n_d):
        candidates = ~taken & (ious[d][None, :] >= limits)
        masked = np.where(candidates, ious[d][None, :], -1.0)
        # pycocotools keeps the *last* ground truth among equal best IoUs.
        best = n_g - 1 - masked[:, ::-1].argmax(axis=1)
        hit = candidates.any(axis=1)
        matched[hit, d] = True
        taken[rows[hit], best[hit]] = True
    return matched


@dataclass
class _ClassRecord:
    scores: list[np.ndarray] = field(default_factory=list)
    hits: list[np.ndarray] = field(default_factory=list)
    n_gt: int = 0


class DetectionEvaluator:
    """Accumulates per-image detections and ground truth, then computes the metrics."""

    def __init__(self, nc: int, *, max_dets: int = 100) -> None:
        self.nc = nc
        self.max_dets = max_dets
        self._classes = [_ClassRecord() for _ in range(nc)]

    def add(self, detections: np.ndarray, ground_truth: np.ndarray) -> None:
        """One image: ``detections`` ``(N, 6)`` = x0 y0 x1 y1 score class and
        ``ground_truth`` ``(M, 5)`` = class x0 y0 x1 y1, both in the same pixel frame."""
        detections = np.asarray(detections, dtype=np.float64).reshape(-1, 6)
        ground_truth = np.asarray(ground_truth, dtype=np.float64).reshape(-1, 5)
        det_cls = detections[:, 5].astype(int)
        gt_cls = ground_truth[:, 0].astype(int)
        for c in np.union1d(det_cls, gt_cls):
            record = self._classes[int(c)]
            dets = detections[det_cls == c]
            gts = ground_truth[gt_cls == c, 1:5]
            order = np.argsort(-dets[:, 4], kind="mergesort")[: self.max_dets]
            dets = dets[order]
            record.n_gt += len(gts)
            record.scores.append(dets[:, 4])
            record.hits.append(match_detections(iou_matrix(dets[:, :4], gts)))

    def merge(self, other: DetectionEvaluator) -> None:
        """Add the images another evaluator saw (a validation shard of another rank)."""
        for mine, theirs in zip(self._classes, other._classes):
            mine.scores.extend(theirs.scores)
            mine.hits.extend(theirs.hits)
            mine.n_gt += theirs.n_gt

    def compute(self) -> dict[str, float]:
        """``precision``, ``recall``, ``mAP50`` and ``mAP50-95``, averaged over the classes
        that have ground truth (all 0 when no image has any)."""
        ap, p_curves, r_curves = [], [], []
        for record in self._classes:
            if record.n_gt == 0:
                continue
            scores = np.concatenate(record.scores) if record.scores else np.zeros(0)
            hits = (np.concatenate(record.hits, axis=1) if record.hits
                    else np.zeros((len(IOU_THRESHOLDS), 0), dtype=bool))
            order = np.argsort(-scores, kind="mergesort")
            scores, hits = scores[order], hits[:, order]
            ap.append([_average_precision(h, record.n_gt) for h in hits])
            p, r = _pr_at_confidences(scores, hits[0], record.n_gt)
            p_curves.append(p)
            r_curves.append(r)
        if not ap:
            return {"precision": 0.0, "recall": 0.0, "mAP50": 0.0, "mAP50-95": 0.0}
        ap_arr = np.asarray(ap)  # (classes, thresholds)
        p_mat, r_mat = np.asarray(p_curves), np.asarray(r_curves)
        f1 = 2 * p_mat * r_mat / np.maximum(p_mat + r_mat, 1e-16)
        best = int(f1.mean(axis=0).argmax())
        return {
            "precision": float(p_mat[:, best].mean()),
            "recall": float(r_mat[:, best].mean()),
            "mAP50": float(ap_arr[:, 0].mean()),
            "mAP50-95": float(ap_arr.mean()),
        }


def _average_precision(hits: np.ndarray, n_gt: int) -> float:
    """COCO AP of score-sorted hits at one threshold: 101-point interpolated precision."""
    if hits.size == 0:
        return 0.0
    tp = np.cumsum(hits, dtype=float)
    fp = np.cumsum(~hits, dtype=float)
    recall = tp / n_gt
    precision = tp / (tp + fp + np.spacing(1))
    precision = np.maximum.accumulate(precision[::-1])[::-1]
    idx = np.searchsorted(recall, RECALL_POINTS, side="left")
    sampled = np.where(idx < len(precision), precision[np.minimum(idx, len(precision) - 1)], 0)
    return float(sampled.mean())


_CONFIDENCES = np.linspace(0, 1, 1000)


def _pr_at_confidences(scores: np.ndarray, hits: np.ndarray,
                       n_gt: int) -> tuple[np.ndarray, np.ndarray]:
    """Precision and recall of one class as functions of the confidence threshold."""
    if scores.size == 0:
        return np.zeros_like(_CONFIDENCES), np.zeros_like(_CONFIDENCES)
    tp = np.cumsum(hits, dtype=float)
    fp = np.cumsum(~hits, dtype=float)
    recall = tp / n_gt
    precision = tp / (tp + fp)
    # Scores fall along the arrays; np.interp wants increasing x, hence the negations.
    r = np.interp(-_CONFIDENCES, -scores, recall, left=0)
    p = np.interp(-_CONFIDENCES, -scores, precision, left=1)
    return p, r
