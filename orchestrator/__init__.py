"""Parallax orchestrator: the Hydra app (`python -m orchestrator`) and the driver.

* `trainer.py`: the run's lifecycle (setup, fit, save, finish) and its SFT and RL steps, one screen each;
* `prepare.py`: what a run needs before Ray starts (model, data, curriculum, held-out prompts), checked;
* `setup.py`: the local or attached Ray cluster and the actor groups on one placement group;
* `generation.py`: a step's samples started and collected as scored groups; `dynamic.py`: DAPO's refill;
* `heldout.py`: held-out evaluation; `structure.py`, `samples.py`: a step's parallel structure and table;
* `checkpoint.py`, `logger.py`, `plots.py`, `stage_table.py`, `sweep.py`: what a run writes.

The typed configs and batches it passes around are `parallax/contract/`; its data streams are `parallax/trainingdata/`.
"""
