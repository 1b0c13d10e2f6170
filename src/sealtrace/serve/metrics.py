"""Prometheus metrics of a server (one registry per app, so that several apps in one process do not mix)."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily

# Latency buckets from 1 ms to 30 s: small models answer in a few ms, full audits of large ones in seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServeMetrics:
    """Requests by model and status, latency, ledger size and queue, replay backlog and verdicts."""

    def __init__(self, service: Any) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("sealtrace_requests", "Inference requests answered, by model and HTTP status.",
                                ["model", "status"], registry=self.registry)
        self.latency = Histogram("sealtrace_request_duration_seconds",
                                 "Inference latency from the body read to the durable record, by model.",
                                 ["model"], buckets=LATENCY_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("sealtrace_requests_in_flight",
                               "Inference requests received and not answered yet (queued, running or awaiting their record).",
                               registry=self.registry)
        self.replays = Counter("sealtrace_replays", "Deferred-audit replays appended, by model and verdict.",
                               ["model", "verdict"], registry=self.registry)
        self.divergences = Counter("sealtrace_divergences",
                                   "Replays whose reference outputs differ from the served ones beyond tolerance.",
                                   ["model"], registry=self.registry)
        ledger = service.ledger
        Gauge("sealtrace_ledger_records", "Durable records in the ledger.",
              registry=self.registry).set_function(lambda: ledger.size)
        Gauge("sealtrace_ledger_pending", "Appends queued for the next group commit.",
              registry=self.registry).set_function(lambda: ledger.pending)
        Gauge("sealtrace_ledger_signed_tree_size", "Records covered by the latest signed tree head.",
              registry=self.registry).set_function(lambda: _signed_size(ledger))
        Gauge("sealtrace_replay_backlog",
              "Deferred records not replayed yet (queued, running, or left unreplayed in the ledger for the next start).",
              registry=self.registry).set_function(lambda: service.replay_backlog)
        waiting = Gauge("sealtrace_replay_waiting", "The replay backlog by state: queued, running, left (for the next start).",
                        ["state"], registry=self.registry)
        for state in ("queued", "running", "left"):
            waiting.labels(state).set_function(functools.partial(_waiting, service, state))
        self.registry.register(_CounterOf("sealtrace_replay_worker_restarts",
                                          "Replay worker pools started again after a worker process died.",
                                          lambda: service.replay_restarts))
        for name in service.models:
            for verdict in ("identical", "within-tolerance", "diverged", "failed"):
                self.replays.labels(name, verdict)
            self.divergences.labels(name)

    def replayed(self, model: str, verdict: str) -> None:
        self.replays.labels(model, verdict).inc()
        if verdict == "diverged":
            self.divergences.labels(model).inc()


def _waiting(service: Any, state: str) -> int:
    return service.replay.waiting()[state] if service.replay is not None else 0


class _CounterOf:
    """A counter read from the service when scraped (the count is kept where it happens)."""

    def __init__(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        self.name, self.documentation, self.read = name, documentation, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.read())


def _signed_size(ledger: Any) -> int:
    head = ledger.latest_tree_head()
    return head.tree_size if head is not None else 0


# -- Triton's statistics extension (GET /v2/models[/{name}[/versions/{v}]]/stats) ------------------------
PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


class RequestTimer:
    """The phases of one inference request, timed in nanoseconds: each ``lap`` ends the phase it names."""

    def __init__(self) -> None:
        self.started = self.last = time.perf_counter_ns()
        self.phases: dict[str, int] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter_ns()
        self.phases[phase] = now - self.last
        self.last = now


class InferenceStatistics:
    """One model's inference statistics in Triton's shape: successes and failures with their total
    durations, and the durations of the phases of the successes (docs/serving.md says what each covers).
    Requests are not batched, so each execution is one inference."""

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._last_inference_ms = 0
        self._totals = {kind: [0, 0] for kind in ("success", "fail", *PHASES)}  # kind -> [count, ns]

    def finished(self, timer: RequestTimer, succeeded: bool) -> None:
        elapsed = time.perf_counter_ns() - timer.started
        with self._lock:
            self._add("success" if succeeded else "fail", elapsed)
            if succeeded:
                self._last_inference_ms = time.time_ns() // 1_000_000
                for phase in PHASES:
                    self._add(phase, timer.phases.get(phase, 0))

    def _add(self, kind: str, ns: int) -> None:
        total = self._totals[kind]
        total[0] += 1
        total[1] += ns

    def to_json(self) -> dict[str, Any]:
        """The ``$model_stat`` object of the statistics response."""
        with self._lock:
            durations = {kind: {"count": count, "ns": ns} for kind, (count, ns) in self._totals.items()}
            last = self._last_inference_ms
        successes = durations["success"]["count"]
        # No response cache; Triton counts hits and misses only with one.
        durations.update(cache_hit={"count": 0, "ns": 0}, cache_miss={"count": 0, "ns": 0})
        return {"name": self.name, "version": self.version, "last_inference": last, "inference_count": successes,
                "execution_count": successes, "inference_stats": durations, "batch_stats": []}
