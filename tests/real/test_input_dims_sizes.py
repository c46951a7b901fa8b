"""Message sizes from record_param_comms' Input Dims on PARAM's DLRM trace (8 ranks, PyTorch 1.x:
no Collective name, no element counts): each sized collective equals what the JSON says by hand,
the first input's dims times its Input type's element size; tensor-list inputs stay unsized."""

from __future__ import annotations

import json
import math

from conftest import REAL, analyzed, need_real

ELEMENT = {"float": 4, "double": 8, "long int": 8, "int": 4, "c10::Half": 2, "c10::BFloat16": 2}


def test_dlrm_sizes_are_the_input_dims_times_the_element_size():
    folder = need_real(REAL / "kineto" / "param-dlrm-8rank")
    by_hand = set()
    for path in sorted(folder.glob("*.json")):
        for e in json.loads(path.read_text())["traceEvents"]:
            if e.get("name") == "record_param_comms":
                dims, types = e["args"]["Input Dims"], e["args"]["Input type"]
                if dims and dims[0] and types[0] in ELEMENT:
                    by_hand.add(math.prod(dims[0]) * ELEMENT[types[0]])
    doc = analyzed(sorted(folder.glob("*.json")))[1].doc
    sized = [c for c in doc["collectives"] if c["bytes"] is not None]
    assert len(sized) == 5 and {c["bytes_source"] for c in sized} == {"input_dims"}
    assert {c["bytes"] for c in sized} <= by_hand
    assert all(c["op"] == "AllToAll" for c in sized)  # the all-reduces take tensor lists: no dims
    print("DLRM sizes from Input Dims:", [(c["id"], c["op"], c["bytes"]) for c in doc["collectives"]])
