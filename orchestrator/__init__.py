"""Parallax orchestrator: the Hydra app (`python -m orchestrator`) and the driver.

* `trainer.py`: the driver loop (SFT step, RL step, held-out evaluation), one screen per step;
* `setup.py`: the local or attached Ray cluster and the actor groups on one placement group;
* `data.py`: problems, prompts and one batch stream per curriculum stage;
* `checkpoint.py`, `logger.py`, `plots.py`, `stage_table.py`, `sweep.py`: what a run writes.

The typed configs and batches it passes around are `contract/`.
"""
