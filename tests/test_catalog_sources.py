"""Every number in the GPU catalog says where it comes from: a comment on its line, or (files
whose header says so) the value of the shipped hardware.csv for that GPU."""

import re

import pandas as pd
import pytest

from jctopt.config.resources import CONF_DIR, validation_file

HARDWARE = pd.read_csv(validation_file("hardware.csv")).set_index("gpu")
# catalog key -> hardware.csv column (blank there = the GPU lacks the unit: 0 in the catalog)
COLUMNS = {"peak_bf16_tflops": "peak_dense_bf16_tflops", "peak_fp8_tflops": "peak_dense_fp8_tflops",
           "peak_fp4_tflops": "peak_dense_fp4_tflops", "hbm_gb": "hbm_gb", "hbm_tbps": "hbm_tbps",
           "nvlink_gbps": "nvlink_gbps_per_gpu_unidirectional", "tdp_w": "tdp_w"}
NUMBER = re.compile(r"^(\w+):\s*(-?[0-9][0-9.e+-]*)\s*(#.*)?$")


def _numbers(path):
    for line in path.read_text().splitlines():
        m = NUMBER.match(line)
        if m:
            yield m.group(1), float(m.group(2)), m.group(3)


@pytest.mark.parametrize("path", sorted((CONF_DIR / "gpu").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_catalog_number_has_a_source(path):
    header = path.read_text().splitlines()[0]
    from_csv = "hardware.csv" in header and path.stem in HARDWARE.index
    unsourced = []
    for key, value, comment in _numbers(path):
        if comment and len(comment.strip("# ")) > 3:
            continue
        if from_csv and key in COLUMNS:
            cell = HARDWARE.loc[path.stem, COLUMNS[key]]
            if value == pytest.approx(0.0 if pd.isna(cell) else float(cell), rel=1e-9):
                continue
        unsourced.append(f"{key}: {value:g}")
    assert not unsourced, f"{path.name}: no source comment and not hardware.csv's value: {unsourced}"
