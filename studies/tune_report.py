"""A trial's reports to Ray Tune, declared once: what the worker sends, what the driver reads.

The trainable (``studies.worker``) sends Tune one :class:`EpochResult` per epoch and, last, one
:class:`FinalResult`: the trial's end together with its last epoch (each report is a round trip
through Tune's driver). Tune carries them as flat dicts of scalars (``to_tune``), the columns of
its CSV and its dataframes, so every report has every key. The searcher and the scheduler read
them back as fields (``from_tune``), and the searcher writes the epochs to the study record
(``EpochResult.record``). This module imports nothing heavy: it runs on every worker.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = ["FINAL_KEYS", "EpochResult", "FinalResult", "Kind", "kind_of"]

#: What a report is: one epoch's metrics, or the trial's end with its last epoch.
Kind = Literal["epoch", "final"]
#: What the final report carries beside its epoch's metrics; an epoch report carries each as
#: None (``value`` excepted: there it is the epoch's own), so Tune's columns are stable.
FINAL_KEYS: Final = ("status", "reason", "value", "seconds", "samples_per_second",
                     "latency_ms", "checkpoint", "node", "epochs_reached", "epoch_value")


def _number(value: Any) -> float | None:
    """A finite number as a float, else None (what a report holds of a number it was given)."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


@dataclass(frozen=True)
class EpochResult:
    """One epoch of a trial: its number, the task's metric (name and value), the training
    loss, the learning rate, the epoch's seconds and any extra metrics."""

    epoch: int
    metric: str | None = None
    value: float | None = None
    train_loss: float | None = None
    lr: float | None = None
    seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_evaluator(cls, epoch: dict[str, Any]) -> EpochResult:
        """An epoch as an evaluator reports it (``trainers.EpochReport`` as a dict, or a
        function of one's own): a number that is not finite is none."""
        return cls(epoch=int(epoch["epoch"]), metric=epoch.get("metric"),
                   value=_number(epoch.get("value")),
                   train_loss=_number(epoch.get("train_loss")), lr=_number(epoch.get("lr")),
                   seconds=_number(epoch.get("seconds")), extra=dict(epoch.get("extra") or {}))

    def to_tune(self) -> dict[str, Any]:
        """What Tune carries: ``kind`` epoch, the epoch's seconds as ``epoch_seconds`` (Tune
        keeps ``seconds``-like names of its own), ``extra`` as JSON text (a column of
        scalars), and the final report's keys as None."""
        return {"kind": "epoch", "epoch": self.epoch, "metric": self.metric,
                "value": self.value, "train_loss": self.train_loss, "lr": self.lr,
                "epoch_seconds": self.seconds, "extra": json.dumps(self.extra),
                **dict.fromkeys(k for k in FINAL_KEYS if k != "value")}

    @classmethod
    def from_tune(cls, result: dict[str, Any], *, value: str = "value") -> EpochResult:
        """An epoch back from Tune's ``result`` (``value``: the key holding the epoch's own
        value: ``epoch_value`` in a final report). ``extra`` that is not a JSON mapping is
        read as none."""
        try:
            extra = json.loads(result.get("extra") or "{}")
        except (TypeError, ValueError):
            extra = {}
        return cls(epoch=int(result.get("epoch") or 0), metric=result.get("metric"),
                   value=result.get(value), train_loss=result.get("train_loss"),
                   lr=result.get("lr"), seconds=result.get("epoch_seconds"),
                   extra=extra if isinstance(extra, dict) else {})

    def record(self) -> dict[str, Any]:
        """The row the study record keeps of it (``StudyStore.record_epoch``)."""
        return {"epoch": self.epoch, "train_loss": self.train_loss, "metric": self.metric,
                "value": self.value, "seconds": self.seconds, "extra": self.extra}


@dataclass(frozen=True)
class FinalResult:
    """How a trial ended: its status word, why (where it failed or stopped), its final metric
    value, the training's seconds and throughput, the measured latency, the checkpoint it
    kept, the Ray node it ran on, the epochs it reached; and its last epoch (``epoch``, None
    for an ending no trainer reported: a failure Tune saw, a stop by the scheduler)."""

    status: str
    reason: str | None = None
    value: float | None = None
    seconds: float | None = None
    samples_per_second: float | None = None
    latency_ms: float | None = None
    checkpoint: str | None = None
    node: str | None = None
    epochs_reached: int | None = None
    epoch: EpochResult | None = None

    @classmethod
    def from_evaluator(cls, out: dict[str, Any], last: EpochResult | None, *,
                       node: str | None) -> FinalResult:
        """The end of a trial from what its evaluator returned (``out``, as
        ``studies.worker.evaluate_trial`` returns it) and the last epoch it reported."""
        return cls(status=str(out.get("status", "failed")), reason=out.get("reason"),
                   value=_number(out.get("value")), seconds=_number(out.get("seconds")),
                   samples_per_second=_number(out.get("samples_per_second")),
                   latency_ms=_number(out.get("latency_ms")), checkpoint=out.get("checkpoint"),
                   node=node, epochs_reached=len(out.get("epochs") or []), epoch=last)

    def to_tune(self) -> dict[str, Any]:
        """What Tune carries: the last epoch's keys (of epoch 0 where none was reported),
        ``kind`` final, that epoch's own value as ``epoch_value`` and the trial's as
        ``value``."""
        epoch = self.epoch or EpochResult(epoch=0)
        return {**epoch.to_tune(), "kind": "final", "epoch_value": epoch.value,
                "status": self.status, "reason": self.reason, "value": self.value,
                "seconds": self.seconds, "samples_per_second": self.samples_per_second,
                "latency_ms": self.latency_ms, "checkpoint": self.checkpoint,
                "node": self.node, "epochs_reached": self.epochs_reached}

    @classmethod
    def from_tune(cls, result: dict[str, Any]) -> FinalResult:
        """The end back from Tune's final ``result``."""
        return cls(status=result.get("status") or "failed", reason=result.get("reason"),
                   value=result.get("value"), seconds=result.get("seconds"),
                   samples_per_second=result.get("samples_per_second"),
                   latency_ms=result.get("latency_ms"), checkpoint=result.get("checkpoint"),
                   node=result.get("node"), epochs_reached=result.get("epochs_reached"),
                   epoch=EpochResult.from_tune(result, value="epoch_value"))

    def measured(self) -> dict[str, Any]:
        """What the objectives read of a trial's end (``studies.objectives.Objective.value``):
        the metric's ``value`` and the measured objectives by name."""
        return {"value": self.value, "latency_ms": self.latency_ms}


def kind_of(result: dict[str, Any]) -> Kind | None:
    """Whether Tune's ``result`` is an epoch report, a final one, or neither (Tune's own)."""
    kind = result.get("kind")
    return kind if kind in ("epoch", "final") else None
