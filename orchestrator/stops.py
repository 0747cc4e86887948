"""How a run that cannot go on ends: one paragraph for the user, no traceback (`python -m orchestrator`
prints it as `parallax: run stopped: ...`, exit 1)."""

from __future__ import annotations

from actors.faults import ActorLost
from contract.config import ParallaxConfig


class RunStopped(RuntimeError):
    """The run cannot go on; its message is one paragraph for the user (no traceback)."""


def lost_actor_paragraph(e: ActorLost, cfg: ParallaxConfig, failures: int, where) -> str:
    """What died, which knob would have allowed more, and how to continue."""
    tries = f"trainer.max_failures={cfg.trainer.max_failures}, {failures} used"
    if e.role == "learner":  # its peers hang in the collective: only a restart of the whole run helps
        knob = (f"A learner is never restarted in place; a higher trainer.max_failures (now {tries}) restarts "
                "the whole run from its newest verified checkpoint.")
    else:
        knob = (f"Ray restarts a lost {e.role} actor in place up to cluster.max_restarts="
                f"{cfg.cluster.max_restarts} times, and that was not enough; raise it, or trainer.max_failures "
                f"(now {tries}) to restart the whole run from its newest verified checkpoint.")
    return (f"{e}. The run stops. {knob} To continue from the newest checkpoint ({where}), run the same "
            "command with resume=auto.")
