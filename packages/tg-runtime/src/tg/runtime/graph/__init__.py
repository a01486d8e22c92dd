"""Graph executors: run a batch of captured kernel calls with few host round trips (see ``cpu_batch``)."""

from tg.runtime.graph.cpu_batch import CPUBatchExecutor

__all__ = ["CPUBatchExecutor"]
