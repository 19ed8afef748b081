#!/usr/bin/env bash
# coll-agent from the agent image, for tests/image/image_test.py: the harness starts this in place
# of a host coll-agent binary. It runs `buildah run` in the working container $KCOLL_IMAGE_CTR
# (chroot isolation, the host's network, as the image's non-root user) with $KCOLL_IMAGE_MOUNT
# bind-mounted at the same path, and passes on the environment a pod's downward API and the
# webhook's injection would give the sidecar. setsid: the test ends the whole group by its id.
set -euo pipefail

: "${KCOLL_IMAGE_CTR:?the working container (buildah from IMAGE)}"
: "${KCOLL_IMAGE_MOUNT:?the directory shared with the container}"
envs=()
for v in POD_NAME POD_NAMESPACE KUBERNETES_SERVICE_HOST KUBERNETES_SERVICE_PORT KUBECONFIG \
    COLL_AGENT_LIB_DIR COLL_AGENT_SOCKET COLL_AGENT_IPC_ALLOW_UIDS; do
    if [ -n "${!v:-}" ]; then
        envs+=(--env "$v=${!v}")
    fi
done
exec setsid buildah run --isolation chroot --network host \
    --volume "$KCOLL_IMAGE_MOUNT:$KCOLL_IMAGE_MOUNT" "${envs[@]}" "$KCOLL_IMAGE_CTR" -- \
    /opt/kcoll/bin/coll-agent "$@"
