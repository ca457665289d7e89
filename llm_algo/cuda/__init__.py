"""Part 04's CUDA tools: CUDA C++ from a notebook cell compiled and cached (`inline`), and numba-cuda's CUDA simulator
for the kernels' CPU twins (`simulator`)."""
