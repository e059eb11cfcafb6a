"""Sweep rate and device memory against ``sweep.chunk_size``.

    python benchmarks/chunk_size.py [--sizes 262144 1048576 2097152] [--chunks 8]

Builds the throughput benchmark's space (GPT-3 175B, >= 10^7 configurations, keep=top_k) at
each chunk size, compiles, then times ``--chunks`` chunks (after one untimed) and reads the
device's peak memory in use (``memory_stats``; CPU devices report none). The last line printed
is one JSON object: per chunk size, configurations per second and peak bytes, and the bytes per
configuration of the largest size. ``search.engine.default_chunk_size``'s GPU chunk was chosen from
its figures on an H200.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax
from throughput import SPACE

import jctopt
from jctopt.search.engine import build


def _peak_bytes(devices) -> int | None:
    stats = [d.memory_stats() for d in devices]
    if any(s is None or "peak_bytes_in_use" not in s for s in stats):
        return None
    return max(s["peak_bytes_in_use"] for s in stats)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[262144, 1048576, 2097152])
    ap.add_argument("--chunks", type=int, default=8)
    args = ap.parse_args()
    results = []
    for size in sorted(args.sizes):
        space, engine = build(jctopt.compose(SPACE + [f"sweep.chunk_size={size}", "sweep.keep=top_k",
                                                      "sweep.top_k=10"]))
        n_chunks = min(args.chunks, space.n_chunks(engine.chunk_size) - 1)
        list(engine.run([0]))  # compile
        t0 = time.perf_counter()
        n = sum(int(counts.sum()) for _, _, counts in engine.run(range(1, 1 + n_chunks)))
        seconds = time.perf_counter() - t0
        peak = _peak_bytes(engine.devices)
        results.append({"chunk_size": engine.chunk_size, "configs_per_s": round(n / seconds), "peak_bytes": peak})
        print(f"chunk {engine.chunk_size:,}: {n / seconds:,.0f} configurations/s, peak device memory "
              f"{'n/a' if peak is None else f'{peak / 2**30:.2f} GiB'}", file=sys.stderr)
    device = jax.devices()[0]
    largest = results[-1]
    per_config = None if largest["peak_bytes"] is None else round(largest["peak_bytes"] / largest["chunk_size"])
    print(json.dumps({"device": f"{device.platform}:{device.device_kind}", "n_devices": jax.device_count(),
                      "bytes_limit": (device.memory_stats() or {}).get("bytes_limit"),
                      "bytes_per_config_at_largest": per_config, "sizes": results, "jax": jax.__version__}))


if __name__ == "__main__":
    main()
