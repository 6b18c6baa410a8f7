"""Text from outside (plugins' messages, files) made inert before it is printed or written.

A backend's error message is the plugin author's text: a raw escape sequence in it would reach
the terminal (clear the screen, move the cursor, forge a line, an OSC hyperlink), and a carriage
return or escape in a result file makes the file one the result format refuses. Every control
character is written out instead, as Python writes it in a string literal (``\\x1b``, ``\\r``,
``\\u202e``), so the text reads the same and does nothing.
"""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, C1 controls, and the Unicode format characters that
# reorder or hide text (bidirectional overrides and isolates, zero-width characters).
_CONTROL_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


_SHORT = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    if match.group() in _SHORT:
        return _SHORT[match.group()]
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str, lines: bool = False) -> str:
    """``text`` with every control character written out (tabs and newlines kept where
    ``lines``)."""
    return (_CONTROL_LINES if lines else _CONTROL).sub(_escaped, text)
