"""The docstring examples in toyworld are true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["toyworld", "toyworld.problem", "toyworld.tasks", "toyworld.teacher", "toyworld.generate", "toyworld.stats"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
