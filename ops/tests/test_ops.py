"""Checks of the deployment files that need no Docker: docker-compose.yml, docker/Dockerfile,
the Prometheus and Grafana configuration, and the dashboard against the metrics catalog.

Run by scripts/check-ops.sh, which installs the tools and sets PIRQ_COMPOSE_SCHEMA (the
compose-spec JSON schema that dclint ships).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from opslib import (
    ROOT,
    deep_merge,
    bin_targets,
    cargo_metadata,
    catalog,
    effective,
    env_flags,
    ignore_patterns,
    ignored,
    interpolate,
    parse_dockerfile,
    REQUIRED_ENV,
    read_env_file,
    stage_chain,
    variables,
    with_required,
)

COMPOSE = ROOT / "docker-compose.yml"
# Read by Compose with docker-compose.yml by itself (no -f): the published ports.
COMPOSE_OVERRIDE = ROOT / "docker-compose.override.yml"
DASHBOARD = ROOT / "ops/grafana/dashboards/pirq.json"
PROMETHEUS = ROOT / "ops/prometheus/prometheus.yml"
PARTIES = [ROOT / "ops/party-a.env", ROOT / "ops/party-b.env"]

# Which crate's flags a pirq binary reads; compose passes every setting as a PIRQ_* variable.
# The crates whose clap configs make up each binary's flags (`party` holds the --redis/--prefix
# flags both servers flatten in).
BINARY_CRATE_DIRS = {
    "pirq-gateway": ["gateway", "party"],
    "pirq-worker": ["worker", "party"],
    "pirq": ["cli", "client"],
}


def compose_base(env: dict[str, str] | None = None) -> dict:
    return yaml.safe_load(interpolate(COMPOSE.read_text(), with_required(env)))


def compose(env: dict[str, str] | None = None) -> dict:
    """What `docker compose up` runs: docker-compose.yml with docker-compose.override.yml."""
    return deep_merge(compose_base(env), yaml.safe_load(interpolate(COMPOSE_OVERRIDE.read_text(), with_required(env))))


def services(env: dict[str, str] | None = None) -> dict[str, dict]:
    return compose(env)["services"]


def dockerfile_of(svc: dict) -> Path:
    build = svc["build"]
    return ROOT / build.get("context", ".") / build["dockerfile"]


def entry_binary(svc: dict) -> str | None:
    """The pirq binary a service runs (its entrypoint), or None for third-party images."""
    if "build" not in svc:
        return None
    if "entrypoint" in svc:
        return None  # runs a shell command; checked separately
    _, stages = parse_dockerfile(dockerfile_of(svc))
    ins = effective(stages, svc["build"]["target"], "ENTRYPOINT")
    assert ins is not None, f"target {svc['build']['target']} has no ENTRYPOINT"
    return Path(ins.words()[0]).name


def listen_port(value: str) -> int:
    return int(value.rsplit(":", 1)[1])


# ---- compose ----------------------------------------------------------------------------------


@pytest.mark.parametrize("env_file", [None, *PARTIES], ids=lambda p: p.name if p else "defaults")
def test_compose_matches_the_compose_spec_schema(env_file):
    schema_path = os.environ.get("PIRQ_COMPOSE_SCHEMA")
    assert schema_path, "set PIRQ_COMPOSE_SCHEMA (scripts/check-ops.sh does)"
    schema = json.loads(Path(schema_path).read_text())
    env = read_env_file(env_file) if env_file else {}
    errors = sorted(
        jsonschema.Draft7Validator(schema).iter_errors(compose(env)), key=lambda e: list(e.path)
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_schema_check_rejects_a_broken_file():
    """The schema check above is only worth something if it can fail."""
    schema = json.loads(Path(os.environ["PIRQ_COMPOSE_SCHEMA"]).read_text())
    broken = compose()
    broken["services"]["redis"]["healthcheck"]["retries"] = ["many"]
    broken["services"]["gateway"]["depends_on"]["redis"]["condition"] = "service_ready"
    broken["services"]["gateway"]["no_such_key"] = True
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(broken))) >= 3


def test_redis_has_aof_a_volume_and_a_healthcheck():
    redis = services()["redis"]
    cmd = redis["command"]
    assert cmd[:1] == ["redis-server"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "redis-cli ping" in " ".join(redis["healthcheck"]["test"])
    assert re.match(r"redis:\d+\.\d+", redis["image"]), "pin a Redis major.minor"


def test_published_ports_are_only_in_the_override():
    """The public gateway port and the loopback admin, Prometheus and Grafana ports, in the file
    Compose reads by itself; none in docker-compose.yml (the host-network stack must have none)."""
    assert not any("ports" in s for s in compose_base()["services"].values())
    svcs = services()
    assert svcs["gateway"]["ports"] == ["0.0.0.0:8080:8080", "127.0.0.1:9080:9080"]
    assert svcs["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
    assert svcs["grafana"]["ports"] == ["127.0.0.1:3000:3000"]
    override = yaml.safe_load(COMPOSE_OVERRIDE.read_text())["services"]
    assert set(override) <= set(svcs) and all(set(o) == {"ports"} for o in override.values())


def test_gpu_workers_reserve_one_distinct_gpu_each():
    svcs = services()
    gpu = {n: s for n, s in svcs.items() if n.startswith("worker-gpu")}
    assert gpu, "no GPU worker services"
    seen = set()
    for name, svc in gpu.items():
        (dev,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"], name
        assert len(dev["device_ids"]) == 1, f"{name}: one GPU per worker"
        assert dev["device_ids"][0] not in seen, f"{name}: GPU {dev['device_ids']} taken twice"
        seen.add(dev["device_ids"][0])
        assert svc["environment"]["PIRQ_BACKEND"] == "cuda", name
        assert svc["build"]["target"] == "worker", name
    cpu = svcs["worker-cpu"]
    assert cpu["profiles"] == ["cpu"] and cpu["environment"]["PIRQ_BACKEND"] == "cpu"
    assert "deploy" not in cpu, "the CPU worker must not ask for a GPU"


def test_build_targets_are_dockerfile_stages():
    for name, svc in services().items():
        if "build" not in svc:
            continue
        path = dockerfile_of(svc)
        assert path.is_file(), f"{name}: {path} missing"
        _, stages = parse_dockerfile(path)
        assert svc["build"]["target"] in {s.name for s in stages}, name
        assert svc["build"]["args"] == services()["gateway"]["build"]["args"], name


def test_pirq_settings_are_flags_the_binaries_read():
    """Every PIRQ_* variable compose or an image sets is an `env =` of that binary's clap
    config; a typo or a renamed flag would otherwise be silently ignored."""
    for name, svc in services().items():
        binary = entry_binary(svc)
        if binary is None:
            continue
        known = set().union(*(env_flags(ROOT / d) for d in BINARY_CRATE_DIRS[binary]))
        _, stages = parse_dockerfile(dockerfile_of(svc))
        image_env = {}
        for stage in reversed(stage_chain(stages, svc["build"]["target"])):
            image_env.update(stage.env())
        for var in {**image_env, **svc.get("environment", {})}:
            if var.startswith("PIRQ_"):
                assert var in known, f"{name} sets {var}, which {binary} does not read"


def test_db_init_runs_real_cli_flags():
    svc = services()["db-init"]
    script = svc["command"][0]
    assert "pirq db gen" in script
    gen = script[script.index("pirq db gen") :]
    flags = {tok[2:] for tok in shlex.split(gen) if tok.startswith("--")}
    source = (ROOT / "cli/src/db.rs").read_text()
    block = source[source.index("pub struct GenArgs") :]
    block = block[: block.index("}")]
    fields = {f.replace("_", "-") for f in re.findall(r"^\s*(\w+):", block, re.M)}
    assert flags and flags <= fields, f"db gen flags {flags - fields} do not exist"
    # The workers read the file db-init writes.
    for name, s in services().items():
        if name.startswith("worker"):
            assert s["environment"]["PIRQ_DB"] == "/data/pirq.pirdb", name
    assert "/data/$${PIRQ_DB_FILE}" in COMPOSE.read_text()


def test_every_variable_has_a_default():
    """`docker compose up` with no environment but the required ones (REQUIRED_ENV: Grafana's
    password) must produce a working file."""
    text = (COMPOSE.read_text() + COMPOSE_OVERRIDE.read_text()).replace("$$", "")
    for m in re.finditer(r"\$\{([A-Za-z_]\w*)(:?-)?", text):
        assert m.group(2) or m.group(1) in REQUIRED_ENV, f"${{{m.group(1)}}} has no default"


def test_two_party_env_files_differ_only_where_they_must():
    a, b = (read_env_file(p) for p in PARTIES)
    used = set().union(
        *(variables(f.read_text()) for f in (COMPOSE, COMPOSE_OVERRIDE, ROOT / "ops/compose/host-network.yml"))
    )
    for env in (a, b):
        assert set(env) <= used, f"unused variables {set(env) - used}"
    for key in ("PIRQ_DEMO_PAGES", "PIRQ_DEMO_PAGE_SIZE", "PIRQ_DEMO_SEED"):
        assert a[key] == b[key], f"{key}: both parties must serve the same database"
    for key in ("PIRQ_GATEWAY_PORT", "PIRQ_ADMIN_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT", "PIRQ_PREFIX"):
        assert a[key] != b[key], f"{key} must differ between the parties on one host"
    # Each party its own certificate (a client refuses two parties with one TLS identity).
    assert a["PIRQ_TLS_DIR"] != b["PIRQ_TLS_DIR"]


def test_gateway_serves_tls_and_keeps_admin_off_the_public_port():
    """HTTPS with the party's certificate from PIRQ_TLS_DIR; the admin routes and /metrics on
    --admin-listen, a port of its own that is published on loopback only; the health check asks
    the admin listener (plain HTTP: bash cannot speak TLS)."""
    gw = services()["gateway"]
    env = gw["environment"]
    assert "./tls:/tls:ro" in gw["volumes"]
    assert env["PIRQ_TLS_CERT"] == "/tls/cert.pem" and env["PIRQ_TLS_KEY"] == "/tls/key.pem"
    admin, public = listen_port(env["PIRQ_ADMIN_LISTEN"]), listen_port(env["PIRQ_LISTEN"])
    assert admin != public
    published = {p.split(":")[-1]: p.split(":")[0] for p in gw["ports"]}
    assert published[str(admin)] == "127.0.0.1", "the admin port must not be published publicly"
    assert f"/dev/tcp/127.0.0.1/{admin}" in gw["healthcheck"]["test"][-1]
    # ops/compose/certs.sh writes what the env files name, and the files it writes are those
    # the gateway reads.
    certs = (ROOT / "ops/compose/certs.sh").read_text()
    assert '"$dir/cert.pem"' in certs and '"$dir/key.pem"' in certs
    for env_file in PARTIES:
        e = read_env_file(env_file)
        assert e["PIRQ_TLS_DIR"] == f"./tls/{env_file.stem}", env_file


# Gateway settings an operator may need and compose passes through (no value in the file: set
# in the shell or the env file, else the gateway's default). Access control above all.
PASSED_THROUGH = {
    "PIRQ_ADMIN_TOKEN", "PIRQ_QUERY_TOKENS", "PIRQ_TOKEN_RATE", "PIRQ_IP_RATE", "PIRQ_CORS_ORIGIN",
    "PIRQ_MAX_CONNECTIONS", "PIRQ_MAX_WAITERS", "PIRQ_MAX_BACKLOG", "PIRQ_MAX_REDIS_MEMORY",
    "PIRQ_FETCHED_RESULT_BYTES", "PIRQ_RUNTIME_THREADS", "PIRQ_MANIFESTS", "PIRQ_TABLE_MANIFESTS",
    "PIRQ_SUBMIT_TICK_US", "PIRQ_CONNECTION_THREADS",
}


def raw_services(path: Path = COMPOSE) -> dict[str, dict]:
    """A compose file's services as written, before interpolation (what Compose parses)."""
    return yaml.safe_load(path.read_text())["services"]


def test_gateway_passes_access_control_and_caps_through():
    """Query tokens, rate limits, CORS and the caps reach the gateway when an operator sets them,
    and nothing when not: a variable with no value is left out of the container, where an empty
    string would be a flag given empty (clap refuses `--query-tokens ""`)."""
    gw = raw_services()["gateway"]["environment"]
    for var in PASSED_THROUGH:
        assert var in gw and gw[var] is None, f"{var} must be passed through (no value)"
    # The documented place of the tokens file is inside the gateway's read-only /tls mount.
    assert "PIRQ_QUERY_TOKENS=/tls/tokens" in COMPOSE.read_text()
    assert any(v.endswith(":/tls:ro") for v in services()["gateway"]["volumes"])
    for doc in ("docs/deploy.md", "docs/operations.md"):
        assert "PIRQ_QUERY_TOKENS=/tls/tokens" in (ROOT / doc).read_text(), doc


def test_no_pirq_setting_is_an_empty_string():
    """`${VAR:-}` would hand a flag an empty value; pass a variable through instead. Checked on
    the files as written: Compose interpolates after parsing, so an empty result stays a string."""
    files = (COMPOSE, COMPOSE_OVERRIDE, ROOT / "ops/compose/host-network.yml")
    for env in [{}, *(read_env_file(p) for p in PARTIES)]:
        for path in files:
            for name, svc in (raw_services(path) or {}).items():
                for var, value in ((svc or {}).get("environment") or {}).items():
                    if var.startswith("PIRQ_") and value is not None:
                        assert interpolate(str(value), with_required(env)) != "", f"{path.name} {name}: {var} is empty"


# ---- Dockerfile ------------------------------------------------------------------------------


def all_dockerfiles() -> list[Path]:
    return sorted({dockerfile_of(s) for s in services().values() if "build" in s})


def cmd_text(run_args: str) -> str:
    """The `cargo build ...` command of a RUN line, whitespace-normalized."""
    text = run_args[run_args.index("cargo build") :].split("&&")[0]
    return " ".join(text.replace("\\", " ").split())


def test_entrypoints_are_binaries_the_build_produces():
    meta = cargo_metadata()
    bins = bin_targets(meta)
    features = {p["name"]: set(p["features"]) for p in meta["packages"]}
    for path in all_dockerfiles():
        args, stages = parse_dockerfile(path)
        build = next(s for s in stages if s.name == "build")
        (run,) = [i for i in build.all("RUN") if "cargo build" in i.args]
        cmd = shlex.split(run.args[run.args.index("cargo build") :].split("&&")[0])
        assert "--locked" in cmd, "build with the committed Cargo.lock"
        packages = {cmd[i + 1] for i, t in enumerate(cmd) if t == "-p"}
        for i, tok in enumerate(cmd):
            if tok == "--features":
                for feat in cmd[i + 1].split(","):
                    pkg, _, f = feat.partition("/")
                    assert f in features[pkg], f"{pkg} has no feature {f}"
        produced = {b for b, p in bins.items() if p in packages}
        installed = set(re.findall(r"target/release/([\w-]+)", run.args))
        assert installed <= produced, f"{installed - produced} are not built by {packages}"

        # BINARIES=prebuilt copies the same binaries from docker/prebuilt/ (what
        # ops/compose/prebuilt-binaries.sh puts there, from the same cargo build line).
        (prebuilt_copy,) = next(s for s in stages if s.name == "prebuilt").all("COPY")
        *prebuilt_srcs, prebuilt_dest = prebuilt_copy.words()
        assert prebuilt_dest == "/out/"
        assert {Path(p).name for p in prebuilt_srcs} == installed
        assert all(p.startswith("docker/prebuilt/") for p in prebuilt_srcs)
        script = (ROOT / "ops/compose/prebuilt-binaries.sh").read_text()
        assert cmd_text(run.args) in " ".join(script.replace("\\\n", " ").split()), (
            "prebuilt-binaries.sh must run the Dockerfile's cargo build line"
        )
        for name in installed:
            assert f"target/release/{name}" in script, name
        binaries = next(s for s in stages if s.name == "binaries")
        assert binaries.base in {"build", "prebuilt"} and args["BINARIES"] == "build"

        for stage in stages:
            for copy in stage.all("COPY"):
                if copy.flags().get("from") in ("build", "binaries"):
                    *srcs, _dest = copy.words()
                    for src in srcs:
                        assert src.startswith("/out/") and src[5:] in installed, src
            if stage.name:
                entry = effective(stages, stage.name, "ENTRYPOINT")
                if entry and stage.name != "build":
                    exe = entry.words()[0]
                    copied = {
                        f"{c.words()[-1].rstrip('/')}/{Path(s).name}"
                        if c.words()[-1].endswith("/")
                        else c.words()[-1]
                        for st in stage_chain(stages, stage.name)
                        for c in st.all("COPY")
                        for s in c.words()[:-1]
                    }
                    assert exe in copied, f"{stage.name}: ENTRYPOINT {exe} is never copied in"


def test_build_context_keeps_what_cargo_needs():
    """The ignore file may drop target/ and docs, but no workspace member, no file a crate
    embeds with include_str!/include_bytes!, and nothing COPY names."""
    for path in all_dockerfiles():
        patterns = ignore_patterns(path.with_name(path.name + ".dockerignore"))
        for member in ["Cargo.toml", "Cargo.lock", "kernels"]:
            assert not ignored(member, patterns), member
        meta = cargo_metadata()
        for pkg in meta["packages"]:
            rel = Path(pkg["manifest_path"]).parent.relative_to(ROOT).as_posix()
            assert not ignored(rel, patterns), f"workspace member {rel} is ignored"
            for rs in Path(pkg["manifest_path"]).parent.rglob("*.rs"):
                if "target" in rs.parts:
                    continue
                for inc in re.findall(r'include_(?:str|bytes)!\(\s*"([^"]+)"', rs.read_text()):
                    target = (rs.parent / inc).resolve().relative_to(ROOT).as_posix()
                    assert not ignored(target, patterns), f"{rs}: embeds ignored {target}"
        assert ignored("target/release/pirq", patterns), "target/ must stay out of the context"
        _, stages = parse_dockerfile(path)
        for stage in stages:
            for copy in stage.all("COPY"):
                if "from" not in copy.flags():
                    for src in copy.words()[:-1]:
                        if src.startswith("docker/prebuilt/"):
                            # Made by ops/compose/prebuilt-binaries.sh, never committed.
                            assert ignored_by_git(src), src
                            assert not ignored(src, patterns), f"{src} is kept out of the context"
                            continue
                        assert (ROOT / src).exists(), f"COPY {src}: not in the repository"


def ignored_by_git(rel: str) -> bool:
    import subprocess

    return subprocess.run(["git", "check-ignore", "-q", rel], cwd=ROOT).returncode == 0


def test_dockerfile_policy():
    for path in all_dockerfiles():
        args, stages = parse_dockerfile(path)
        names = {s.name for s in stages}
        # Stages that only carry files between stages (no image of their own is run).
        carriers = {"build", "prebuilt", "binaries"}
        for stage in stages:
            if stage.base in names or stage.base == "scratch":
                continue
            if stage.base.startswith("${"):
                # FROM ${BINARIES}: a stage name chosen by a build arg.
                assert stage.base == "${BINARIES}" and args["BINARIES"] in names, stage.base
                continue
            assert ":" in stage.base and not stage.base.endswith(":latest"), (
                f"{stage.name}: pin the base image, not {stage.base}"
            )
            if stage.name not in carriers:
                assert effective(stages, stage.name, "USER") is not None, (
                    f"{stage.name}: runtime images run as a non-root USER"
                )
        for stage in stages:
            for run in stage.all("RUN"):
                if "apt-get install" in run.args:
                    assert "--no-install-recommends" in run.args, f"line {run.line}"
                    assert "rm -rf /var/lib/apt/lists" in run.args, f"line {run.line}"
            user = effective(stages, stage.name, "USER") if stage.name else None
            if stage.name not in carriers and user is not None:
                assert user.words()[0] not in ("root", "0"), stage.name
        assert "nvidia/cuda" in args["CUDA_IMAGE"] and "-runtime-" in args["CUDA_IMAGE"], (
            "the GPU worker needs the CUDA runtime flavour: it ships NVRTC, `base` does not"
        )
        # The GPU image states the driver it needs (the CUDA version's minimum).
        worker = next(s for s in stages if s.name == "worker")
        labels = " ".join(i.args for i in worker.all("LABEL"))
        assert "nvidia-driver-min" in labels and "580" in labels
        # No `# syntax=` line: it would pull a frontend image from Docker Hub at every build.
        assert not path.read_text().startswith("# syntax=")
        # Every base image is a build arg, and compose passes each one through.
        build_args = services()["gateway"]["build"]["args"]
        for arg in ("RUST_IMAGE", "RUNTIME_IMAGE", "CUDA_IMAGE", "BINARIES"):
            assert arg in args and arg in build_args, arg


# ---- Prometheus --------------------------------------------------------------------------------


def test_prometheus_scrapes_every_pirq_service_on_its_port():
    prom = yaml.safe_load(PROMETHEUS.read_text())
    scraped: dict[str, int] = {}
    for job in prom["scrape_configs"]:
        for sd in job.get("dns_sd_configs", []):
            assert sd["type"] == "A"
            for name in sd["names"]:
                scraped[name] = sd["port"]
    svcs = services()
    for name, svc in svcs.items():
        binary = entry_binary(svc)
        if binary == "pirq-gateway":
            # /metrics answers only on the admin listener once there is one.
            port = listen_port(svc["environment"]["PIRQ_ADMIN_LISTEN"])
            assert scraped.get(name) == port, f"{name} is not scraped on its admin port :{port}"
            assert str(port) in [str(p) for p in svc.get("expose", [])], name
        elif binary == "pirq-worker":
            port = listen_port(svc["environment"]["PIRQ_METRICS_LISTEN"])
            assert scraped.get(name) == port, f"{name} is not scraped on :{port}"
            assert str(port) in [str(p) for p in svc.get("expose", [])], name
    for name in scraped:
        assert name in svcs, f"prometheus scrapes {name}, which compose does not define"
    mounts = svcs["prometheus"]["volumes"]
    assert "./ops/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    # The alert rules, beside the configuration that names them.
    assert "./ops/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    assert prom["rule_files"] == ["alerts.yml"]


# ---- Grafana ------------------------------------------------------------------------------------


def grafana_mounts() -> dict[str, str]:
    """Repository path -> container path of the Grafana service's bind mounts."""
    out = {}
    for v in services()["grafana"]["volumes"]:
        src, dst, *_ = v.split(":")
        if src.startswith("./"):
            out[src[2:]] = dst
    return out


def provisioned_datasource_uids() -> set[str]:
    prov = ROOT / "ops/grafana/provisioning"
    uids = set()
    for f in (prov / "datasources").glob("*.yml"):
        doc = yaml.safe_load(f.read_text())
        assert doc["apiVersion"] == 1, f
        for ds in doc["datasources"]:
            assert {"name", "type", "uid", "url", "access"} <= set(ds), f
            # From the environment: compose sets PROMETHEUS_URL (the service, or loopback on
            # the host network).
            assert ds["type"] == "prometheus" and ds["url"] == "${PROMETHEUS_URL}"
            uids.add(ds["uid"])
    return uids


def test_grafana_has_no_default_password():
    """Grafana creates admin/admin when no password is given: Compose itself refuses the file
    without GRAFANA_ADMIN_PASSWORD (`${VAR:?...}`, issue 36), and the container would still
    refuse to start with an empty one."""
    for env in ({}, {"GRAFANA_ADMIN_PASSWORD": ""}):
        with pytest.raises(ValueError, match="GRAFANA_ADMIN_PASSWORD"):
            interpolate(COMPOSE.read_text(), env)
    assert "${GRAFANA_ADMIN_PASSWORD:?" in COMPOSE.read_text()
    assert "GRAFANA_ADMIN_PASSWORD:-" not in COMPOSE.read_text()
    grafana = services({"GRAFANA_ADMIN_PASSWORD": "s3cret"})["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"
    script = grafana["entrypoint"][-1]
    assert 'test -n "${GF_SECURITY_ADMIN_PASSWORD}"' in script and "exit 1" in script
    assert script.rstrip().endswith("exec /run.sh"), "then the image's own entrypoint"
    assert grafana["environment"]["PROMETHEUS_URL"] == "http://prometheus:9090"


def test_grafana_provisioning_format_and_mounts():
    mounts = grafana_mounts()
    assert mounts.get("ops/grafana/provisioning") == "/etc/grafana/provisioning"
    dash_dir = mounts["ops/grafana/dashboards"]
    assert provisioned_datasource_uids(), "no datasource provisioned"
    providers = yaml.safe_load((ROOT / "ops/grafana/provisioning/dashboards/pirq.yml").read_text())
    assert providers["apiVersion"] == 1
    (prov,) = providers["providers"]
    assert prov["type"] == "file" and prov["options"]["path"] == dash_dir
    home = services()["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{dash_dir}/{DASHBOARD.name}"


def dashboard_panels(dash: dict) -> list[dict]:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # collapsed rows hold their panels
    return out


def test_dashboard_is_a_provisionable_dashboard_model():
    dash = json.loads(DASHBOARD.read_text())
    # File provisioning wants the bare model, not the HTTP API's {"dashboard": ...} envelope.
    assert "dashboard" not in dash and "meta" not in dash
    assert dash["uid"] == "pirq" and dash["title"] and isinstance(dash["schemaVersion"], int)
    assert dash["schemaVersion"] >= 36, "pre-9.0 schemas get migrated on load"
    uids = provisioned_datasource_uids()
    ids = [p["id"] for p in dashboard_panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    occupied = set()
    for p in dashboard_panels(dash):
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        if p["type"] == "row":
            continue
        assert p["type"] in {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap"}
        assert p["datasource"]["uid"] in uids, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] in uids and t["expr"].strip(), p["title"]


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(pirq_[a-z0-9_]+)", expr))


def resolve(name: str, cat: dict[str, str]) -> str | None:
    """Catalog metric a series name belongs to (histograms export _bucket/_sum/_count)."""
    if name in cat:
        return name if cat[name] != "histogram" else None  # a bare histogram name has no series
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and cat.get(base) == "histogram":
            return base
    return None


def test_every_dashboard_query_names_catalog_metrics():
    cat = catalog()
    dash = json.loads(DASHBOARD.read_text())
    shown = set()
    for p in dashboard_panels(dash):
        for t in p.get("targets", []):
            names = metric_names(t["expr"])
            assert names, f"{p['title']}: query names no pirq metric: {t['expr']}"
            for n in names:
                base = resolve(n, cat)
                assert base, f"{p['title']}: {n} is not a series of any catalog metric"
                shown.add(base)
            if "histogram_quantile" in t["expr"]:
                assert "_bucket" in t["expr"] and "le" in t["expr"], p["title"]
    assert set(cat) - shown == set(), f"catalog metrics with no panel: {set(cat) - shown}"


def test_catalog_reader_and_resolver_reject_unknown_names():
    cat = catalog()
    assert resolve("pirq_worker_turn_duration_seconds_bucket", cat)
    assert not resolve("pirq_worker_turn_duration_seconds", cat)
    assert not resolve("pirq_worker_jobs_completed_total_bucket", cat)
    assert not resolve("pirq_worker_nonexistent_total", cat)


# ---- licence -------------------------------------------------------------------------------------


def test_every_manifest_declares_the_repository_license():
    """LICENSE is the Apache 2.0 text, and every Cargo.toml and package.json says Apache-2.0
    (directly or through the workspace), so a packaged crate or npm tarball carries it."""
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    skip = {"target", "node_modules", ".git"}
    cargo = [p for p in ROOT.rglob("Cargo.toml") if not skip & set(p.relative_to(ROOT).parts)]
    npm = [p for p in ROOT.rglob("package.json") if not skip & set(p.relative_to(ROOT).parts)]
    assert len(cargo) > 5 and npm
    workspace = re.search(r"^license\s*=\s*\"([^\"]+)\"", (ROOT / "Cargo.toml").read_text(), re.M)
    assert workspace and workspace.group(1) == "Apache-2.0"
    for manifest in cargo:
        text = manifest.read_text()
        if "[package]" not in text:
            continue
        package = text[text.index("[package]") :].split("\n[", 1)[0]
        m = re.search(r"^license(\.workspace)?\s*=\s*(\S+)", package, re.M)
        assert m, f"{manifest.relative_to(ROOT)}: no license field"
        assert m.group(1) or m.group(2) == '"Apache-2.0"', f"{manifest.relative_to(ROOT)}: {m.group(0)}"
    for manifest in npm:
        assert json.loads(manifest.read_text()).get("license") == "Apache-2.0", manifest


# ---- alerts -------------------------------------------------------------------------------------

ALERTS = ROOT / "ops/prometheus/alerts.yml"


def test_alert_rules_name_catalog_metrics_and_cover_the_list():
    cat = catalog()
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    # Issue 25's list: oldest job age, dead-letter growth, no ready worker for the newest epoch,
    # Redis memory near its cap, pass time far above its usual, refusals by caps.
    assert {
        "PirqOldestJobStale",
        "PirqDeadLettersGrowing",
        "PirqNoReadyWorker",
        "PirqNoReadyWorkerForNewestEpoch",
        "PirqRedisMemoryNearCap",
        "PirqTurnTimeHigh",
        "PirqQueriesRefused",
    } <= names
    for r in rules:
        assert r["labels"]["severity"] in {"warning", "critical"}, r["alert"]
        assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]
        found = metric_names(r["expr"])
        assert found, r["alert"]
        for n in found:
            assert resolve(n, cat), f"{r['alert']}: {n} is not a catalog series"


def promtool() -> str:
    import shutil

    path = shutil.which("promtool")
    if path is None:
        why = "promtool not installed (Debian: apt-get install prometheus; scripts/install-deps.sh does)"
        # scripts/test.sh installs it first and sets this: there a missing promtool is a failure.
        if os.environ.get("PIRQ_REQUIRE_PROMTOOL") == "1":
            pytest.fail(f"{why}, and PIRQ_REQUIRE_PROMTOOL=1")
        pytest.skip(f"{why}: the alert rules and Prometheus configurations are NOT checked")
    return path


def test_alert_rules_pass_promtool_and_their_unit_tests():
    import subprocess

    tool = promtool()
    for args in (["check", "rules", str(ALERTS)], ["test", "rules", str(ALERTS.with_suffix(".test.yml"))]):
        out = subprocess.run([tool, *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


def test_prometheus_configs_pass_promtool(tmp_path):
    """Both configurations, the bridge one and the host-network template with ports filled in,
    with the rules file beside them."""
    import subprocess

    tool = promtool()
    (tmp_path / "alerts.yml").write_text(ALERTS.read_text())
    bridge = tmp_path / "prometheus.yml"
    bridge.write_text(PROMETHEUS.read_text())
    host = tmp_path / "host.yml"
    text = (ROOT / "ops/compose/prometheus-host.yml").read_text()
    for marker in ("@GATEWAY_ADMIN_PORT@", "@WORKER_PORT@", "@WORKER2_PORT@", "@PROMETHEUS_PORT@"):
        assert marker in text and marker in (ROOT / "ops/compose/host-network.yml").read_text()
        text = text.replace(marker, "9999")
    host.write_text(text.replace("/etc/prometheus/alerts.yml", str(tmp_path / "alerts.yml")))
    for cfg in (bridge, host):
        out = subprocess.run([tool, "check", "config", str(cfg)], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


# ---- the host-network override --------------------------------------------------------------------

HOST = ROOT / "ops/compose/host-network.yml"


def host_services(env: dict[str, str] | None = None) -> dict[str, dict]:
    return yaml.safe_load(interpolate(HOST.read_text(), with_required(env)))["services"]


def test_host_network_override_covers_every_service_on_loopback():
    for env_file in PARTIES:
        env = read_env_file(env_file)
        base, host = compose_base(env)["services"], host_services(env)
        assert set(base) <= set(host), f"not on the host network: {set(base) - set(host)}"
        for name, svc in host.items():
            assert svc["network_mode"] == "host", name
            if "build" in base.get(name, {}):
                assert svc["build"] == {"network": "host"}, f"{name}: build on the host network"
        # Nothing names another service (no DNS on the host network): Redis on its port.
        redis_url = f"redis://127.0.0.1:{env['PIRQ_REDIS_PORT']}"
        for name, svc in host.items():
            envs = svc.get("environment", {})
            if "PIRQ_REDIS_URL" in envs or name.startswith("worker"):
                assert envs["PIRQ_REDIS_URL"] == redis_url, name
        assert str(env["PIRQ_REDIS_PORT"]) in host["redis"]["command"]
        # Each worker its own metrics port, and Prometheus told all of them.
        ports = {
            n: listen_port(s["environment"]["PIRQ_METRICS_LISTEN"])
            for n, s in host.items()
            if n.startswith("worker-cpu")
        }
        assert len(set(ports.values())) == len(ports) == 2, ports
        prom_env = host["prometheus"]["environment"]
        assert {int(prom_env["PIRQ_WORKER_METRICS_PORT"]), int(prom_env["PIRQ_WORKER2_METRICS_PORT"])} == set(ports.values())
        gw = host["gateway"]["environment"]
        assert gw["PIRQ_LISTEN"].endswith(f":{env['PIRQ_GATEWAY_PORT']}")
        assert gw["PIRQ_ADMIN_LISTEN"] == f"127.0.0.1:{env['PIRQ_ADMIN_PORT']}"
        assert f"/dev/tcp/127.0.0.1/{env['PIRQ_ADMIN_PORT']}" in host["gateway"]["healthcheck"]["test"][-1]
        assert str(prom_env["PIRQ_ADMIN_PORT"]) == env["PIRQ_ADMIN_PORT"]


def test_host_network_ports_differ_between_the_parties():
    a, b = (read_env_file(p) for p in PARTIES)
    keys = ["PIRQ_GATEWAY_PORT", "PIRQ_ADMIN_PORT", "PROMETHEUS_PORT", "GRAFANA_PORT", "PIRQ_REDIS_PORT",
            "PIRQ_WORKER_METRICS_PORT", "PIRQ_WORKER2_METRICS_PORT"]
    used = [int(a[k]) for k in keys] + [int(b[k]) for k in keys]
    assert len(set(used)) == len(used), "two services of the host would want one port"


def test_host_network_second_worker_matches_the_first():
    host = host_services()
    base = compose_base()["services"]
    second, first = host["worker-cpu2"], base["worker-cpu"]
    assert second["image"] == first["image"] and second["profiles"] == first["profiles"]
    assert second["volumes"] == first["volumes"] and second["depends_on"] == first["depends_on"]
    merged_first = {**first["environment"], **host["worker-cpu"]["environment"]}
    for key, value in merged_first.items():
        if key not in ("PIRQ_METRICS_LISTEN", "PIRQ_CONSUMER"):
            assert second["environment"].get(key) == value, key


@pytest.mark.parametrize("env_file", PARTIES, ids=lambda p: p.name)
def test_host_network_stack_matches_the_schema_and_reads_real_flags(env_file):
    env = read_env_file(env_file)
    merged = deep_merge(compose_base(env), yaml.safe_load(interpolate(HOST.read_text(), with_required(env))))
    assert not any("ports" in svc for svc in merged["services"].values()), (
        "Compose v1 refuses published ports on the host network"
    )
    schema = json.loads(Path(os.environ["PIRQ_COMPOSE_SCHEMA"]).read_text())
    errors = list(jsonschema.Draft7Validator(schema).iter_errors(merged))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    for name, svc in merged["services"].items():
        binary = "pirq-worker" if name.startswith("worker") else entry_binary(svc) if "build" in svc else None
        if binary is None:
            continue
        known = set().union(*(env_flags(ROOT / d) for d in BINARY_CRATE_DIRS[binary]))
        for var in svc.get("environment", {}):
            if var.startswith("PIRQ_"):
                assert var in known, f"{name} sets {var}, which {binary} does not read"


# ---- ops/compose/certs.sh -----------------------------------------------------------------------


def test_certs_script_makes_one_verifiable_identity_per_party(tmp_path):
    """What the compose gateways serve and the smoke's clients trust: each party's certificate
    chains to the throwaway CA, names the loopback addresses and the extra names given, is a
    server certificate, and has a key of its own (a client refuses two parties with one key);
    a second run keeps what exists."""
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (scripts/install-deps.sh installs it)")
    script = ROOT / "ops/compose/certs.sh"

    def run(*args: str) -> str:
        out = subprocess.run(args, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    run(str(script), str(tmp_path), "party-a", "party-b=b.pirq.invalid,192.0.2.7")
    ca = tmp_path / "ca.pem"
    pubkeys = set()
    for party in ("party-a", "party-b"):
        cert, key = tmp_path / party / "cert.pem", tmp_path / party / "key.pem"
        assert "OK" in run("openssl", "verify", "-CAfile", str(ca), str(cert))
        text = run("openssl", "x509", "-in", str(cert), "-noout", "-text")
        for name in ("DNS:localhost", "IP Address:127.0.0.1", "TLS Web Server Authentication", "CA:FALSE"):
            assert name in text, f"{party}: {name} missing"
        # The key is the certificate's.
        assert run("openssl", "pkey", "-in", str(key), "-pubout") == run(
            "openssl", "x509", "-in", str(cert), "-noout", "-pubkey"
        )
        pubkeys.add(run("openssl", "x509", "-in", str(cert), "-noout", "-pubkey"))
    assert len(pubkeys) == 2, "two parties with one TLS identity"
    b = run("openssl", "x509", "-in", str(tmp_path / "party-b/cert.pem"), "-noout", "-text")
    assert "DNS:b.pirq.invalid" in b and "IP Address:192.0.2.7" in b
    before = (tmp_path / "party-a/cert.pem").read_bytes()
    run(str(script), str(tmp_path), "party-a")
    assert (tmp_path / "party-a/cert.pem").read_bytes() == before
    bad = subprocess.run([str(script), str(tmp_path), "../escape"], capture_output=True, text=True)
    assert bad.returncode == 2 and "bad party name" in bad.stderr


# ---- BuildKit without buildx (issue 36) -------------------------------------------------------

BUILDKIT = ROOT / "ops/compose/buildkit.sh"


def fake_docker(directory: Path, version: str, buildx: bool) -> None:
    """A `docker` CLI of `version` that has the buildx plugin or not."""
    directory.mkdir()
    script = directory / "docker"
    script.write_text(
        "#!/bin/sh\n"
        f'case "$1" in buildx) exit {0 if buildx else 1};; version) echo {version};; esac\n'
    )
    script.chmod(0o755)


def docker_after_sourcing(path: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [shutil.which("bash"), "-c", f'. "{BUILDKIT}" && readlink -f "$(command -v docker)" && echo "$DOCKER_BUILDKIT"'],
        env={"PATH": path, "HOME": os.environ.get("HOME", "/")},
        capture_output=True,
        text=True,
    )


def test_compose_builds_find_a_buildkit_cli_without_buildx(tmp_path):
    """A docker CLI >= 23 without buildx first on PATH (the review's failure): sourcing
    ops/compose/buildkit.sh puts Debian's 20.10 CLI first; with only the new one it says why;
    the smoke test and the compose recipe of docs/operations.md both source it."""
    fake_docker(tmp_path / "new", "27.3.1", buildx=False)
    fake_docker(tmp_path / "old", "20.10.24", buildx=False)
    # The commands the script uses, and no real docker CLI that might be installed here.
    (tmp_path / "bin").mkdir()
    for tool in ("which", "mktemp", "ln", "cut", "readlink", "sh"):
        (tmp_path / "bin" / tool).symlink_to(shutil.which(tool))
    tools = f"{tmp_path}/bin"
    done = docker_after_sourcing(f"{tmp_path}/new:{tmp_path}/old:{tools}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(tmp_path / "old/docker"), "1"], done.stdout
    assert "BuildKit without buildx" in done.stderr
    done = docker_after_sourcing(f"{tmp_path}/new:{tools}")
    assert done.returncode != 0 and "no docker CLI here builds with BuildKit" in done.stderr
    # A CLI with buildx is left first.
    fake_docker(tmp_path / "plugin", "27.3.1", buildx=True)
    done = docker_after_sourcing(f"{tmp_path}/plugin:{tmp_path}/old:{tools}")
    assert done.stdout.split()[0] == str(tmp_path / "plugin/docker"), done.stdout
    assert ". ops/compose/buildkit.sh" in (ROOT / "ops/compose/smoke.sh").read_text()
    recipe = (ROOT / "docs/operations.md").read_text().split("### Compose v1, no registry", 1)[1]
    block = recipe.split("```sh", 1)[1].split("```", 1)[0]
    assert ". ops/compose/buildkit.sh" in block
    assert block.index(". ops/compose/buildkit.sh") < block.index("build\n"), "sourced before the build"
    assert "GRAFANA_ADMIN_PASSWORD=" in block
