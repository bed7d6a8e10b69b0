"""An image as the SBOM writers see it, without an engine: the demo spec, a lock written by hand
(a git source for the compile layer in one variant, an sdist in another), a Debian package, a
pinned wheel and a compiled one installed, a compile layer's record with its audit, and both
kinds of patch set."""

from __future__ import annotations

from pathlib import Path

from sparkimg.formats.lockfile import (
    BasePin,
    GitPin,
    LockFile,
    PatchFilePin,
    PatchSetPin,
    PathPin,
    PypiPin,
    SourcePin,
    ToolchainPin,
)
from sparkimg.formats.oci import Descriptor, ImageRecord, Layer
from sparkimg.formats.record import LayerRecord, Metrics, Output
from sparkimg.lock.resolve import Lock
from sparkimg.sbom.contents import Contents, DebPackage, PythonDist
from sparkimg.sbom.inventory import Inventory, inventory
from sparkimg.spec import Spec
from sparkimg.spec.load import load_spec

ROOT = Path(__file__).resolve().parents[3]
SIX = "8abb2f1d86890a2dfb989f9a77cfcfd3e47c2a354b01111771326f8aa26e0254"
KERNEL_WHEEL = "1" * 64
SITE = "usr/local/lib/python3.11/dist-packages"


def spec() -> Spec:
    return load_spec(ROOT / "layers" / "demo.yaml")


def lock(kernel: str = "path") -> Lock:
    """The demo's lock, its compile layer's source pinned as a ``path``, ``git`` or ``sdist``."""
    pins: dict[str, SourcePin] = {
        "path": PathPin("build/demo-kernel", "2" * 64, {}),
        "git": GitPin({}, "https://github.com/example/demo-kernel.git", "v1", "a" * 40, "b" * 40, 1_700_000_000),
        "sdist": PypiPin({}, "Demo_Kernel", "0.3", "demo_kernel-0.3.tar.gz",
                         "https://files.example/demo_kernel-0.3.tar.gz", "3" * 64, dist="sdist"),
    }
    six = PypiPin({}, "six", "1.16.0", "six-1.16.0-py2.py3-none-any.whl", "https://files.example/six.whl", SIX)
    patches = {"demo": PatchSetPin("patches/demo", "bake", (PatchFilePin("serve.env", "/etc/sparkimg/serve.env",
                                                                             10, "4" * 32, "5" * 64),)),
               "demo-runtime": PatchSetPin("patches/demo-runtime", "mount", (
                   PatchFilePin("runtime.conf", "/etc/sparkimg/runtime.conf", 5, "6" * 32, "7" * 64),))}
    base = BasePin({}, "127.0.0.1:5000/sparkimg/demo-base", "bookworm", None, "sha256:" + "8" * 64,
                   "sha256:" + "9" * 64, None, "linux/amd64")
    model = LockFile("sparkimg test", "demo.yaml", "sha256:" + "0" * 64, "2026-01-01T00:00:00Z", "linux/amd64",
                     ("12.1a",), 1_767_225_600, base, {"demo-kernel": pins[kernel], "six": six}, patches,
                     ToolchainPin("base"))
    return Lock(model, "sha256:" + "0" * 64, ROOT / "layers" / "demo.yaml.lock.json")


def record() -> ImageRecord:
    blob = Descriptor("application/vnd.oci.image.layer.v1.tar+gzip", "sha256:" + "c" * 64, 100)
    layer = Layer(blob, "sha256:" + "d" * 64, "demo-kernel", (("x86-64", 3),))
    return ImageRecord("sha256:" + "e" * 64, "sha256:" + "f" * 64, "application/vnd.oci.image.manifest.v1+json",
                       "sha256:" + "8" * 64, (layer,), "gzip", "pax")


def contents() -> Contents:
    return Contents(debs=[DebPackage("python3", "3.11.2-1+b1", "amd64", "python3-defaults"),
                          DebPackage("libc6", "2.36-9", "amd64", None)],
                    python=[PythonDist("six", "1.16.0", f"{SITE}/six-1.16.0.dist-info"),
                            PythonDist("sparkimg_demo_kernel", "0.1.0", f"{SITE}/sparkimg_demo_kernel-0.1.0.dist-info"),
                            PythonDist("pip", "23.0.1", f"{SITE}/pip-23.0.1.dist-info")],
                    unread=[])


def records() -> dict[str, LayerRecord]:
    audit = ({"file": "sparkimg_demo_kernel-0.1.0-cp311-cp311-linux_x86_64.whl!sparkimg_demo_kernel/libdemo.so",
              "machine": "x86-64", "cubin_sm": ["121a"], "ptx_sm": []},)
    return {"demo-kernel": LayerRecord(
        "demo-kernel", "key", (Output("sparkimg_demo_kernel-0.1.0-cp311-cp311-linux_x86_64.whl", KERNEL_WHEEL, 1),),
        Metrics(1.0, 1.0, 1), {}, audit, None)}


def made(kernel: str = "path") -> Inventory:
    return inventory(spec(), lock(kernel), record(), contents(), records(), "sparkimg/demo:abc")
