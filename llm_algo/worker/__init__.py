"""Grading children: a warm process that forks one child per lesson, the child's protocol, and the scheduler that
keeps a few lessons graded ahead of pytest's item loop."""
