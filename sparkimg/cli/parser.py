"""The argument parser: one subcommand per user task, each with an example from ``EXAMPLES``.

Imports nothing heavy: ``--version`` and ``--help`` never load the pipeline. Given the command
line, it builds the arguments of the one command named there and no other (building all of
them cost ~10 ms a run, a tenth of a no-op build).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, cast

from sparkimg import __version__
from sparkimg._internal.suggest import closest
from sparkimg._internal.units import parse_size
from sparkimg.formats.sbom_formats import FORMATS

EXAMPLES = {
    "check": "sparkimg check layers/demo.yaml",
    "lock": "sparkimg lock layers/demo.yaml            # or: --update six --update base",
    "fetch": "sparkimg fetch layers/demo.yaml",
    "plan": "sparkimg plan layers/demo.yaml --json\n"
            "  sparkimg plan layers/demo.yaml --dockerfile   # the same image as a Dockerfile",
    "build": "sparkimg build layers/demo.yaml --reserve 16g --cgroup-parent sparkimg.slice",
    "push": "sparkimg push layers/demo.yaml --to 127.0.0.1:5000/sparkimg/demo --tag latest",
    "pull": "sparkimg pull 127.0.0.1:5000/sparkimg/demo:latest --key demo.pub --recipe layers/demo.recipe.yaml",
    "save": "sparkimg save layers/demo.yaml -o demo.oci.tar      # or: --without-base (the node has the base)",
    "load": "sparkimg load demo.oci.tar --key demo.pub --recipe layers/demo.recipe.yaml",
    "nightly": "sparkimg nightly layers/demo.yaml --key ~/.config/sparkimg/nightly.key --reserve 16g "
               "--push 127.0.0.1:5000/sparkimg/demo --keep 30 --json      # exit 0 unchanged or built, 1 failed",
    "history": "sparkimg history layers/demo.yaml        # or --json",
    "promote": "sparkimg promote layers/demo.yaml 20261203T020000Z   # after your own qualification",
    "rollback": "sparkimg rollback layers/demo.yaml --to 20261202T020000Z",
    "doctor": "sparkimg doctor --json      # or: sparkimg doctor --clean (containers and folders of dead runs)",
    "gc": "sparkimg gc --dry-run      # then: sparkimg gc, or sparkimg gc --keep-storage 200g",
    "sbom": "sparkimg sbom layers/demo.yaml --json      # SPDX 2.3 JSON; without --json a table\n"
            "  sparkimg sbom layers/demo.yaml --format cyclonedx --json   # CycloneDX 1.6, for grype and trivy\n"
            "  sparkimg sbom receipts/demo/KEY.receipt.json --key demo.pub\n"
            "  sparkimg sbom 127.0.0.1:5000/sparkimg/demo:latest --key demo.pub",
    "keygen": "sparkimg keygen --out ~/.config/sparkimg/node1      # writes node1.key (0600) and node1.pub",
    "patches": "sparkimg patches pin patches/demo && sparkimg patches check patches/demo",
    "store": "sparkimg store verify      # then, if it names damaged blobs: sparkimg store verify --repair",
    "verify-receipt": "sparkimg verify-receipt receipts/demo/KEY.receipt.json --key demo.pub "
                      "--recipe layers/demo.recipe.yaml --image sparkimg/demo:KEY --patches patches/demo",
    "verify-node": "sparkimg verify-node --receipt receipts/demo/KEY.receipt.json --key demo.pub "
                   "--recipe layers/demo.recipe.yaml --patches patches/demo-runtime --cache /var/cache/sparkimg/demo",
    "show-receipt": "sparkimg show-receipt receipts/demo/KEY.receipt.json --key demo.pub",
    "run-args": "docker run --rm $(sparkimg run-args receipts/demo/KEY.receipt.json) sparkimg/demo:KEY",
    "prewarm": "sparkimg prewarm --spec layers/demo.yaml --cache /var/cache/sparkimg/demo --key demo.key && "
               "sparkimg prewarm --spec layers/demo.yaml --cache /var/cache/sparkimg/demo --verify --key demo.pub",
    "completion": "sparkimg completion bash > ~/.local/share/bash-completion/completions/sparkimg\n"
                  "  sparkimg completion zsh > ~/.zfunc/_sparkimg      # a folder on $fpath, before compinit\n"
                  "  sparkimg completion fish > ~/.config/fish/completions/sparkimg.fish",
    "man": "sparkimg man | man -l -      # or: sparkimg man > /usr/local/share/man/man1/sparkimg.1",
}
SHELLS = ("bash", "zsh", "fish")  # what `sparkimg completion` writes a script for


GLOBAL_FLAGS = ("--debug", "--json-logs")
_json_logs_asked = False  # ``--json-logs`` is on the command line: a usage error is said as JSON too


def chosen(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names after the global options; None when it names none or holds
    anything else first (``--help``, an abbreviated option): then every command is built."""
    words = iter(argv)
    for word in words:
        if word in EXAMPLES:
            return word
        if word == "--store":
            next(words, None)
        elif not (word in GLOBAL_FLAGS or word.startswith("--store=")):
            return None
    return None


class _Unbuilt:
    """A command other than the one being run: what it is told to add is dropped."""

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        return None

    def add_mutually_exclusive_group(self, **kwargs: Any) -> _Unbuilt:
        return self


class _Parser(argparse.ArgumentParser):
    """argparse, with a "did you mean" for a misspelt command or option, and an unknown option
    told by the command's own usage (not the root's)."""

    def error(self, message: str) -> NoReturn:
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            choices = re.findall(r"'([^']*)'", wrong.group(2))
            if guess := closest(wrong.group(1), choices):
                message = f"{message.split(' (choose from')[0]}; did you mean '{guess}'?"
        if _json_logs_asked:  # the error as the one JSON line a log collector reads, as any other error
            from sparkimg.cli.render import json_line

            said = f"{self.prog}: {message}"
            json_line("error", said, error=said, exit_code=2, hint=f"see `{self.prog} --help`",
                      usage=self.format_usage().strip())
            self.exit(2)
        super().error(message)

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        found, extras = self.parse_known_args(args, namespace)
        if extras:
            command = self._commands().get(getattr(found, "command", None) or "")
            (command or self).unknown(extras)
        return found

    def unknown(self, extras: Sequence[str]) -> NoReturn:
        options = [o for action in self._actions for o in action.option_strings]
        said = f"unrecognized arguments: {' '.join(extras)}"
        flag = next((e.split("=")[0] for e in extras if e.startswith("-")), None)
        if flag and (guess := closest(flag, options)):
            said += f"; did you mean {guess}?"
        self.error(said)

    def _commands(self) -> dict[str, _Parser]:
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}


def _global(p: argparse.ArgumentParser, *, everywhere: bool) -> None:
    """The options every command takes, before the command or after it (``build X --store Y``):
    after it, each is kept only when given, so it never undoes one given before."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if everywhere else {}
    p.add_argument("--debug", action="store_true", help="show tracebacks for errors", **default)
    p.add_argument("--json-logs", action="store_true", help="report progress as one JSON object per event on "
                   "stderr (phase, layer, message, figures)", **default)
    p.add_argument("--store", type=Path, help="content-addressed store (default: $SPARKIMG_STORE, else "
                   "$XDG_CACHE_HOME/sparkimg, else ~/.cache/sparkimg)", **default)


def parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the command it names is built (all of them when it names none)."""
    global _json_logs_asked
    only = chosen(argv) if argv is not None else None
    _json_logs_asked = argv is not None and "--json-logs" in argv
    root = _Parser(
        prog="sparkimg",
        description="Reproducible, signed, cgroup-bounded vLLM image builds for DGX Spark (GB10).",
        epilog="examples:\n" + "\n".join(f"  {e}" for e in EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument("--version", action="version", version=f"sparkimg {__version__}")
    _global(root, everywhere=False)
    sub = root.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    def command(name: str, help_text: str, *, spec: bool = True, json_flag: bool = True) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return cast(argparse.ArgumentParser, _Unbuilt())
        p = sub.add_parser(name, help=help_text, description=help_text,
                           epilog=f"example:\n  {EXAMPLES[name]}", formatter_class=argparse.RawDescriptionHelpFormatter)
        if spec:
            p.add_argument("spec", type=Path, metavar="SPEC", help="the layer spec (YAML)")
        if json_flag:
            p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        _global(p, everywhere=True)
        return p

    command("check", "validate a spec (and its lock, if present) without running a container; with a lock, "
            "evaluate vLLM's CUDA architecture selection (the preflight, docs/gb10.md)")
    p = command("lock", "resolve every mutable reference and write SPEC.lock.json")
    p.add_argument("--update", action="append", default=[], metavar="NAME",
                   help="re-resolve this input (a source, 'base', 'toolchain' or 'all'); repeatable")
    _registry_access(p, "the base image's registry")
    command("fetch", "fetch every locked input into the store and pull the base by digest")
    p = command("plan", "show each layer's cache key, whether it is built, and what changed")
    p.add_argument("--dockerfile", action="store_true",
                   help="print the equivalent Dockerfile instead, for a person to read (not the build path)")
    p = command("push", "upload the built image from sparkimg's own data to a registry: only the blobs it "
                "lacks, then the manifest the receipt names, by digest and by tag")
    p.add_argument("--to", required=True, metavar="REGISTRY/REPO", help="the repository to push to")
    p.add_argument("--tag", action="append", default=[], metavar="TAG",
                   help="a moving tag besides the immutable dated one (repeatable), e.g. latest")
    p.add_argument("--receipt", type=Path, help="the receipt to attach (default: the one `build` wrote)")
    p.add_argument("--with", dest="also", action="append", type=Path, default=[], metavar="SPEC",
                   help="another platform's spec, built (e.g. layers/demo-arm64.yaml beside layers/demo.yaml): each "
                   "image goes with its own receipt, and the tags name an image index of all (repeatable)")
    p.add_argument("--compression", choices=("none", "gzip", "zstd"), default="none",
                   help="compress the new layers on the way out (default none: the layers leave as the plain "
                   "tars the build stored; zstd needs Docker CE 23+, containerd or podman on the nodes)")
    p.add_argument("--level", type=int, metavar="N", help="compression level (default: gzip 6, zstd 3)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="compression threads per layer (default: every core); the bytes do not depend on it")
    _registry_access(p, "the --to registry")
    p = command("pull", "verify the receipt attached to an image in a registry (key, recipe, subject), then "
                "pull it by digest and tag it; a receipt that does not verify pulls nothing", spec=False)
    p.add_argument("reference", metavar="REF", help="REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:...")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the trusted public key")
    p.add_argument("--recipe", type=Path, help="a serving recipe the receipt must match")
    p.add_argument("--receipt-out", type=Path, metavar="FILE",
                   help="keep the receipt that verified here (for verify-node and run-args)")
    _platform(p, "from a tag that holds several platforms (push --with), this one's image and receipt; "
              "an image of another platform is refused")
    _registry_access(p, "REF's registry (the engine's pull uses its own insecure-registries and certs.d)")
    p = command("save", "write the built image and its receipt to one file (an OCI image layout with "
                "docker's manifest.json): `docker load`, `podman load` and `sparkimg load` take it", spec=False)
    p.add_argument("source", type=Path, metavar="SPEC|RECEIPT",
                   help="the layer spec, or the receipt of a build (a .json file)")
    p.add_argument("-o", "--output", type=Path, required=True, metavar="FILE", help="the archive to write")
    p.add_argument("--without-base", action="store_true",
                   help="leave the base's layers out (the loading engine must have the base already)")
    p.add_argument("--receipt", type=Path, help="the receipt to put in it (default: the one `build` wrote)")
    p.add_argument("--tag", metavar="REPO:TAG", help="the name `docker load` gives it (default: the receipt's image "
                   "reference; `sparkimg load` always names it as the receipt does, or as its own --tag says)")
    p.add_argument("--with", dest="also", action="append", type=Path, default=[], metavar="SPEC",
                   help="another platform's spec, built: its image goes in the file too, with its own receipt "
                   "(`sparkimg load --platform` picks one; `docker load` loads all, the first tagged; repeatable)")
    p = command("load", "verify the receipt in an archive `sparkimg save` wrote (key, recipe, subject), then "
                "load the image into this engine and tag it; a receipt that does not verify loads nothing",
                spec=False)
    p.add_argument("archive", type=Path, metavar="FILE")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the trusted public key")
    p.add_argument("--recipe", type=Path, help="a serving recipe the receipt must match")
    p.add_argument("--tag", metavar="REPO:TAG", help="tag it so (default: the image reference its signed receipt "
                   "names; the archive's own names are not signed and not used)")
    p.add_argument("--receipt-out", type=Path, metavar="FILE",
                   help="keep the receipt that verified here (for verify-node and run-args)")
    _platform(p, "from an archive of several platforms (save --with), this one's image and receipt; an image of "
              "another platform is refused")
    p = command("build", "build the image: fetch, bounded compiles, assembly")
    p.add_argument("--memory", type=_size, help="memory bound per compile container (overrides the spec)")
    p.add_argument("--cpus", type=float, help="CPU bound per compile container")
    p.add_argument("--cpuset", help="CPUs the compile containers may use, e.g. 0-7")
    p.add_argument("--pids", type=int, help="pid limit per compile container")
    p.add_argument("--reserve", type=_size, help="host MemAvailable to keep free for serving, e.g. 16g")
    p.add_argument("--check", action="store_true", help="build every layer again from scratch (no cache) "
                   "and compare bit for bit; exit 1 if they differ (an image layer an earlier check of the same "
                   "key showed identical is not rebuilt, and the verdict says so)")
    p.add_argument("--recheck", action="store_true", help="with --check: rebuild those layers too")
    p.add_argument("--cgroup-parent", help="parent cgroup (e.g. a systemd slice) for every build container")
    p.add_argument("--quiet", action="store_true", help="do not stream compile output")
    p.add_argument("--key", type=Path, help="sign the receipt with this private key (default: $SPARKIMG_KEY); "
                   "without one the receipt is written unsigned and says so")
    p.add_argument("--receipt", type=Path, help="where to write the receipt "
                   "(default: receipts/NAME/KEY.receipt.json under the spec's root)")
    p.add_argument("--record-host", action="store_true", help="record this machine's host name in the receipt")
    p.add_argument("--sbom-format", choices=FORMATS, default=FORMATS[0], help="the format of the SBOM signed "
                   f"beside the receipt: {' or '.join(FORMATS)} (default {FORMATS[0]})")
    p.add_argument("--prewarm", type=Path, metavar="DIR", help="then prewarm the spec's FlashInfer kernel set "
                   "into DIR inside the new image, and record its manifest in the receipt")
    p = command("keygen", "write an ECDSA P-256 signing key pair: PREFIX.key (0600) and PREFIX.pub", spec=False)
    p.add_argument("--out", type=Path, required=True, metavar="PREFIX", help="path prefix of the two files")
    p.add_argument("--force", action="store_true", help="replace existing files")
    p = command("patches", "pin a patch set (write MD5SUMS and SHA256SUMS) or check it against them", spec=False)
    p.add_argument("action", choices=("pin", "check"))
    p.add_argument("dir", type=Path, metavar="DIR", help="the patch set folder (holding mounts.txt)")
    p = command("verify-node", "what a rank runs before `docker run`: the receipt (key, recipe), the image in "
                "this node's engine by digest, the patch files and the prewarmed cache all agree; exit 0 ok, "
                "1 mismatch, 2 bad input", spec=False)
    p.add_argument("--receipt", type=Path, required=True, metavar="RECEIPT")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the trusted public key (PEM)")
    p.add_argument("--recipe", type=Path, help="the serving recipe the receipt must match")
    p.add_argument("--patches", type=Path, metavar="DIR", help="the patch set folder mounted at run time")
    p.add_argument("--cache", type=Path, metavar="DIR", help="the prewarmed FlashInfer cache")
    p.add_argument("--sbom", type=Path, metavar="FILE", help="the SBOM the receipt names (default: NAME.sbom.json "
                   "beside the receipt, checked when it is there)")
    _platform(p, "the platform the receipt's image must be for")
    p = command("verify-receipt", "check a signed receipt against the key, a recipe, the image and the patch "
                "files; exit 0 ok, 1 mismatch, 2 bad input", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--key", type=Path, required=True, metavar="PUB", help="the trusted public key (PEM)")
    p.add_argument("--recipe", type=Path, help="a sparkimg-recipe/v1 or sparkring-recipe/v1 file")
    p.add_argument("--image", metavar="REF", help="an image in the local engine, or in a registry")
    p.add_argument("--patches", type=Path, metavar="DIR", help="a patch set folder to check file by file")
    p.add_argument("--rehash", action="store_true",
                   help="also re-hash, in parallel, the store's copy of every input and output the receipt names")
    p.add_argument("--sbom", type=Path, metavar="FILE", help="the SBOM the receipt names (default: NAME.sbom.json "
                   "beside the receipt, checked when it is there)")
    p = command("show-receipt", "render a receipt for a person", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--key", type=Path, metavar="PUB", help="check the signature with this public key")
    p = command("run-args", "print the docker run arguments a receipt implies (read-only patch mounts, and a "
                "prewarmed cache)", spec=False)
    p.add_argument("receipt", type=Path, metavar="RECEIPT")
    p.add_argument("--root", type=Path, default=Path("."), help="folder the receipt's patch paths are under "
                   "(default: the current folder)")
    p.add_argument("--key", type=Path, metavar="PUB", help="refuse unless the receipt is signed by this key")
    p.add_argument("--cache", type=Path, metavar="DIR", help="a prewarmed FlashInfer cache for this image: "
                   "mount it read-only and set the environment it was compiled with")
    _platform(p, "the platform the receipt's image must be for (another than this machine's adds "
              "`--platform` to the arguments: it runs under emulation)")
    p = command("prewarm", "compile the FlashInfer JIT modules an image needs into a cache folder, with a signed "
                "manifest; or --list them, or --verify a cache (exit 0 ok, 1 mismatch, 2 bad input)", spec=False)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--spec", type=Path, metavar="SPEC", help="the spec's kernel set, for the image it builds")
    which.add_argument("--image", metavar="REF", help="an image built by sparkimg (its kernel set is in a label)")
    which.add_argument("--receipt", type=Path, metavar="R", help="the image a receipt names")
    p.add_argument("--cache", type=Path, metavar="DIR", help="the cache folder (FLASHINFER_WORKSPACE_BASE)")
    p.add_argument("--runner", choices=("image", "host"), default="image",
                   help="compile inside the image (default) or in a Python environment on this machine")
    p.add_argument("--python", default=None, metavar="PY",
                   help="with --runner host: the serving environment's interpreter (default: this one)")
    p.add_argument("--image-id", metavar="ID", help="with --runner host: the image this environment is, "
                   "recorded in (or checked against) the manifest")
    p.add_argument("--key", type=Path, help="sign the manifest with this private key (default: $SPARKIMG_KEY); "
                   "with --verify: the trusted public key")
    p.add_argument("--list", action="store_true", help="resolve and show the kernel set; compile nothing")
    p.add_argument("--verify", action="store_true", help="check the cache against its manifest and the image")
    p.add_argument("--quick", action="store_true", help="with --verify: the signature and file sizes only")
    p.add_argument("--arch", action="append", metavar="ARCH",
                   help="with --verify: the architecture the cache must serve (default: the spec's or image's)")
    p.add_argument("--memory", type=_size, help="memory bound of the prewarm container (overrides the spec)")
    p.add_argument("--cpus", type=float, help="CPU bound of the prewarm container")
    p.add_argument("--pids", type=int, help="pid limit of the prewarm container")
    p.add_argument("--reserve", type=_size, help="host MemAvailable to keep free for serving, e.g. 16g")
    p.add_argument("--cgroup-parent", help="parent cgroup (e.g. a systemd slice) for the prewarm container")
    p.add_argument("--quiet", action="store_true", help="do not stream compile output")
    p = command("nightly", "re-resolve every moving input (git branch or tag, base tag, PyPI 'latest') into a "
                "candidate lock; if something moved, build it in bounds, check, sign, push, and only then promote "
                "it to the lock and the moving tag IMAGE:nightly. A failure keeps the build in service and exits 1 "
                "naming the failed stage")
    p.add_argument("--state", type=Path, metavar="DIR", help="the state folder: one entry per night, its report "
                   "and lock (default: SPEC.nightly beside the spec)")
    p.add_argument("--key", type=Path, help="sign the receipt with this private key (default: $SPARKIMG_KEY; "
                   "required)")
    p.add_argument("--push", metavar="REGISTRY/REPO", help="push the image with the dated tag nightly-ENTRY, and "
                   "move REPO:nightly to it at promotion")
    _registry_access(p, "the --push registry")
    p.add_argument("--check", action="store_true", help="rebuild every layer from scratch and compare bit for "
                   "bit before promoting")
    p.add_argument("--reserve", type=_size, help="host MemAvailable to keep free for serving, e.g. 16g")
    p.add_argument("--cgroup-parent", help="parent cgroup (e.g. sparkimg.slice) for every build container")
    p.add_argument("--hook", metavar="CMD", help="run CMD (sh -c) after the night, with SPARKIMG_NIGHTLY_STATUS, "
                   "_FAILED_STAGE, _REPORT (the JSON report), _HTML, _ENTRY and _EXIT in its environment")
    p.add_argument("--keep", type=int, metavar="N", help="keep the N newest nights in the state folder (and the "
                   "one in service, and every known-good one); untag the images only removed nights named "
                   "(default: keep all)")
    p.add_argument("--quiet", action="store_true", help="do not stream compile output")
    p = command("history", "list the nights kept for a spec: status, what moved, what was rebuilt, known-good")
    p.add_argument("--state", type=Path, metavar="DIR", help="the state folder (default: SPEC.nightly)")
    p = command("promote", "mark a built night known-good, after your own qualification (rollback goes only "
                "to known-good nights)")
    p.add_argument("entry", metavar="ENTRY", help="the night's entry id, from `sparkimg history`")
    p.add_argument("--state", type=Path, metavar="DIR", help="the state folder (default: SPEC.nightly)")
    p = command("rollback", "put a known-good night back in service: its lock file, and the moving tag "
                "IMAGE:nightly in the engine (and REPO:nightly in the registry when it was pushed)")
    p.add_argument("--to", required=True, metavar="ENTRY", help="the known-good night's entry id")
    p.add_argument("--state", type=Path, metavar="DIR", help="the state folder (default: SPEC.nightly)")
    p = command("doctor", "check this machine: Python, engine, cgroups, memory, nvcc, emulation of the other "
                "platform, the store (its size, and every blob against its name)", spec=False)
    p.add_argument("--clean", action="store_true", help="also remove what runs that died left behind: their "
                   "containers (by owner label) and their work folders in the store")
    p = command("sbom", "what is inside the built image: its Debian packages, Python distributions, compiled "
                "libraries with their CUDA architectures, sources and patch files (SPDX 2.3 or CycloneDX 1.6 with "
                "--json)", spec=False)
    p.add_argument("source", metavar="SPEC|RECEIPT|REF", help="a layer spec (made from the store), a receipt (the "
                   "signed SBOM beside it) or an image in a registry (the SBOM attached beside it)")
    p.add_argument("--key", type=Path, metavar="PUB", help="check the SBOM's signature (and against the receipt "
                   "that names it) with this public key")
    p.add_argument("--format", choices=FORMATS, dest="sbom_format", help="the document's format: "
                   f"{' or '.join(FORMATS)}; a SPEC's default {FORMATS[0]}, a signed SBOM's the format it was signed "
                   "in (another is refused)")
    p = command("store", "check the store: `verify` hashes every blob against its name (as git fsck does); exit 0 "
                "all sound, 1 damaged blobs found; --repair removes them, so the next build fetches or rebuilds "
                "them", spec=False)
    p.add_argument("action", choices=("verify",))
    p.add_argument("--repair", action="store_true", help="remove the damaged blobs (exit 0 once they are gone)")
    p = command("gc", "remove from the store what no root reaches: the specs built with it (their last build, "
                "current lock, receipts and kept nights), running builds, and --keep-root paths", spec=False)
    p.add_argument("--dry-run", action="store_true", help="remove nothing; list what would go and its bytes")
    p.add_argument("--keep-storage", type=_size, metavar="SIZE", help="remove only the least recently used "
                   "unreachable blobs, until the store's blobs take at most SIZE (e.g. 200g)")
    p.add_argument("--keep-root", type=Path, action="append", default=[], metavar="PATH",
                   help="also keep what this file (a receipt, a lock) or folder of them names; repeatable")
    p = command("completion", "print a shell completion script, made from this parser (static: no Python runs on "
                "Tab); write it where the shell looks, as the example shows", spec=False,
                json_flag=False)
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    command("man", "print the manual page (roff), made from this parser", spec=False, json_flag=False)
    return root


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size; write e.g. 16g or 512m") from None




def _registry_access(p: argparse.ArgumentParser, which: str) -> None:
    """How a command reaches the registry it names (docs/distribution.md, Registries on a LAN)."""
    p.add_argument("--plain-http", action="store_true", help=f"talk to {which} over plain HTTP, without TLS "
                   "(loopback always is; refused otherwise unless given)")
    p.add_argument("--ca-file", type=Path, metavar="PEM", help=f"verify {which}'s TLS certificate with this CA "
                   "(default: the system's CAs, or Docker's certs.d/HOST:PORT/ca.crt when there is one)")


def _platform(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--platform", metavar="OS/ARCH", help=f"{what} (default: this machine's, linux/arm64 on a GB10)")
