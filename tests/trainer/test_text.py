"""``trainer.text.clean_text`` / ``one_line``: the one sanitiser for untrusted text. No
control character, escape sequence, bidi control or zero-width character survives, and
ordinary text (accents, CJK, emoji, tabs) is left alone."""

from __future__ import annotations

import re
import unicodedata

import pytest

from trainer.text import clean_text, one_line

#: Every code point that must never reach a terminal from untrusted text.
FORBIDDEN = ([chr(c) for c in range(0x00, 0x20) if c != 0x09] + [chr(c) for c in range(0x7f, 0xa0)]
             + ["\u061c", "\u180e", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f",
                "\u2028", "\u2029", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                "\u2060", "\u2061", "\u2062", "\u2063", "\u2064", "\u2066", "\u2067",
                "\u2068", "\u2069", "\ufeff", "\ufff9", "\ufffa", "\ufffb", "\U000e0001",
                "\U000e0041", "\U000e007f"])
_FORBIDDEN_RE = re.compile("[" + re.escape("".join(FORBIDDEN)) + "]")


@pytest.mark.parametrize("raw, shown", [
    ("reset \x1bc now", "reset  now"),  # a bare ESC c (RIS: resets the terminal)
    ("save \x1b7 restore \x1b8", "save  restore "),
    ("charset \x1b(0 lines", "charset  lines"),  # DEC line drawing from here on
    ("keypad \x1b= app", "keypad  app"),
    ("lone escape at the end \x1b", "lone escape at the end "),
    ("title \x1b]0;pwned\x07 bel", "title  bel"),
    ("clip \x1b]52;c;cm0gLXJmIH4=\x1b\\ st", "clip  st"),  # OSC 52: clipboard write
    ("link \x1b]8;;http://evil\x1b\\text\x1b]8;;\x1b\\", "link text"),
    ("ask \x1b[6n cursor", "ask  cursor"),  # a report request the terminal answers
    ("dcs \x1bPq#0;2;0;0;0\x1b\\ sixel", "dcs  sixel"),
    ("c1 csi \x9b2J clear", "c1 csi  clear"),
    ("c1 osc \x9d0;title\x9c end", "c1 osc  end"),
    ("rlo file\u202egnp.exe", "rlo filegnp.exe"),
    ("isolate \u2067abc\u2069", "isolate abc"),
    ("zero\u200bwidth\u200d join\ufeff", "zerowidth join"),
    ("tag\U000e0041\U000e0042s", "tags"),
    ("bs \b\b\bhidden \r over", "bs hidden  over"),
])
def test_hostile_sequences_are_removed(raw: str, shown: str) -> None:
    assert clean_text(raw) == shown
    assert "\x1b" not in clean_text(raw, keep_newlines=True)
    assert not _FORBIDDEN_RE.search(one_line(raw))


@pytest.mark.parametrize("char", FORBIDDEN, ids=lambda c: f"U+{ord(c):04X}")
def test_no_forbidden_code_point_survives(char: str) -> None:
    for text in (f"a{char}b", f"{char}", f"x{char}\x1b{char}[31m{char}"):
        assert not _FORBIDDEN_RE.search(clean_text(text))
        kept = clean_text(text, keep_newlines=True)
        assert not _FORBIDDEN_RE.search(kept.replace("\n", ""))
        assert not _FORBIDDEN_RE.search(one_line(text))
        assert not _FORBIDDEN_RE.search(clean_text(text.encode("utf-8")))


def test_ordinary_text_is_left_alone() -> None:
    text = "épaule ü 中文 😀 العربية a\tb [bold]x[/] 100% $5"
    assert clean_text(text) == text
    assert one_line(text) == "épaule ü 中文 😀 العربية a b [bold]x[/] 100% $5"
    # Only format (Cf) and control (Cc) characters are taken out of real text.
    for c in range(0x20, 0x3000):
        ch = chr(c)
        if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
            assert clean_text(ch) == ch, f"U+{c:04X}"


def test_one_line_is_one_line_and_cut() -> None:
    assert one_line("a\nb\u2028c\u2029d\x85e") == "a b c d e"
    assert one_line("x" * 400, 20) == "x" * 19 + "…"
    assert one_line(ValueError()) == "ValueError"
