"""The log pane's held lines keep the file's byte offsets exactly (``tui.widgets.logfeed``):
lines pushed out at the top move the first offset by their size in the file (not their
cleaned length), older bytes fetched from the box join only where the held lines begin,
and lines that do not follow what is held replace it rather than leave a hidden gap."""

from __future__ import annotations

from remote.watch.events import LogEvent
from tui.widgets.logfeed import HeldLines, LogFeed, split_lines


def log_bytes(first: int, last: int) -> bytes:
    """Lines ``first``..``last - 1`` of a log whose lines carry escapes and odd bytes."""
    return b"".join(b"\x1b[32mline %d\x1b[0m \xff\n" % n for n in range(first, last))


def test_sizes_are_the_file_bytes_not_the_cleaned_text() -> None:
    lines, sizes = split_lines(b"a\x1b[2Jb\n\nc\xff\n")
    assert lines == ["ab", "", "c\ufffd"] and sizes == [7, 1, 3]
    # An escape sequence that swallows a newline when cleaned whole: line by line.
    lines, sizes = split_lines(b"x\x1b]0;t\ny\x07z\n")
    assert len(lines) == 2 and sizes == [7, 4]
    # A runaway line without its newline.
    assert split_lines(b"abc") == (["abc"], [3])


def test_lines_pushed_out_move_the_first_offset() -> None:
    data = log_bytes(0, 30)
    feed, held = LogFeed(100), HeldLines(10)
    feed.feed(LogEvent(data[:500], 1000))
    feed.feed(LogEvent(data[500:], 1500))
    _, lines, sizes, start = feed.drain()
    assert start == 1000 and held.append(lines, sizes, start)
    assert len(held) == 10 and list(held)[0] == "line 20 \ufffd"
    assert held.first == 1000 + len(log_bytes(0, 20)) and held.end == 1000 + len(data)


def test_older_bytes_join_where_the_held_lines_begin() -> None:
    data = log_bytes(0, 100)
    held = HeldLines(10)
    first = len(log_bytes(0, 90))
    lines, sizes = split_lines(data[first:])
    held.append(lines, sizes, first)
    assert held.more_above
    cut = len(log_bytes(0, 60))
    assert held.prepend(cut, data[cut:first - 1], 1000) == 0  # ends short: does not join
    assert held.prepend(cut, data[cut:first], 35) == 25  # 35 lines at most
    assert list(held)[0] == "line 65 \ufffd" and held.first == len(log_bytes(0, 65))
    assert held.capacity == 35 and held.prepend(0, data[:held.first], 35) == 0
    # New lines keep flowing below; the capacity raised by the history holds.
    lines, sizes = split_lines(log_bytes(100, 101))
    assert held.append(lines, sizes, held.end)
    assert len(held) == 35 and list(held)[-1] == "line 100 \ufffd"
    assert held.first == len(log_bytes(0, 66))


def test_older_bytes_that_overlap_the_held_lines_are_not_shown_twice() -> None:
    """An older chunk that runs past where the held lines begin (the log moved while it
    was fetched) is left out: no line appears twice."""
    data = log_bytes(0, 100)
    held = HeldLines(10)
    first = len(log_bytes(0, 90))
    lines, sizes = split_lines(data[first:])
    held.append(lines, sizes, first)
    cut = len(log_bytes(0, 80))
    past = len(log_bytes(0, 91))  # one held line more
    assert held.prepend(cut, data[cut:past], 1000) == 0
    assert list(held) == [f"line {n} \ufffd" for n in range(90, 100)]
    assert held.first == first


def test_lines_that_do_not_follow_replace_what_is_held() -> None:
    held = HeldLines(10)
    lines, sizes = split_lines(log_bytes(0, 5))
    held.append(lines, sizes, 0)
    later = len(log_bytes(0, 50))
    lines, sizes = split_lines(log_bytes(50, 52))
    assert not held.append(lines, sizes, later)
    assert list(held) == ["line 50 \ufffd", "line 51 \ufffd"] and held.first == later
