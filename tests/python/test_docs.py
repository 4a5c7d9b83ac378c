"""Every environment variable the C library declares (csrc/params.h) is documented in
docs/environment.md with its default."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_parameter_is_documented():
    params = re.findall(r'X\(\w+, "(ACCL_\w+)", "([^"]*)"', (ROOT / "csrc/params.h").read_text())
    assert len(params) >= 10, params
    doc = (ROOT / "docs/environment.md").read_text()
    for name, default in params:
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{name}` |")), None)
        assert row is not None, f"{name} is missing from docs/environment.md"
        cell = row.split("|")[2].strip()
        assert cell == (f"`{default}`" if default else ""), f"{name}: default {default!r}, doc {cell!r}"
