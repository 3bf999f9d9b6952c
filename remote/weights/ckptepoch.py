"""The epoch a pulled ``last.pt`` holds, read on the laptop without torch.

A torch checkpoint is a zip whose ``*/data.pkl`` pickles the saved dict; tensors are
persistent ids. The file may come from a hostile box, so the pickle is not unpickled: its
opcodes (``pickletools.genops``) drive a small stack machine that builds nothing but
placeholders and, for each dict, the value of its ``"epoch"`` key. Nothing the pickle
names is resolved or called (a checkpoint that calls ``os.system`` runs nothing), no
container is copied and no hostile key is hashed, so time and memory grow with the
opcodes alone. ``data.pkl`` must be stored (torch never compresses it; a compressed one
is how a bomb hides), at most ``MAX_PICKLE_BYTES`` declared and read, and at most
``MAX_OPCODES`` long; the epoch must be a believable count
(``trainer.runfiles.MAX_EPOCHS``). Whatever is wrong is one line.
"""

from __future__ import annotations

import pickletools
import zipfile
from typing import Any

from trainer.runfiles import MAX_EPOCHS, epoch_count
from trainer.text import one_line

#: A real ``data.pkl`` (tensors are separate members) is well under a megabyte; a whole
#: pickled model a few megabytes.
MAX_PICKLE_BYTES = 64 * 1024 * 1024
#: A real one has tens of thousands of opcodes; a million keep the walk to seconds and
#: its memory to about a hundred megabytes.
MAX_OPCODES = 1_000_000


class UnreadableCheckpoint(ValueError):
    """A ``last.pt`` whose epoch cannot be read, with a one-line reason."""


class _Dict:
    """A dict the pickle builds, of which only the ``"epoch"`` value is kept."""

    __slots__ = ("epoch",)

    def __init__(self) -> None:
        self.epoch: Any = None


#: What anything else the pickle builds becomes; the ``OrderedDict`` class it names.
_OPAQUE, _ORDERED = object(), object()
_KEEP = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}
_SCALARS = {"INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "NONE",
            "NEWTRUE", "NEWFALSE", "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE",
            "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "FLOAT", "BINFLOAT"}


def _top_epoch(data: bytes) -> Any:
    """The ``"epoch"`` of the dict ``data`` pickles (``None``: not a dict, or none)."""
    stack: list[Any] = []
    marks: list[int] = []
    memo: dict[object, Any] = {}  # keyed by the opcodes' arguments
    for count, (op, arg, _pos) in enumerate(pickletools.genops(data), 1):
        if count > MAX_OPCODES:
            raise UnreadableCheckpoint(f"its data.pkl holds over {MAX_OPCODES} pickle "
                                       "opcodes: not a checkpoint")
        name = op.name
        if name in ("PROTO", "FRAME"):
            continue
        if name == "STOP":
            top = stack.pop()
            return top.epoch if isinstance(top, _Dict) else None
        if name == "MARK":
            marks.append(len(stack))
        elif name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[len(memo) if name == "MEMOIZE" else arg] = stack[-1]
        elif name in ("GET", "BINGET", "LONG_BINGET"):
            stack.append(memo[arg])
        elif name == "DUP":
            stack.append(stack[-1])
        elif name == "POP" and marks and marks[-1] == len(stack):
            marks.pop()
        else:
            stack.extend(_apply(name, op, arg, stack, marks))
    raise UnreadableCheckpoint("its data.pkl ends before its STOP opcode")


def _apply(name: str, op: Any, arg: Any, stack: list[Any], marks: list[int]) -> list[Any]:
    """Pop what opcode ``op`` takes off ``stack``; what it leaves there."""
    items: list[Any] = []
    before = op.stack_before
    if pickletools.markobject in before:
        start = marks.pop()
        items, stack[start:] = stack[start:], []
        before = before[:before.index(pickletools.markobject)]
    taken = stack[len(stack) - len(before):] if before else []
    del stack[len(stack) - len(taken):]
    if len(taken) != len(before):
        raise IndexError("the pickle's stack runs out")
    if name in ("EMPTY_DICT", "DICT", "SETITEM", "SETITEMS"):
        target = taken[0] if taken else _Dict()
        pairs = taken[1:] + items
        for key, value in zip(pairs[::2], pairs[1::2], strict=False):
            if isinstance(target, _Dict) and isinstance(key, str) and key == "epoch":
                target.epoch = value
        return [target]
    if name in _KEEP:
        return [taken[0]]
    if name in ("GLOBAL", "STACK_GLOBAL"):
        named = arg.split(" ", 1) if name == "GLOBAL" else taken
        return [_ORDERED if named == ["collections", "OrderedDict"] else _OPAQUE]
    if name == "REDUCE" and taken[0] is _ORDERED:
        return [_Dict()]
    if name in _SCALARS:
        return [{"NONE": None, "NEWTRUE": True, "NEWFALSE": False}.get(name, arg)]
    return [_OPAQUE] * len(op.stack_after)


def read_epoch(path: str) -> int:
    """The ``epoch`` of the torch checkpoint at ``path``; ``UnreadableCheckpoint`` (one
    line) when it cannot be read, holds none, or holds one out of range."""
    try:
        epoch = _top_epoch(_data_pkl(path))
    except UnreadableCheckpoint:
        raise
    except Exception as exc:  # noqa: BLE001 - hostile bytes raise many types
        raise UnreadableCheckpoint(f"not a readable torch checkpoint ({type(exc).__name__}: "
                                   f"{one_line(exc, 120)})") from None
    if epoch is None:
        raise UnreadableCheckpoint("it holds no epoch")
    if epoch_count(epoch) is None:
        # No repr: a hostile int may have millions of digits.
        what = type(epoch).__name__ if not isinstance(epoch, int) or isinstance(
            epoch, bool) else ("negative" if epoch < 0 else f"over {MAX_EPOCHS}")
        raise UnreadableCheckpoint(f"its epoch is not a count in 0..{MAX_EPOCHS} ({what})")
    return int(epoch)


def checkpoint_epoch(path: str) -> int | None:
    """``read_epoch``, or ``None`` when it cannot be read."""
    try:
        return read_epoch(path)
    except UnreadableCheckpoint:
        return None


def _data_pkl(path: str) -> bytes:
    """The bytes of the checkpoint's one ``*/data.pkl``, read under the caps."""
    with zipfile.ZipFile(path) as archive:
        infos = [i for i in archive.infolist() if i.filename.endswith("/data.pkl")]
        if len(infos) != 1:
            raise UnreadableCheckpoint(f"it holds {len(infos)} data.pkl, not one: not a "
                                       "torch checkpoint")
        info = infos[0]
        if info.compress_type != zipfile.ZIP_STORED:
            raise UnreadableCheckpoint("its data.pkl is compressed: torch stores it as is")
        if info.file_size > MAX_PICKLE_BYTES:
            raise UnreadableCheckpoint(f"its data.pkl declares {info.file_size} bytes, over "
                                       f"the {MAX_PICKLE_BYTES} byte cap")
        with archive.open(info) as fh:
            data = fh.read(MAX_PICKLE_BYTES + 1)
    if len(data) > MAX_PICKLE_BYTES:
        raise UnreadableCheckpoint(f"its data.pkl is over the {MAX_PICKLE_BYTES} byte cap")
    return data
