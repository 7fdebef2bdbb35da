"""Run in the benchmark's own environment (``make bench-env``): one NAS-Bench-Graph dataset's
table, from the data the ``nas-bench-graph`` package ships, as JSON for ``_tabular.py``.

    .venv-bench/bin/python benchmarks/_tabular_extract.py DATASET OUT.json

Written: the link patterns and operations of the package's space, the table's rows (validation
accuracy, test accuracy, parameters, latency, as the package reads them), and for every
combination of a link pattern and four operations the row of the architecture it is (the
package's own ``valid_hash``: isomorphic combinations share a row), -1 where the table has none.
"""

from __future__ import annotations

import itertools
import json
import sys

from nas_bench_graph import Arch, light_read
from nas_bench_graph.architecture import gnn_list, link_list


def main() -> None:
    dataset, out = sys.argv[1], sys.argv[2]
    bench = light_read(dataset)
    keys = sorted(bench)
    index = {k: i for i, k in enumerate(keys)}
    rows = [[float(bench[k]["valid_perf"]), float(bench[k]["perf"]), float(bench[k]["para"]),
             float(bench[k]["latency"])] for k in keys]
    combos = []
    for link in link_list:
        for ops in itertools.product(gnn_list, repeat=4):
            if all(op == "skip" for op in ops):
                combos.append(-1)
                continue
            combos.append(index.get(Arch(list(link), list(ops)).valid_hash(), -1))
    with open(out, "w") as f:
        json.dump({"dataset": dataset, "links": link_list, "ops": gnn_list,
                   "columns": ["valid", "test", "params", "latency"], "rows": rows,
                   "combos": combos}, f)


if __name__ == "__main__":
    main()
