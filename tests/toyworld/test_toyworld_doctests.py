"""The docstring examples in toyworld are true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["parallax.toyworld", "parallax.toyworld.problem", "parallax.toyworld.tasks", "parallax.toyworld.traces",
           "parallax.toyworld.generate", "parallax.toyworld.stats"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
