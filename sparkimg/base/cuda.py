"""With ``toolchain: cuda: base``, the toolkit's identity is nvcc itself, asked inside the base.

Once per base (by its config digest, which fixes every byte of the image), a container from the
pinned base with no network, 128 MiB and 64 pids finds nvcc (on the PATH, else
/usr/local/cuda/bin/nvcc), runs ``nvcc --version`` and hashes the binary it resolves to. The
answer is a store record (``records/base-nvcc/CONFIG.json``): ``fetch`` (and so ``build``) asks;
the receipt's toolchain dependency then names nvcc (version, build, sha256), not only the base;
the vLLM preflight reads its CUDA version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sparkimg.base.ask import SCRIPTS, ask
from sparkimg.engine.protocol import Engine, RunLimits
from sparkimg.errors import BuildError
from sparkimg.events import Event, Kind, Phase, Reporter, silent
from sparkimg.store.content import Store

RECORDS = "base-nvcc"
VERSION = 1
LIMITS = RunLimits(memory=128 << 20, pids=64)
SCRIPT = r"""#!/bin/sh
# Written by sparkimg: where is nvcc in this image, what does it say, what are its bytes.
out=/sparkimg/out/nvcc.txt
p=$(command -v nvcc 2>/dev/null)
[ -n "$p" ] || { [ -x /usr/local/cuda/bin/nvcc ] && p=/usr/local/cuda/bin/nvcc; }
if [ -z "$p" ]; then echo "none" > "$out"; exit 0; fi
r=$(readlink -f "$p")
{ echo "path $p"; echo "resolved $r"; echo "sha256 $(sha256sum "$r" | cut -d' ' -f1)"; "$p" --version; } > "$out" 2>&1
"""


@dataclass(frozen=True)
class BaseNvcc:
    """nvcc in a base image: where it is, its release (``13.0, V13.0.88``), build string and sha256."""

    path: str
    resolved: str
    release: str
    build: str
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "resolved": self.resolved, "nvcc_version": self.release,
                "nvcc_build": self.build, "nvcc_sha256": self.sha256}


def _name(config_digest: str) -> str:
    return f"{config_digest.split(':', 1)[1]}-v{VERSION}"


def remembered(store: Store, config_digest: str) -> BaseNvcc | None:
    """What the base with this config digest said before; None when never asked or it has no nvcc."""
    data = store.read_record(RECORDS, _name(config_digest))
    if not data or not data.get("found"):
        return None
    try:
        return BaseNvcc(str(data["path"]), str(data["resolved"]), str(data["nvcc_version"]),
                        str(data["nvcc_build"]), str(data["nvcc_sha256"]))
    except KeyError:
        return None


def parse(text: str) -> BaseNvcc | None:
    """The answer the script wrote; None for a base without nvcc."""
    if text.strip() == "none":
        return None
    ours = ("path ", "resolved ", "sha256 ")
    fields = dict(line.split(" ", 1) for line in text.splitlines() if line.startswith(ours))
    said = [line for line in text.splitlines() if not line.startswith(ours)]  # what nvcc --version printed
    release = next((line.split("release", 1)[1].strip() for line in said if "release" in line), "")
    build = next((line.split(":", 1)[-1].strip() for line in said if line.startswith("Build")), "")
    sha = fields.get("sha256", "").strip()
    if not re.fullmatch(r"[0-9a-f]{64}", sha) or not release:
        raise BuildError(f"nvcc in the base answered what sparkimg cannot read:\n    {text.strip()[-400:]}",
                         hint="the base's nvcc --version must print 'release X.Y'; sha256sum must exist")
    return BaseNvcc(fields.get("path", "").strip(), fields.get("resolved", "").strip(), release, build, sha)


def identify(engine: Engine, image: str, config_digest: str, store: Store, *,
             report: Reporter = silent) -> BaseNvcc | None:
    """nvcc's identity in the local image ``image`` (whose ID is ``config_digest``), asked once."""
    known = store.read_record(RECORDS, _name(config_digest))
    if known is not None:
        return remembered(store, config_digest)
    report(Event(Phase.FETCH, f"toolchain: asking the base for nvcc ({config_digest[:19]})"))
    asked = ask(engine, image, script=("nvcc.sh", SCRIPT.encode()), command=["/bin/sh", f"{SCRIPTS}/nvcc.sh"],
                answer="nvcc.txt", limits=LIMITS, store=store, layer="base-nvcc", phase="fetch", limit=64 << 10)
    answer = asked.answer.decode(errors="replace")
    if asked.exit_code != 0 or not answer:
        raise BuildError(f"base {image}: asking for nvcc failed (exit {asked.exit_code}): "
                         + " ".join(asked.tail[-5:]), hint="the base needs /bin/sh, readlink and sha256sum")
    found = parse(answer)
    store.write_record(RECORDS, _name(config_digest),
                       {"found": found is not None, **(found.to_json() if found else {})})
    if found is None:
        report(Event(Phase.FETCH, "toolchain: the base has no nvcc (toolchain cuda: base)", kind=Kind.WARNING))
    else:
        report(Event(Phase.FETCH, f"toolchain: nvcc {found.release} at {found.resolved} in the base"))
    return found

