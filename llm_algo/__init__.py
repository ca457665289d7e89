"""LLM Algo Lab: lessons as notebooks, graded by checks that pytest and the notebook share."""

from .notebook_api import setup_lesson

__all__ = ["setup_lesson"]
__version__ = "0.1.0"
