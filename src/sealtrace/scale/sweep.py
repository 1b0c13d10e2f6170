"""``sealtrace falsify-bench --ray``: VNN-COMP instances falsified across a cluster.

Each instance is one task: :func:`sealtrace.falsify.instances.run_instance`, the function that runs
each instance without Ray, so a worker searches **and certifies** its counterexample (the audited
reference run of the sealed network happens where it was found) and the driver only tabulates. What
travels: each network file's bytes once, through Ray's object store (a network shared by many
instances, as a verification benchmark's few networks are by its many properties, is put there
once), the property's text and the settings. A worker writes them to a private folder named by the network's SHA-256 (so
the sealing cache, keyed by content, is hit on every later task) and runs the instance from there;
the result names the instance as the driver's file does. Results are returned in the file's order.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sealtrace.errors import SealtraceError
from sealtrace.falsify.instances import Instance, InstanceResult, run_instance
from sealtrace.falsify.search import SearchSettings
from sealtrace.falsify.vnnlib import read_text_input
from sealtrace.limits import check_allocation, memory_budget, memory_budget_of, open_regular_file
from sealtrace.scale.cluster import Executor, Shared


@dataclass(frozen=True)
class SweepSettings:
    """What every task of a sweep shares."""

    timeout_s: float | None
    settings: SearchSettings
    memory_budget: int


@dataclass(frozen=True)
class ShippedInstance:
    """One instance as it travels: the driver's instance (for its name), the network's bytes (shared)
    and the property's text; or ``error`` when the driver could not read them."""

    instance: Instance
    network: Shared | None
    network_sha256: str
    property_text: str
    error: str | None = None
    error_exit_code: int | None = None


def run_shipped_instance(shared: SweepSettings, task: ShippedInstance) -> InstanceResult:
    """Falsify one shipped instance in this worker (a Ray task's whole job)."""
    instance = task.instance
    if task.network is None:
        budget = instance.timeout_s if shared.timeout_s is None else min(instance.timeout_s, shared.timeout_s)
        return InstanceResult(instance, "error", 0.0, False, budget, error=task.error,
                              error_exit_code=task.error_exit_code)
    with memory_budget_of(shared.memory_budget):
        folder = Path(tempfile.gettempdir()) / f"sealtrace-sweep-{os.getuid()}" / task.network_sha256
        network = folder / instance.network.name
        if not network.exists():
            _write(network, bytes(task.network.get()))
        digest = hashlib.sha256(task.property_text.encode("utf-8")).hexdigest()[:16]
        prop = folder / f"{digest}-{instance.vnnlib.name}"
        if not prop.exists():
            _write(prop, task.property_text.encode("utf-8"))
        local = dataclasses.replace(instance, network=network, vnnlib=prop)
        result = run_instance(local, timeout_s=shared.timeout_s, settings=shared.settings)
    error = result.error
    if error is not None:  # errors name the driver's files, not this worker's copies
        error = error.replace(str(prop), str(instance.vnnlib)).replace(str(network), str(instance.network))
    return dataclasses.replace(result, instance=instance, error=error)


def _write(path: Path, data: bytes) -> None:
    """Write a file whole (a temporary name, then renamed): two workers of one node may race here."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    with os.fdopen(handle, "wb") as f:
        f.write(data)
    os.replace(temporary, path)


def ship_instances(instances: Sequence[Instance], executor: Executor) -> list[ShippedInstance]:
    """Read every network (once per file) and property here, bounded; share the networks' bytes."""
    networks: dict[Path, tuple[Shared, str] | SealtraceError] = {}
    shipped = []
    for instance in instances:
        try:
            if instance.network not in networks:
                try:
                    f, size = open_regular_file(instance.network, "network")
                    with f:
                        check_allocation(size, f"{instance.network}: network")
                        data = f.read(size)
                    networks[instance.network] = (executor.share(data), hashlib.sha256(data).hexdigest())
                except SealtraceError as exc:
                    networks[instance.network] = exc
            network = networks[instance.network]
            if isinstance(network, SealtraceError):
                raise network
            text = read_text_input(instance.vnnlib, "property file")
            shipped.append(ShippedInstance(instance, network[0], network[1], text))
        except SealtraceError as exc:
            shipped.append(ShippedInstance(instance, None, "", "", str(exc), exc.exit_code))
    return shipped


def sweep_instances(
    instances: Sequence[Instance],
    executor: Executor,
    *,
    timeout_s: float | None = None,
    settings: SearchSettings | None = None,
    on_result: Callable[[InstanceResult], None] | None = None,
) -> list[InstanceResult]:
    """Falsify every instance as a task on ``executor``; the results in the instances' order."""
    shared = SweepSettings(timeout_s, settings or SearchSettings(), memory_budget())
    tasks = ship_instances(instances, executor)
    results: list[Any] = [None] * len(tasks)
    for number, result in executor.run(run_shipped_instance, shared, tasks):
        results[number] = result
        if on_result is not None:
            on_result(result)
    return results
