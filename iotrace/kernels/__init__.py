"""Built-in kernels, one file each: the Triton (or CUDA C++) kernel, its launcher and its KernelSpec."""
