"""What a run leaves behind on the machine once it has ended."""

from __future__ import annotations

import os


def shm_files() -> set[str]:
    """Names in /dev/shm of the shared memory torch (`torch_*`: the weight hand-off) and Python's
    `multiprocessing.shared_memory` (`psm_*`: vLLM's message queues) make."""
    return {n for n in os.listdir("/dev/shm") if n.startswith(("torch_", "psm_"))}
