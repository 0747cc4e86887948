"""Studies of the papers' training dynamics on the toy world, each one command (README, "Studies").

A study is one cold-start SFT run, then several RL arms from its checkpoint over several seeds,
then a report: per-arm curves averaged over seeds (``summary.png``), a table (``results.md``) and
every number behind them (``results.json``).  Runs are real ``python -m orchestrator`` jobs; each
arm is one Hydra sweep over the seeds (one Ray cluster per arm).

* ``drift``    -- Parallel-R1 Figure 3: does the first-``<Parallel>`` position move later under
  accuracy-only RL against ``R_parallel x R_acc``?  The teacher forks first, mid-solution or after
  a serial solution (``data.teacher_verify`` / ``data.teacher_midfork``).
* ``scaffold`` -- the exploration scaffold: S2 for the first steps then accuracy only, against S1
  (accuracy throughout) and S2 throughout, from a teacher that forks half the time.
* ``branch``   -- a reward per branch (``branch_acc``) against accuracy only: does RL then
  improve the arithmetic inside the branches?

Launch:
    python -m parallax.studies drift                      # the full study, under 15 minutes on 2 CPU cores
    python -m parallax.studies scaffold --seeds 0 1 2 --out runs/studies
    python -m parallax.studies report runs/studies/drift  # rebuild the table and plot from the runs on disk
"""

from parallax.studies.specs import STUDIES, Arm, Study

__all__ = ["STUDIES", "Arm", "Study"]
