"""The documentation: the README stays one short page, and docs/validation.md is what
docs/make_validation.py writes from the shipped data."""

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "make_validation.py"


def _script():
    spec = importlib.util.spec_from_file_location("make_validation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _frame():
    """Five rows of two sources, as validate writes them; the last row is not placed."""
    nan = math.nan
    df = pd.DataFrame({
        "id": ["a1", "a2", "b1", "b2", "b3"],
        "source": ["Source A", "Source A", "Source B", "Source B", "Source B"],
        "measured_iter_time_s": [10.0, 20.0, 4.0, 8.0, 3.0],
        "predicted_iter_time_s": [11.0, 19.0, 5.0, 6.8, nan],
        "predicted_lo_s": [9.0, 17.0, 4.5, 6.0, nan],    # measured inside: a1, b2
        "predicted_hi_s": [12.0, 19.5, 6.0, 9.0, nan],
    })
    df["pct_error"] = 100.0 * (df.predicted_iter_time_s - df.measured_iter_time_s) / df.measured_iter_time_s
    df["abs_pct_error"] = df.pct_error.abs()  # +10, -5, +25, -15, blank
    return df


def _row(page: str, first: str) -> list[str]:
    (line,) = [line for line in page.splitlines() if line.startswith(f"| {first} |")]
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_render_gives_the_hand_computed_figures():
    page = _script().render({"tiny.csv": _frame()}, confidence=0.8, fitted={"tiny.csv": "yes"})
    # |error| 5, 10, 15, 25: median 12.5; p90 by linear interpolation 15 + 0.7 x 10 = 22.0.
    # Signed -15, -5, +10, +25: median +2.5. Inside the interval: a1 and b2 of four, 50 %.
    assert _row(page, "tiny.csv") == ["tiny.csv", "5", "4", "4", "12.5", "22.0", "+2.5", "50.0", "yes"]
    # Source A: |error| 10, 5 -> 7.5, signed +10, -5 -> +2.5; source B: 25, 15 -> 20.0, +25, -15 -> +5.0.
    assert _row(page, "Source A") == ["Source A", "2", "7.5", "+2.5"]
    assert _row(page, "Source B") == ["Source B", "2", "20.0", "+5.0"]
    assert "80 % interval" in page


def test_render_is_deterministic_and_sorted():
    script = _script()
    frames = {"runs_b.csv": _frame(), "runs_a.csv": _frame().iloc[::-1]}
    page = script.render(frames)
    assert page == script.render(dict(reversed(list(frames.items()))))
    assert page.index("| runs_a.csv |") < page.index("| runs_b.csv |")
    assert page.index("| Source A |") < page.index("| Source B |")


def test_readme_is_one_short_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; reference material belongs in docs/"


@pytest.mark.slow
def test_validation_page_matches_the_shipped_data():
    out = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True,
                         timeout=1800, check=False)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
