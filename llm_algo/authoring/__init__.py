"""Authoring tools: lesson notebooks built from `authoring/` sources (`LessonBuilder`), the parts' README indexes,
and the lint that keeps every notebook to the contract."""

from .builder import LessonBuilder

__all__ = ["LessonBuilder"]
