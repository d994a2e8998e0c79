#!/usr/bin/env bash
# Builds, without any image registry, the third-party images the compose stack needs, from
# Debian's own packages:
#
#   pirq-local/debian:bookworm-slim   a Debian bookworm root (debootstrap --variant=minbase), imported
#                                     with `docker import`: the base of everything below and of
#                                     the pirq images (build arg RUNTIME_IMAGE)
#   pirq-local/redis:7.0              Debian's redis-server (7.0), run as user redis in /data
#   pirq-local/prometheus:2.42        Debian's prometheus (2.42) and promtool
#
# and writes ops/compose/local-images.env, which points the compose file at them
# (PIRQ_REDIS_IMAGE, PIRQ_PROMETHEUS_IMAGE, PIRQ_RUNTIME_IMAGE). Use it where Docker Hub cannot
# be reached:
#
#   sudo ops/compose/local-images.sh
#   docker-compose -p pirq-a --env-file ops/compose/local-images.env ... (ops/compose/smoke.sh does)
#
# Grafana is not packaged by Debian, so it has no local image: where grafana/grafana cannot be
# pulled, run the stack without it (the smoke test does, and says so). The CUDA image
# (nvidia/cuda) cannot be made from Debian packages either; the CPU profile needs none.
#
# Needs root, debootstrap and a running Docker engine; reaches only the Debian mirror
# (PIRQ_DEBIAN_MIRROR, default http://deb.debian.org/debian). Takes a few minutes the first time;
# the root is cached in PIRQ_LOCAL_IMAGES_CACHE (default /var/cache/pirq-local-images) and images
# already present are kept (PIRQ_LOCAL_IMAGES_REBUILD=1 builds them again).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
MIRROR=${PIRQ_DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${PIRQ_LOCAL_IMAGES_CACHE:-/var/cache/pirq-local-images}
REBUILD=${PIRQ_LOCAL_IMAGES_REBUILD:-0}
BASE=pirq-local/debian:bookworm-slim
REDIS=pirq-local/redis:7.0
PROMETHEUS=pirq-local/prometheus:2.42
ENV_FILE=$ROOT/ops/compose/local-images.env

log() { echo "local-images: $*" >&2; }
[ "$(id -u)" -eq 0 ] || { log "run as root (debootstrap and docker import need it)"; exit 1; }
command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get install -y -qq debootstrap >/dev/null; }
docker info >/dev/null 2>&1 || { log "no Docker engine answers (see docs/operations.md, 'Compose without a registry')"; exit 1; }

have() { [ "$REBUILD" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }

# ---- the Debian root -----------------------------------------------------------------------------
if have "$BASE"; then
    log "$BASE: present"
else
    mkdir -p "$CACHE"
    tarball=$CACHE/bookworm-minbase.tar
    if [ ! -s "$tarball" ] || [ "$REBUILD" = 1 ]; then
        work=$(mktemp -d "$CACHE/root.XXXXXX")
        # mktemp makes it 0700, and it becomes the image's `/`: users other than root (redis,
        # prometheus, pirq) could then reach nothing in it.
        chmod 0755 "$work"
        trap 'rm -rf "$work"' EXIT
        log "debootstrap bookworm from $MIRROR (a few minutes)"
        # ca-certificates: the images talk TLS (rediss://, https parties).
        debootstrap --variant=minbase --include=ca-certificates bookworm "$work" "$MIRROR" >&2
        # What a slim image leaves out: package lists and caches (apt-get update restores them).
        chroot "$work" apt-get clean
        rm -rf "$work"/var/lib/apt/lists/* "$work"/var/cache/apt/*.bin "$work"/tmp/* \
            "$work"/usr/share/doc/* "$work"/usr/share/man/*
        tar --numeric-owner -C "$work" -cf "$tarball.tmp" .
        mv "$tarball.tmp" "$tarball"
        rm -rf "$work"
        trap - EXIT
    fi
    log "importing $BASE"
    docker import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        "$tarball" "$BASE" >/dev/null
fi

# ---- Redis and Prometheus from Debian packages ---------------------------------------------------
# Built with the engine's own builder and host networking (the engine may have no bridge); the
# Dockerfiles take the base as a build arg like docker/Dockerfile does.
build() {
    local tag=$1 file=$2
    if have "$tag"; then
        log "$tag: present"
        return
    fi
    log "building $tag"
    DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE" \
        -t "$tag" -f "$file" "$ROOT/ops/compose/images" >&2
}
build "$REDIS" "$ROOT/ops/compose/images/redis.Dockerfile"
build "$PROMETHEUS" "$ROOT/ops/compose/images/prometheus.Dockerfile"

cat >"$ENV_FILE" <<EOF
# Written by ops/compose/local-images.sh: the compose stack on images built from Debian packages.
PIRQ_RUNTIME_IMAGE=$BASE
PIRQ_REDIS_IMAGE=$REDIS
PIRQ_PROMETHEUS_IMAGE=$PROMETHEUS
EOF
log "wrote ${ENV_FILE#$ROOT/}"
docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep '^pirq-local/' >&2
