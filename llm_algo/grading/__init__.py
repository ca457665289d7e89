"""Grading: a notebook's cells executed into a namespace, checks run against it, a lesson graded in one process,
and earlier lessons loaded once per process for `use(...)`."""
