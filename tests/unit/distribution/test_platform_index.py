"""One tag for several platforms: the index names each image with its platform (an OCI index, or
Docker's manifest list for Docker manifests), and a pull chooses by platform or says what is there."""

from __future__ import annotations

import json

import pytest

from sparkimg.errors import FetchError
from sparkimg.formats import oci

AMD64 = oci.Descriptor(oci.DOCKER_MANIFEST, "sha256:" + "a" * 64, 100)
ARM64 = oci.Descriptor(oci.DOCKER_MANIFEST, "sha256:" + "b" * 64, 200)


def test_the_index_names_each_image_with_its_platform() -> None:
    index, media_type = oci.platform_index([(AMD64, "linux/amd64"), (ARM64, "linux/arm64")])
    assert media_type == oci.DOCKER_LIST == json.loads(index)["mediaType"]
    assert json.loads(index)["manifests"][1] == {**ARM64.to_json(), "platform": {"architecture": "arm64",
                                                                                "os": "linux"}}
    oci_image = oci.Descriptor(oci.OCI_MANIFEST, "sha256:" + "c" * 64, 3)
    assert oci.platform_index([(oci_image, "linux/arm64")])[1] == oci.OCI_INDEX
    assert oci.chosen_manifest(index, "linux/arm64", "r") == ARM64
    assert oci.chosen_manifest(index, "linux/amd64", "r") == AMD64


def test_a_platform_the_index_lacks_is_said_with_what_it_holds() -> None:
    index, _ = oci.platform_index([(AMD64, "linux/amd64")])
    with pytest.raises(FetchError, match="r: no image for linux/arm64; the index holds linux/amd64"):
        oci.chosen_manifest(index, "linux/arm64", "r")


def test_a_saved_archive_records_the_platform() -> None:
    index = json.loads(oci.layout_index([oci.LayoutEntry(ARM64, "x/y:1", "sha256:" + "d" * 64,
                                                         platform="linux/arm64")]))
    assert index["manifests"][0]["platform"] == {"architecture": "arm64", "os": "linux"}
