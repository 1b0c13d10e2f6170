"""What the graph index (container format 2) costs on the real models: header bytes, the time to
compute it from the graph section (sealing and verifying each do it once), and the time to parse
the larger header, against the same header without the index (what format 1 holds).

    python benchmarks/bench_graph_index.py [--repeat 15]

Writes a markdown table to results/graph-index.md. Medians of ``--repeat`` timings, in process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from material import require  # noqa: E402
from sealtrace import zoo  # noqa: E402
from sealtrace.container import seal_model, verify_container  # noqa: E402
from sealtrace.container.format import open_container, parse_canonical_json  # noqa: E402
from sealtrace.container.graphindex import graph_index  # noqa: E402
from sealtrace.digest import canonical_json  # noqa: E402

RESULTS = HERE / "results" / "graph-index.md"
MODELS = ["silero-vad", "silero-vad-sequence", "magika", "yolov8n", "mobilenetv3-orientation", "minilm-int8",
          "ppocr-det", "ppocr-rec", "ppocr-cls"]


def median_seconds(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(key: str, work: Path, repeat: int) -> dict[str, float]:
    out = work / f"{key}.seal"
    seal_model(zoo.model(key).path, out)
    with open_container(out) as container:
        section = bytes(container.data(container.entry("graph", "section")))
        index = container.graph_index
        assert index is not None
        header = canonical_json({"container": container.body, "signatures": []})
        without = canonical_json({"container": {k: v for k, v in container.body.items() if k != "graph_index"},
                                  "signatures": []})
        size = container.size
    row = {
        "nodes": len(index["nodes"]),
        "attributes": sum(len(n["attributes"]) for n in index["nodes"]),
        "section": len(section),
        "header": len(header),
        "index": len(header) - len(without),
        "file": size,
        "compute": median_seconds(lambda: graph_index(section), repeat),
        "parse": median_seconds(lambda: parse_canonical_json(header, "header"), repeat),
        "parse_v1": median_seconds(lambda: parse_canonical_json(without, "header"), repeat),
        "verify": median_seconds(lambda: verify_container(out, workers=1), max(3, repeat // 3)),
    }
    out.unlink()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    require("bench_graph_index", RESULTS, MODELS)
    rows = {}
    with tempfile.TemporaryDirectory() as work:
        for key in MODELS:
            rows[key] = measure(key, Path(work), args.repeat)
            print(f"{key}: {rows[key]}", flush=True)
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg()[:2])
    lines = [
        "## Containers: the graph index (format version 2)",
        "",
        f"Command: `python benchmarks/bench_graph_index.py --repeat {args.repeat}`. In process, one thread, medians; "
        f"load average {load} (1 / 5 min) at the end. The index names a changed node, attribute or opset import "
        "(docs/container-format.md); its cost is the header bytes it adds, computing it once when sealing and once "
        "when verifying, and parsing the larger header. `verify` is the whole in-process verification "
        "(one hashing thread) of the container, index included.",
        "",
        "| model | nodes (attributes) | graph section | index in header | file grows by | compute index | parse header: v2 / without index | verify |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in rows.items():
        share = r["index"] / (r["file"] - r["index"])
        lines.append(
            f"| {key} | {r['nodes']:.0f} ({r['attributes']:.0f}) | {r['section'] / 1024:,.0f} KiB | "
            f"{r['index'] / 1024:,.0f} KiB | {share:.1%} | {r['compute'] * 1e3:.1f} ms | "
            f"{r['parse'] * 1e3:.1f} / {r['parse_v1'] * 1e3:.1f} ms | {r['verify'] * 1e3:.0f} ms |"
        )
    lines.append("")
    RESULTS.write_text("\n".join(lines))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
