"""Every module of the product stays readable in one sitting: none over 400 lines."""

from __future__ import annotations

from pathlib import Path

import relay

LINES_MAX = 400


def test_no_module_over_400_lines() -> None:
    root = Path(relay.__file__).parent
    long = {
        str(path.relative_to(root)): n
        for path in sorted(root.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > LINES_MAX
    }
    assert not long, f"modules over {LINES_MAX} lines: {long}"
