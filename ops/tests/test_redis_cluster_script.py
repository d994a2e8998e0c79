"""scripts/redis-cluster.sh starts a real Redis Cluster of any size, places the slots of the tags
it is given on the primaries in turn (a party's partitions, so that queue-scale.sh's runs carry
the same number on every primary), and stops every node it started."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess

import pytest

from opslib import ROOT

SCRIPT = ROOT / "scripts" / "redis-cluster.sh"

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None or shutil.which("redis-cli") is None,
    reason="redis-server and redis-cli are not installed (scripts/install-deps.sh installs them)",
)


def free_port_block(count: int) -> int:
    """A first port P such that P … P+count-1 and their cluster bus ports (+10000) are free."""
    for _ in range(200):
        base = random.randrange(20000, 30000 - count)
        socks = []
        try:
            for port in [*range(base, base + count), *range(base + 10000, base + 10000 + count)]:
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports")


def cli(port: int, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def owner_of(nodes: str, slot: int) -> int:
    """The port of the node that serves a slot, from CLUSTER NODES."""
    for line in nodes.splitlines():
        fields = line.split()
        for part in fields[8:]:
            lo, _, hi = part.partition("-")
            if lo.isdigit() and int(lo) <= slot <= int(hi or lo):
                return int(fields[1].split(":")[1].split("@")[0])
    raise AssertionError(f"slot {slot} is served by no node:\n{nodes}")


@pytest.mark.parametrize("primaries", [1, 2, 4])
def test_places_tags_on_primaries_in_turn_and_stops_every_node(primaries, tmp_path):
    tags = [f"qs:{p}" if p else "qs" for p in range(2 * primaries)]
    port = free_port_block(primaries)
    run = lambda *args: subprocess.run(  # noqa: E731
        [str(SCRIPT), *args, "--port", str(port), "--dir", str(tmp_path / "c")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    started = run("start", "--primaries", str(primaries), "--place-tags", " ".join(tags))
    try:
        assert started.returncode == 0, started.stderr
        expected = ",".join(f"127.0.0.1:{port + i}" for i in range(primaries))
        assert started.stdout.strip() == f"redis+cluster://{expected}"
        assert "cluster_state:ok" in cli(port, "cluster", "info")
        nodes = cli(port, "cluster", "nodes")
        flags = [line.split()[2].split(",") for line in nodes.splitlines()]
        assert sum("master" in f for f in flags) == primaries, nodes
        for i, tag in enumerate(tags):
            slot = int(cli(port, "cluster", "keyslot", "{%s}" % tag))
            assert owner_of(nodes, slot) == port + i % primaries, (tag, slot, nodes)
        # Every slot is served.
        assert "cluster_slots_assigned:16384" in cli(port, "cluster", "info")
        pids = [int((tmp_path / "c" / f"node-{port + i}" / "redis.pid").read_text()) for i in range(primaries)]
    finally:
        stopped = run("stop")
    assert stopped.returncode == 0, stopped.stderr
    assert not (tmp_path / "c").exists()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_two_primaries_with_a_replica_each(tmp_path):
    port = free_port_block(4)
    args = ["--port", str(port), "--dir", str(tmp_path / "c")]
    started = subprocess.run(
        [str(SCRIPT), "start", "--primaries", "2", "--replicas", "1", *args],
        capture_output=True, text=True, timeout=120,
    )
    try:
        assert started.returncode == 0, started.stderr
        for replica, primary in ((port + 2, port), (port + 3, port + 1)):
            info = cli(replica, "info", "replication")
            assert "role:slave" in info and f"master_port:{primary}" in info, info
            assert "master_link_status:up" in info, info
    finally:
        subprocess.run([str(SCRIPT), "stop", *args], check=True, capture_output=True, timeout=60)


def test_refuses_an_unknown_argument():
    out = subprocess.run([str(SCRIPT), "start", "--bogus"], capture_output=True, text=True)
    assert out.returncode == 2 and "unknown argument --bogus" in out.stderr
