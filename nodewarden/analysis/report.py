"""``nodewarden analyze``: print the tables and write them as Markdown and CSV."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, TextIO

from nodewarden import exitcodes
from nodewarden.analysis import tables
from nodewarden.analysis.ingest import IngestStats
from nodewarden.events import FaultEvent


def run(events: Iterable[FaultEvent], stats: IngestStats, out_dir: str | None = None,
        stream: TextIO | None = None) -> int:
    """Build the tables from ``events``, print them to ``stream`` (stdout), write Markdown and CSV
    into ``out_dir`` when given. Returns 3 when an input could not be read, else 0."""
    stream = stream or sys.stdout
    df = tables.events_frame(events)
    t6 = tables.table6_xid_counts(df)
    kinds = tables.kind_counts(df)
    shown = tables.format_percent(t6)
    print("Table VI - Xid errors by group", file=stream)
    print(shown.to_string(index=False), file=stream)
    print("", file=stream)
    print("Events by kind", file=stream)
    print(kinds.to_string(index=False) if len(kinds) else "(none)", file=stream)
    print("", file=stream)
    print(f"inputs read: {stats.files}; events: {stats.events}; unparsed fault-like lines: {stats.unparsed}; "
          f"copies counted once: {stats.copies_dropped}; unreadable inputs: {len(stats.errors)}", file=stream)
    if out_dir:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        t6.to_csv(out / "table6_xid_counts.csv", index=False)
        kinds.to_csv(out / "events_by_kind.csv", index=False)
        (out / "table6_xid_counts.md").write_text(
            "# Table VI: Xid errors by group\n\n" + shown.to_markdown(index=False) + "\n")
        print(f"wrote {out / 'table6_xid_counts.md'}, {out / 'table6_xid_counts.csv'}, "
              f"{out / 'events_by_kind.csv'}", file=stream)
    return exitcodes.INCOMPLETE if stats.errors else exitcodes.OK
