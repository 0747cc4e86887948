"""Curricula: pure, serialisable state machines that decide each step's stage.

    >>> from curricula import Curriculum, Stage
    >>> c = Curriculum([Stage("sft", "sft", steps=2), Stage("rl", "rl", steps=1)])
    >>> [c.stage.name, c.update({}).name, c.update({}).name, c.done]
    ['sft', 'sft', 'rl', False]
"""

from curricula.machine import Curriculum, Stage, build_curriculum, curriculum_names

__all__ = ["Curriculum", "Stage", "build_curriculum", "curriculum_names"]
