"""Readers for the ops files: Compose interpolation, Dockerfiles, .dockerignore, the metrics catalog.

Small on purpose: each reader understands only the subset of its format that the repository's
own files use, and fails loudly on anything else rather than guessing.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# ---- Compose interpolation -------------------------------------------------------------------

_INTERP = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*)|(?P<bad>))"
)


# What a user must set: Compose refuses the file without it (`${VAR:?message}`). The checks read
# the files as a user who set it; test_grafana_has_no_default_password reads them without.
REQUIRED_ENV = {"GRAFANA_ADMIN_PASSWORD": "set-by-the-ops-checks"}


def with_required(env: dict[str, str] | None = None) -> dict[str, str]:
    """`env` with the variables Compose requires (REQUIRED_ENV) where it lacks them."""
    return {**REQUIRED_ENV, **(env or {})}


def interpolate(text: str, env: dict[str, str] | None = None) -> str:
    """Compose's variable interpolation: `$$`, `$VAR`, `${VAR}`, `${VAR:-default}`, `${VAR-default}`,
    `${VAR:?error}`. Unset variables without a default become "" (Compose warns and does the same)."""
    env = env or {}

    def sub(m: re.Match) -> str:
        if m.group("escaped"):
            return "$"
        if m.group("bad") is not None and not m.group("braced") and not m.group("bare"):
            raise ValueError(f"invalid interpolation at {m.start()}: {text[m.start():m.start() + 20]!r}")
        name = m.group("braced") or m.group("bare")
        op, arg = m.group("op"), m.group("arg")
        value = env.get(name)
        if op in (":-", "-"):
            if value is None or (op == ":-" and value == ""):
                return interpolate(arg, env)
            return value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise ValueError(f"required variable {name} is unset: {arg}")
            return value
        return value or ""

    return _INTERP.sub(sub, text)


def variables(text: str) -> set[str]:
    """Names of the variables a Compose file reads (not counting `$$` escapes)."""
    names = set()
    for m in _INTERP.finditer(text):
        if not m.group("escaped"):
            names.add(m.group("braced") or m.group("bare"))
    names.discard(None)
    return names


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"{path}: not KEY=VALUE: {line!r}"
        env[key.strip()] = value.strip()
    return env


def deep_merge(base: dict, override: dict) -> dict:
    """Compose's merge of an override file, as far as the repository's files need it: mappings
    merge key by key; `ports` and `volumes` lists are joined; anything else (commands,
    health-check tests) is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        elif key in ("ports", "volumes") and isinstance(out.get(key), list):
            out[key] = out[key] + [v for v in value if v not in out[key]]
        else:
            out[key] = value
    return out


# ---- Dockerfiles -----------------------------------------------------------------------------


@dataclass
class Instruction:
    keyword: str  # upper case
    args: str  # continuation lines joined, flags included
    line: int

    def flags(self) -> dict[str, str]:
        """`--from=build --chown=x` style flags at the front of the arguments."""
        out = {}
        for tok in self.args.split():
            if not tok.startswith("--"):
                break
            key, _, value = tok[2:].partition("=")
            out[key] = value
        return out

    def words(self) -> list[str]:
        """Arguments after the flags, split on whitespace (JSON form parsed as JSON)."""
        rest = self.args.split()
        while rest and rest[0].startswith("--"):
            rest.pop(0)
        text = " ".join(rest)
        if text.startswith("["):
            return json.loads(text)
        return rest


@dataclass
class Stage:
    name: str | None
    base: str  # after ARG substitution
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        out = {}
        for ins in self.all("ENV"):
            for m in re.finditer(r'([A-Za-z_][A-Za-z0-9_]*)=("[^"]*"|\S+)', ins.args):
                out[m.group(1)] = m.group(2).strip('"')
        return out


def parse_dockerfile(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """The global ARG defaults and the stages of a Dockerfile, in order."""
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # comment lines inside a continuation are dropped by BuildKit too
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        logical.append((start, buf))
        buf = ""
    assert not buf, f"{path}: dangling line continuation"

    args: dict[str, str] = {}
    stages: list[Stage] = []
    for n, text in logical:
        keyword, _, rest = text.partition(" ")
        ins = Instruction(keyword.upper(), rest.strip(), n)
        if ins.keyword == "FROM":
            words = ins.words()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(name, base))
        elif not stages:
            assert ins.keyword == "ARG", f"{path}:{n}: only ARG may precede the first FROM"
            key, _, value = ins.args.partition("=")
            args[key] = value
        else:
            stages[-1].instructions.append(ins)
    return args, stages


def stage_chain(stages: list[Stage], name: str) -> list[Stage]:
    """A stage and the stages it is built FROM, nearest first."""
    by_name = {s.name: s for s in stages if s.name}
    chain = [by_name[name]]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    return chain


def effective(stages: list[Stage], name: str, keyword: str) -> Instruction | None:
    """The last `keyword` instruction in force for a target (ENTRYPOINT, USER, ...)."""
    for stage in stage_chain(stages, name):
        found = stage.all(keyword)
        if found:
            return found[-1]
    return None


# ---- .dockerignore ---------------------------------------------------------------------------


def ignore_patterns(path: Path) -> list[str]:
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]


def ignored(rel: str, patterns: list[str]) -> bool:
    """Whether a context-relative path is excluded (Docker's rules minus `!` exceptions, which
    the repository does not use)."""
    assert not any(p.startswith("!") for p in patterns), "exceptions are not supported here"
    parts = rel.split("/")
    for pat in patterns:
        pat = pat.strip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatchcase(prefix, pat):
                return True
            if pat.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pat[3:]):
                return True
    return False


# ---- Cargo ------------------------------------------------------------------------------------


def cargo_metadata() -> dict:
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def bin_targets(meta: dict) -> dict[str, str]:
    """Binary name -> package name, for every workspace binary."""
    return {
        t["name"]: p["name"]
        for p in meta["packages"]
        for t in p["targets"]
        if "bin" in t["kind"]
    }


def env_flags(crate_dir: Path) -> set[str]:
    """Every `env = "PIRQ_..."` a crate's clap configuration reads."""
    names = set()
    for rs in crate_dir.rglob("*.rs"):
        names.update(re.findall(r'env\s*=\s*"(PIRQ_[A-Z0-9_]+)"', rs.read_text()))
    return names


# ---- Metrics catalog ----------------------------------------------------------------------------


def catalog() -> dict[str, str]:
    """Metric name -> type, from docs/metrics.md's generated table (which the Rust test
    `docs_table_matches_the_catalog` holds equal to shared/src/metrics.rs)."""
    doc = (ROOT / "docs/metrics.md").read_text()
    begin = doc.index("<!-- catalog:begin")
    end = doc.index("<!-- catalog:end -->")
    out = {}
    for line in doc[begin:end].splitlines():
        m = re.match(r"\| `(pirq_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", line)
        if m:
            out[m.group(1)] = m.group(2)
    assert out, "no catalog rows in docs/metrics.md"
    return out

