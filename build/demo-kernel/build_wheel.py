"""Build the demo kernel into a wheel, with only python3 and nvcc (no network, no pip).

Inputs come from the environment the compile layer sets: NVCC_GENCODE (from the spec's
{gencode}), MAX_JOBS, SOURCE_DATE_EPOCH. The wheel is written to the folder given by --out.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

NAME = "sparkimg_demo_kernel"
VERSION = "0.1.0"
HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    gencode = shlex.split(os.environ.get("NVCC_GENCODE", "-gencode arch=compute_121a,code=sm_121a"))
    nvcc = shutil.which("nvcc") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    work = Path(tempfile.mkdtemp(prefix="demo-kernel."))
    library = work / "libsparkimg_demo.so"
    command = [nvcc, *gencode, "-O2", "-shared", "-Xcompiler", "-fPIC", "-o", str(library), str(HERE / "kernel.cu")]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    init = (
        '"""sparkimg demo kernel (built by sparkimg for the spec\'s CUDA architectures)."""\n'
        "from pathlib import Path\n\n"
        "LIBRARY = Path(__file__).with_name('libsparkimg_demo.so')\n"
    )
    files = {f"{NAME}/__init__.py": init.encode(), f"{NAME}/libsparkimg_demo.so": library.read_bytes()}
    tag = f"py3-none-linux_{platform.machine()}"
    dist = f"{NAME}-{VERSION}.dist-info"
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode()
    files[f"{dist}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: sparkimg-demo\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    stamp = max(epoch, 315532800)  # zip cannot hold dates before 1980
    import time

    date_time = time.gmtime(stamp)[:6]
    args.out.mkdir(parents=True, exist_ok=True)
    wheel = args.out / f"{NAME}-{VERSION}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=date_time)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[path])
    print(f"wrote {wheel.name}", flush=True)


if __name__ == "__main__":
    main()
