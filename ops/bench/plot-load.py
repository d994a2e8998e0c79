#!/usr/bin/env python3
"""Plots end-to-end load runs: keys/s and p50/p99 latency against clients, one line a design.

Reads recorded load series (docs/bench/data/*.json, format below) and draws one SVG with two
panels side by side: keys/s by the party (left), p50 (solid) and p99 (dashed) latency (right),
clients on a log2 axis, one colour a series. Standard library only (a small SVG writer), so it
runs anywhere `python3` does and its output changes only with its input.

    ops/bench/plot-load.py docs/bench/data/rotation-load-h100-2026-11-25.json \\
        --out docs/img/rotation-load.svg

A run of ops/bench/gpu-e2e-load.sh (or scripts/gpu-rotation-2gpu.sh) leaves one
`pirq bench load --json` report a point, named `cfgN-VARIANT-closed-CLIENTS.json` (in the
tarball it writes to $OUT, or a directory); `--from-reports` turns them into a series file to
record under docs/bench/data/ (each VARIANT a series; `--label VARIANT=TEXT` names it):

    ops/bench/plot-load.py --from-reports gpu-e2e-load.tgz --device "nvidia-h100-x1 (H100 80GB HBM3)" \\
        --date 2026-11-26 --commit batch=8364706 --commit packed=d85e8e6 \\
        --label batch=batch-per-pass --label packed=rotating --halves 2 \\
        --command "CLIENTS='1 64 128 512' ops/bench/gpu-e2e-load.sh run" \\
        --write-series docs/bench/data/rotation-load-h100-2026-11-26.json

Series file: {"title", "device", "date", "command", "source", "keys_per_s": (what keys/s
counts), "series": [{"label", "commit", "points": [{"clients", "queries_per_s",
"keys_per_s", "p50_ms", "p99_ms", ...}]}]}.
"""

import argparse
import io
import json
import math
import os
import re
import sys
import tarfile

# A point's report: gpu-e2e-load.sh's name for it.
REPORT_NAME = re.compile(r"(?:^|/)cfg(?P<cfg>\d+)-(?P<variant>.+)-closed-(?P<clients>\d+)\.json$")
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def load_series(path):
    with open(path) as f:
        data = json.load(f)
    for s in data["series"]:
        s["points"].sort(key=lambda p: p["clients"])
        for p in s["points"]:
            for field in ("clients", "keys_per_s", "p50_ms", "p99_ms"):
                if not isinstance(p.get(field), (int, float)):
                    sys.exit(f"{path}: series {s['label']!r}: a point without a number {field!r}")
    return data


def reports(source):
    """(name, parsed JSON) of every report in a directory or a tarball."""
    if os.path.isdir(source):
        for root, _, files in os.walk(source):
            for name in sorted(files):
                if name.endswith(".json"):
                    path = os.path.join(root, name)
                    with open(path) as f:
                        yield path, json.load(f)
        return
    with tarfile.open(source) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.endswith(".json"):
                yield member.name, json.load(io.TextIOWrapper(tar.extractfile(member)))


def series_from_reports(args):
    labels = dict(kv.split("=", 1) for kv in args.label)
    commits = dict(kv.split("=", 1) for kv in args.commit)
    by_variant = {}
    for name, report in reports(args.from_reports):
        m = REPORT_NAME.search(name)
        if not m or report.get("mode", {}).get("kind") != "closed":
            continue
        variant = (m["cfg"], m["variant"])
        qps = report["achieved_qps"]
        point = {
            "clients": report["mode"]["concurrency"],
            "queries_per_s": round(qps, 1),
            # Keys the party answered: each query's keys, times the halves one party was given.
            "keys_per_s": round(qps * report["keys_per_query"] * args.halves, 1),
            "p50_ms": report["latency_ms"]["p50"],
            "p90_ms": report["latency_ms"]["p90"],
            "p99_ms": report["latency_ms"]["p99"],
            "errors": sum(report.get("errors", {}).values()),
            "report": os.path.basename(name),
        }
        by_variant.setdefault(variant, []).append(point)
    if not by_variant:
        sys.exit(f"{args.from_reports}: no closed-loop reports named cfgN-VARIANT-closed-C.json")
    # A variant run under several worker configurations (CONFIGS) is a series per configuration.
    variants = [v for _, v in by_variant]
    series = []
    for (cfg, variant), points in sorted(by_variant.items(), key=lambda kv: (int(kv[0][0]), kv[0][1])):
        points.sort(key=lambda p: p["clients"])
        name = variant if variants.count(variant) == 1 else f"cfg{cfg}-{variant}"
        series.append({
            "label": labels.get(name, name),
            "variant": name,
            "commit": commits.get(variant, ""),
            "points": points,
        })
    return {
        "title": args.title,
        "device": args.device,
        "date": args.date,
        "command": args.command,
        "source": f"pirq bench load --json reports from {os.path.basename(args.from_reports)}",
        "keys_per_s": f"keys answered by the party: queries/s x keys a query x {args.halves}"
        " (halves of each query one party was given)",
        "series": series,
    }


# ---- the SVG writer ----------------------------------------------------------------------

def esc(text):
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def nice_ticks(hi, n=5):
    """0 and round steps up to at least `hi`."""
    if hi <= 0:
        return [0, 1]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [0]
    while ticks[-1] < hi:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def fmt(v):
    return f"{v:,.0f}" if v >= 100 or v == int(v) else f"{v:g}"


class Panel:
    def __init__(self, x, y, w, h, xs, y_max, title, y_label):
        self.x, self.y, self.w, self.h = x, y, w, h
        self.lo, self.hi = math.log2(min(xs)), math.log2(max(xs))
        if self.hi == self.lo:
            self.hi += 1
        self.ticks = nice_ticks(y_max)
        self.y_top = self.ticks[-1]
        self.xs, self.title, self.y_label = sorted(set(xs)), title, y_label

    def px(self, clients):
        return self.x + (math.log2(clients) - self.lo) / (self.hi - self.lo) * self.w

    def py(self, v):
        return self.y + self.h - v / self.y_top * self.h

    def frame(self, out):
        out.append(f'<text x="{self.x + self.w / 2:.1f}" y="{self.y - 12:.1f}" '
                   f'text-anchor="middle" font-weight="bold">{esc(self.title)}</text>')
        for t in self.ticks:
            y = self.py(t)
            out.append(f'<line x1="{self.x}" x2="{self.x + self.w}" y1="{y:.1f}" y2="{y:.1f}" '
                       'stroke="#ddd"/>')
            out.append(f'<text x="{self.x - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt(t)}</text>')
        for c in self.xs:
            x = self.px(c)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.y}" y2="{self.y + self.h}" '
                       'stroke="#eee"/>')
            out.append(f'<text x="{x:.1f}" y="{self.y + self.h + 16}" '
                       f'text-anchor="middle">{c}</text>')
        out.append(f'<rect x="{self.x}" y="{self.y}" width="{self.w}" height="{self.h}" '
                   'fill="none" stroke="#444"/>')
        out.append(f'<text x="{self.x + self.w / 2:.1f}" y="{self.y + self.h + 34}" '
                   'text-anchor="middle">clients (closed loop, log scale)</text>')
        cy = self.y + self.h / 2
        out.append(f'<text x="{self.x - 52}" y="{cy:.1f}" text-anchor="middle" '
                   f'transform="rotate(-90 {self.x - 52} {cy:.1f})">{esc(self.y_label)}</text>')

    def line(self, out, points, field, colour, dash=None):
        coords = " ".join(f"{self.px(p['clients']):.1f},{self.py(p[field]):.1f}" for p in points)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{coords}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{dash_attr}/>')
        for p in points:
            out.append(f'<circle cx="{self.px(p["clients"]):.1f}" cy="{self.py(p[field]):.1f}" '
                       f'r="3" fill="{colour}"><title>{p["clients"]} clients: '
                       f'{field} {fmt(p[field])}</title></circle>')


def plot(datasets, title, made_from):
    series = [(d, s) for d in datasets for s in d["series"]]
    points = [p for _, s in series for p in s["points"]]
    xs = [p["clients"] for p in points]
    width = 1000
    legend_y = 420
    height = legend_y + 18 * (len(series) + len(datasets)) + 10
    left = Panel(90, 60, 360, 300, xs, max(p["keys_per_s"] for p in points),
                 "keys/s by the party", "keys/s")
    right = Panel(590, 60, 360, 300, xs, max(p["p99_ms"] for p in points),
                  "latency: p50 (solid), p99 (dashed)", "ms")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f"<!-- made by ops/bench/plot-load.py from: {esc(' '.join(made_from))} -->",
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="15" '
           f'font-weight="bold">{esc(title)}</text>']
    left.frame(out)
    right.frame(out)
    y = legend_y
    for i, (d, s) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        left.line(out, s["points"], "keys_per_s", colour)
        right.line(out, s["points"], "p50_ms", colour)
        right.line(out, s["points"], "p99_ms", colour, dash="6,4")
        commit = f" ({s['commit']})" if s.get("commit") else ""
        out.append(f'<line x1="90" x2="114" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" '
                   'stroke-width="2"/>')
        out.append(f'<text x="120" y="{y}">{esc(s["label"] + commit)}</text>')
        y += 18
    for d in datasets:
        out.append(f'<text x="90" y="{y}" fill="#555">{esc(d.get("device", ""))}; '
                   f'{esc(d.get("date", ""))}</text>')
        y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("series", nargs="*", help="series files (docs/bench/data/*.json)")
    ap.add_argument("--out", help="the SVG to write")
    ap.add_argument("--title", default="One party end to end, 64 GiB: batch-per-pass and rotating scan",
                    help="with --from-reports: the series' title; a plot of one file takes that file's, of several this")
    ap.add_argument("--from-reports", help="a directory or tarball of pirq bench load reports")
    ap.add_argument("--write-series", help="with --from-reports: the series file to write")
    ap.add_argument("--label", action="append", default=[], help="VARIANT=label")
    ap.add_argument("--commit", action="append", default=[], help="VARIANT=commit")
    ap.add_argument("--halves", type=int, default=2,
                    help="key halves of each query one party answered (2: one party given both)")
    ap.add_argument("--device", default="")
    ap.add_argument("--date", default="")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    datasets = [load_series(p) for p in args.series]
    if args.from_reports:
        data = series_from_reports(args)
        if args.write_series:
            with open(args.write_series, "w") as f:
                json.dump(data, f, indent=2)
                f.write("\n")
        datasets.append(data)
    if not datasets:
        ap.error("give series files or --from-reports")
    if args.out:
        made_from = [os.path.relpath(p) for p in args.series] + (
            [os.path.relpath(args.write_series)] if args.from_reports and args.write_series else [])
        # One file names its run; several runs share the generic title.
        title = datasets[0]["title"] if len(datasets) == 1 else args.title
        svg = plot(datasets, title, made_from)
        with open(args.out, "w") as f:
            f.write(svg)
        print(f"wrote {args.out}: {sum(len(d['series']) for d in datasets)} series")


if __name__ == "__main__":
    main()
