"""A Modal Volume read asks for, and is sent, only the bytes it needs: a tail of
``train.log`` or the new bytes of ``metrics.jsonl`` from an offset (``VolumeGetFile2``'s
``start``/``len``, through the real client)."""

from __future__ import annotations

from remote.transport.volume import VolumeTransport
from tests.fixtures.modal_standin import ModalStandin

VOLUME = "gpurent-runs"


def volume_with(modal: ModalStandin, name: str, data: bytes) -> VolumeTransport:
    """The runs Volume holding ``name`` (committed) as a transport."""
    modal.volumes.ids.setdefault(VOLUME, modal.new_id("vo"))
    path = modal.volumes.published(VOLUME) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return VolumeTransport(VOLUME)


def test_a_read_from_an_offset_gets_only_those_bytes(modal: ModalStandin) -> None:
    """The bytes from the offset come back, and the stand-in sent only that range."""
    lines = b"".join(b'{"epoch": %d, "loss": 0.5}\n' % i for i in range(2000))
    offset = len(lines) - 100
    with volume_with(modal, "app/r1/metrics.jsonl", lines) as volume:
        assert volume.read("app/r1/metrics.jsonl", offset, 1 << 20) == lines[offset:]
        assert volume.read("app/r1/metrics.jsonl", 10, 25) == lines[10:35]
        assert volume.read("app/r1/metrics.jsonl", len(lines), 100) == b""
        assert volume.read("app/r1/missing.log", 0, 100) == b""
    served = [(start, sent) for _, start, sent in modal.blobs.served]
    assert served == [(offset, 100), (10, 25)]
    [first, second, *_] = modal.calls("VolumeGetFile2")
    assert (first.start, first.len) == (offset, 1 << 20)
    assert (second.start, second.len) == (10, 25)


def test_a_range_across_a_block_boundary_is_read_in_its_blocks(
        modal: ModalStandin) -> None:
    """A range over Modal's 8 MiB block boundary comes in two blocks, whole and in order;
    the trailing zeros the stand-in leaves out of a block (as Modal may) are put back."""
    block = 8 * 1024 * 1024
    data = bytes(range(256)) * (block // 256) + b"tail" + b"\0" * 12
    with volume_with(modal, "app/r1/train.log", data) as volume:
        got = volume.read("app/r1/train.log", block - 4, 20)
    assert got == data[block - 4:block + 16]
    assert [(s, n) for _, s, n in modal.blobs.served] == [(block - 4, 4), (block, 4)]
