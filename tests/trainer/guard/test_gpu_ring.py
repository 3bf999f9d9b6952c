"""The box's GPU ring (``trainer.guard.ring``) on its own: its lines read back as
nvidia-smi wrote them, anything else skipped, the file kept bounded, and the summary's
quiet stretch claimed only as far as it was observed (a hole or a stale end ends it)."""

from __future__ import annotations

from pathlib import Path

from trainer.guard import ring
from trainer.guard.ring import GpuUse, Sample, parse, summarize

NOW = 1_800_000_000.0


def line(at: float, *utils: float | None, used: float = 1000.0) -> str:
    """A ring line of one GPU per utilisation."""
    return ring.sample_line(at, [{"index": i, "utilization.gpu": u, "memory.used": used,
                                  "memory.total": 81559.0} for i, u in enumerate(utils)])


def samples(*pairs: tuple[float, float]) -> list[Sample]:
    """One-GPU samples ``(seconds before NOW, utilisation)``."""
    return parse("".join(line(NOW - ago, util) for ago, util in pairs))


def test_lines_read_back_and_what_is_not_a_sample_is_skipped():
    written = line(NOW, 3, None)
    assert written == "1800000000 0, 3, 1000, 81559;1, [N/A], 1000, 81559\n"
    # What the probe's shell writes: nvidia-smi's own rows, a trailing ';'.
    shell = "1800000001 0, 7, 1234, 81559;1, 0, 5, 81559;\n"
    hostile = [
        "\x1b]0;pwned\x07 0, 1, 2, 3",  # not an epoch
        "1800000002 \x1b[2J0, 1, 2, 3",  # an escape inside a row
        "1800000003 [/], 1, 2, 3",  # markup where the index goes
        "1800000004 0, 1, 2",  # a field short
        "1800000005",  # no GPU
        "99999999999999 0, 1, 2, 3",  # an epoch no clock gives
        "1800000006 " + ";".join(f"{i}, 1, 2, 3" for i in range(ring.MAX_GPUS + 1)),
        "1800000007 0, 1, 2, 3" + " " * ring.MAX_LINE,
        "\xff\xfe garbage",
    ]
    cut = "1800000009 0, 5, 1234, 8"  # a reader's cap cut the last line: not read
    found = parse((written + shell + "\n".join(hostile) + "\n" + cut).encode())
    assert [s.at for s in found] == [NOW, NOW + 1]
    assert found[0].gpus == (GpuUse(0, 3.0, 1000.0, 81559.0), GpuUse(1, None, 1000.0, 81559.0))
    assert [g.util for g in found[1].gpus] == [7.0, 0.0]
    assert not found[0].quiet(10) and found[1].quiet(10)  # an unreported GPU is not quiet


def test_the_quiet_stretch_is_claimed_only_as_far_as_it_was_observed():
    # Quiet for 20 minutes, every 30 s, after a busy sample: quiet since the first quiet.
    steady = samples((25 * 60, 80), *((ago, 2) for ago in range(20 * 60, -1, -30)))
    past = summarize(steady, NOW)
    assert past.quiet_since == NOW - 20 * 60 and past.samples == 42
    assert past.span == 25 * 60 and past.util_max == 80
    assert past.util_mean == (80 + 41 * 2) / 42
    # A hole longer than MAX_GAP is not bridged: quiet since the first sample after it.
    holed = samples(*((ago, 2) for ago in range(40 * 60, 25 * 60, -60)),
                    *((ago, 2) for ago in range(10 * 60, -1, -60)))
    assert summarize(holed, NOW).quiet_since == NOW - 10 * 60
    # The newest sample too old: nothing is claimed about now.
    stale = samples(*((ago, 2) for ago in range(30 * 60, 10 * 60, -30)))
    assert summarize(stale, NOW).quiet_since is None
    # Busy now: not quiet; a higher threshold makes the same samples quiet.
    busy = samples((120, 2), (60, 2), (0, 15))
    assert summarize(busy, NOW).quiet_since is None
    assert summarize(busy, NOW, threshold=20).quiet_since == NOW - 120
    # Samples outside the window, or after the box's now (a clock set back), do not count.
    odd = samples((2 * 3600, 2), (-600, 2), (60, 4), (0, 6))
    window = summarize(odd, NOW)
    assert (window.samples, window.first, window.util_max) == (2, NOW - 60, 6)
    assert summarize([], NOW).quiet_since is None and summarize([], NOW).span == 0


def test_memory_is_the_most_any_gpu_used():
    found = parse(line(NOW - 60, 1, 1, used=500) + line(NOW, 1, used=70000))
    past = summarize(found, NOW)
    assert (past.memory_used_mib, past.memory_total_mib) == (70000, 81559)
    assert past.to_dict()["span_seconds"] == 60


def test_the_ring_stays_bounded_and_keeps_its_newest_lines(tmp_path: Path):
    path = tmp_path / "cache" / ring.RING_FILE
    rows = [{"index": 0, "utilization.gpu": 1.0, "memory.used": 2.0, "memory.total": 3.0}]
    for n in range(2 * ring.KEEP + 1):
        ring.append(rows, at=NOW + n, path=path)
    kept = parse(path.read_bytes())
    assert len(kept) == ring.KEEP and kept[-1].at == NOW + 2 * ring.KEEP
    ring.append([], at=NOW, path=path)  # no GPU rows: nothing written
    assert len(path.read_bytes().splitlines()) == ring.KEEP
    # A garbage blob with no newline is cut back to what a reader takes, too (the sample
    # glued to its end is garbage with it; the next one reads).
    path.write_bytes(b"x" * (2 * ring.MAX_READ_BYTES + 1))
    ring.append(rows, at=NOW, path=path)
    assert path.stat().st_size <= ring.MAX_READ_BYTES
    ring.append(rows, at=NOW + 1, path=path)
    assert [s.at for s in parse(path.read_bytes())] == [NOW + 1]


def test_a_line_with_a_non_ascii_digit_is_skipped_not_the_whole_probe():
    """``"²".isdigit()`` is true, yet ``int("²")`` fails: one such line (or nvidia-smi
    row) from a box is not a sample, and the probe still reads the rest."""
    from remote.runs.probe import parse_report

    hostile = "1800000001 \u00b2, 3, 1000, 81559\n"
    report = parse_report({"now": b"1800000002", "gpu": "\u00b2, 9, 1, 2\n0, 5, 10, 80\n"
                           .encode(), "gpu ring": (line(NOW, 3) + hostile +
                                                   line(NOW + 2, 5)).encode(), "end": b""})
    assert [s.at for s in report.history] == [NOW, NOW + 2]
    assert [g.index for g in report.gpus or []] == [0]
    assert parse(hostile) == []
