"""The committed table format: tab-separated, one header line, one row a line.

TSV because a table row per line is what makes `diff out/590.48.01/controls.tsv
out/595.45.04/controls.tsv` show an ABI change as one changed line.  No cell
may hold a tab or a newline; writing refuses one rather than quoting it, so
the files never need a CSV parser to read.
"""

from __future__ import annotations

from pathlib import Path


def write(path: Path, columns: tuple[str, ...], rows: list[dict]) -> None:
    lines = ["\t".join(columns)]
    for row in rows:
        cells = [str(row[c]) for c in columns]
        bad = [c for c in cells if "\t" in c or "\n" in c]
        if bad:
            raise ValueError(f"{path.name}: a cell holds a tab or newline: {bad[0]!r}")
        lines.append("\t".join(cells))
    path.write_text("\n".join(lines) + "\n")


def read(path: Path) -> list[dict[str, str]]:
    header, *lines = path.read_text().splitlines()
    columns = header.split("\t")
    return [dict(zip(columns, line.split("\t"))) for line in lines]
