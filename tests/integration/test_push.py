"""``sparkimg push`` against the real loopback registry: the registry serves the manifest the
receipt names, blobs it has are skipped, base layers are mounted, a patch change moves bytes."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from sparkimg.engine.protocol import Engine
from tests.support import REGISTRY

from .helpers import cli, copy_demo

ACCEPT = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"


def _served(repository: str, reference: str) -> str:
    response = requests.head(f"http://{REGISTRY}/v2/{repository}/manifests/{reference}", timeout=5,
                             headers={"Accept": ACCEPT})
    response.raise_for_status()
    return str(response.headers["Docker-Content-Digest"])


def test_push_serves_the_receipts_manifest_and_a_patch_change_moves_only_its_layer(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    code, built, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet", "--key", str(tmp_path / "node.key"))
    assert code == 0
    repository = f"sparkimg-test/push-{uuid.uuid4().hex[:8]}"
    code, pushed, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--tag", "latest",
                            "--json")
    assert code == 0, err
    assert pushed["manifest"] == built["oci"]["manifest"] == _served(repository, "latest")
    assert _served(repository, pushed["tags"][0]) == pushed["manifest"]  # the dated tag
    hows = [b["how"] for b in pushed["blobs"]]
    assert hows[0] == "mounted" and hows[1:] == ["uploaded"] * 4  # base layer from its repo; 3 layers, config

    # The receipt's manifest subject is what the registry serves: verify-receipt from the registry.
    receipt = json.loads(Path(built["receipt"]).read_text())
    statement = json.loads(base64.b64decode(receipt["payload"]))
    manifest_subject = next(s for s in statement["subject"] if s["annotations"]["kind"] == "image-manifest")
    assert "sha256:" + manifest_subject["digest"]["sha256"] == pushed["manifest"]
    code, report, _ = cli(capsys, store, "verify-receipt", built["receipt"], "--key", str(tmp_path / "node.pub"),
                          "--image", f"{registry}/{repository}:latest", "--json")
    check = next(c for c in report["checks"] if c["field"] == "image.manifest_digest")
    assert check["ok"] and not check["note"]
    # Pulled by digest, the engine names it by the config digest sparkimg wrote.
    remote = f"{registry}/{repository}@{pushed['manifest']}"
    subprocess.run([engine.client, "pull", "-q", remote], check=True, capture_output=True)
    assert engine.image_id(remote) == built["oci"]["config"]

    code, again, _ = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--json")
    assert code == 0 and again["sent_bytes"] == 0 and {b["how"] for b in again["blobs"]} == {"present"}

    patch = demo.parents[1] / "patches" / "demo" / "serve.env"
    patch.write_text(patch.read_text() + "VLLM_PUSH_TEST=1\n")
    assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, rebuilt, _ = cli(capsys, store, "build", str(demo), "--json", "--quiet")
    assert code == 0
    code, third, _ = cli(capsys, store, "push", str(demo), "--to", f"{registry}/{repository}", "--tag", "latest",
                         "--json")
    assert code == 0 and _served(repository, "latest") == rebuilt["oci"]["manifest"]
    uploaded = [b for b in third["blobs"] if b["how"] == "uploaded"]
    # the patch layer (an uncompressed tar: at least one 10 KiB tar record) and the config
    assert len(uploaded) == 2 and third["sent_bytes"] < 16_384
    for result in (built, rebuilt):
        engine.remove_image(result["image"]["reference"])
    engine.remove_image(remote)


def test_push_refuses_a_bad_target_and_an_unbuilt_image(
    tmp_path: Path, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = copy_demo(tmp_path / "project")
    store = tmp_path / "store"
    code, _, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/x:tag")
    assert code == 2 and "REGISTRY/REPO" in err and "Traceback" not in err
    assert cli(capsys, store, "lock", str(demo))[0] == 0
    code, _, err = cli(capsys, store, "push", str(demo), "--to", f"{registry}/sparkimg-test/unbuilt")
    assert code == 2 and "sparkimg build" in err


class _FailingProxy:
    """The real loopback registry behind a proxy that answers request number ``fail`` (1-based)
    with a 500 instead of forwarding it; upload Locations are rewritten to come back through it."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.fail: int | None = None
        self.count = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _forward(self) -> None:
                proxy.count += 1
                if proxy.count == proxy.fail:
                    self.send_response(500)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                answer = requests.request(self.command, f"http://{REGISTRY}{self.path}", headers=headers, data=body,
                                          allow_redirects=False, timeout=30)
                self.send_response(answer.status_code)
                for key, value in answer.headers.items():
                    if key.lower() in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        continue
                    self.send_header(key, value.replace(f"http://{REGISTRY}", proxy.url))
                content = answer.content if self.command != "HEAD" else b""
                self.send_header("Content-Length", str(len(content) if self.command != "HEAD"
                                                       else answer.headers.get("Content-Length", "0")))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.url = f"http://{self.address}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _attested(repository: str, manifest: str | None) -> bool:
    """Whether the registry lists a receipt for ``manifest`` (the referrers fallback index)."""
    if manifest is None:
        return False
    response = requests.get(f"http://{REGISTRY}/v2/{repository}/manifests/sha256-{manifest[7:]}", timeout=5,
                            headers={"Accept": "application/vnd.oci.image.index.v1+json"})
    return response.status_code == 200 and bool(response.json().get("manifests"))


def _tag(repository: str, tag: str) -> str | None:
    response = requests.head(f"http://{REGISTRY}/v2/{repository}/manifests/{tag}", timeout=5,
                             headers={"Accept": ACCEPT})
    return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None


def test_a_push_failing_at_any_request_leaves_each_tag_where_it_was_or_on_an_attested_image(
    tmp_path: Path, engine: Engine, demo_base: str, registry: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    assert cli(capsys, store, "keygen", "--out", str(tmp_path / "node"))[0] == 0
    key = ("--key", str(tmp_path / "node.key"))
    built = []
    for n in range(2):  # the image in service (v0) and the one pushed over it (v1): another patch file
        demo = copy_demo(tmp_path / f"v{n}")
        patch = demo.parents[1] / "patches" / "demo" / "serve.env"
        patch.write_text(patch.read_text() + f"VLLM_PUSH_TEST={n}\n")
        assert cli(capsys, store, "patches", "pin", str(patch.parent))[0] == 0
        assert cli(capsys, store, "lock", str(demo))[0] == 0
        code, result, err = cli(capsys, store, "build", str(demo), "--json", "--quiet", *key)
        assert code == 0, err
        built.append((demo, result))
    (v0, first), (v1, second) = built
    proxy = _FailingProxy()
    try:
        attempt = 0
        while True:
            attempt += 1
            repository = f"sparkimg-test/failing-{uuid.uuid4().hex[:8]}"
            code, _, err = cli(capsys, store, "push", str(v0), "--to", f"{registry}/{repository}", "--tag",
                                    "latest", "--json")
            assert code == 0, err
            proxy.count, proxy.fail = 0, attempt
            code, pushed, err = cli(capsys, store, "push", str(v1), "--to", f"{proxy.address}/{repository}",
                                    "--tag", "latest", "--json")
            latest = _tag(repository, "latest")
            if code == 0:
                assert latest == second["oci"]["manifest"] and _attested(repository, latest)
                break
            assert code != 0 and "Traceback" not in err, err
            assert latest in (first["oci"]["manifest"], second["oci"]["manifest"]), attempt
            if latest == second["oci"]["manifest"]:
                assert _attested(repository, latest), f"request {attempt}: latest moved before the receipt"
            assert attempt < 100
        assert attempt > 10  # every request of a real push was failed once: blobs, manifest, receipt, tags
        dated = pushed["tags"][0]
        assert _tag(repository, dated) == second["oci"]["manifest"]
    finally:
        proxy.close()
        for _, result in built:
            engine.remove_image(result["image"]["reference"])
