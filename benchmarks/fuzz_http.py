"""`make fuzz`'s HTTP part: 100,000 generated inference requests against one live `sealtrace serve`.

    python benchmarks/fuzz_http.py --record                 # 100,000 requests; writes results/fuzz-http.md
    python benchmarks/fuzz_http.py --requests 5000          # a quick look; prints the table

The invariant is the default test run's (tests/fuzz/http.py, tests/serve/test_fuzz.py): a 200 or a 4xx
with an error, never a 5xx or no answer; one ledger record per 200; health answering after every
request; the server's peak resident memory growing by at most RSS_ALLOWANCE. The requests go in runs of
CHUNK, each from its own seed, to one server started once: memory growth is measured over all of them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

CHUNK = 5_000
RESULT = HERE / "results" / "fuzz-http.md"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--record", action="store_true", help=f"write {RESULT.relative_to(ROOT)}")
    args = parser.parse_args()

    from tests.fuzz.http import HttpTally, fuzz_http, live_server

    statuses: Counter[int] = Counter()
    violations: list[str] = []
    health = 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sealtrace-fuzz-http-") as tmp, live_server(Path(tmp)) as (url, pid, _):
        first: HttpTally | None = None
        done = 0
        while done < args.requests:
            n = min(CHUNK, args.requests - done)
            tally = fuzz_http(url, pid, n, random_seed=args.seed * 1_000_003 + done)
            first = first or tally
            statuses.update(tally.statuses)
            health += tally.health_checks
            violations += [f"{problem}: {request.model} {request.headers} {request.body[:200]!r}"
                           for problem, request in tally.violations]
            done += n
            print(f"{done:,} sent: {dict(sorted(statuses.items()))}, {len(violations)} violation(s), peak RSS "
                  f"{tally.rss_peak >> 20} MiB", flush=True)
        assert first is not None
        baseline, peak = first.rss_baseline, tally.rss_peak
    seconds = time.perf_counter() - started
    text = report(statuses, violations, health, baseline, peak, seconds, args.requests)
    print(text)
    if args.record:
        RESULT.write_text(text)
    return 1 if violations else 0


def report(statuses: Counter[int], violations: list[str], health: int, baseline: int, peak: int, seconds: float,
           requested: int) -> str:
    from tests.fuzz.http import RSS_ALLOWANCE, SERVER_BUDGET

    from machine import machine_facts

    facts = machine_facts()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    sent = sum(statuses.values())
    lines = [
        "## Fuzz suite: the HTTP reader (issue 27)",
        "",
        f"Command: `make fuzz` (`python benchmarks/fuzz_http.py --record`: {requested:,} requests), at commit "
        f"{commit}, on {facts['cpu']}, {facts['cores']} cores, Python {facts['python']}, numpy {facts['numpy']}, "
        f"onnxruntime {facts['onnxruntime']}; {seconds / 60:.0f} minutes, {sent / seconds:.0f} requests/s "
        "(each followed by a health check and a read of /metrics).",
        "",
        "One `sealtrace serve --audit io` on 127.0.0.1 (memory budget " + SERVER_BUDGET + ", --max-body 1 MiB) over "
        "three small models; one client sends hypothesis-made Open Inference Protocol bodies, JSON and binary, "
        "from well-formed requests broken in the ways tests/fuzz/http.py lists. Invariant (target: zero "
        "violations): a 200 or a 4xx with an error, never a 5xx or no answer; exactly one ledger record per 200; "
        f"health answering throughout; the server's peak resident memory growing by at most {RSS_ALLOWANCE >> 20} "
        "MiB after its warm-up.",
        "",
        "| requests | " + " | ".join(str(s) for s in sorted(statuses)) + " | health checks | violations | peak RSS after warm-up | at the end |",
        "|---:|" + "---:|" * len(statuses) + "---:|---:|---:|---:|",
        f"| {sent:,} | " + " | ".join(f"{statuses[s]:,}" for s in sorted(statuses))
        + f" | {health:,} | {len(violations)} | {baseline >> 20} MiB | {peak >> 20} MiB |",
        "",
    ]
    if violations:
        lines += ["Violations (the first 20):", ""] + [f"- `{v}`" for v in violations[:20]] + [""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
