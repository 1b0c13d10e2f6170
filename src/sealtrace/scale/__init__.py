"""Beyond one machine: audited batch runs, ledger replays and falsification sweeps, on Ray or not.

Every job here is a list of tasks, each a call of a plain library function; an executor
(:mod:`sealtrace.scale.cluster`) runs them in this process or as Ray tasks on a cluster, and the
driver collects the results in order. The functions are the same either way and so are their
records: only times and worker names differ. Ray is an optional extra (``pip install
'sealtrace[ray]'``), imported only when a job is given a cluster (``--ray``).

- :func:`~sealtrace.scale.batch.run_batch`: a dataset through a sealed model, every record in a ledger;
- :func:`~sealtrace.scale.replay.replay_ledger`: stored requests re-run, replay records with verdicts;
- :func:`~sealtrace.scale.sweep.sweep_instances`: VNN-COMP instances falsified across the cluster.

docs/scale.md says what is shipped to workers, the order of appends, resuming, and the limits.
"""

from __future__ import annotations

from sealtrace.scale.batch import BatchJob, BatchSummary, run_batch
from sealtrace.scale.cluster import LOCAL, Executor, InProcess, RayExecutor, executor_for
from sealtrace.scale.errors import ClusterError, JobError

__all__ = [
    "LOCAL",
    "BatchJob",
    "BatchSummary",
    "ClusterError",
    "Executor",
    "InProcess",
    "JobError",
    "RayExecutor",
    "executor_for",
    "run_batch",
]
