"""Registry references as docker and skopeo write them, and how a registry is reached (scheme,
CA file), without a registry: the real ones are in tests/integration/test_lan_registry.py."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sparkimg._internal.locations import CERTS_D_ENV
from sparkimg._internal.net.reach import NO_REACH, Reach, ca_file, recorded, split_transport, tls_refusal
from sparkimg._internal.net.registry import ImageRef, RegistryClient, reach_for
from sparkimg.cli import main
from sparkimg.distribution import push as push_mod
from sparkimg.distribution.pull import _named
from sparkimg.errors import UsageError
from sparkimg.formats.lockfile import BasePin

PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
LAN = "192.0.2.2:5001"


@pytest.mark.parametrize(("text", "registry", "repository", "url"), [
    (f"{LAN}/team/app", LAN, "team/app", f"https://{LAN}/v2/team/app"),
    (f"docker://{LAN}/team/app", LAN, "team/app", f"https://{LAN}/v2/team/app"),
    (f"https://{LAN}/team/app", LAN, "team/app", f"https://{LAN}/v2/team/app"),
    ("head.local/app", "head.local", "app", "https://head.local/v2/app"),
    ("127.0.0.1:5000/sparkimg/demo", "127.0.0.1:5000", "sparkimg/demo", "http://127.0.0.1:5000/v2/sparkimg/demo"),
    ("localhost:5000/demo", "localhost:5000", "demo", "http://localhost:5000/v2/demo"),
    ("https://127.0.0.1:5000/demo", "127.0.0.1:5000", "demo", "https://127.0.0.1:5000/v2/demo"),
    ("http://127.0.0.1:5000/demo", "127.0.0.1:5000", "demo", "http://127.0.0.1:5000/v2/demo"),
    ("ubuntu", "registry-1.docker.io", "library/ubuntu", "https://registry-1.docker.io/v2/library/ubuntu"),
    ("docker://nvidia/cuda", "registry-1.docker.io", "nvidia/cuda", "https://registry-1.docker.io/v2/nvidia/cuda"),
])
def test_references_are_read_as_docker_and_skopeo_read_them(text: str, registry: str, repository: str,
                                                             url: str) -> None:
    ref = ImageRef.parse(text)
    assert (ref.registry, ref.repository, ref.base_url) == (registry, repository, url)


def test_plain_http_to_a_lan_host_only_when_asked_and_only_for_the_registry_named() -> None:
    with pytest.raises(UsageError, match="refused unless asked") as refused:
        ImageRef.parse(f"http://{LAN}/team/app")
    assert "--plain-http" in str(refused.value.hint)
    asked = reach_for(f"http://{LAN}/team/app", plain_http=True)
    assert ImageRef.parse(f"http://{LAN}/team/app", asked).base_url == f"http://{LAN}/v2/team/app"
    assert ImageRef.parse(f"{LAN}/team/app", asked).base_url == f"http://{LAN}/v2/team/app"
    assert ImageRef.parse("192.0.2.3:5001/team/app", asked).base_url.startswith("https://")  # another registry
    assert ImageRef.parse(f"{LAN}/team/app").base_url.startswith("https://")  # not asked


def test_a_push_reads_the_base_as_its_lock_says_unless_the_base_is_on_the_pushed_registry() -> None:
    base = BasePin({}, f"{LAN}/team/base", "bookworm", None, "sha256:" + "1" * 64, "sha256:" + "2" * 64, None,
                   "linux/amd64", "http")
    pushing = RegistryClient(reach=reach_for(f"{LAN}/team/app", plain_http=True))
    assert push_mod.base_reader(base, pushing, LAN) is pushing
    elsewhere = RegistryClient(reach=reach_for("head.local/team/app", plain_http=False))
    reader = push_mod.base_reader(base, elsewhere, "head.local")
    assert reader is not elsewhere and reader.ref(base.repository).base_url == f"http://{LAN}/v2/team/base"
    locked_tls = push_mod.base_reader(replace(base, transport=None), elsewhere, "head.local")
    assert locked_tls.ref(base.repository).base_url == f"https://{LAN}/v2/team/base"


@pytest.mark.parametrize(("text", "plain", "says"), [
    (f"ftp://{LAN}/app", False, "not a registry transport"),
    (f"oci://{LAN}/app", False, "not a registry transport"),
    (f"https://{LAN}/app", True, "contradict"),
])
def test_what_is_really_wrong_is_refused_with_the_fix(text: str, plain: bool, says: str) -> None:
    with pytest.raises(UsageError, match=says) as refused:
        split_transport(text, plain)
    assert refused.value.hint


@pytest.mark.parametrize("text", [f"docker://{LAN}/team/app", f"https://{LAN}/team/app", f"{LAN}/team/app"])
def test_push_takes_the_docker_and_skopeo_forms(text: str) -> None:
    assert push_mod.target_of(text) == ImageRef(LAN, "team/app", "https")


@pytest.mark.parametrize("text", [f"https://{LAN}/team/app:tag", f"docker://{LAN}/app@sha256:" + "1" * 64,
                                  "https://justrepo"])
def test_push_still_refuses_a_tag_digest_or_missing_registry_behind_a_prefix(text: str) -> None:
    with pytest.raises(UsageError, match="REGISTRY/REPO"):
        push_mod.target_of(text)


def test_push_names_the_option_for_http() -> None:
    with pytest.raises(UsageError, match=f"--to http://{LAN}/app") as refused:
        push_mod.target_of(f"http://{LAN}/app")
    assert "--plain-http" in str(refused.value.hint)
    assert push_mod.target_of(f"http://{LAN}/app", Reach(LAN, True)) == ImageRef(LAN, "app", "http")


@pytest.mark.parametrize(("text", "tag", "digest"), [
    (f"docker://{LAN}/team/app:v1", "v1", None),
    (f"https://{LAN}/team/app@sha256:" + "a" * 64, None, "sha256:" + "a" * 64),
    (f"{LAN}/team/app:v1", "v1", None),
])
def test_pull_takes_the_docker_and_skopeo_forms(text: str, tag: str | None, digest: str | None) -> None:
    ref, repository, found_tag, found_digest = _named(text, RegistryClient())
    assert (ref.base_url, repository, found_tag, found_digest) == (f"https://{LAN}/v2/team/app", f"{LAN}/team/app",
                                                                   tag, digest)


def test_a_ca_file_is_a_pem_file_and_never_goes_with_plain_http(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--ca-file .*no such file"):
        reach_for(f"{LAN}/app", ca=tmp_path / "absent.pem")
    (tmp_path / "bad.pem").write_text("not a certificate")
    with pytest.raises(UsageError, match="not a PEM certificate"):
        reach_for(f"{LAN}/app", ca=tmp_path / "bad.pem")
    (tmp_path / "ca.pem").write_bytes(PEM)
    with pytest.raises(UsageError, match="contradict"):
        reach_for(f"{LAN}/app", plain_http=True, ca=tmp_path / "ca.pem")
    given = reach_for(f"docker://{LAN}/app", ca=tmp_path / "ca.pem")
    assert given.ca == ca_file(tmp_path / "ca.pem", "--ca-file")
    assert given.verify(LAN) == str(tmp_path / "ca.pem") and given.verify("192.0.2.3:5001") is True


def test_docker_certs_d_is_read_for_any_registry_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CERTS_D_ENV, str(tmp_path))
    assert NO_REACH.ca_for(LAN) is None
    (tmp_path / LAN).mkdir()
    (tmp_path / LAN / "ca.crt").write_bytes(PEM)
    found = NO_REACH.ca_for(LAN)
    assert found is not None and found.source == "certs.d" and found.path == tmp_path / LAN / "ca.crt"
    assert RegistryClient().reached(ImageRef.parse(f"{LAN}/app")).to_json() == {
        "registry": LAN, "transport": "https",
        "ca_file": {"path": str(tmp_path / LAN / "ca.crt"), "sha256": "sha256:" + hashlib.sha256(PEM).hexdigest(),
                    "from": "certs.d"}}
    assert NO_REACH.ca_for("192.0.2.3:5001") is None
    (tmp_path / "flag.pem").write_bytes(PEM + b"\n")
    flagged = reach_for(f"{LAN}/app", ca=tmp_path / "flag.pem")
    assert flagged.ca_for(LAN) == flagged.ca  # the flag before certs.d
    assert RegistryClient(reach=flagged).reached(ImageRef.parse(f"{LAN}/app")).ca == flagged.ca
    assert RegistryClient().reached(ImageRef.parse("127.0.0.1:5000/app")).to_json() == {
        "registry": "127.0.0.1:5000", "transport": "http", "ca_file": None}


def test_a_rollback_reaches_the_registry_as_the_night_recorded(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(PEM)
    given = reach_for(f"{LAN}/app", ca=tmp_path / "ca.pem")
    assert recorded(RegistryClient(reach=given).reached(ImageRef.parse(f"{LAN}/app", given)).to_json()) == given
    plain = reach_for(f"{LAN}/app", plain_http=True)
    assert recorded(RegistryClient(reach=plain).reached(ImageRef.parse(f"{LAN}/app", plain)).to_json()) == plain
    assert recorded(None) == NO_REACH
    (tmp_path / "ca.pem").unlink()  # gone since: certs.d or the system's CAs, and a failure names the fix
    assert recorded(RegistryClient(reach=given).reached(ImageRef.parse(f"{LAN}/app", given)).to_json()) == Reach(LAN)


def test_a_tls_failure_names_the_registry_the_reason_and_the_fix() -> None:
    failed = tls_refusal(LAN, f"https://{LAN}/v2/", Exception(
        "Max retries exceeded (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] "
        "certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1006)')))"), NO_REACH)
    assert LAN in failed.message and "self-signed certificate in certificate chain" in failed.message
    assert "--ca-file" in str(failed.hint) and f"certs.d/{LAN}/ca.crt" in str(failed.hint)
    plain = tls_refusal(LAN, f"https://{LAN}/v2/", Exception(
        "(Caused by SSLError(SSLError(1, '[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1006)')))"),
        NO_REACH)
    assert "does not speak TLS" in plain.message and "--plain-http" in str(plain.hint)


def test_the_commands_refuse_unasked_plain_http_before_anything_else(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "k.pub").write_text("not read")
    for argv in (["pull", f"http://{LAN}/app:v1", "--key", str(tmp_path / "k.pub")],
                 ["push", str(tmp_path / "spec.yaml"), "--to", f"http://{LAN}/app"]):
        assert main(["--store", str(tmp_path / "store"), *argv]) == 2
        err = capsys.readouterr().err
        assert "--plain-http" in err and "Traceback" not in err, argv


def test_nightly_refuses_unasked_plain_http_for_its_push_before_the_night(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support import REPO

    store = ["--store", str(tmp_path / "store")]
    assert main([*store, "keygen", "--out", str(tmp_path / "night")]) == 0
    night = [*store, "nightly", str(REPO / "layers" / "demo.yaml"), "--key", str(tmp_path / "night.key"),
             "--state", str(tmp_path / "state"), "--push", f"http://{LAN}/app"]
    capsys.readouterr()
    assert main(night) == 2
    assert "--plain-http" in capsys.readouterr().err
    (tmp_path / "ca.pem").write_bytes(PEM)
    assert main([*night, "--plain-http", "--ca-file", str(tmp_path / "ca.pem")]) == 2
    assert "contradict" in capsys.readouterr().err
    assert not (tmp_path / "state").exists()


def test_plain_http_a_lock_recorded_is_kept_for_that_repository_only(project: Callable[..., Path]) -> None:
    """``lock`` and the nightly's re-resolution ask ``base_client``: the last lock's plain HTTP
    holds for the same base repository, never for one the spec moved to, and not against a CA."""
    from dataclasses import replace

    from sparkimg.lock.resolve import base_client
    from sparkimg.spec import load_spec
    from tests.formats import GOOD, lock_file

    lan = GOOD.replace("127.0.0.1:5000/sparkimg/demo-base:bookworm", "192.0.2.2:5000/base:bookworm")
    spec = load_spec(project(lan))
    recorded = replace(lock_file().base, repository="192.0.2.2:5000/base", transport="http")
    assert base_client(spec, recorded).ref(spec.base.repository).scheme == "http"
    assert base_client(spec, replace(recorded, repository="192.0.2.9:5000/base")).ref(
        spec.base.repository).scheme == "https"
    assert base_client(spec, None).ref(spec.base.repository).scheme == "https"
    assert base_client(spec, None, plain_http=True).ref(spec.base.repository).scheme == "http"
    pem = spec.path.with_name("ca.pem")
    pem.write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    assert base_client(spec, recorded, ca_file=pem).ref(spec.base.repository).scheme == "https"
