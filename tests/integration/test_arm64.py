"""linux/arm64, the GB10's own platform, built here under emulation with the real engine: the
arm64 demo compiles its kernel for 12.1a with NVIDIA's aarch64 toolkit wheels (hermetic: no toolkit
on the host or in the base), builds bit for bit again under --check, and its image imports its
wheels and loads the kernel library in an arm64 container. Every ELF file is audited for the
platform's CPU: one of another CPU fails the build (exit 6) naming layer, file and machine, and an
x86 host toolkit is refused for arm64 before anything runs."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from sparkimg.engine.protocol import Engine
from sparkimg.image.assemble import IMAGES
from sparkimg.store.content import Store
from tests.formats import spec_header
from tests.support import REPO

from .helpers import build_ok, cli

PARTS = ("layers/demo-arm64.yaml", "build/demo-kernel", "patches/demo")


def _copy_arm64_demo(into: Path) -> Path:
    for part in PARTS:
        (shutil.copytree if (REPO / part).is_dir() else shutil.copyfile)(REPO / part, into / part)
    spec = into / "layers" / "demo-arm64.yaml"
    spec.write_text(spec.read_text().replace("image: sparkimg/demo-arm64",
                                             f"image: sparkimg-test/demo-arm64-{uuid.uuid4().hex[:8]}"))
    return spec


def test_the_arm64_demo_builds_checks_and_runs_under_emulation(
    tmp_path: Path, engine: Engine, arm64_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "layers").mkdir()
    (tmp_path / "patches").mkdir()
    (tmp_path / "build").mkdir()
    spec = _copy_arm64_demo(tmp_path)
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    locked = json.loads(spec.with_name("demo-arm64.yaml.lock.json").read_text())
    assert locked["platform"] == "linux/arm64" and locked["toolchain"]["cuda"] == "wheels"
    assert all("aarch64" in locked["sources"][w["source"]]["filename"] for w in locked["toolchain"]["wheels"])

    result = build_ok(capsys, store, spec, "--check")
    assert result["check"]["identical"], result["check"]
    reference = result["image"]["reference"]
    assert engine.inspect(reference) is not None

    # The CPU audit's census: every ELF file in the layers sparkimg wrote is aarch64.
    record = Store(store).read_record(IMAGES, result["layers"][-1]["key"])  # the image's own key
    assert record is not None
    census: dict[str, int] = {}
    for layer in record["layers"]:
        for machine, count in layer["elfMachines"].items():
            census[machine] = census.get(machine, 0) + count
    assert census == {"aarch64": 2}  # the kernel library and PyYAML's extension
    code, sbom, err = cli(capsys, store, "sbom", str(spec), "--json")
    assert code == 0, err
    image = next(p for p in sbom["packages"] if p["SPDXID"] == "SPDXRef-Image")
    assert "audited for linux/arm64: 2 aarch64" in image["comment"]
    library = next(p for p in sbom["packages"] if p["name"] == "sparkimg_demo_kernel/libsparkimg_demo.so")
    assert library["comment"].startswith("CPU aarch64; CUDA architectures: cubin sm_121;")

    # The receipt names the toolkit by its identity, a function of every wheel's bytes.
    envelope = json.loads(Path(result["receipt"]).read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    toolchain = next(d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
                     if d["name"] == "toolchain")
    assert toolchain["uri"] == f"sparkimg-toolkit:{locked['toolchain']['toolkit']}"
    assert (store / "toolkits" / locked["toolchain"]["toolkit"] / "bin" / "nvcc").is_file()

    inside = subprocess.run(
        [engine.client, "run", "--rm", "--platform", "linux/arm64", "--network", "none", reference, "python3", "-c",
         "import ctypes, platform, six, yaml, sparkimg_demo_kernel as k; ctypes.CDLL(str(k.LIBRARY)); "
         "print(platform.machine(), six.__version__, yaml.__version__, yaml.__with_libyaml__)"],
        capture_output=True, text=True, check=False)
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split() == ["aarch64", "1.16.0", "6.0.2", "True"]
    engine.remove_image(reference)


# A compile layer (python3 only, no CUDA) whose py3-none-any wheel carries the .so of its input:
# the case, an x86-64 library in an arm64 image.
FOREIGN = """\
sources:
  kernel:
    path: kernel
  prebuilt:
    path: prebuilt
layers:
  - name: kernel
    kind: compile
    source: kernel
    inputs: [prebuilt]
    command: python3 /src/wheel.py
    memory: 1g
    job_memory: 256m
    pids: 256
"""
WHEEL = r'''
import zipfile
name = "foreign-0.1.dist-info"
files = {"foreign/libhelper.so": open("/inputs/prebuilt/libhelper.so", "rb").read(),
         name + "/METADATA": b"Metadata-Version: 2.1\nName: foreign\nVersion: 0.1\n",
         name + "/WHEEL": b"Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
files[name + "/RECORD"] = b""
with zipfile.ZipFile("/out/foreign-0.1-py3-none-any.whl", "w") as out:
    for path, data in files.items():
        out.writestr(path, data)
'''


def test_an_elf_file_of_another_cpu_fails_the_build_naming_layer_file_and_machine(
    tmp_path: Path, engine: Engine, arm64_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / "kernel").mkdir(parents=True)
    (project / "kernel" / "wheel.py").write_text(WHEEL)
    (project / "prebuilt").mkdir()
    (project / "helper.c").write_text("int helper(void) { return 42; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(project / "prebuilt" / "libhelper.so"),
                    str(project / "helper.c")], check=True)  # a real x86-64 library, from this machine's compiler
    name = f"foreign-{uuid.uuid4().hex[:8]}"
    header = spec_header(name, base=arm64_base, image=f"sparkimg-test/{name}").replace(
        "toolchain:\n  cuda: host\n  path: /usr/local/cuda\n", "toolchain:\n  cuda: base\n")
    spec = project / "spec.yaml"
    spec.write_text(header + FOREIGN)
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, _, err = cli(capsys, store, "build", str(spec), "--quiet")
    assert code == 6, err
    assert "layer kernel: 1 ELF file(s) built for another CPU than linux/arm64's aarch64" in err
    assert "foreign-0.1-py3-none-any.whl!foreign/libhelper.so: x86_64" in err and "Traceback" not in err
    assert not list((store / "records" / "layers").glob("*.json"))  # refused, so never cached

    # A patch set that bakes the same library: refused as its layer is written.
    (project / "kernel" / "wheel.py").write_text(WHEEL.replace(
        'open("/inputs/prebuilt/libhelper.so", "rb").read()', 'b"# no library\\n"').replace("libhelper.so", "x.py"))
    (project / "patches").mkdir()
    shutil.copy(project / "prebuilt" / "libhelper.so", project / "patches" / "libhelper.so")
    (project / "patches" / "mounts.txt").write_text("libhelper.so /opt/helper/libhelper.so\n")
    spec.write_text(header + FOREIGN + "patches:\n  - name: helper\n    dir: patches\n    mode: bake\n")
    assert cli(capsys, store, "lock", str(spec))[0] == 0
    code, _, err = cli(capsys, store, "build", str(spec), "--quiet")
    assert code == 6, err
    assert "layer patches.helper: 1 ELF file(s) built for another CPU than linux/arm64's aarch64" in err
    assert "opt/helper/libhelper.so: x86_64" in err


def test_an_x86_host_toolkit_is_refused_for_arm64_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nvcc = Path("/usr/local/cuda/bin/nvcc")
    if not nvcc.is_file():
        pytest.skip("no host toolkit at /usr/local/cuda")
    project = tmp_path / "project"
    shutil.copytree(REPO / "build" / "demo-kernel", project / "kernel")
    spec = project / "spec.yaml"
    spec.write_text(spec_header("hosted", image="sparkimg-test/hosted") + FOREIGN.split("  prebuilt:")[0]
                    + "layers:\n  - name: kernel\n    kind: compile\n    source: kernel\n    command: \"true\"\n")
    for command in ("check", "lock"):
        code, _, err = cli(capsys, tmp_path / "store", command, str(spec))
        assert code == 2, err
        assert f"toolchain.path: {nvcc.resolve()} is a program for x86_64, but the spec's platform linux/arm64 " \
            "compiles in aarch64 containers" in err
        assert "cuda: wheels" in err and "Traceback" not in err
    assert not spec.with_name("spec.yaml.lock.json").exists()


def test_doctor_says_whether_the_other_platform_runs_here(
    tmp_path: Path, arm64_base: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkimg._internal import emulation

    code, found, err = cli(capsys, tmp_path / "store", "doctor", "--json")
    assert code == 0, err
    checks = {c["name"]: c for c in found["checks"]}
    if emulation.native() == "linux/amd64":  # the fixture found emulation: doctor says so, and how
        assert checks["emulation linux/arm64"]["ok"] and "binfmt handler" in checks["emulation linux/arm64"]["detail"]


def test_one_tag_holds_both_platforms_and_each_pull_verifies_its_own_receipt(
    tmp_path: Path, engine: Engine, demo_base: str, arm64_base: str, registry: str,
    capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkimg._internal.net.registry import INDEX_TYPES, ImageRef, RegistryClient

    from .helpers import copy_demo

    demo = copy_demo(tmp_path / "project")
    arm64 = demo.with_name("demo-arm64.yaml")
    arm64.write_text((REPO / "layers" / "demo-arm64.yaml").read_text().replace(
        "image: sparkimg/demo-arm64", f"image: sparkimg-test/demo-arm64-{uuid.uuid4().hex[:8]}"))
    store = tmp_path / "store"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    built = {}
    for spec in (demo, arm64):
        assert cli(capsys, store, "lock", str(spec))[0] == 0
        built[spec.name] = build_ok(capsys, store, spec, "--key", str(tmp_path / "node.key"))

    repository = f"{registry}/sparkimg-test/multi-{uuid.uuid4().hex[:8]}"
    code, _, err = cli(capsys, store, "push", str(demo), "--with", str(demo), "--to", repository)
    assert code == 2 and "two of the specs are for linux/amd64" in err, err  # refused before anything is sent
    code, pushed, err = cli(capsys, store, "push", str(demo), "--with", str(arm64), "--to", repository,
                            "--tag", "latest", "--json")
    assert code == 0, err
    assert set(pushed["platforms"]) == {"linux/amd64", "linux/arm64"} and pushed["tags"] == ["latest"]
    assert all(image["receipt"] and image["sbom"] for image in pushed["platforms"].values())

    # The tag names an index with the platform in each descriptor, each the image its build wrote.
    ref = ImageRef.parse(repository)
    index = RegistryClient().send("GET", ref, f"{ref.base_url}/manifests/latest",
                                  headers={"Accept": ", ".join(INDEX_TYPES)}).json()
    assert index["mediaType"] in INDEX_TYPES
    listed = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"] for m in index["manifests"]}
    assert listed == {"linux/amd64": built["demo.yaml"]["oci"]["manifest"],
                      "linux/arm64": built["demo-arm64.yaml"]["oci"]["manifest"]}

    # Each platform's pull picks its image from the index and verifies that image's own receipt.
    for platform, name in (("linux/arm64", "demo-arm64.yaml"), ("linux/amd64", "demo.yaml")):
        code, pulled, err = cli(capsys, store, "pull", f"{repository}:latest", "--key", str(tmp_path / "node.pub"),
                                "--platform", platform, "--json")
        assert code == 0, err
        assert (pulled["manifest"], pulled["config"]) == (built[name]["oci"]["manifest"], built[name]["oci"]["config"])
        assert engine.image_id(f"{repository}:latest") == built[name]["oci"]["config"]
    # Without --platform: this machine's.
    code, pulled, err = cli(capsys, store, "pull", f"{repository}:latest", "--key", str(tmp_path / "node.pub"),
                            "--json")
    assert code == 0 and pulled["manifest"] == built["demo.yaml"]["oci"]["manifest"], err
    # A one-platform tag asked for another platform: refused, nothing pulled.
    dated = next(t for t in RegistryClient().send("GET", ref, f"{ref.base_url}/tags/list").json()["tags"]
                 if t.endswith(built["demo.yaml"]["layers"][-1]["key"][:12]))
    code, _, err = cli(capsys, store, "pull", f"{repository}:{dated}", "--key", str(tmp_path / "node.pub"),
                       "--platform", "linux/arm64")
    assert code == 1 and "the image is for linux/amd64, not linux/arm64" in err, err

    # One file holds both platforms (save --with), each image with its own receipt; load picks one.
    code, _, err = cli(capsys, store, "save", str(demo), "--with", str(demo), "-o", str(tmp_path / "x.tar"))
    assert code == 2 and "two of the specs are for linux/amd64" in err and not (tmp_path / "x.tar").exists(), err
    archive = tmp_path / "both.oci.tar"
    code, saved, err = cli(capsys, store, "save", str(demo), "--with", str(arm64), "-o", str(archive), "--json")
    assert code == 0 and set(saved["platforms"]) == {"linux/amd64", "linux/arm64"}, err
    import tarfile

    with tarfile.open(archive) as tar:
        handle = tar.extractfile("index.json")
        assert handle is not None
        listed = {f"{m['platform']['os']}/{m['platform']['architecture']}": m["digest"]
                  for m in json.loads(handle.read())["manifests"]}
    assert listed == {"linux/amd64": built["demo.yaml"]["oci"]["manifest"],
                      "linux/arm64": built["demo-arm64.yaml"]["oci"]["manifest"]}
    receipts = {}
    for result in built.values():
        engine.remove_image(result["image"]["reference"])
    for platform, name in (("linux/arm64", "demo-arm64.yaml"), ("", "demo.yaml")):
        receipts[name] = tmp_path / f"{name}.receipt.json"
        code, loaded, err = cli(capsys, store, "load", str(archive), "--key", str(tmp_path / "node.pub"),
                                *(("--platform", platform) if platform else ()), "--receipt-out",
                                str(receipts[name]), "--json")
        assert code == 0, err
        assert (loaded["manifest"], loaded["config"]) == (built[name]["oci"]["manifest"], built[name]["oci"]["config"])
        assert engine.image_id(built[name]["image"]["reference"]) == built[name]["oci"]["config"]
    # A one-platform archive of another platform: refused unless asked for, nothing loaded.
    single = tmp_path / "arm64.oci.tar"
    assert cli(capsys, store, "save", str(arm64), "-o", str(single))[0] == 0
    engine.remove_image(built["demo-arm64.yaml"]["image"]["reference"])
    code, _, err = cli(capsys, store, "load", str(single), "--key", str(tmp_path / "node.pub"))
    assert code == 1 and "the image is for linux/arm64, not linux/amd64 (this machine's)" in err, err
    assert "--platform linux/arm64" in err and engine.inspect(built["demo-arm64.yaml"]["image"]["reference"]) is None
    assert cli(capsys, store, "load", str(single), "--key", str(tmp_path / "node.pub"), "--platform",
               "linux/arm64")[0] == 0

    # verify-node and run-args hold a receipt to this machine's platform unless --platform names another.
    arm64_receipt = receipts["demo-arm64.yaml"]
    code, report, _ = cli(capsys, store, "verify-node", "--receipt", str(arm64_receipt), "--key",
                          str(tmp_path / "node.pub"), "--json")
    assert code == 1 and report["failed_stage"] == "platform", report
    code, report, err = cli(capsys, store, "verify-node", "--receipt", str(arm64_receipt), "--key",
                            str(tmp_path / "node.pub"), "--platform", "linux/arm64", "--json")
    assert code == 0, (report, err)
    code, _, err = cli(capsys, store, "run-args", str(arm64_receipt), "--root", str(demo.parent.parent))
    assert code == 1 and "the image is for linux/arm64, not linux/amd64" in err, err
    code, args, err = cli(capsys, store, "run-args", str(arm64_receipt), "--root", str(demo.parent.parent),
                          "--platform", "linux/arm64", "--json")
    assert code == 0 and args["args"][:2] == ["--platform", "linux/arm64"], err
    ran = subprocess.run([engine.client, "run", "--rm", "--network", "none", *args["args"], args["image"],
                          "python3", "-c", "import platform; print(platform.machine())"],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and ran.stdout.strip() == "aarch64", ran.stderr
    code, args, err = cli(capsys, store, "run-args", str(receipts["demo.yaml"]), "--root", str(demo.parent.parent),
                          "--json")
    assert code == 0 and "--platform" not in args["args"], err
    for name in (f"{repository}:latest", *(result["image"]["reference"] for result in built.values()),
                 *(result["oci"]["config"] for result in built.values())):
        engine.remove_image(name)
