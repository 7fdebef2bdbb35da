"""``make demo``: the main job.

Runs the shipped ``quickstart`` study (tiny ViTs on scikit-learn's digits, local Ray, the default
SQLite database), then prints the Pareto front and the command that opens the dashboard on it.
Each demo run is a new study named ``quickstart-<date>-<time>``, so it can be run repeatedly.
"""

from __future__ import annotations

import sys
import time

from nas_cli.main import main as nas


def main() -> int:
    name = time.strftime("quickstart-%Y%m%d-%H%M%S")
    print(f"== nas run quickstart --name {name} ==", flush=True)
    return nas(["run", "quickstart", "--name", name])


if __name__ == "__main__":
    sys.exit(main())
