"""What each study runs: the SFT run's overrides, the RL arms' overrides, the step budgets.

Pure data.  Override templates may name ``{model}`` (the SFT checkpoint's model directory),
``{steps}`` (RL steps per arm), ``{switch}`` (the scaffold's S2 steps) and ``{eval_every}``.
Budgets are sized so that each study's full command ends within 15 minutes on 2 CPU cores
(README, "Studies"; measured times there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["STUDIES", "Arm", "Study"]


@dataclass(frozen=True)
class Arm:
    """One RL arm: its name in the tables and its overrides on top of :attr:`Study.rl`."""

    name: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Study:
    """One SFT run, then every arm from its checkpoint, once per seed."""

    name: str
    question: str
    shared: tuple[str, ...]  # overrides shared by the SFT run and every arm: the data, the generation length
    arms: tuple[Arm, ...]
    sft_steps: int = 600
    rl_steps: int = 30
    switch: int = 0  # the scaffold's S2 steps
    eval_every: int = 10  # 0: held-out evaluation before the first RL step and after the last only
    seeds: tuple[int, ...] = (0, 1, 2)
    # Every job (SFT and RL): held-out mean@4 (no greedy pass), no evaluation before the first step: the
    # SFT job's final evaluation is every arm's start (the same weights, the same sampling stream).
    common: tuple[str, ...] = ("trainer.eval_samples=4", "trainer.eval_greedy=false", "trainer.eval_init=false")
    # RL overrides shared by every arm: from the SFT model, no SFT, smaller batches than the default
    # run (8 prompts x 8 samples) so that arms x seeds fit the budget, held-out evaluation every eval_every.
    rl: tuple[str, ...] = ("model.path={model}", "trainer.prompts_per_step=8", "trainer.eval_every={eval_every}")
    # Per-step training-batch metrics and held-out metrics the report draws as curves.
    curves: tuple[str, ...] = ("parallel/first_pos", "parallel/ratio", "reward/acc")
    eval_curves: tuple[str, ...] = ("eval/acc", "eval/parallel/ratio", "eval/parallel/first_pos")
    extra: dict = field(default_factory=dict)


# The default curriculum (parallel_r1_toy: sft, easy_rl, acc_rl) with its RL stages re-purposed:
# easy_rl off, acc_rl runs the arm's reward for `steps` steps at the toy LR (5e-5).
_TOY_RL = ("curriculum.stages.sft.steps=0", "curriculum.stages.easy_rl.steps=0",
           "curriculum.stages.acc_rl.steps={steps}")
# The scaffold curriculum: one RL stage, `dapo`, whose reward schedule the arm sets.
_SCAFFOLD_RL = ("curriculum=parallel_r1_scaffold", "curriculum.stages.sft.steps=0",
                "curriculum.stages.dapo.steps={steps}", "curriculum.stages.dapo.lr=5e-5")

STUDIES: dict[str, Study] = {
    "drift": Study(
        name="drift",
        question="Does the first-<Parallel> position move later under accuracy-only RL (Parallel-R1 Figure 3)?",
        # A quarter of the teacher's traces are serial, a quarter fork first, a quarter mid-solution, a quarter
        # after a serial solution. The serial ones matter: when every sample forks, R_parallel x R_acc (1/0) and
        # accuracy (+1/-1) give the same group-normalised advantages, and the two arms cannot differ.
        # A verifying trace is ~65 tokens (up to 79): room to write it whole.
        shared=("data.teacher_serial=0.25", "data.teacher_verify=0.33", "data.teacher_midfork=0.33",
                "rollout.max_new_tokens=96", "data.n_test=64"),
        sft_steps=250,
        rl_steps=20,
        eval_every=0,
        arms=(
            Arm("accuracy", _TOY_RL + ("curriculum.stages.acc_rl.reward=accuracy",)),
            Arm("parallel_acc", _TOY_RL + ("curriculum.stages.acc_rl.reward=parallel_acc",)),
        ),
    ),
    "scaffold": Study(
        name="scaffold",
        question="Does S2 for the first steps, then accuracy only, beat S1 and S2 throughout?",
        # Half the teacher's traces are serial: #Parallel starts near 0.5 and can move either way.
        shared=("data.teacher_serial=0.5", "data.n_test=64"),
        sft_steps=300,
        rl_steps=30,
        switch=20,  # two S2 windows (8 accuracy + 2 tiered steps each), then accuracy: the paper's 200 of 300
        arms=(
            Arm("S1", _SCAFFOLD_RL + ("curriculum.stages.dapo.schedule=[{cycle:[{reward:accuracy}]}]",)),
            Arm("S2", _SCAFFOLD_RL + ("curriculum.stages.dapo.schedule.0.steps={steps}",)),
            Arm("scaffold", _SCAFFOLD_RL + ("curriculum.stages.dapo.schedule.0.steps={switch}",)),
        ),
    ),
    "branch": Study(
        name="branch",
        question="Does a reward per branch make RL improve the arithmetic inside the branches?",
        # A perfect teacher on a space too large to memorise: what is left to learn is arithmetic.
        shared=("data.teacher_no_answer=0", "data.difficulty=[1,2]", "data.n_train=20000", "data.n_test=64",
                "rollout.max_new_tokens=96"),
        sft_steps=300,
        rl_steps=20,
        arms=(
            Arm("accuracy", _TOY_RL + ("curriculum.stages.acc_rl.reward=accuracy",)),
            Arm("branch_acc", _TOY_RL + ("curriculum.stages.acc_rl.reward=branch_acc",)),
        ),
        curves=("reward/acc", "parallel/steps_ok", "parallel/ratio"),
        eval_curves=("eval/acc", "eval/parallel/steps_ok", "eval/parallel/ratio"),
    ),
}
