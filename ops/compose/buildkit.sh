# Sourced before a Compose build (`. ops/compose/buildkit.sh`), by ops/compose/smoke.sh and by
# the recipes of docs/operations.md: docker/Dockerfile needs BuildKit (`RUN --mount`). Compose v1
# builds through the docker CLI only when asked (DOCKER_BUILDKIT, COMPOSE_DOCKER_CLI_BUILD), and a
# docker CLI >= 23 builds with BuildKit only through its buildx plugin: where the `docker` first
# on PATH cannot, a later one that can (Debian's docker.io 20.10) is put first, through a
# directory holding a link to it. Returns non-zero, saying why, when no docker CLI can.
export DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1

pirq_cli_can_buildkit() {
    "$1" buildx version >/dev/null 2>&1 && return 0
    pirq_major=$("$1" version --format '{{.Client.Version}}' 2>/dev/null | cut -d. -f1)
    [ -n "$pirq_major" ] && [ "$pirq_major" -lt 23 ]
}

if ! pirq_cli_can_buildkit docker; then
    pirq_shim=""
    for pirq_cli in $(which -a docker); do
        if pirq_cli_can_buildkit "$pirq_cli"; then pirq_shim=$pirq_cli; break; fi
    done
    if [ -z "$pirq_shim" ]; then
        echo "no docker CLI here builds with BuildKit (install the buildx plugin, or Debian's docker.io)" >&2
        false
    else
        pirq_shimdir=$(mktemp -d)
        ln -s "$pirq_shim" "$pirq_shimdir/docker"
        export PATH="$pirq_shimdir:$PATH"
        echo "using $pirq_shim for builds (BuildKit without buildx)" >&2
    fi
fi
