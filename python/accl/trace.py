"""Reads the flight-recorder dumps of a job and says which ranks are behind, and on which op.

    python -m accl.trace DIR

DIR holds accl-trace-<comm>-rank<r>.json files: written by every rank on a timeout or a dead
peer when ACCL_TRACE_DIR is set, or by Communicator.dump_trace(path). A collective hangs when
some rank never calls it: the ranks whose newest operation comes before the one the others are
blocked in are the ones behind.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def load(directory: str) -> dict[str, list[dict[str, Any]]]:
    """The dumps in `directory`, grouped by communicator."""
    comms: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(Path(directory).glob("accl-trace-*.json")):
        dump = json.loads(path.read_text())
        comms.setdefault(dump["comm"], []).append(dump)
    return comms


def _op(o: dict[str, Any]) -> str:
    return f"#{o['seq']} {o['op']}"


def analyse(dumps: list[dict[str, Any]]) -> list[str]:
    """Lines describing one communicator: each rank's position, then who is behind."""
    first = dumps[0]
    lines = [f"communicator {first['comm']} ({first['nranks']} ranks, {first['backend']})"]
    by_rank = {d["rank"]: d for d in dumps}
    newest: dict[int, dict[str, Any]] = {}
    stuck: list[dict[str, Any]] = []  # the oldest unfinished op of each rank that has one
    for rank in range(first["nranks"]):
        d = by_rank.get(rank)
        if d is None:
            lines.append(f"  rank {rank}: no dump (dead, or it never failed or dumped)")
            continue
        ops = [o for o in d["ops"] if o["op"] not in ("acclSend", "acclRecv")] or d["ops"]
        if not ops:
            lines.append(f"  rank {rank}: no operations recorded")
            continue
        newest[rank] = ops[-1]
        pending = [o for o in ops if o["state"] in ("queued", "started")]
        failed = [o for o in ops if o["state"] == "failed"]
        if pending or failed:
            o = (pending or failed)[0]
            stuck.append(o)
            lines.append(f"  rank {rank}: in {_op(o)} ({o['state']}, result: {o['result']})")
        else:
            lines.append(f"  rank {rank}: idle after {_op(ops[-1])}")
    if stuck:
        wait = min(stuck, key=lambda o: o["seq"])
        behind = [r for r, o in newest.items() if o["seq"] < wait["seq"]]
        missing = [r for r in range(first["nranks"]) if r not in by_rank]
        if behind:
            who = ", ".join(f"rank {r} (newest {_op(newest[r])})" for r in behind)
            lines.append(f"  => behind: {who}; the others wait in {_op(wait)}")
        elif missing:
            lines.append(f"  => no dump from rank {', '.join(map(str, missing))}; the others "
                         f"wait in {_op(wait)}")
        else:
            lines.append(f"  => every rank reached {_op(wait)}; look at the errors above")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m accl.trace", description=__doc__.split("\n")[0])
    p.add_argument("directory")
    args = p.parse_args(argv)
    comms = load(args.directory)
    if not comms:
        print(f"no accl-trace-*.json files in {args.directory}", file=sys.stderr)
        return 1
    for dumps in comms.values():
        print("\n".join(analyse(dumps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
