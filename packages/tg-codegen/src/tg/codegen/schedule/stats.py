"""Scheduler counters (read by tests, benchmarks and the JIT: a replay must not schedule anything).

`calls` counts `create_schedule` calls since the process started; `steps` counts units of scheduling work (nodes
normalised, nodes walked by the range walk and the cost rule, values built by kernels.py, calls instantiated):
tests check that it grows linearly with the graph, without timing anything.
"""

calls: int = 0
steps: int = 0
