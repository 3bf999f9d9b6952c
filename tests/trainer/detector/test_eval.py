"""Our COCO-style metrics against pycocotools on the same random predictions, and the box
helpers they rest on (IoU, NMS, decoding)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch

from trainer.detector.bbox import batched_nms, box_iou, decode_ltrb, nms, postprocess
from trainer.detector.evaluate import DetectionEvaluator


def random_case(seed: int, n_images: int = 25, nc: int = 5):
    """Ground truth and noisy detections (hits, misses, wrong classes, duplicates)."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(n_images):
        n_gt = int(rng.integers(0, 9))
        xy = rng.uniform(0, 300, (n_gt, 2))
        gt = np.c_[rng.integers(0, nc, n_gt), xy, xy + rng.uniform(4, 120, (n_gt, 2))]
        dets = []
        for _ in range(int(rng.integers(0, 70))):
            if n_gt and rng.random() < 0.6:
                g = gt[rng.integers(n_gt)]
                box = g[1:5] + rng.normal(0, 6, 4)
                cls = g[0] if rng.random() < 0.85 else rng.integers(nc)
            else:
                p = rng.uniform(0, 300, 2)
                box = np.r_[p, p + rng.uniform(4, 120, 2)]
                cls = rng.integers(nc)
            box = np.r_[np.minimum(box[:2], box[2:] - 1), box[2:]]
            dets.append([*box, rng.random(), cls])
        images.append((np.asarray(dets, dtype=float).reshape(-1, 6), gt))
    return images, nc


def coco_eval(images, nc: int, size: int = 500):
    """pycocotools' evaluation (evaluated and accumulated) of the same data."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    info, anns, dets = [], [], []
    for image_id, (det, gt) in enumerate(images, 1):
        info.append({"id": image_id, "width": size, "height": size})
        for g in gt:
            w, h = g[3] - g[1], g[4] - g[2]
            anns.append({"id": len(anns) + 1, "image_id": image_id, "category_id": int(g[0]),
                         "bbox": [g[1], g[2], w, h], "area": w * h, "iscrowd": 0})
        for d in det:
            dets.append({"image_id": image_id, "category_id": int(d[5]),
                         "bbox": [d[0], d[1], d[2] - d[0], d[3] - d[1]], "score": float(d[4])})
    coco = COCO()
    coco.dataset = {"images": info, "annotations": anns,
                    "categories": [{"id": c} for c in range(nc)]}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        evaluation = COCOeval(coco, coco.loadRes(dets), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
    return evaluation


def coco_stats(images, nc: int) -> np.ndarray:
    """pycocotools' bbox stats for the same data."""
    evaluation = coco_eval(images, nc)
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation.summarize()
    return evaluation.stats


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_map_agrees_with_pycocotools(seed: int) -> None:
    images, nc = random_case(seed)
    evaluator = DetectionEvaluator(nc)
    for det, gt in images:
        evaluator.add(det, gt)
    ours = evaluator.compute()
    stats = coco_stats(images, nc)
    assert 0.02 < stats[0] < 0.9  # a non-trivial case
    assert ours["mAP50-95"] == pytest.approx(stats[0], abs=1e-4)
    assert ours["mAP50"] == pytest.approx(stats[1], abs=1e-4)


def test_more_than_100_detections_per_class_are_cut_like_coco() -> None:
    rng = np.random.default_rng(7)
    gt = np.array([[0, 10, 10, 60, 60], [0, 100, 100, 150, 150]], dtype=float)
    noise = np.c_[rng.uniform(200, 250, (150, 2)), rng.uniform(260, 300, (150, 2)),
                  rng.uniform(0.5, 1, 150), np.zeros(150)]
    # The true hits score lowest, so they fall beyond the 100 best.
    hits = np.array([[10, 10, 60, 60, 0.1, 0], [100, 100, 150, 150, 0.05, 0]])
    images = [(np.r_[noise, hits], gt)]
    evaluator = DetectionEvaluator(1)
    evaluator.add(*images[0])
    ours = evaluator.compute()
    assert ours["mAP50"] == pytest.approx(coco_stats(images, 1)[1], abs=1e-4)
    assert ours["mAP50"] == 0.0


def test_perfect_predictions_score_one_and_no_truth_scores_zero() -> None:
    gt = np.array([[0, 10, 10, 50, 50], [1, 60, 60, 90, 100]], dtype=float)
    dets = np.c_[gt[:, 1:], [0.9, 0.8], gt[:, 0]]
    evaluator = DetectionEvaluator(2)
    evaluator.add(dets, gt)
    result = evaluator.compute()
    assert result == {"precision": pytest.approx(1.0), "recall": pytest.approx(1.0),
                      "mAP50": pytest.approx(1.0), "mAP50-95": pytest.approx(1.0)}
    empty = DetectionEvaluator(2)
    empty.add(dets, np.zeros((0, 5)))
    assert empty.compute()["mAP50-95"] == 0.0


def naive_nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> list[int]:
    """Textbook greedy NMS, one box at a time."""
    order = scores.argsort(descending=True).tolist()
    iou = box_iou(boxes, boxes).tolist()
    keep: list[int] = []
    for i in order:
        if all(iou[i][j] <= threshold for j in keep):
            keep.append(i)
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_nms_equals_greedy_nms(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    xy = torch.rand(120, 2, generator=gen) * 100
    boxes = torch.cat((xy, xy + 5 + torch.rand(120, 2, generator=gen) * 40), 1)
    scores = torch.rand(120, generator=gen)
    assert nms(boxes, scores, 0.5).tolist() == naive_nms(boxes, scores, 0.5)


def test_class_aware_nms_keeps_overlapping_boxes_of_other_classes() -> None:
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 0, 10, 10.5], [-20, -20, -5, -5]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    assert sorted(batched_nms(boxes, scores, torch.tensor([0, 1, 1]), 0.5).tolist()) == [0, 1, 2]
    assert sorted(batched_nms(boxes, scores, torch.tensor([0, 0, 0]), 0.5).tolist()) == [0, 2]


def test_decode_inverts_encode_and_postprocess_caps_detections() -> None:
    points = torch.tensor([[8.0, 8.0], [24.0, 8.0]])
    boxes = torch.tensor([[2.0, 3.0, 20.0, 30.0], [10.0, 0.0, 40.0, 12.0]])
    ltrb = torch.cat((points - boxes[..., :2], boxes[..., 2:] - points), dim=-1)
    assert torch.allclose(decode_ltrb(points, ltrb), boxes)
    many = torch.cat((torch.arange(300.0)[:, None].repeat(1, 2) * 20,
                      torch.arange(300.0)[:, None].repeat(1, 2) * 20 + 10), 1)
    scores = torch.rand(1, 300, 3)
    out = postprocess(many[None], scores, max_det=100)
    assert out[0].shape == (100, 6)
    assert torch.all(out[0][:-1, 4] >= out[0][1:, 4])


def shifted_case(seed: int, nc: int = 3, n_images: int = 20):
    """Imperfect predictions whose IoU with their target lies between 0.55 and 0.9 (hits
    at IoU 0.5, misses at 0.95), some targets missed, and false positives (empty places,
    boxes overlapping a target too little) that all score above every hit: the best F1 is
    then at the lowest confidence, where P and R are the whole-set counts pycocotools'
    matching gives."""
    rng = np.random.default_rng(seed)
    images = []
    for _ in range(n_images):
        n_gt = int(rng.integers(1, 6))
        xy = rng.uniform(0, 300, (n_gt, 2))
        wh = rng.uniform(20, 120, (n_gt, 2))
        gt = np.c_[rng.integers(0, nc, n_gt), xy, xy + wh]
        dets = []
        for g, size in zip(gt, wh, strict=True):
            if rng.random() < 0.8:
                shift = size * rng.uniform(0.03, 0.12, 2) * rng.choice([-1, 1], 2)
                dets.append([*(g[1:5] + np.r_[shift, shift]), rng.uniform(0.05, 0.5), g[0]])
            if rng.random() < 0.3:  # a box near the target, overlapping it too little
                off = np.r_[size * 0.6, size * 0.6]
                dets.append([*(g[1:5] + off), rng.uniform(0.6, 1.0), g[0]])
        for _ in range(int(rng.integers(0, 3))):  # somewhere with nothing
            p = rng.uniform(500, 700, 2)
            dets.append([*p, *(p + 30), rng.uniform(0.6, 1.0), rng.integers(nc)])
        images.append((np.asarray(dets, dtype=float).reshape(-1, 6), gt))
    return images, nc


def coco_counts_at_iou50(images, nc: int) -> tuple[float, float]:
    """Mean over classes of whole-set precision and recall, from pycocotools' own matches
    at IoU 0.5 (``evalImgs[...]['dtMatches'][0]``, area "all", 100 detections)."""
    evaluation = coco_eval(images, nc, size=800)
    tp, n_det, n_gt = np.zeros(nc), np.zeros(nc), np.zeros(nc)
    for e in evaluation.evalImgs:
        if e is None or e["aRng"] != evaluation.params.areaRng[0] or e["maxDet"] != 100:
            continue
        c = e["category_id"]
        tp[c] += (e["dtMatches"][0] > 0).sum()
        n_det[c] += len(e["dtIds"])
        n_gt[c] += (~np.asarray(e["gtIgnore"], dtype=bool)).sum()
    has_gt = n_gt > 0
    recall = tp[has_gt] / n_gt[has_gt]
    # pycocotools' own recall at IoU 0.5 agrees with these counts.
    assert recall == pytest.approx(evaluation.eval["recall"][0, has_gt, 0, -1])
    precision = tp[has_gt] / np.maximum(n_det[has_gt], 1)
    return float(precision.mean()), float(recall.mean())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_precision_and_recall_at_iou_50_agree_with_pycocotools(seed: int) -> None:
    images, nc = shifted_case(seed)
    evaluator = DetectionEvaluator(nc)
    for det, gt in images:
        evaluator.add(det, gt)
    ours = evaluator.compute()
    precision, recall = coco_counts_at_iou50(images, nc)
    assert 0.3 < precision < 0.95 and 0.5 < recall < 0.95  # imperfect, not degenerate
    assert ours["precision"] == pytest.approx(precision, abs=1e-6)
    assert ours["recall"] == pytest.approx(recall, abs=1e-6)
    assert ours["mAP50"] > ours["mAP50-95"]  # the boxes are good at 0.5, poor at 0.95
