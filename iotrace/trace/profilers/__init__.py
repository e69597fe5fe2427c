"""Profiler runs: a kernel launched in a child process under Nsight Systems, Nsight Compute or CUPTI/Kineto."""
