"""``make demo``: the main job.

Until the study engine lands (issue 4), the demo shows every preset with its exact cost and the
cost of one searched-space point, computed on the meta device without training.
"""

from __future__ import annotations

import sys

from nas_cli.main import main as nas


def main() -> int:
    print("== nas presets: every preset's parameters and MAdds on its family's default task ==")
    code = nas(["presets"])
    if code:
        return code
    print("\n== nas cost lw-1x --set qk_multiplier=3 --set layer_sharing='(0x3,1x3)' ==")
    return nas(["cost", "lw-1x", "--set", "qk_multiplier=3", "--set", "layer_sharing=(0x3,1x3)"])


if __name__ == "__main__":
    sys.exit(main())
