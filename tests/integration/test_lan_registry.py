"""Registries on a LAN, for real: two docker-registry processes on this machine's non-loopback
address (192.0.2.2, a LAN host as far as any client can tell), one over plain HTTP, one over
HTTPS with a self-signed CA made here. The signed demo is pushed to each: plain HTTP only with
``--plain-http``; TLS only with the CA (``--ca-file``, or Docker's certs.d file); then pulled
back and verified. The engine pulls with its own configuration: an extra daemon started with
``--insecure-registry`` pulls from the HTTP one, the shared engine (the CA in its certs.d) from
the TLS one."""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import ipaddress
import json
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from sparkimg._internal.locations import CERTS_D_ENV
from sparkimg.errors import EngineError
from tests.support import REGISTRY, unavailable

from .nodes import nodes, signed_demo, sparkimg

pytestmark = pytest.mark.integration

LAN_HOST = "192.0.2.2"  # eth0 here: not loopback, so no client treats it as local
MANIFESTS = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
ENGINE_CERTS_D = Path("/etc/docker/certs.d")  # where the engine (dockerd) reads a registry's CA


@dataclass(frozen=True)
class Demo:
    folder: Path
    spec: Path
    store: Path
    built: dict[str, Any]

    @property
    def key(self) -> str:
        return str(self.folder / "trusted.pub")

    def run(self, *args: str) -> tuple[int, Any, str]:
        return sparkimg(self.store, *args)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, engine: Any, demo_base: str) -> Iterator[Demo]:
    folder = tmp_path_factory.mktemp("lan")
    spec, store, _, built = signed_demo(folder)
    try:
        yield Demo(folder, spec, store, built)
    finally:
        engine.remove_image(built["image"]["reference"])


@pytest.fixture(autouse=True)
def no_certs_d(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty certs.d for sparkimg: only what a test puts there (never the engine's) is read."""
    folder = tmp_path / "certs.d"
    folder.mkdir()
    monkeypatch.setenv(CERTS_D_ENV, str(folder))
    return folder


def _free_port() -> int:
    with socket.socket() as probe:
        try:
            probe.bind((LAN_HOST, 0))
        except OSError as exc:
            unavailable(f"{LAN_HOST} is not an address of this machine: {exc}")
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _registry(folder: Path, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    """A docker-registry serving on LAN_HOST at a free port (HTTPS with ``tls``: certificate, key),
    as scripts/dev-up starts the loopback one; stopped at the end. Yields HOST:PORT."""
    if shutil.which("docker-registry") is None:
        unavailable("no docker-registry binary (scripts/dev-up installs it)")
    address = f"{LAN_HOST}:{_free_port()}"
    folder.mkdir(parents=True)
    served = (f"  tls:\n    certificate: {tls[0]}\n    key: {tls[1]}\n") if tls else ""
    config = folder / "registry.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                      f"    rootdirectory: {folder / 'data'}\n  delete:\n    enabled: true\n"
                      f"http:\n  addr: {address}\n{served}")
    with (folder / "registry.log").open("wb") as log:
        process = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection((LAN_HOST, int(address.split(":")[1])), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                unavailable(f"docker-registry on {address} did not come up: "
                            f"{(folder / 'registry.log').read_text(errors='replace')[-600:]}")
            time.sleep(0.2)
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _tls_files(folder: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a server certificate it signed for LAN_HOST (an IP SAN): (CA, cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparkimg test LAN CA")])
    usage = {name: False for name in ("digital_signature", "content_commitment", "key_encipherment",
                                      "data_encipherment", "key_agreement", "key_cert_sign", "crl_sign",
                                      "encipher_only", "decipher_only")}
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(**{**usage, "key_cert_sign": True, "crl_sign": True}), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder()
              .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, LAN_HOST)])).issuer_name(ca_name)
              .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
              .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(LAN_HOST))]),
                             critical=False)
              .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
              .add_extension(x509.KeyUsage(**{**usage, "digital_signature": True}), critical=True)
              .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
              .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
              .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.crt", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return paths


def _served(url: str, verify: bool | str = True) -> str:
    answer = requests.head(url, headers={"Accept": MANIFESTS}, timeout=10, verify=verify)
    answer.raise_for_status()
    return str(answer.headers["Docker-Content-Digest"])


def test_plain_http_registry_only_with_plain_http(demo: Demo, tmp_path: Path,
                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    with _registry(tmp_path / "http") as host:
        repository = f"{host}/sparkimg-test/lan-{uuid.uuid4().hex[:8]}"
        # Refused by default, named with the flag: a bare reference is tried over TLS, http:// is refused unasked.
        code, _, err = demo.run("push", str(demo.spec), "--to", repository, "--tag", "latest")
        assert code == 1 and "does not speak TLS" in err and "--plain-http" in err, err
        code, _, err = demo.run("push", str(demo.spec), "--to", f"http://{repository}", "--tag", "latest")
        assert code == 2 and "--plain-http" in err and "Traceback" not in err, err
        code, pushed, err = demo.run("push", str(demo.spec), "--to", f"http://{repository}", "--tag", "latest",
                                     "--plain-http", "--json")
        assert code == 0, err
        assert pushed["repository"] == repository
        assert pushed["registry"] == {"registry": host, "transport": "http", "ca_file": None}
        name = repository.removeprefix(f"{host}/")
        assert _served(f"http://{host}/v2/{name}/manifests/latest") == pushed["manifest"]

        # lock: a base on the LAN registry (the demo base's manifest and config beside the pushed layers).
        base = requests.get(f"http://{REGISTRY}/v2/sparkimg/demo-base/manifests/bookworm", timeout=10,
                            headers={"Accept": MANIFESTS})
        base.raise_for_status()
        config = requests.get(f"http://{REGISTRY}/v2/sparkimg/demo-base/blobs/{base.json()['config']['digest']}",
                              timeout=30).content
        started = requests.post(f"http://{host}/v2/{name}/blobs/uploads/", timeout=10)
        requests.put(started.headers["Location"], params={"digest": base.json()["config"]["digest"]}, data=config,
                     headers={"Content-Type": "application/octet-stream"}, timeout=30).raise_for_status()
        requests.put(f"http://{host}/v2/{name}/manifests/base", data=base.content, timeout=10,
                     headers={"Content-Type": base.headers["Content-Type"]}).raise_for_status()
        spec = demo.folder / "project" / "layers" / "lan.yaml"
        spec.write_text(demo.spec.read_text().replace(f"image: {REGISTRY}/sparkimg/demo-base:bookworm",
                                                      f"image: {repository}:base"))
        code, _, err = demo.run("lock", str(spec))
        assert code == 1 and "--plain-http" in err, err
        code, locked, err = demo.run("lock", str(spec), "--plain-http", "--json")
        assert code == 0, err
        assert locked["base"]["repository"] == repository
        assert locked["base"]["manifest_digest"] == "sha256:" + hashlib.sha256(base.content).hexdigest()
        # The lock records the plain HTTP it was asked for; every reader of the base goes the same way
        # (fetch, build, --check's scratch store, the SBOM, the nightly), and a re-lock keeps it.
        assert json.loads(spec.with_name("lan.yaml.lock.json").read_text())["base"]["transport"] == "http"
        code, _, err = demo.run("lock", str(spec), "--update", "base")
        assert code == 0, err
        from sparkimg.fetch.inputs import base_image
        from sparkimg.lock.resolve import load_lock
        from sparkimg.spec import load_spec
        from sparkimg.store.content import Store

        read = base_image(load_lock(load_spec(spec)), Store(tmp_path / "scratch-store"))
        assert read.manifest == base.content and read.config == config

        # pull: sparkimg verifies the receipt over plain HTTP; the shared engine, not configured for this
        # registry, refuses its own pull, and the error says where the engine is configured.
        code, _, err = demo.run("pull", f"{repository}:latest", "--key", demo.key)
        assert code == 1 and "--plain-http" in err, err
        code, _, err = demo.run("pull", f"{repository}:latest", "--key", demo.key, "--plain-http")
        assert code == 1 and "insecure-registries" in err and "verified" in err, err
        # A short folder: a node's containerd socket path must fit a unix socket's 108 bytes.
        with nodes(1, tmp_path_factory.mktemp("n"), ("--insecure-registry", host)) as (node,):
            code, pulled, err = node.sparkimg(demo.store, "pull", f"docker://{repository}:latest", "--key", demo.key,
                                              "--plain-http", "--json")
            assert code == 0, err
            assert pulled["manifest"] == pushed["manifest"] and pulled["reference"] == f"{repository}:latest"
            assert node.image_id(f"{repository}:latest") == pushed["config"]


def test_tls_registry_with_a_self_signed_ca(demo: Demo, tmp_path: Path, no_certs_d: Path, engine: Any) -> None:
    ca, certificate, key = _tls_files(tmp_path / "tls")
    with _registry(tmp_path / "https", (certificate, key)) as host:
        repository = f"{host}/sparkimg-test/lan-{uuid.uuid4().hex[:8]}"
        name = repository.removeprefix(f"{host}/")
        code, _, err = demo.run("push", str(demo.spec), "--to", repository, "--tag", "latest")
        assert code == 1 and host in err and "does not verify" in err and "--ca-file" in err, err
        assert "certs.d" in err and "Traceback" not in err
        code, _, err = demo.run("push", str(demo.spec), "--to", repository, "--ca-file", str(tmp_path / "none.pem"))
        assert code == 2 and "--ca-file" in err and "no such file" in err, err

        code, pushed, err = demo.run("push", str(demo.spec), "--to", f"docker://{repository}", "--tag", "latest",
                                     "--ca-file", str(ca), "--json")
        assert code == 0, err
        sha = "sha256:" + hashlib.sha256(ca.read_bytes()).hexdigest()
        assert pushed["registry"] == {"registry": host, "transport": "https",
                                      "ca_file": {"path": str(ca), "sha256": sha, "from": "--ca-file"}}
        assert _served(f"https://{host}/v2/{name}/manifests/latest", str(ca)) == pushed["manifest"]

        # Docker's own per-registry CA, read without a flag.
        (no_certs_d / host).mkdir()
        shutil.copyfile(ca, no_certs_d / host / "ca.crt")
        code, again, err = demo.run("push", str(demo.spec), "--to", f"https://{repository}", "--tag", "again",
                                    "--json")
        assert code == 0, err
        assert again["registry"]["ca_file"] == {"path": str(no_certs_d / host / "ca.crt"), "sha256": sha,
                                                "from": "certs.d"}
        assert {b["how"] for b in again["blobs"]} == {"present"}
        (no_certs_d / host / "ca.crt").unlink()

        # pull: sparkimg with --ca-file; the engine with the CA where it reads one (its certs.d).
        code, _, err = demo.run("pull", f"{repository}:latest", "--key", demo.key)
        assert code == 1 and "--ca-file" in err, err
        engine_ca = ENGINE_CERTS_D / host / "ca.crt"
        made = engine_ca.parent if ENGINE_CERTS_D.exists() else ENGINE_CERTS_D  # removed again at the end
        try:
            engine_ca.parent.mkdir(parents=True)
        except OSError as exc:
            unavailable(f"cannot give the engine the test CA in {engine_ca.parent}: {exc}")
        try:
            shutil.copyfile(ca, engine_ca)
            code, pulled, err = demo.run("pull", f"{repository}:latest", "--key", demo.key, "--ca-file", str(ca),
                                         "--json")
            assert code == 0, err
            assert pulled["manifest"] == pushed["manifest"] and "signature" in pulled["checks"]
            assert engine.inspect(f"{repository}:latest").id == pushed["config"]
        finally:
            shutil.rmtree(made, ignore_errors=True)
            with contextlib.suppress(EngineError):  # not there when the pull failed
                engine.remove_image(f"{repository}:latest")
