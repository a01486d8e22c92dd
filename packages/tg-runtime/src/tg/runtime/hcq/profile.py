"""Profile records of HCQ devices (hcq.md section 6) and their Chrome/Perfetto trace.

With ``PROFILE=1`` (or ``DEBUG>=2``) programs compile with a TIMESTAMP before and after every call; after a device
synchronizes (or reuses a link copy) each finished pair becomes a :class:`ProfileRecord` (device, queue, name,
start and end in microseconds of ``time.perf_counter``) appended to ``records``. At exit, when records exist and
``PROFILE`` is set, they are written as a Chrome trace-event JSON file (open it in https://ui.perfetto.dev or
chrome://tracing): one process per device, one thread per queue. The path is printed; ``PROFILE_PATH`` overrides the
default ``<tempdir>/tg_profile_<pid>.json``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
from dataclasses import dataclass

from tg.ir.helpers import PROFILE, PROFILE_PATH

__all__ = ["ProfileRecord", "chrome_trace", "records", "write_trace"]


@dataclass
class ProfileRecord:
    """One command's device time: start and end in microseconds of the host's clock (``time.perf_counter``)."""

    device: str
    queue: str
    name: str
    start_us: float
    end_us: float


records: list[ProfileRecord] = []  # appended by HCQDevice.collect_profile


def chrome_trace(recs: list[ProfileRecord]) -> dict[str, object]:
    """The records as Chrome trace events: complete events ("X") on (device, queue) tracks, plus track names."""
    pids = {d: i for i, d in enumerate(dict.fromkeys(r.device for r in recs))}
    tids = {q: i for i, q in enumerate(dict.fromkeys((r.device, r.queue) for r in recs))}
    events: list[dict[str, object]] = []
    for dev, pid in pids.items():
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": dev}})
    for (dev, queue), tid in tids.items():
        events.append({"name": "thread_name", "ph": "M", "pid": pids[dev], "tid": tid, "args": {"name": queue}})
    for r in recs:
        events.append({"name": r.name, "ph": "X", "pid": pids[r.device], "tid": tids[(r.device, r.queue)],
                       "ts": r.start_us, "dur": max(r.end_us - r.start_us, 0.0), "cat": r.queue})  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_trace(path: str | None = None) -> str:
    """Write ``records`` as a Chrome trace to ``path`` (default: PROFILE_PATH, else a file in the temp dir)."""
    default = os.path.join(tempfile.gettempdir(), f"tg_profile_{os.getpid()}.json")
    path = path or PROFILE_PATH.value or default
    with open(path, "w") as f:
        json.dump(chrome_trace(records), f)
    return path


def _at_exit() -> None:
    if records and PROFILE.value:
        try:
            print(f"tg: wrote the HCQ profile ({len(records)} records) to {write_trace()}", file=sys.stderr)
        except OSError as e:
            print(f"tg: could not write the HCQ profile: {e}", file=sys.stderr)


atexit.register(_at_exit)
