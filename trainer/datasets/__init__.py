"""Datasets in the YOLO layout: ``data.yaml``, image and label files, the loaders that
feed training, and the generated shapes dataset of the demo and the tests."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "layout": ["IMAGE_SUFFIXES", "label_path"],
    "loader": ["DataError", "DataConfig", "load_data_config", "YoloDataset", "make_loader"],
    "shapes": ["write_dataset"],
})
