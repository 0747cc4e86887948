"""Curricula: pure, serialisable state machines that decide each step's stage and reward.

    >>> from curricula import Curriculum, Phase, Slot, Stage
    >>> c = Curriculum([Stage("sft", "sft", steps=2), Stage("rl", "rl", steps=1)])
    >>> [c.stage.name, c.update({}).name, c.update({}).name, c.done]
    ['sft', 'sft', 'rl', False]
    >>> s2 = Stage("rl", "rl", 10, schedule=(Phase((Slot("accuracy", steps=8), Slot("tiered", steps=2))),))
    >>> [s2.at(i).reward for i in (7, 8)]
    ['accuracy', 'tiered']
"""

from curricula.machine import Curriculum
from curricula.registry import build_curriculum, curriculum_from_dict, curriculum_names, register_curriculum
from curricula.schedule import Phase, RewardChoice, Slot, parse_schedule, reward_at
from curricula.stage import Stage, stage_from_dict
from curricula.transitions import EPOCH_METRIC, Predicate

__all__ = ["EPOCH_METRIC", "Curriculum", "Phase", "Predicate", "RewardChoice", "Slot", "Stage", "build_curriculum",
           "curriculum_from_dict", "curriculum_names", "parse_schedule", "register_curriculum", "reward_at",
           "stage_from_dict"]
