#!/usr/bin/env bash
# Checks of the deployment files without Docker (Docker cannot run on CI machines):
#
#   1. docker/Dockerfile linted by dockerfile-utils (npm): unknown instructions and flags, bad
#      ports, duplicate CMD/ENTRYPOINT, ...
#   2. docker-compose.yml, as Compose sees it with the defaults and with each party's env file,
#      linted by dclint (npm), which also validates it against the compose-spec JSON schema.
#   3. ops/tests (pytest): the schema check again on our side, images' binaries, paths and flags
#      against the Cargo build, Prometheus targets against the services, Grafana provisioning,
#      and every dashboard query against the metrics catalog; the alert rules through
#      `promtool check rules` and their unit tests (ops/prometheus/alerts.test.yml), where promtool
#      is installed (Debian's prometheus package, which scripts/install-deps.sh installs; skipped
#      with a SKIPPED line otherwise, and a failure with PIRQ_REQUIRE_PROMTOOL=1, as scripts/test.sh
#      runs it); the host-network override; the licence of every manifest; every relative link
#      and #anchor of the repository's Markdown files (test_docs_links.py); scripts/redis-cluster.sh
#      against a real redis-server (clusters of 1, 2 and 4 primaries, slots placed, replicas;
#      skipped when redis-server is not installed).
#
# Bringing the stack up for real is ops/compose/smoke.sh (scripts/test.sh with PIRQ_COMPOSE_SMOKE=1).
#
# Installs its own tools, pinned, under target/ops-tools (npm and a Python venv); needs node/npm
# and python3, and installs them with apt-get when missing. Run from anywhere.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/target/ops-tools

NPM_PACKAGES=(dclint@3.1.0 dockerfile-utils@0.16.3)
PY_PACKAGES=(PyYAML==6.0.3 jsonschema==4.26.0 pytest==9.2.0)

need_apt() {
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "$@"
}

command -v npm >/dev/null || need_apt nodejs npm

# A venv at $1 with PY_PACKAGES in it. `import ensurepip` succeeding proves nothing: Debian's
# python3 has the module but not the wheels it installs (they come with python3-venv), so the
# venv is actually tried, python3-venv installed if it fails, and as a last way this Python's
# own pip installs into a venv made without one.
make_python_venv() {
    local venv=$1 log=$TOOLS/venv.log
    if ! python3 -m venv "$venv" >"$log" 2>&1; then
        echo "python3 -m venv failed ($(tail -n 1 "$log")); installing python3-venv"
        rm -rf "$venv"
        need_apt python3-venv || true
        if ! python3 -m venv "$venv" >"$log" 2>&1; then
            echo "python3 -m venv still cannot bootstrap pip ($(tail -n 1 "$log"));" \
                "installing with $(python3 -m pip --version) into a venv without pip"
            rm -rf "$venv"
            python3 -m venv --without-pip "$venv"
            python3 -m pip --python "$venv/bin/python" install --quiet --disable-pip-version-check \
                "${PY_PACKAGES[@]}"
            return
        fi
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
}

stamp="${NPM_PACKAGES[*]} ${PY_PACKAGES[*]}"
if [ "$(cat "$TOOLS/.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "== installing ops tools into $TOOLS"
    rm -rf "$TOOLS"
    mkdir -p "$TOOLS"
    npm install --silent --no-audit --no-fund --prefix "$TOOLS/node" "${NPM_PACKAGES[@]}"
    make_python_venv "$TOOLS/venv"
    echo "$stamp" >"$TOOLS/.stamp"
fi
BIN=$TOOLS/node/node_modules/.bin
PY=$TOOLS/venv/bin/python

echo "== dockerfile lint"
for f in docker/Dockerfile; do
    "$BIN/dockerfile-utils" lint "$f"
    echo "$f: ok"
done

echo "== compose lint (dclint, compose-spec schema)"
# dclint reads the file literally and does not interpolate ${VAR:-default}; lint what Compose
# would run: the file rendered with the defaults and with each party's env file.
rendered=$TOOLS/rendered
rm -rf "$rendered" && mkdir -p "$rendered"
(cd ops/tests && "$PY" - "$rendered" <<'PY'
import sys
from pathlib import Path
import yaml
from opslib import ROOT, deep_merge, interpolate, read_env_file, with_required

out = Path(sys.argv[1])
# What `docker compose` runs with no -f: docker-compose.yml and docker-compose.override.yml.
def render(env=None):
    env = with_required(env)
    base = yaml.safe_load(interpolate((ROOT / "docker-compose.yml").read_text(), env))
    over = yaml.safe_load(interpolate((ROOT / "docker-compose.override.yml").read_text(), env))
    # Every scalar double-quoted, as the source files quote their ports.
    return yaml.safe_dump(deep_merge(base, over), sort_keys=False, default_style='"')
(out / "docker-compose.defaults.yml").write_text(render())
for env in sorted((ROOT / "ops").glob("party-*.env")):
    (out / f"docker-compose.{env.stem}.yml").write_text(render(read_env_file(env)))
PY
)
"$BIN/dclint" --config ops/dclint.yml --color false "$rendered"/*.yml
echo "dclint: ok ($(ls "$rendered" | wc -l) renderings)"

echo "== ops tests"
if command -v promtool >/dev/null; then
    echo "promtool: $(promtool --version 2>&1 | head -n1): alert rules, their unit tests and the Prometheus configurations checked"
else
    echo "promtool: SKIPPED: not installed (Debian's prometheus package; scripts/install-deps.sh installs it):" \
        "the alert rules, their unit tests and the Prometheus configurations are not checked"
fi
export PIRQ_COMPOSE_SCHEMA=$TOOLS/node/node_modules/dclint/schemas/compose.schema.json
cd ops/tests
# -rs: every skipped test's reason in the summary.
"$PY" -m pytest -q -rs -p no:cacheprovider
