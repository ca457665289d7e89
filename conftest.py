# Loads the grading plugin for every pytest run inside this repository (and nowhere else).
pytest_plugins = ["llm_algo.pytest_plugin"]
