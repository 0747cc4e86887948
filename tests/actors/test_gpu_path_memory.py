"""`actors.devices.release_cached_memory` (issue 50, item 3): what torch's CUDA allocator caches but no tensor
uses goes back to the GPU before a colocated engine wakes there; on CPU there is nothing to release."""

from __future__ import annotations

import pytest
import torch

from actors.devices import release_cached_memory


def test_on_cpu_there_is_nothing_to_release():
    if torch.cuda.is_available():
        pytest.skip("CPU only")
    assert release_cached_memory() == {"reserved_before": 0.0, "reserved_after": 0.0}


@pytest.mark.gpu
def test_the_cached_blocks_of_freed_tensors_go_back_to_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kept = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")  # in use: stays reserved
    freed = torch.ones(512 << 20, dtype=torch.uint8, device="cuda")
    del freed  # torch keeps its 512 MiB cached for the next allocation; the device counts them taken
    got = release_cached_memory()
    assert got["reserved_before"] - got["reserved_after"] >= 512 << 20, got
    assert got["reserved_after"] >= kept.numel()
