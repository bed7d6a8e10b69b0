"""--rehash throughput: the store stage of ``verify-receipt --rehash`` against ``sha256sum``
over the same files, in the same run.

Writes N blobs into a fresh store, names them in a minimal statement as a receipt would,
and times (median of --runs) the real store check, a serial single-thread hash, and
``sha256sum FILES...``. Run: ``python bench/rehash.py [--files 32 --mib 16 --runs 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkimg._internal.fs.hashing import hash_many
from sparkimg.formats.statement import Descriptor, Statement, Subject
from sparkimg.receipts.verify import store_checks
from sparkimg.store.content import Store


def timed(run: Any) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sparkimg-rehash.") as tmp:
        store = Store(Path(tmp) / "store")
        blobs = [store.put_bytes(os.urandom(args.mib << 20)) for _ in range(args.files)]
        statement = Statement((Subject("bench", {"sha256": "0" * 64}),), {}, {}, (), byproducts=tuple(
            Descriptor(f"wheel:bench/{i}", annotations={"store_blob": b}) for i, b in enumerate(blobs)))
        paths = [str(store.blob(b)) for b in blobs]
        results: dict[str, list[float]] = {"sparkimg": [], "serial": [], "sha256sum": []}
        for _ in range(args.runs):
            results["sparkimg"].append(timed(lambda: store_checks(store, statement)))
            results["serial"].append(timed(lambda: hash_many([Path(p) for p in paths], workers=1)))
            results["sha256sum"].append(timed(lambda: subprocess.run(["sha256sum", *paths], check=True,
                                                                       capture_output=True)))
    total = args.files * args.mib
    median = {k: statistics.median(v) for k, v in results.items()}
    print(f"{args.files} files x {args.mib} MiB = {total} MiB, median of {args.runs} runs, {os.cpu_count()} CPUs")
    for name, label in (("sha256sum", "sha256sum FILES (baseline)"), ("serial", "sparkimg hash, 1 thread"),
                        ("sparkimg", "verify-receipt --rehash store stage")):
        print(f"  {label:38s} {median[name]:6.2f} s  {total / median[name]:8.1f} MiB/s  "
              f"ratio to sha256sum: {median['sha256sum'] / median[name]:.2f}x")


if __name__ == "__main__":
    main()
