"""The plots under docs/img that ops/bench/plot-load.py made are what it makes now from the data
they name (docs/bench/data/): a plot is never edited by hand, nor left behind its data."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from opslib import ROOT

MADE_FROM = re.compile(r"<!-- made by ops/bench/plot-load\.py from: (?P<inputs>[^>]*) -->")
PLOTS = sorted(
    p for p in (ROOT / "docs" / "img").glob("*.svg") if MADE_FROM.search(p.read_text())
)


def test_there_are_plots_to_check():
    assert PLOTS, "docs/img/rotation-load.svg is made by ops/bench/plot-load.py"


@pytest.mark.parametrize("plot", PLOTS, ids=lambda p: p.name)
def test_plot_is_remade_from_its_data(plot, tmp_path):
    inputs = MADE_FROM.search(plot.read_text())["inputs"].split()
    assert inputs and all((ROOT / i).is_file() for i in inputs), inputs
    out = tmp_path / plot.name
    subprocess.run(
        [sys.executable, str(ROOT / "ops" / "bench" / "plot-load.py"), *inputs, "--out", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    assert out.read_text() == plot.read_text(), (
        f"{plot.relative_to(ROOT)} differs from what ops/bench/plot-load.py makes of {inputs}; "
        "run it again"
    )
