"""A study on a two-node Ray cluster on this machine: trials land on both nodes."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import study_helpers as h
from optuna.trial import TrialState
from ray_nodes import START_TIMEOUT, START_TRIES

from studies import StudySpec, counted_trials, create_study, run_study

GEOMETRY = h.GEOMETRY
# Ray nodes of its own: one at a time with the other such tests (see test_cluster_token).
pytestmark = pytest.mark.xdist_group("ray-start")
BASE = h.SMALL_SPACE["base"]


@pytest.fixture()
def cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """A head node and one worker node, one CPU each; Ray is shut down around it. Their
    workers meet in ``tmp_path / "meet"`` (:func:`study_helpers.meet`)."""
    import ray
    from ray.cluster_utils import Cluster

    h.worker_env()  # the nodes' workers import the evaluator by name (study key `evaluator`)
    (tmp_path / "meet").mkdir()
    monkeypatch.setenv("NAS_FAKE_MEET", str(tmp_path / "meet"))  # before the nodes start
    ray.shutdown()
    for attempt in range(START_TRIES):  # Ray's fixed 30 s for a raylet to register: see ray_nodes
        cluster = Cluster(initialize_head=True,
                          head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            cluster.add_node(num_cpus=1)
            break
        except Exception as err:
            # The node that failed is tracked by nothing: end every process of the session.
            assert cluster.head_node is not None
            session = cluster.head_node.get_session_dir_path()
            cluster.shutdown()
            subprocess.run(["pkill", "-f", session], check=False)
            if START_TIMEOUT not in str(err) or attempt == START_TRIES - 1:
                raise
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_trials_are_placed_on_both_nodes(cluster, tmp_path) -> None:
    import ray

    # The first two trainings wait for each other: the head's one CPU is held by the first, so
    # the second starts only on the other node. Were the study to run one trial at a time (or
    # place both on one node), the first would wait 120 s alone and the placement check below
    # fails; without the wait, a node whose workers start slowly (a loaded machine) saw every
    # trial run on the other one, Tune reusing its finished actor.
    meet = tmp_path / "meet"
    url = f"sqlite:///{tmp_path / 'cluster.db'}"
    spec = StudySpec.from_dict(h.study_dict(
        "cluster", budget={"trials": 6}, evaluator="study_helpers:meet",
        enqueue=[{**BASE, "groups": 1}, {**BASE, "groups": 2, "group_ffn": True}]))
    run = create_study(spec, url, geometry=GEOMETRY)
    run_study(run, address=cluster.address, progress=False)
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(nodes) == 2
    trials = h.load(url, "cluster")
    placed = Counter(t.user_attrs["nas.node"] for t in trials if "nas.node" in t.user_attrs)
    assert set(placed) == nodes, placed  # one trial per CPU at once, spread over the nodes
    assert len(list(meet.glob("arrived-*"))) == sum(placed.values())
    assert counted_trials(trials) == 6
    assert all(t.state in (TrialState.COMPLETE, TrialState.FAIL) for t in trials)
