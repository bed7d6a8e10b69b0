# Shared by scripts/flashinfer-image and scripts/vllm-build-image: a base image made of the demo
# base plus /opt/venv installed from a requirements file, tagged by the first 12 hex digits of
# that file's sha256 (and the Debian package list's, when there is one), built once with no
# network (wheels and .debs downloaded beforehand beside the engine state) and pushed to the
# loopback registry. Prints its reference.
# Usage: base_image REPOSITORY REQUIREMENTS "PIP DOWNLOAD ARGS" "PIP INSTALL ARGS" [DEBIAN PACKAGES FILE]
# (the packages file lists PACKAGE=VERSION lines, installed with dpkg after the Python environment).
base_image() {
  local repo=$1 reqs=$2 download_args=$3 pip_args=$4 debs=${5:-}
  local state=${SPARKIMG_DEV_DIR:-/var/tmp/sparkimg-dev}
  local tag ref docker context name
  name=$(basename "$repo")
  tag=$(cat "$reqs" ${debs:+"$debs"} | sha256sum | cut -c1-12)
  ref=127.0.0.1:5000/$repo:$tag
  docker=/usr/bin/docker
  [[ -x $docker ]] || docker=$(command -v docker)
  if ! curl -fs -o /dev/null -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
      "http://127.0.0.1:5000/v2/$repo/manifests/$tag"; then
    if ! $docker image inspect "$ref" >/dev/null 2>&1; then
      context=$state/$name.ctx
      rm -rf "$context" && mkdir -p "$context/wheels"
      printf '%s: downloading the wheels of %s\n' "$name" "$reqs" >&2
      python3 -m pip download -q $download_args -d "$context/wheels" -r "$reqs" >"$state/$name-download.log" 2>&1 \
        || { tail -20 "$state/$name-download.log" >&2; return 1; }
      cp "$reqs" "$context/wheels/requirements.txt"
      local dpkg_step=""
      if [[ -n $debs ]]; then
        mkdir -p "$context/debs"
        dpkg_step='RUN --mount=type=bind,source=debs,target=/debs dpkg -i /debs/*.deb >/dev/null'
        (cd "$context/debs" && grep -v '^#' "$OLDPWD/$debs" | xargs apt-get download -q >/dev/null) \
          || { printf '%s: apt-get download of %s failed\n' "$name" "$debs" >&2; return 1; }
      fi
      cat >"$context/Dockerfile" <<DOCKERFILE
FROM 127.0.0.1:5000/sparkimg/demo-base:bookworm
RUN --mount=type=bind,source=wheels,target=/wheels \\
    python3 -m venv /opt/venv && \\
    /opt/venv/bin/pip install -q --no-index --find-links /wheels $pip_args -r /wheels/requirements.txt && \\
    mkdir -p /opt/cuda-stubs && echo 'void cuInit(void) {}' >/tmp/stub.c && \\
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o /opt/cuda-stubs/libcuda.so /tmp/stub.c && rm /tmp/stub.c
$dpkg_step
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
DOCKERFILE
      printf '%s: building %s (a few minutes, once)\n' "$name" "$ref" >&2
      DOCKER_BUILDKIT=1 $docker build -q --network none -t "$ref" "$context" >"$state/$name.log" 2>&1 \
        || { tail -20 "$state/$name.log" >&2; return 1; }
      rm -rf "$context"
    fi
    printf '%s: pushing %s\n' "$name" "$ref" >&2
    $docker push -q "$ref" >/dev/null
  fi
  echo "$ref"
}
