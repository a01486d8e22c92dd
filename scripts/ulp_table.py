"""Print the README table of float32 max ulp errors per function, on CPU and PYTHON, libm and polynomial paths.

Usage: python scripts/ulp_table.py [N] (N random inputs per function on CPU, default 1,000,000; PYTHON gets N/20),
plus the edge inputs. The cases are those of packages/tg-tensor/tests/test_numerics_math.py.
"""

import pathlib
import sys

from tqdm import tqdm

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "packages" / "tg-tensor" / "tests"))
from test_numerics_math import CASES, max_ulp

n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
columns = [("CPU", 1, n), ("CPU", 2, n), ("PYTHON", 1, n // 20), ("PYTHON", 2, n // 20)]
print("| function | CPU libm | CPU poly | PYTHON libm | PYTHON poly |")
print("| --- | --- | --- | --- | --- |")
for case in tqdm(CASES, desc="functions", file=sys.stderr):
    cells = [f"{max_ulp(case, dev, size, seed=1, transcendental=mode)[0]:.2f}" for dev, mode, size in columns]
    print(f"| `{case.name}` | " + " | ".join(cells) + " |")
