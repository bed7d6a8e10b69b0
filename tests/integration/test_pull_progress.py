"""The engine's pull progress streamed (issue 36): a base pull reads the daemon's JSON stream as it
comes and tells the bytes received, so a multi-GB base shows a bar with size, rate and ETA instead
of ``docker pull -q``'s silence. Against the real daemon and the loopback registry."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

from sparkimg.engine.protocol import Engine

SIZE = 12 << 20  # random bytes: the layer does not compress below this


def test_a_pull_tells_the_bytes_it_received_up_to_the_whole_image(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str
) -> None:
    reference = f"{registry}/sparkimg-test/progress-{uuid.uuid4().hex[:10]}:1"
    (tmp_path / "Dockerfile").write_text(f"FROM {demo_base}\nRUN head -c {SIZE} /dev/urandom > /blob\n")
    # The legacy builder: BuildKit's cache would keep the layer, and the pull would find it there.
    subprocess.run([engine.client, "build", "-q", "--network", "none", "-t", reference, str(tmp_path)], check=True,
                   capture_output=True,
                   env={**os.environ, "DOCKER_BUILDKIT": "0"})
    subprocess.run([engine.client, "push", "-q", reference], check=True, capture_output=True)
    engine.remove_image(reference)
    told: list[tuple[int, int | None]] = []
    engine.pull(reference, lambda done, total: told.append((done, total)))
    assert engine.inspect(reference) is not None
    assert told, "the daemon's stream told no progress"
    assert [done for done, _ in told] == sorted(done for done, _ in told)  # it only grows
    done, total = told[-1]
    assert total is not None and done == total and SIZE // 2 < total < SIZE * 2  # gzip of random bytes
    engine.remove_image(reference)
