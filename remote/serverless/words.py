"""A Modal launch from the ``key=value`` words a person gives (the CLI's arguments, the
launch form's fields): the one place that turns them into a ``ModalSpec`` and refuses
what Modal or the trainer would."""

from __future__ import annotations

import os

from remote.runs.launch import check_arg
from remote.serverless.appfile import ModalSpec, check_gpu, parse_timeout, stage_words
from remote.serverless.record import ModalRecord
from remote.serverless.watch import limit_words


def spec_from_words(app: str, pairs: dict[str, str]) -> ModalSpec:
    """The launch's spec from its ``key=value`` words: ``name=`` the run, ``timeout=``
    (required), ``gpu=``, ``data=`` a path in a Volume, ``hub=``; the rest go to the
    trainer. ``ValueError`` (one line) for a missing or bad one."""
    pairs = dict(pairs)
    run = pairs.pop("name", "")
    if not run:
        raise ValueError("name=RUN is required (the run directory is APP/RUN in the Volume)")
    timeout = parse_timeout(pairs.pop("timeout", None))
    gpu = check_gpu(pairs.pop("gpu", "cpu"))
    data, hub = pairs.pop("data", ""), pairs.pop("hub", "")
    stage_repo = stage_file = ""
    if pairs.get("stage"):
        stage_repo, stage_file, dest = stage_words(pairs.pop("stage"))
        data = f"{dest}/{data or 'data.yaml'}" if not data.startswith("/") else data
    if not data:
        raise ValueError("data= is required: the data.yaml of a dataset in a Modal Volume "
                         "(e.g. data=/cache/shapes/data.yaml), or stage=ORG/NAME/FILE.tar")
    if not data.startswith(("/cache/", "/runs/")):
        raise ValueError(f"data={data!r}: the dataset must be in a Volume the app mounts "
                         "(/cache/... or /runs/...)")
    for key, value in pairs.items():
        why = check_arg("trainer", key, value)
        if why:
            raise ValueError(f"{key}={value!r}: {why}")
    for key in ("project", "device") if gpu is None else ("project",):
        pairs.pop(key, None)
    args = [f"{k}={v}" for k, v in pairs.items()]
    if gpu is None:
        args.append("device=cpu")
    return ModalSpec(app, run, tuple(args), gpu, timeout, data, hub,
                     os.environ.get("HF_ENDPOINT", ""), stage_repo=stage_repo,
                     stage_file=stage_file)


def words_from_record(record: ModalRecord, run: str) -> dict[str, str]:
    """The ``key=value`` words of ``record``'s launch, for run ``run`` (what a launch
    form on that app starts from)."""
    words = dict(arg.partition("=")[::2] for arg in record.args)
    words.pop("device", None)  # spec_from_words adds it again for a CPU run
    words.update(name=run, gpu=record.gpu or "cpu", timeout=limit_words(record.timeout))
    if record.hub:
        words["hub"] = record.hub
    if record.stage:
        words["stage"] = record.stage
    if record.data:
        words["data"] = record.data
    return words
