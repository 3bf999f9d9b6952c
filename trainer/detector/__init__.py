"""The detector itself: the model, its loss, evaluation (precision, recall, mAP) and the
bounding-box operations they share."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "model": ["Detector", "ModelError", "FAMILY", "SIZES", "build_model", "parse_model_name"],
    "loss": ["LOSS_PARTS", "detection_loss"],
    "evaluate": ["DetectionEvaluator"],
    "bbox": ["box_iou", "nms", "postprocess"],
})
