"""The training bar: steps done, the last step's reward and accuracy, and, while a step runs, what
it is doing: its phase (rollout, update, evaluation) and, during generation, the rows still
generating, so that a step of minutes (SmolLM2 on a CPU) moves the bar while it runs."""

from __future__ import annotations

from typing import Any

from tqdm.auto import tqdm


class StepBar:
    """A tqdm bar over a run's steps (``TrainConfig.progress``)."""

    def __init__(self, cfg, initial: int):
        self.bar = tqdm(
            total=cfg.steps,
            initial=initial,
            disable=not cfg.progress,
            desc=f"{cfg.algo} {cfg.env}",
            dynamic_ncols=True,
        )
        self.phase = ""

    def enter(self, phase: str) -> None:
        """A new phase (``step 3: update``), shown at once."""
        self.phase = phase
        self.bar.set_postfix_str(phase)

    def generating(self, finished: int, live: int) -> None:
        """``RolloutBackend.on_step``: redrawn at tqdm's own pace (steps come many a second)."""
        self.bar.set_postfix_str(f"{self.phase}, {live} generating", refresh=False)
        self.bar.update(0)

    def done(self, record: dict[str, Any]) -> None:
        """A step finished: its reward and accuracy."""
        self.bar.update(1)
        self.bar.set_postfix(reward=f"{record['reward/mean']:.3f}", acc=f"{record['accuracy']:.3f}")

    def close(self) -> None:
        self.bar.close()


__all__ = ["StepBar"]
