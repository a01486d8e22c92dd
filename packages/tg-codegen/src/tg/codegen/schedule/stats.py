"""Scheduler counters (read by tests and the JIT: a replay must not schedule anything).

`calls` counts `create_schedule` calls since the process started.
"""

calls: int = 0
