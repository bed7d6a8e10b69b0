#!/usr/bin/env bash
# What each rank of a serving cycle runs before `docker run`, in place of the seed launcher's
# md5 checks (scripts/deepseek_v41_cycle_serve.sh --check): pull only what a trusted receipt
# names, prove the node agrees with it, then start the container with the receipt's mounts.
# Every value comes from the rank's env file; nothing here is specific to one model.
set -euo pipefail
: "${IMAGE:?REGISTRY/REPO:TAG of the serving image}"
: "${SPARKIMG_PUB:?the trusted public key of the cluster}"
: "${RECIPE:?the serving recipe (sparkring-recipe/v1 or sparkimg-recipe/v1)}"
: "${PATCHES:?the patch set folder mounted at run time}"
: "${CACHE:?the prewarmed FlashInfer cache of this node}"
RECEIPT=${RECEIPT:-/var/lib/sparkimg/$(printf '%s' "$IMAGE" | tr '/:@' '___').receipt.json}

# 1. Verify, then pull by digest (a receipt that does not verify pulls nothing: exit 1).
sparkimg pull "$IMAGE" --key "$SPARKIMG_PUB" --recipe "$RECIPE" --receipt-out "$RECEIPT"
# 2. The node: image by digest, receipt, recipe, patch files and prewarmed cache agree (< 1 s).
sparkimg verify-node --receipt "$RECEIPT" --key "$SPARKIMG_PUB" --recipe "$RECIPE" \
  --patches "$PATCHES" --cache "$CACHE"
# 3. Serve: the receipt's read-only mounts (patches, cache) and the image by its digest.
# shellcheck disable=SC2046  # run-args prints one argument per word, by design
exec docker run --rm --gpus all --network host --ipc host \
  $(sparkimg run-args "$RECEIPT" --root "$(dirname "$(dirname "$PATCHES")")" --cache "$CACHE") \
  "$IMAGE" "$@"
