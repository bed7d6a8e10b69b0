"""``sparkimg nightly`` with real moving inputs on this machine: a local git repository whose
branch gets new commits, a base tag re-pushed to the loopback registry with a new digest, and a
local package index whose newest version changes. Each move is detected, only the layers it
touches are rebuilt, the report names it; a broken tip fails the night and leaves the build in
service; ``rollback`` puts a known-good night back (lock, engine tag, registry tag)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import socketserver
import subprocess
import threading
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from sparkimg.engine.protocol import Engine
from tests.formats import spec_header
from tests.support import image_build

from .helpers import cli, git

PACKAGE = "sparkimg-nt-extra"
ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"

# The compile layer's build script, kept in the git repository it builds: a pure-Python wheel
# whose module carries the repository's rev.txt (a new commit, a new wheel). "fail" breaks it as a
# compiler does: the error first, then lines after it (the tool's last word is not the cause).
BUILD = """\
import sys, zipfile
rev = open("/src/rev.txt").read().strip()
if rev == "fail":
    sys.stderr.write("nt_kernel.cu(3): error: this tip is broken\\n1 error detected in nt_kernel.cu\\n")
    sys.exit("ninja: build stopped")
z = zipfile.ZipFile("/out/nt_kernel-0-py3-none-any.whl", "w")
for name, data in [("nt_kernel.py", "REV = %r\\n" % rev),
                   ("nt_kernel-0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: nt-kernel\\nVersion: 0\\n"),
                   ("nt_kernel-0.dist-info/WHEEL", "Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"),
                   ("nt_kernel-0.dist-info/RECORD", "")]:
    z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data)
z.close()
"""


def _commit(repo: Path, rev: str, subject: str) -> str:
    (repo / "rev.txt").write_text(rev + "\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", subject)
    return git(repo, "rev-parse", "HEAD")


def _wheel(folder: Path, version: str) -> Path:
    name = "sparkimg_nt_extra"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    files = {f"{name}.py": f"VERSION = {version!r}\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d.encode()).digest()).rstrip(b'=').decode()}"
                     f",{len(d.encode())}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in {**files, f"{info}/RECORD": record}.items():
            z.writestr(zipfile.ZipInfo(n, (1980, 1, 1, 0, 0, 0)), d)
    return path


class Index:
    """A package index on loopback (PEP 691 JSON with upload times, PEP 503 HTML) over a folder of
    wheels; ``publish`` adds a version."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.uploaded: dict[str, str] = {}
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.rstrip("/") == f"/simple/{PACKAGE}":
                    files = index.files()
                    if "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", ""):
                        body = json.dumps({"meta": {"api-version": "1.1"}, "name": PACKAGE, "files": files}).encode()
                        kind = "application/vnd.pypi.simple.v1+json"
                    else:
                        body = "".join(f'<a href="{f["url"]}#sha256={f["hashes"]["sha256"]}">{f["filename"]}</a>\n'
                                       for f in files).encode()
                        kind = "text/html"
                elif self.path.startswith("/files/") and (index.folder / self.path[7:]).is_file():
                    body, kind = (index.folder / self.path[7:]).read_bytes(), "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def files(self) -> list[dict[str, Any]]:
        return [{"filename": p.name, "url": f"/files/{p.name}", "upload-time": self.uploaded[p.name],
                 "hashes": {"sha256": hashlib.sha256(p.read_bytes()).hexdigest()}}
                for p in sorted(self.folder.glob("*.whl"))]

    def publish(self, version: str, when: str) -> None:
        self.uploaded[_wheel(self.folder, version).name] = when

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Index]:
    (tmp_path / "index").mkdir()
    served = Index(tmp_path / "index")
    monkeypatch.setenv("PIP_INDEX_URL", served.url)
    monkeypatch.setenv("SPARKIMG_PYPI_INDEX", served.url)
    monkeypatch.delenv("PIP_EXTRA_INDEX_URL", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    yield served
    served.close()


def _push_base(engine: Engine, demo_base: str, reference: str, n: int, tmp_path: Path) -> str:
    """The demo base with one label, built and pushed as ``reference``; its manifest digest."""
    context = tmp_path / f"base-{n}"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {demo_base}\nLABEL dev.sparkimg.test.night={n}\n")
    image_build(engine, context, tags=[reference], labels={"dev.sparkimg.test": "nightly-base"})
    subprocess.run([engine.client, "push", "-q", reference], capture_output=True, text=True, check=True)
    return _served(reference.split("/", 1)[1].rsplit(":", 1)[0], reference.rsplit(":", 1)[1])


def _served(repository: str, reference: str) -> str:
    response = requests.head(f"http://127.0.0.1:5000/v2/{repository}/manifests/{reference}", timeout=5,
                             headers={"Accept": ACCEPT})
    response.raise_for_status()
    return str(response.headers["Docker-Content-Digest"])


def _statuses(night: dict[str, Any]) -> dict[str, str]:
    report = json.loads(Path(night["report"]["json"]).read_text())
    return {layer["name"]: layer["status"] for layer in report["layers"]}


def test_nightly_detects_each_move_rebuilds_only_what_it_touches_and_rolls_back(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, index: Index,
    capsys: pytest.CaptureFixture[str]
) -> None:
    unique = uuid.uuid4().hex[:8]
    base = f"{registry}/sparkimg-test/nightly-base-{unique}:t"
    repository = f"{registry}/sparkimg-test/nightly-{unique}"
    _push_base(engine, demo_base, base, 1, tmp_path)
    bases = [engine.image_id(base)]
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "build.py").write_text(BUILD)
    first_commit = _commit(upstream, "one", "first kernel")
    index.publish("1.0", "2026-12-01T10:00:00Z")
    project = tmp_path / "project"
    project.mkdir()
    name = f"it-nightly-{unique}"
    spec = project / "spec.yaml"
    spec.write_text(spec_header(name, base=base, platform="native", image=f"sparkimg-test/{name}") + f"""\
sources:
  kernel:
    git: {upstream}
    ref: main
  extra:
    pypi: {PACKAGE}
    version: latest
layers:
  - name: kernel
    kind: compile
    source: kernel
    command: python3 /src/build.py
    memory: 1g
    job_memory: 256m
    pids: 256
  - name: extra
    kind: wheel
    source: extra
""")
    store, state = tmp_path / "store", tmp_path / "state"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    lock = project / "spec.yaml.lock.json"
    nightly = ["nightly", str(spec), "--state", str(state), "--key", str(tmp_path / "node.key"), "--push", repository,
               "--json", "--quiet"]
    images: list[str] = []

    # Night 1: no lock yet: everything is resolved and built, then promoted.
    code, first, err = cli(capsys, store, *nightly)
    assert code == 0, err
    assert first["status"] == "built" and first["moved"] == [] and set(first["rebuilt"]) == {"kernel", "extra", "image"}
    images.append(first["image"]["reference"])
    locked = json.loads(lock.read_text())
    assert locked["sources"]["kernel"]["commit"] == first_commit and locked["sources"]["extra"]["version"] == "1.0"
    assert engine.image_id(f"sparkimg-test/{name}:nightly") == first["image"]["config"]
    assert _served(repository.split("/", 1)[1], "nightly") == first["image"]["manifest"]
    assert not (project / "spec.yaml.lock.candidate.json").exists()
    # The night pushed the SBOM beside the receipt, as `sparkimg push` does (one push path).
    code, sbom, err = cli(capsys, store, "sbom", f"{repository}:nightly", "--key", str(tmp_path / "node.pub"), "--json")
    assert code == 0 and sbom["spdxVersion"] == "SPDX-2.3", err

    # Night 2: nothing moved (said to a person too).
    code, same, err = cli(capsys, store, *nightly)
    assert code == 0 and same["status"] == "unchanged" and same["moved"] == [] and same["rebuilt"] == [], err
    code, said, err = cli(capsys, store, *[a for a in nightly if a != "--json"])
    assert code == 0 and "nothing moved" in said and "Traceback" not in err

    # Night 3: a new commit on the branch: the compile layer and the assembly, not the wheel.
    second_commit = _commit(upstream, "two", "second kernel: faster <b>path</b>")
    code, git_night, err = cli(capsys, store, *nightly, "--check")
    assert code == 0, err
    assert json.loads(Path(git_night["report"]["json"]).read_text())["check"] == {"identical": True, "differences": 0}
    assert json.loads(Path(git_night["report"]["json"]).read_text())["verify"]["ok"]
    assert git_night["moved"] == [{"input": "kernel", "from": first_commit, "to": second_commit}]
    assert _statuses(git_night) == {"kernel": "rebuilt", "extra": "reused", "image": "rebuilt"}
    report = json.loads(Path(git_night["report"]["json"]).read_text())
    assert report["moved"][0]["kind"] == "git"
    assert report["moved"][0]["to_detail"]["subject"] == "second kernel: faster <b>path</b>"
    assert report["moved"][0]["from_detail"]["subject"] == "first kernel"
    assert next(r for r in report["layers"] if r["name"] == "kernel")["reason"] == "source kernel moved"
    assert next(r for r in report["layers"] if r["name"] == "kernel")["wall_s"] > 0
    assert [h["entry"] for h in report["history"]][:2] == [first["entry"], same["entry"]]
    assert len(report["history"]) == 3
    page = Path(git_night["report"]["html"]).read_text()
    assert "Content-Security-Policy" in page and "<svg" in page  # the renderer's page, with its plots
    assert "<b>path</b>" not in page and "second kernel: faster &lt;b&gt;path&lt;/b&gt;" in page  # escaped
    images.append(git_night["image"]["reference"])
    good_lock = lock.read_bytes()
    assert cli(capsys, store, "promote", str(spec), git_night["entry"], "--state", str(state))[0] == 0

    # Night 4: a newer version on the index: the wheel layer and the assembly, not the compile.
    index.publish("1.1", "2026-12-02T11:00:00Z")
    code, pypi_night, err = cli(capsys, store, *nightly)
    assert code == 0, err
    assert pypi_night["moved"] == [{"input": "extra", "from": "1.0", "to": "1.1"}]
    assert _statuses(pypi_night) == {"kernel": "reused", "extra": "rebuilt", "image": "rebuilt"}
    moved = json.loads(Path(pypi_night["report"]["json"]).read_text())["moved"][0]
    assert moved["kind"] == "pypi" and moved["to_detail"]["date"] == "2026-12-02T11:00:00Z"
    images.append(pypi_night["image"]["reference"])

    # Night 5: the base tag re-pushed with a new digest: the compile (it runs on the base) and the
    # assembly; the wheel layer's key is the wheel's own sha256 (it is installed at assembly).
    old_base = json.loads(lock.read_text())["base"]["manifest_digest"]
    new_base = _push_base(engine, demo_base, base, 2, tmp_path)
    bases.append(engine.image_id(base))
    code, base_night, err = cli(capsys, store, *nightly)
    assert code == 0, err
    assert base_night["moved"] == [{"input": "base", "from": old_base, "to": new_base}]
    assert _statuses(base_night) == {"kernel": "rebuilt", "extra": "reused", "image": "rebuilt"}
    assert "date" in json.loads(Path(base_night["report"]["json"]).read_text())["moved"][0]["to_detail"]
    images.append(base_night["image"]["reference"])
    in_service = lock.read_bytes()

    # Night 6: a new commit whose push fails (nothing listens there): failed at push, nothing promoted.
    _commit(upstream, "three", "third kernel")
    unreachable = [*nightly[:-4], "--push", "127.0.0.1:9/sparkimg-test/nowhere", "--json", "--quiet"]
    code, unpushed, err = cli(capsys, store, *unreachable)
    assert code == 1 and unpushed["failed_stage"] == "push" and "127.0.0.1:9" in unpushed["error"], err
    assert unpushed["rebuilt"] == ["kernel", "image"]  # built, signed, not pushed, not promoted
    assert lock.read_bytes() == in_service
    assert engine.image_id(f"sparkimg-test/{name}:nightly") == base_night["image"]["config"]
    images.append(unpushed["image"]["reference"])

    # Night 7: a broken tip: the build fails, the lock and the moving tags stay on night 5.
    _commit(upstream, "fail", "broken tip")
    told = tmp_path / "told.txt"
    code, broken, err = cli(capsys, store, *nightly, "--hook", f"env | grep ^SPARKIMG_NIGHTLY_ | sort > {told}")
    assert code == 1 and broken["status"] == "failed" and broken["failed_stage"] == "build", err
    hook = dict(line.split("=", 1) for line in told.read_text().splitlines())
    assert hook["SPARKIMG_NIGHTLY_STATUS"] == "failed" and hook["SPARKIMG_NIGHTLY_FAILED_STAGE"] == "build"
    assert hook["SPARKIMG_NIGHTLY_EXIT"] == "1" and hook["SPARKIMG_NIGHTLY_REPORT"] == broken["report"]["json"]
    assert broken["error"].startswith("layer kernel") and "ninja: build stopped" in broken["error"]
    # The entry and its report keep the cause: the failed layer's first error line, not its last word.
    failure = {"stage": "build", "first_error_line": "nt_kernel.cu(3): error: this tip is broken", "layer": "kernel",
               "files": [], "files_total": 0}
    assert broken["failure"] == failure
    assert json.loads((Path(broken["report"]["json"]).parent / "entry.json").read_text())["failure"] == failure
    page = Path(broken["report"]["html"]).read_text()
    assert "<th>first error line</th><td><code>nt_kernel.cu(3): error: this tip is broken</code>" in page
    assert _statuses(broken) == {"kernel": "failed", "extra": "reused", "image": "skipped"}
    assert lock.read_bytes() == in_service
    assert engine.image_id(f"sparkimg-test/{name}:nightly") == base_night["image"]["config"]
    assert _served(repository.split("/", 1)[1], "nightly") == base_night["image"]["manifest"]
    assert not (project / "spec.yaml.lock.candidate.json").exists()

    # History lists every night; rollback to the known-good night 3 restores its lock and tags.
    code, listed, _ = cli(capsys, store, "history", str(spec), "--state", str(state), "--json")
    assert code == 0 and [e["status"] for e in listed["entries"]] == \
        ["built", "unchanged", "unchanged", "built", "built", "built", "failed", "failed"]
    assert listed["current"] == base_night["entry"]
    code, table, err = cli(capsys, store, "history", str(spec), "--state", str(state))
    assert code == 0 and "push" in table + err and "Traceback" not in err
    code, _, err = cli(capsys, store, "rollback", str(spec), "--to", pypi_night["entry"], "--state", str(state))
    assert code == 2 and "known-good" in err and "Traceback" not in err
    code, rolled, err = cli(capsys, store, "rollback", str(spec), "--to", git_night["entry"], "--state", str(state),
                            "--json")
    assert code == 0 and rolled["entry"] == git_night["entry"], err
    assert lock.read_bytes() == good_lock
    assert engine.image_id(f"sparkimg-test/{name}:nightly") == git_night["image"]["config"]
    assert _served(repository.split("/", 1)[1], "nightly") == git_night["image"]["manifest"]
    code, built, err = cli(capsys, store, "build", str(spec), "--json", "--quiet")
    assert code == 0 and built["image"]["reference"] == git_night["image"]["reference"], err  # nothing rebuilt

    # Night 8 with --keep 2 (the broken tip fails again): the two newest nights stay, and the one in
    # service (known-good night 3); the others go, and the images only they named are untagged.
    code, pruning, err = cli(capsys, store, *nightly, "--keep", "2")
    assert code == 1 and pruning["failed_stage"] == "build", err
    code, listed, _ = cli(capsys, store, "history", str(spec), "--state", str(state), "--json")
    assert [e["entry"] for e in listed["entries"]] == [git_night["entry"], broken["entry"], pruning["entry"]]
    assert engine.image_id(git_night["image"]["reference"]) == git_night["image"]["config"]
    for gone in (first, pypi_night, base_night, unpushed):
        assert engine.image_id(gone["image"]["reference"]) is None, gone["entry"]
    assert engine.image_id(f"sparkimg-test/{name}:nightly") == git_night["image"]["config"]

    for reference in [*images, f"sparkimg-test/{name}:nightly", *(b for b in bases if b)]:
        engine.remove_image(reference)
