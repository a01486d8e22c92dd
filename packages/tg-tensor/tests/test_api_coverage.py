"""The op-coverage table in tg-tensor's README stays true: all 251 tinygrad 0.14 names are listed, and a name is
marked implemented exactly when Tensor has it."""

import re
from pathlib import Path

from tg.tensor import Tensor

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_op_table_matches_the_tensor_class():
    text = README.read_text()
    section = text.split("## Op coverage", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (yes|no) \| (yes|no|—) \| (yes|no|n/a|—) \|", section, re.MULTILINE)
    assert len(rows) == 251
    for name, implemented, tested, grad in rows:
        assert (implemented == "yes") == hasattr(Tensor, name), f"README says {name} implemented={implemented}"
        if implemented == "no":
            assert tested == "—" and grad == "—", name
